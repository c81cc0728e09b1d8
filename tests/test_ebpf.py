"""The ebpf backend with real BPF programs on this kernel: interrupts, faults, switches, interference, the
tracked tree, and every way eBPF can fail to load (each a message and a run measured without it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from conftest import measure, needs_ebpf, needs_root, perfctl, value

pytestmark = needs_ebpf

PERF_AND_EBPF = "perf_event,ebpf"
# Documented in docs/backends.md: perf_event's tracepoint counter and eBPF's count of the same interrupts
# differ only by the few microseconds between perf's enable_on_exec and the exec tracepoint.
TIMER_TOLERANCE = 2


def _hz() -> int:
    from perfctl.agent import inventory

    return inventory.collect().hz


def _readings(sample, backend: str) -> dict:
    return {r.label: r for r in sample.readings if r.backend == backend}


def _measure_all_switches_reported(argv, events, backend=PERF_AND_EBPF, tries=3, **control):
    """One run whose switches the kernel all reported. About one run in several hundred here has a switch the
    kernel ran without a sched_switch event (agent/ebpf.py _unreported; ftrace misses it too): its timing
    readings are errors, said and not guessed, and the run is measured again, up to ``tries`` times."""
    for _ in range(tries):
        sample = measure(argv, events, backend=backend, **control)[0]
        timing = _readings(sample, "ebpf")["on-cpu-time"]
        if timing.status == "ok":
            return sample
        assert "without reporting them" in timing.reason, timing  # no other error is excused
    return sample


def test_busy_loop_takes_hz_timer_interrupts_in_user_mode_agreeing_with_perf_event(programs):
    seconds = 1.0
    sample = _measure_all_switches_reported([programs / "spin", str(seconds)], ["timer-interrupts", "task-clock"])
    assert sample.backends == ("perf_event", "ebpf")
    ebpf = _readings(sample, "ebpf")
    on_cpu_s = ebpf["on-cpu-time"].value / 1e9
    # spin stops by its CPU-time clock, which leaves out interrupt and steal time (the hypervisor running
    # another vCPU: 8% of a second in one CI run); on-cpu-time is switch-in to switch-out by the wall clock
    # and counts them, so it lies between that second and the run's wall time (its final switch-out may
    # come a little after perfctl saw the exit)
    assert seconds * 0.99 <= on_cpu_s <= sample.wall_ns / 1e9 + 0.005, (on_cpu_s, sample.wall_ns)
    timer = ebpf["timer-interrupts"].value
    # the tick, and the other local timers that expire on that CPU while the loop runs there (other tasks'
    # sleeps, the scheduler's), counted in its context: with both cores busy (CI) 334 and 429 in 1.01 s at
    # HZ 250; the same bound as test_perf_event's, never as many as two per tick
    assert 0.8 * _hz() * on_cpu_s <= timer <= 2 * _hz() * on_cpu_s, (timer, on_cpu_s, _hz())
    assert abs(timer - value(sample, "timer-interrupts")) <= TIMER_TOLERANCE  # perf_event's tracepoint count
    user, kernel = ebpf["timer-ticks:u"].value, ebpf["timer-ticks:k"].value
    assert user + kernel <= timer
    assert user >= 0.9 * (user + kernel), (user, kernel)  # a user-mode loop is interrupted in user mode
    # the same run counted by both backends is told apart by label
    assert sample.reading("timer-interrupts@ebpf").value == timer


def test_a_program_in_the_kernel_takes_its_ticks_in_kernel_mode():
    """dd from /dev/zero spends its time in the kernel clearing buffers: the ticks say so."""
    sample = measure([shutil.which("dd"), "if=/dev/zero", "of=/dev/null", "bs=1M", "count=30000"], ["task-clock"],
                     backend=PERF_AND_EBPF)[0]
    ebpf = _readings(sample, "ebpf")
    user, kernel = ebpf["timer-ticks:u"].value, ebpf["timer-ticks:k"].value
    assert kernel >= 20 and kernel > 3 * user, (user, kernel)


def test_page_touching_program_shows_its_user_faults(programs):
    small, large = (measure([programs / "pagetouch", str(pages)], ["page-faults"], backend=PERF_AND_EBPF)[0]
                    for pages in (100, 5100))
    user = [_readings(s, "ebpf")["page-faults:u"].value for s in (small, large)]
    assert user[1] - user[0] == pytest.approx(5000, rel=0.02)
    for sample in (small, large):  # perf_event's page-faults count both modes
        ebpf = _readings(sample, "ebpf")
        both = ebpf["page-faults:u"].value + ebpf["page-faults:k"].value
        assert abs(both - value(sample, "page-faults")) <= max(3, 0.02 * both)


def test_tracked_tree_includes_children(programs):
    one = measure([programs / "pagetouch", "2000"], ["page-faults"], backend="ebpf")[0]
    script = f"{programs / 'pagetouch'} 2000 & {programs / 'pagetouch'} 2000 & {programs / 'pagetouch'} 2000; wait"
    tree = _measure_all_switches_reported(["/bin/sh", "-c", script], ["page-faults"], backend="ebpf")
    assert value(tree, "tasks") >= 4  # sh and its three children
    assert value(one, "tasks") == 1
    assert value(tree, "page-faults:u") >= 3 * (value(one, "page-faults:u") - 200)
    assert value(tree, "off-cpu-time") > 0  # sh waited for its children
    threads = "import threading; ts = [threading.Thread(target=sum, args=(range(10**5),)) for _ in range(4)]; " \
              "[t.start() for t in ts]; [t.join() for t in ts]"
    threaded = measure([sys.executable, "-c", threads], ["page-faults"], backend="ebpf")[0]
    assert value(threaded, "tasks") >= 5  # the interpreter and its four threads


def _hog(cpu: int) -> subprocess.Popen:
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    time.sleep(0.3)  # pinned and spinning
    return hog


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="probe: fewer than 2 CPUs to put a hog beside")
def test_busy_process_on_the_benchmarks_cpu_is_interference_and_elsewhere_is_not(programs):
    from perfctl.model import InterferencePolicy

    cpus = sorted(os.sched_getaffinity(0))
    policy = InterferencePolicy()

    def run():
        sample = measure([programs / "spin", "0.3"], ["task-clock"], backend=PERF_AND_EBPF, pin_cpu=cpus[0])[0]
        interference = _readings(sample, "ebpf")["interference-time"]
        share = interference.value / sample.wall_ns if interference.status == "ok" else None
        return sample, share

    # The hog on the benchmark's CPU: every run interfered with. A run with a switch the kernel did not report
    # has no interference figure (agent/ebpf.py _unreported): it is measured again.
    hog = _hog(cpus[0])
    try:
        for _ in range(10):  # under load 9, three runs in a row each had such a switch
            sample, share = run()
            if share is not None:
                break
    finally:
        hog.kill()
        hog.wait()
    assert share is not None, "every run had a switch the kernel did not report"
    ebpf = _readings(sample, "ebpf")
    # A spinner pinned beside a hog is off its CPU only while another task runs there: the interference is the
    # run's wall time less its task-clock. Its size depends on how the scheduler weighs the run's cgroup against
    # the hog and whatever else runs (a CI run with both cores busy gave the run 75% of the CPU: 0.25).
    task_clock = next(r.value for r in sample.readings if r.event == "task-clock" and r.status == "ok")
    off_cpu = (sample.wall_ns - task_clock) / sample.wall_ns
    assert policy.flags(sample.readings, sample.wall_ns) and share > 0.1, share
    assert abs(share - off_cpu) < 0.1, (share, off_cpu)
    assert ebpf["preemptions"].value > 0 and ebpf["interference-tasks"].value >= 1

    # The hog on the other CPU. A backend that counted it would report more interference than the run's whole
    # wall time (the hog spins all of it). Whatever else the machine runs may land on the benchmark's CPU too
    # (the suite is run with both cores busy): each run with the hog is measured right after one without it,
    # and must show no more than that machine's own interference; on a quiet CPU, none at all.
    seen = []
    for _ in range(3):
        _, baseline = run()
        hog = _hog(cpus[1])
        try:
            sample, share = run()
        finally:
            hog.kill()
            hog.wait()
        if baseline is None or share is None:
            continue
        seen.append((baseline, share))
        if baseline < 0.02 and share < 0.05 and not policy.flags(sample.readings, sample.wall_ns):
            break  # quiet: no interference counted from the other CPU
    assert seen, "every run had a switch the kernel did not report"
    assert any(share < min(0.95, baseline + 0.3) for baseline, share in seen), seen


def test_stat_shows_and_excludes_interfered_runs(programs, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    hog = _hog(cpus[0])
    try:
        kept = perfctl("stat", "-r", "2", "--pin", str(cpus[0]), "--backend", PERF_AND_EBPF, "-o",
                       str(tmp_path / "s.jsonl"), "--", str(programs / "spin"), "0.1")
        left_out = perfctl("stat", "-r", "2", "--pin", str(cpus[0]), "--backend", "ebpf", "--exclude-interfered",
                           "--", str(programs / "spin"), "0.1")
    finally:
        hog.kill()
        hog.wait()
    assert kept.returncode == 0, kept.stderr
    kept_said, left_out_said = (" ".join(done.stdout.split()) for done in (kept, left_out))
    assert "2 of 2 runs flagged" in kept_said and "kept in the statistics" in kept_said, kept.stdout
    assert "2 of 2 runs flagged" in left_out_said and "left out of the statistics" in left_out_said, left_out.stdout
    # the same runs under other uuids: a run on both sides of a compare is refused (docs/samples.md)
    copy = tmp_path / "copy.jsonl"
    copy.write_text("".join(json.dumps({**record, "uuid": str(uuid.uuid4())} if record.get("type") == "sample"
                                       else record) + "\n"
                            for record in map(json.loads, (tmp_path / "s.jsonl").read_text().splitlines())))
    compared = perfctl("compare", str(tmp_path / "s.jsonl"), str(copy), "--exclude-interfered")
    assert compared.returncode == 2 and "left out 2 interfered-with runs" in compared.stderr, compared.stderr
    kept = perfctl("compare", str(tmp_path / "s.jsonl"), str(copy))
    said = " ".join(kept.stdout.split())  # the note wraps with an indent
    assert kept.returncode == 0 and "2 runs flagged: other tasks ran on the benchmark's CPUs" in said, kept.stdout


def _stat_json(*args, env=None):
    return perfctl("stat", "-r", "1", "--json", *args, env=env)


def _samples(result):
    return [json.loads(line) for line in result.stdout.splitlines() if '"type":"sample"' in line]


def test_a_tree_larger_than_the_pid_map_is_reported_and_the_run_still_measured():
    """A burst of 40 live children against a map of 16 tracked tasks (a fork bomb in miniature)."""
    result = _stat_json("--backend", PERF_AND_EBPF, "--ebpf-max-tasks", "16", "-e", "page-faults", "--",
                        "/bin/sh", "-c", "for i in $(seq 40); do sleep 0.2 & done; wait")
    assert result.returncode == 0, result.stderr
    sample = _samples(result)[0]
    by_backend = {(r["event"], r["backend"]): r for r in sample["readings"]}
    assert by_backend[("page-faults", "perf_event")]["status"] == "ok"
    tasks = by_backend[("tasks", "ebpf")]
    assert tasks["status"] == "error" and "not followed" in tasks["reason"] and "--ebpf-max-tasks" in tasks["reason"]
    untracked = int(tasks["reason"].split()[0])
    assert tasks["value"] >= 16 and tasks["value"] + untracked >= 42  # sh, seq, 40 sleeps: each followed or counted


def _fallback(env_object: str | None = None, **kwargs):
    env = {**os.environ, **({"PERFCTL_EBPF_OBJECT": env_object} if env_object else {})}
    result = _stat_json("--backend", PERF_AND_EBPF, "-e", "page-faults", "--", "/bin/true", env=env, **kwargs)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "ebpf unavailable" in line]
    assert len(lines) == 1, result.stderr  # said once
    sample = _samples(result)[0]
    assert sample["backends"] == ["perf_event"] and {r["backend"] for r in sample["readings"]} == {"perf_event"}
    return lines[0]


def test_missing_or_garbage_object_is_said_and_the_run_measured_with_perf_event(tmp_path):
    assert "no such file" in _fallback(str(tmp_path / "missing.bpf.o"))
    garbage = tmp_path / "garbage.bpf.o"
    garbage.write_bytes(b"\x7fELF not really" * 10)
    assert "cannot open BPF object" in _fallback(str(garbage))


def _compile(tmp_path, name: str, source: str) -> str:
    from perfctl.agent.build import BuildError, build_bpf

    path = tmp_path / f"{name}.bpf.c"
    path.write_text(source)
    try:
        return build_bpf(str(path), name)[0]
    except BuildError as err:
        pytest.fail(f"cannot build the test object: {err}")


VERIFIER_REJECTS = """
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, __u64); }
    m SEC(".maps");
