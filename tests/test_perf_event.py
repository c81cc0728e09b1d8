"""The perf_event backend against real counters on this machine."""

import dataclasses
import os
import statistics
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
    # at least the tick's HZ per CPU second; more on a busy machine: the timers of other tasks (their sleeps,
    # the scheduler's) that expire on the CPU while the loop runs there are counted in its context (387
    # for 257 expected with both cores busy), never as many as two per tick
    assert 0.8 * expected <= ticks <= 2 * expected, (ticks, expected)


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
    is at least half of what /proc/interrupts saw on that CPU while the benchmark was on it, and at most all
    of the run's. On a busy machine the loop shares its CPU, and an interrupt that lands while another task
    runs is that task's: the share of the run the loop was on its CPU is task-clock over wall time."""
    cpu, reason = _interrupted_cpu(tmp_path)
    if cpu is None:
        pytest.skip(reason)
    other = next(c for c in sorted(os.sched_getaffinity(0)) if c != cpu)
    writer = _disk_writer(tmp_path)
    os.sched_setaffinity(writer.pid, {other})
    try:
        time.sleep(0.2)
        before = _device_interrupts_per_cpu()
        sample = measure([programs / "spin", 0.5], ["device-interrupts", "task-clock"], pin_cpu=cpu)[0]
        after = _device_interrupts_per_cpu()
    finally:
        writer.kill()
        writer.wait()
    reading = sample.reading("device-interrupts")
    assert reading.status == "ok" and reading.time_running > 0.45e9
    on_cpu = after[cpu] - before[cpu]
    assert on_cpu >= 50, f"the disk raised only {on_cpu} interrupts on CPU {cpu} during the run"
    on_it = min(1.0, value(sample, "task-clock") / sample.wall_ns)
    assert 0.5 * on_cpu * on_it <= reading.value <= sum(after) - sum(before), (reading.value, on_cpu, on_it)


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


def test_a_reading_made_from_its_events_fields_is_the_reading_its_constructor_makes():
    """The hot path's readings (model.counted_reading, no __init__) equal, hash, print and serialize as the
    constructor's; the other statuses still come from the constructor."""
    from perfctl.formats.jsonl_writer import JsonlWriter
    from perfctl.model import ok_fields

    opener = Opener(parse_event("irq:irq_handler_entry"), source="irq:irq_handler_entry")
    spec = opener.spec
    fields = ok_fields(spec.name, "perf_event", spec.scope, spec.unit, opener.source)
    fast = reading_from_counts(opener, "perf_event", 7, 10, 10, fields)
    slow = reading_from_counts(opener, "perf_event", 7, 10, 10)
    assert (fast, hash(fast), repr(fast), list(vars(fast))) == (slow, hash(slow), repr(slow), list(vars(slow)))
    sample = measure(["/bin/true"], ["page-faults"])[0]
    lines = [JsonlWriter().sample_line(dataclasses.replace(sample, readings=(r,))) for r in (fast, slow)]
    assert lines[0] == lines[1] and b'"value":7' in lines[0]
    assert reading_from_counts(opener, "perf_event", 7, 10, 5, fields).status == "multiplexed"
    assert fields["value"] is None  # the event's fields are copied, never changed


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


# --- cgroup counting (counters opened once per backend and runner) against per-run counting ---

NOP_SOURCE = 'void _start(void) { __asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall"); }\n'
# What cgroup counting adds to a run's task-clock over per-task counters: the end of the gate's move into the
# cgroup, the first half of its execve, and the exit after perf_event_exit_task up to the last switch
# (agent/perf_event.py). ~0.1 ms on these VMs; bounded here with room for a loaded machine.
CGROUP_TASK_CLOCK_EXCESS_NS = 400_000


def _cgroup_reason() -> str | None:
    """Why the perf_event backend does not count by cgroup here (probed with a real backend and runner)."""
    from perfctl.agent import session
    from perfctl.agent.events import parse_events
    from perfctl.agent.runner import Runner

    backend = session.make_backend("perf_event", parse_events(["page-faults"]), inventory.collect())
    runner = Runner()
    try:
        how = backend.counting(runner)
    finally:
        backend.close()
        runner.close()
    return None if how == "cgroup" else f"probe: {how}"


needs_cgroup_counting = pytest.mark.skipif(_cgroup_reason() is not None, reason=str(_cgroup_reason()))


@pytest.fixture(scope="module")
def nop(tmp_path_factory):
    """A static program of three instructions (exit(0)): its own task-clock is next to nothing and it takes
    exactly one page fault, so whatever else a run counts is the counting's."""
    out = tmp_path_factory.mktemp("nop")
    os.chmod(out, 0o755)
    (out / "nop.c").write_text(NOP_SOURCE)
    subprocess.run(["cc", "-O2", "-static", "-nostdlib", "-o", str(out / "nop"), str(out / "nop.c")], check=True)
    return out / "nop"


