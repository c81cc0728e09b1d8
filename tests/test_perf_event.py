"""The perf_event backend against real counters on this machine."""

import os
import subprocess
import time

import pytest
from conftest import measure, needs_no_pmu, needs_pmu, needs_tracepoints, value

from perfctl.agent import inventory
from perfctl.agent.events import parse_event
from perfctl.agent.perf_event import Opener, reading_from_counts

PAGE = os.sysconf("SC_PAGESIZE")


def test_page_touch_yields_at_least_one_fault_per_page(programs):
    small, large = (measure([programs / "pagetouch", n], ["page-faults", "minor-faults", "major-faults"])[0]
                    for n in (100, 5100))
    # Each first touch of a page faults once; the difference cancels the program's start-up faults.
    assert value(large, "page-faults") >= 5100
    assert 5000 * 0.98 <= value(large, "page-faults") - value(small, "page-faults") <= 5000 * 1.02
    assert value(large, "minor-faults") + value(large, "major-faults") == value(large, "page-faults")


def test_counting_starts_at_the_benchmarks_exec_not_in_the_gate(programs):
    # /bin/true's faults are the same whatever sh (the gate) did before exec; repeated runs agree exactly.
    samples = measure(["/bin/true"], ["page-faults"], runs=5)
    faults = {value(s, "page-faults") for s in samples}
    assert len(faults) == 1 and 10 < faults.pop() < 200


def test_children_are_counted_through_inherit(programs):
    touch = programs / "pagetouch"
    one = measure([touch, 3000], ["page-faults"])[0]
    three = measure(["/bin/sh", "-c", f"{touch} 3000 & {touch} 3000 & {touch} 3000; wait"], ["page-faults"])[0]
    assert value(three, "page-faults") >= 3 * 3000
    assert value(three, "page-faults") >= 2.5 * value(one, "page-faults")


def test_task_clock_tracks_cpu_time(programs):
    sample = measure([programs / "spin", 0.3], ["task-clock"])[0]
    assert 0.28e9 <= value(sample, "task-clock") <= 0.45e9
    assert value(sample, "task-clock") <= sample.wall_ns * 1.05


@needs_tracepoints
def test_busy_loop_takes_about_hz_timer_interrupts_per_cpu_second(programs):
    hz = inventory.collect().hz
    assert hz, "CONFIG_HZ unreadable"
    sample = measure([programs / "spin", 1.0], ["timer-interrupts", "task-clock"])[0]
    expected = hz * value(sample, "task-clock") / 1e9
    ticks = value(sample, "timer-interrupts")
    assert sample.reading("timer-interrupts").source in ("irq_vectors:local_timer_entry",
                                                         "timer:hrtimer_expire_entry")
    assert 0.8 * expected <= ticks <= 1.25 * expected, (ticks, expected)


def _device_interrupts_per_cpu() -> list[int]:
    """Per-CPU totals of the numbered (device) lines of /proc/interrupts: the kernel's own count."""
    with open("/proc/interrupts") as f:
        cpus = len(f.readline().split())
        totals = [0] * cpus
        for line in f:
            label, _, rest = line.partition(":")
            if label.strip().isdigit():
                for cpu, field in enumerate(rest.split()[:cpus]):
                    totals[cpu] += int(field)
    return totals