SEC("tp_btf/sched_switch")
int reads_past_the_value(void *ctx)
{
    __u32 key = 0;
    __u64 *v = bpf_map_lookup_elem(&m, &key);
    return v ? (int)v[4] : 0; /* 8 bytes of value, read at 32 */
}
"""

FOR_ANOTHER_KERNEL = """
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
SEC("tp_btf/perfctl_tracepoint_of_another_kernel")
int attach_there(void *ctx) { return 0; }
"""


def test_verifier_rejection_is_quoted_and_the_run_measured_with_perf_event(tmp_path):
    line = _fallback(_compile(tmp_path, "rejected", VERIFIER_REJECTS))
    assert "the kernel refused" in line and "invalid access to map value" in line


def test_object_for_another_kernel_is_refused_with_a_message(tmp_path):
    line = _fallback(_compile(tmp_path, "foreign", FOR_ANOTHER_KERNEL))
    assert "perfctl_tracepoint_of_another_kernel" in line or "attach target" in line, line


def test_object_built_from_another_runacct_is_refused_not_misread(tmp_path):
    from perfctl.agent.runacct import SOURCE

    source = open(SOURCE).read().replace("\tRA_FORKS, RA_UNTRACKED,", "\tRA_FORKS,")
    source = source.replace("c->v[RA_UNTRACKED]++;", "")
    assert source != open(SOURCE).read()
    # built beside a copy of nothing else: vmlinux.h comes from the include path build_bpf adds
    line = _fallback(_compile(tmp_path, "older", source))
    assert "built from another version of runacct.bpf.c" in line


UNPRIVILEGED = """
import os, sys
from perfctl.agent import inventory, runacct, session  # imported first: the stdlib is not readable by nobody
from perfctl.agent.events import parse_events
inv = inventory.collect()
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)  # nobody, for good
backend, note = session.open_backend(("perf_event", "ebpf"), parse_events(["page-faults:u"]), inv)
print(backend.names, note)
"""


@needs_root
def test_unprivileged_caller_is_told_and_gets_perf_event_alone(tmp_path):
    os.chmod(tmp_path, 0o777)
    result = subprocess.run([sys.executable, "-c", UNPRIVILEGED], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("('perf_event',) ebpf unavailable: loading BPF programs needs root")


def test_per_run_state_does_not_leak_between_runs(programs):
    """Runs of different programs back to back: each run's counts are its own (generations, not clearing)."""
    samples = []
    for pages in (3000, 10, 3000):
        samples += measure([programs / "pagetouch", str(pages)], ["page-faults"], backend="ebpf")
    faults = [value(s, "page-faults:u") for s in samples]
    assert faults[1] < 200 and abs(faults[0] - faults[2]) <= 3, faults


