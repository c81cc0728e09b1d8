"""The perf_event backend against real counters on this machine."""

import os

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
    hz = inventory.collect()["hz"]
    assert hz, "CONFIG_HZ unreadable"
    sample = measure([programs / "spin", 1.0], ["timer-interrupts", "task-clock"])[0]
    expected = hz * value(sample, "task-clock") / 1e9
    ticks = value(sample, "timer-interrupts")
    assert sample.reading("timer-interrupts").source in ("irq_vectors:local_timer_entry",
                                                         "timer:hrtimer_expire_entry")
    assert 0.8 * expected <= ticks <= 1.25 * expected, (ticks, expected)


@needs_tracepoints
def test_device_interrupts_are_a_real_count(programs):
    sample = measure([programs / "spin", 0.2], ["device-interrupts"])[0]
    reading = sample.reading("device-interrupts")
    assert reading.status == "ok" and reading.value >= 0 and reading.time_running > 0.15e9


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