def _disk_writer(directory) -> subprocess.Popen:
    """dd writing with O_DIRECT: every block completes with a device interrupt."""
    return subprocess.Popen(["dd", "if=/dev/zero", f"of={directory}/io", "bs=4k", "count=1000000", "oflag=direct"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _interrupted_cpu(directory) -> tuple[int | None, str]:
    """The CPU that takes the disk's completion interrupts while dd writes, found by watching them."""
    if len(os.sched_getaffinity(0)) < 2:
        return None, "probe: one CPU only; the disk writer and the benchmark need two"
    writer = _disk_writer(directory)
    try:
        before = _device_interrupts_per_cpu()
        time.sleep(0.5)
        after = _device_interrupts_per_cpu()
    finally:
        writer.kill()
        writer.wait()
    deltas = [b - a for a, b in zip(before, after)]
    cpu = max(range(len(deltas)), key=deltas.__getitem__)
    if deltas[cpu] < 50:
        return None, f"probe: O_DIRECT writes raised only {deltas[cpu]} device interrupts in 0.5 s on any CPU"
    return cpu, ""


@needs_tracepoints
def test_device_interrupts_are_a_real_count(programs, tmp_path):
    """A benchmark spinning on the CPU that takes a busy disk's interrupts is interrupted by them: the count
    is at least half of what /proc/interrupts saw on that CPU during the run, and at most all of it."""
    cpu, reason = _interrupted_cpu(tmp_path)
    if cpu is None:
        pytest.skip(reason)
    other = next(c for c in sorted(os.sched_getaffinity(0)) if c != cpu)
    writer = _disk_writer(tmp_path)
    os.sched_setaffinity(writer.pid, {other})
    try:
        time.sleep(0.2)
        before = _device_interrupts_per_cpu()
        sample = measure([programs / "spin", 0.5], ["device-interrupts"], pin_cpu=cpu)[0]
        after = _device_interrupts_per_cpu()
    finally:
        writer.kill()
        writer.wait()
    reading = sample.reading("device-interrupts")
    assert reading.status == "ok" and reading.time_running > 0.45e9
    on_cpu = after[cpu] - before[cpu]
    assert on_cpu >= 50, f"the disk raised only {on_cpu} interrupts on CPU {cpu} during the run"
    assert 0.5 * on_cpu <= reading.value <= sum(after) - sum(before), (reading.value, on_cpu)


@needs_no_pmu
def test_hardware_events_are_unsupported_with_the_reason_never_zero():
    sample = measure(["/bin/true"], ["instructions", "cycles:k", "branches", "page-faults"])[0]
    for label in ("instructions:u", "cycles:k", "branches:u"):
        reading = sample.reading(label)
        assert reading.status == "unsupported" and reading.value is None
        assert "ENOENT" in reading.reason
    assert value(sample, "page-faults") > 0  # the run went on with the rest


@needs_pmu
def test_hardware_instructions_count_where_a_pmu_exists(programs):
    sample = measure([programs / "spin", 0.1], ["instructions", "cycles", "instructions:k"])[0]
    assert value(sample, "instructions:u") > 1_000_000
    assert value(sample, "cycles:u") > 1_000_000


def test_multiplexed_counts_keep_raw_and_flag_the_scaled_estimate():
    opener = Opener(parse_event("instructions"))
    reading = reading_from_counts(opener, "perf_event", 1000, enabled=400, running=100)
    observed = (reading.status, reading.value, reading.time_enabled, reading.time_running)
    assert observed == ("multiplexed", 1000, 400, 100)
    assert reading.scaled == pytest.approx(4000)
    never = reading_from_counts(opener, "perf_event", 0, enabled=0, running=0)
    assert never.status == "error" and "never enabled" in never.reason
    full = reading_from_counts(opener, "perf_event", 7, enabled=10, running=10)
    assert full.status == "ok" and full.scaled is None and full.value == 7


UNPRIVILEGED = """
import json, os, resource, sys  # resource: imported lazily by wait4, from a dir nobody may not read
sys.path.insert(0, sys.argv[1])
from conftest import measure
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)  # nobody, for good
sample = measure(["/bin/true"], ["page-faults", "page-faults:u"])[0]
print(json.dumps([[r.event, r.scope, r.status, r.reason, r.value] for r in sample.readings]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="probe: euid is not 0, cannot switch to an unprivileged euid")
def test_unprivileged_caller_gets_eacces_with_the_paranoid_level_and_the_run_goes_on(tmp_path):
    import json
    import subprocess
    import sys

    paranoid = int(open("/proc/sys/kernel/perf_event_paranoid").read())
    if paranoid < 2:
        pytest.skip(f"probe: perf_event_paranoid={paranoid} lets unprivileged callers count kernel events")
    os.chmod(tmp_path, 0o777)
    result = subprocess.run([sys.executable, "-c", UNPRIVILEGED, os.path.dirname(__file__)], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (_, _, both, reason, none), (_, _, user, _, count) = json.loads(result.stdout)
    assert both == "unsupported" and none is None
    assert "EACCES" in reason and f"perf_event_paranoid={paranoid}" in reason
    assert user == "ok" and count > 0