def test_info_says_whether_ebpf_loads():
    result = perfctl("info", "--json")
    assert result.returncode == 0, result.stderr
    ebpf = json.loads(result.stdout)["ebpf"]
    assert ebpf["available"] is True and ebpf["reason"].startswith("runacct loaded through libbpf")


def test_a_switch_the_kernel_did_not_report_is_counted_and_its_times_flagged(programs):
    """On these VMs the kernel sometimes runs a context switch without its sched_switch event (ftrace's own
    sched_switch event misses it too): about one run of /bin/sleep 0.01 in 500 with other processes busy.
    runacct.bpf.c then finds a task leaving a CPU it was never seen to get (or the reverse), counts that
    switch and counts it as missed. It cannot be provoked on demand, so the real counts of a real run are
    taken and the missed slot set as the kernel leaves it after such a switch; what the backend makes of
    those counts is what is checked."""
    from perfctl.agent import runacct
    from perfctl.agent.ebpf import MEASURES, EbpfBackend, _label
    from perfctl.model import InterferencePolicy

    backend = EbpfBackend()
    sample = measure([programs / "pagetouch", "10"], ["page-faults"], backend="ebpf")[0]
    clean = {r.label: r for r in sample.readings}
    assert all(r.status == "ok" for r in clean.values()), clean
    slots = {m.slot: int(clean[_label(m)].value) - (1 if m.slot == "forks" else 0) for m in MEASURES}
    counts = runacct.RunCounts({**dict.fromkeys(runacct.SLOTS, 0), **slots, "missed": 1}, started=True)
    flagged = {r.label: r for r in backend.readings_of(counts)}
    for label in ("on-cpu-time", "off-cpu-time", "interference-time", "interference-tasks", "preemptions"):
        assert flagged[label].status == "error" and "without reporting them" in flagged[label].reason, flagged[label]
        assert flagged[label].value == clean[label].value  # the value is kept beside the reason
    for label in ("context-switches", "context-switches-in", "page-faults:u", "timer-interrupts"):
        assert flagged[label].status == "ok" and flagged[label].value == clean[label].value
    # its interference cannot be shown small: it counts as interfered with (--exclude-interfered leaves it out)
    # at a limit the clean run's own interference stays under (it may be large on a busy machine: the run can
    # share both CPUs with other work)
    limit = 1.0 + clean["interference-time"].value / sample.wall_ns
    assert InterferencePolicy(limit=limit).flags(list(flagged.values()), sample.wall_ns)
    assert not InterferencePolicy(limit=limit).flags(list(clean.values()), sample.wall_ns)
    assert all(r.status == "ok" for r in backend.readings_of(runacct.RunCounts({**counts.slots, "missed": 0},
                                                                               started=True)))