def _measure_both(argv, events, runs=5, delay_release_s=0.0):
    """{"cgroup": samples, "per run": samples} of the same command, one backend and runner for each way, the
    two ways taking turns run by run (a load that comes and goes hits both alike); ``delay_release_s``: how
    long each gate blocks before its release (the wait must count nothing)."""
    from perfctl.agent import session
    from perfctl.agent.events import parse_events
    from perfctl.agent.perf_event import PerfEventBackend
    from perfctl.agent.runner import Runner, make_control

    inv = inventory.collect()
    control = make_control()
    resolved, bench = session.identify([str(a) for a in argv], control)
    ways = {"cgroup": (PerfEventBackend(parse_events(events), inv), Runner()),
            "per run": (PerfEventBackend(parse_events(events), inv, cgroup_counting=False), Runner())}
    result: dict[str, list] = {way: [] for way in ways}
    try:
        for way, (backend, runner) in ways.items():
            assert backend.counting(runner) == ("cgroup" if way == "cgroup" else "per run: cgroup counting turned off")
        for index in range(runs):
            for way, (backend, runner) in ways.items():
                with runner.watching(lambda pid: time.sleep(delay_release_s)):
                    result[way].append(session.measure_once(
                        session.RunContext.of(backend, runner, control, "test"), session.Command(resolved, bench),
                        run_index=index, warmup=False, sample_uuid=f"{way}-{index}"))
    finally:
        for backend, runner in ways.values():
            backend.close()
            runner.close()
    return result


def _values(samples, event):
    return sorted(value(s, event) for s in samples)


@needs_cgroup_counting
def test_cgroup_counting_counts_faults_and_switches_as_task_counters_do(programs):
    both = _measure_both([programs / "pagetouch", 2000], ["page-faults", "minor-faults", "context-switches"])
    faults = {way: set(_values(samples, "page-faults")) for way, samples in both.items()}
    assert faults["cgroup"] == faults["per run"] and len(faults["cgroup"]) == 1, faults
    assert 2000 <= faults["cgroup"].pop() < 2200
    # sleep blocks once in nanosleep: one switch; the final switch of each exiting task is not one. Cgroup
    # counting may add one preemption at the very end of the exit (the parent's wakeup on the exiting task's
    # CPU, after perf_event_exit_task: docs/stat.md): in a fresh-clone run of the whole suite, whose process
    # holds other tests' threads, every one of five runs counted 2; alone, 1.
    sleeps = _measure_both(["/bin/sleep", "0.01"], ["context-switches"])
    assert min(_values(sleeps["cgroup"], "context-switches")) in (1, 2)
    assert min(_values(sleeps["per run"], "context-switches")) == 1


@needs_cgroup_counting
def test_cgroup_counting_counts_children_born_in_the_cgroup(programs):
    touch = programs / "pagetouch"
    both = _measure_both(["/bin/sh", "-c", f"{touch} 3000 & {touch} 3000 & {touch} 3000; wait"],
                         ["page-faults", "context-switches"], runs=3)
    cgroup, per_run = (statistics.median(_values(both[way], "page-faults")) for way in ("cgroup", "per run"))
    assert cgroup >= 3 * 3000
    assert abs(cgroup - per_run) <= 0.01 * per_run, (cgroup, per_run)
    # sh waits for its children (it blocks): at least one switch a run, whichever way it is counted
    assert min(_values(both["cgroup"], "context-switches")) >= 1


@needs_cgroup_counting
def test_cgroup_counting_starts_at_the_gates_move_not_during_its_wait(nop):
    # Each gate blocks 20 ms before its release; the gate joins the cgroup only as its last step before
    # execve. Had its start-up been counted, every run would show the gate's own page faults: a nop's run
    # takes exactly its one fault. Its blocking read is no switch either; what cgroup counting may add after
    # such a wait is one preemption at the very end of the exit (the parent's wakeup on the exiting process's
    # CPU, after perf_event_exit_task: docs/stat.md), never more in the median run.
    waited = _measure_both([nop], ["page-faults", "context-switches"], runs=15, delay_release_s=0.02)
    for way, samples in waited.items():
        assert _values(samples, "page-faults") == [1] * 15, way
    # Whatever else runs preempts some runs either way (the suite runs with both cores busy too): a counted
    # wait would be a switch in every run, so the fewest a run shows is what tells.
    assert min(_values(waited["per run"], "context-switches")) == 0
    assert min(_values(waited["cgroup"], "context-switches")) <= 1
    # Released at once: runs without a switch per task; the cgroup's may again hold the exit's one preemption
    # in every run when both cores are busy (a CI run with two `yes` loops showed 1 in all 15); and a task-clock
    # that exceeds the per-task counter's by the execve's first half and the exit's end only.
    both = _measure_both([nop], ["context-switches", "task-clock"], runs=15)
    assert min(_values(both["per run"], "context-switches")) == 0
    assert min(_values(both["cgroup"], "context-switches")) <= 1
    cgroup, per_run = (statistics.median(_values(both[way], "task-clock")) for way in ("cgroup", "per run"))
    assert 0 < per_run < cgroup < per_run + CGROUP_TASK_CLOCK_EXCESS_NS, (cgroup, per_run)


@needs_cgroup_counting
def test_a_run_that_never_execs_reads_never_enabled_both_ways(tmp_path):
    script = tmp_path / "broken"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    for way, samples in _measure_both([script], ["page-faults", "task-clock"], runs=1).items():
        sample = samples[0]
        assert sample.exit_status == 127 and "execve failed" in sample.stderr_tail, way
        for reading in sample.readings:
            assert reading.status == "error" and "never enabled" in reading.reason, (way, reading)


@needs_cgroup_counting
def test_one_set_of_counters_serves_commands_measured_alternately(programs):
    """`perfctl ab` alternates commands with one backend: nothing is opened per run or per command, and
    each command's counts are its own."""
    from perfctl.agent import session
    from perfctl.agent.events import parse_events
    from perfctl.agent.runner import Runner, make_control

    backend = session.make_backend("perf_event", parse_events(["page-faults", "task-clock"]), inventory.collect())
    runner = Runner()
    control = make_control()
    commands = {n: session.Command(*session.identify([str(programs / "pagetouch"), str(n)], control))
                for n in (100, 2100)}
    context = session.RunContext.of(backend, runner, control, "test")
    faults: dict[int, set[int]] = {100: set(), 2100: set()}
    try:
        assert backend.counting(runner) == "cgroup"
        descriptors = None
        for index, n in enumerate([100, 2100, 2100, 100, 100, 2100, 2100, 100]):
            sample = session.measure_once(context, commands[n], run_index=index, warmup=False,
                                          sample_uuid=f"u{index}")
            faults[n].add(value(sample, "page-faults"))
            if descriptors is None:  # the counters opened with the first run
                descriptors = len(os.listdir("/proc/self/fd"))
            assert len(os.listdir("/proc/self/fd")) == descriptors
    finally:
        backend.close()
        runner.close()
    assert len(faults[100]) == 1 and len(faults[2100]) == 1, faults
    assert faults[2100].pop() - faults[100].pop() == 2000


def test_a_run_started_in_the_cgroup_between_two_measured_runs_is_not_counted_in_the_second(programs):
    """A run's end totals are the next run's start (CgroupCounters.resting) only while the runner starts
    nothing else in its cgroup meanwhile: a run that another backend starts there in between (the corrector's
    dbi run; a first backend of two) would be counted in the next one."""
    from perfctl.agent import session
    from perfctl.agent.events import parse_events
    from perfctl.agent.runner import Runner, make_control

    backend = session.make_backend("perf_event", parse_events(["page-faults"]), inventory.collect())
    runner = Runner()
    runner.loop_runs = True
    control = make_control()
    command = session.Command(*session.identify([str(programs / "pagetouch"), "100"], control))
    context = session.RunContext.of(backend, runner, control, "test")
    faults = []
    try:
        for index in range(4):
            if index == 2:  # 2000 pages touched in the cgroup, by a run nobody counts
                other = runner.start([str(programs / "pagetouch"), "2000"], control, join_cgroup=True)
                try:
                    assert other.release_and_wait().exit_status == 0
                finally:
                    other.kill()
            sample = session.measure_once(context, command, run_index=index, warmup=False, sample_uuid=f"u{index}")
            faults.append(value(sample, "page-faults"))
    finally:
        backend.close()
        runner.close()
    assert len(set(faults)) == 1 and faults[0] > 100, faults


def test_the_sh_gate_is_counted_per_run_and_says_why():
    from perfctl.agent import gate, session
    from perfctl.agent.events import parse_events
    from perfctl.agent.runner import Runner, make_control

    backend = session.make_backend("perf_event", parse_events(["page-faults"]), inventory.collect())
    runner = Runner(gate.Gate(gate.sh_gate(), "sh gate (test)", False))
    try:
        how = backend.counting(runner)
        sample = next(session.run(session.Plan(["/bin/true"], 1, 0, make_control()), backend, runner, "test"))
    finally:
        backend.close()
        runner.close()
    assert how.startswith("per run: ") and "static gate" in how
    assert value(sample, "page-faults") > 10


@needs_cgroup_counting
def test_a_run_with_more_exits_than_the_side_band_holds_says_so_rather_than_miscounting(nop):
    # ~88 bytes of records a process (fork, exec, exit) against 16 pages a CPU: 2000 processes overflow
    loop = f"i=0; while [ $i -lt 2000 ]; do {nop}; i=$((i+1)); done"
    sample = measure(["/bin/sh", "-c", loop], ["context-switches", "page-faults"])[0]
    switches = sample.reading("context-switches")
    assert switches.status == "error" and "exits" in switches.reason and "unknown" in switches.reason
    assert value(sample, "page-faults") >= 2000  # each nop takes its one fault; the other counts stand
