"""Issue 12, the command side: one signal policy for every command, an audit that an interruption cannot
undo, strict JSON from `perfctl audit`, bounds said as usage errors, and nothing written when a run cannot
start. Real processes, real signals, real (small, read-only) filesystems."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import audit_document, one_line, perfctl, pmu_as_if, signal_when


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as strict parsers (jq, Go, browsers) do."""

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _one_line_usage_error(result, *needles):
    line = one_line(result, code=2)
    for needle in needles:
        assert needle in line, line


def test_a_run_that_cannot_start_leaves_the_output_file_as_it_was(tmp_path):
    """perfctl receives the arguments; the benchmark receives them plus a 1 MiB environment, which passes
    ARG_MAX only there: execve fails in the first run. That is a usage error, and -o FILE keeps exactly
    what it held (it used to get this machine's inventory line appended)."""
    out = tmp_path / "samples.jsonl"
    before = '{"type": "machine", "kept": true}\n'
    out.write_text(before)
    arg_max = os.sysconf("SC_ARG_MAX")
    arguments = ["y" * 100_000] * ((arg_max - (1 << 20)) // 100_000 + 2)
    result = perfctl("stat", "-o", str(out), "--env-size", str(1 << 20), "-r", "1", "--", "/bin/true", *arguments)
    _one_line_usage_error(result, "perfctl stat:")
    assert out.read_text() == before
    absent = tmp_path / "new.jsonl"  # a file that did not exist is not left behind empty
    result = perfctl("stat", "-o", str(absent), "--env-size", str(1 << 20), "-r", "1", "--", "/bin/true", *arguments)
    _one_line_usage_error(result, "perfctl stat:")
    assert not absent.exists()


@pytest.mark.parametrize("value", ["4194305", "100000000000"])
def test_ebpf_max_tasks_beyond_the_kernels_task_limit_is_a_usage_error(value):
    """Linux has at most PID_MAX_LIMIT (2^22) tasks; a bigger map follows nothing more."""
    result = perfctl("stat", "--backend", "perf_event,ebpf", "--ebpf-max-tasks", value, "-r", "1", "--", "/bin/true")
    _one_line_usage_error(result, "--ebpf-max-tasks", "4194304")


def _cache_env(directory) -> dict:
    return {**os.environ, "PERFCTL_CACHE_DIR": str(directory)}


def _kernel_processes(directory) -> list[int]:
    """Processes running a program from ``directory`` (the audit's calibration kernels)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/exe").startswith(str(directory)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_an_audit_which_keeps_the_last_complete_one(tmp_path, monkeypatch, signum):
    """systemd, timeout(1) and CI cancellation send SIGTERM, a closed terminal SIGHUP: the audit stops like
    Ctrl-C, exits 128 + N, prints its partial report as strict JSON, records it in audit-interrupted.json
    and leaves audit-latest.json, the last complete audit that corrections use, as it was."""
    from perfctl.agent import audit_report, inventory

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("PERFCTL_CACHE_DIR", str(cache))
    complete = audit_document(inventory.collect(), audit_id="complete-one", verdict="no-PMU", fit=None)
    latest = audit_report.save_latest(audit_report.AuditResult.from_dict(complete))
    assert latest == str(cache / "audit-latest.json")
    kept = (cache / "audit-latest.json").read_bytes()

    process = subprocess.Popen([sys.executable, "-m", "perfctl", "audit", "--json", "-r", "40"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_cache_env(cache))
    # each kernel run lasts milliseconds: seen once is enough
    stdout, stderr = signal_when(process, lambda: _kernel_processes(cache), signum, "a calibration kernel run",
                                 settle=0.5)
    assert process.returncode == 128 + signum, stderr
    report = _strict_json(stdout)
    assert report["complete"] is False and report["interrupted_by"] == signal.Signals(signum).name
    assert report["verdict"] != "trusted"
    assert (cache / "audit-latest.json").read_bytes() == kept
    assert _strict_json((cache / "audit-interrupted.json").read_text())["audit_id"] == report["audit_id"]
    assert "corrections keep using the last complete audit" in stderr and "Traceback" not in stderr
    assert not [name for name in os.listdir(cache) if name.startswith(".audit-")]
    assert _kernel_processes(cache) == []


def test_an_audit_that_cannot_build_its_kernels_exits_2_with_a_json_document(tmp_path):
    """A read-only cache: the kernels cannot be built. One line on stderr, exit 2 (docs/audit.md), and with
    --json a document on stdout saying so rather than nothing for the script that reads it."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755,ro", "tmpfs", str(cache)], check=True)
    try:
        result = subprocess.run([sys.executable, "-m", "perfctl", "audit", "--json", "-r", "2"], capture_output=True,
                                text=True, env=_cache_env(cache), timeout=120)
    finally:
        subprocess.run(["umount", str(cache)], check=True)
    _one_line_usage_error(result, "perfctl audit: cannot build the calibration kernels")
    document = _strict_json(result.stdout)
    assert document["complete"] is False and document["error"] == result.stderr.strip()


def test_an_audit_file_someone_else_could_have_written_is_not_used_for_corrections(tmp_path, monkeypatch):
    """audit-latest.json decides every corrected count: a copy others may write, or a symbolic link to a
    file of someone else's choosing, is refused with the reason, as the exec gate is."""
    from perfctl.agent import audit_report, corrections, inventory
    from perfctl.agent.events import parse_events
    from perfctl.model import Benchmark

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("PERFCTL_CACHE_DIR", str(cache))
    inv = pmu_as_if(inventory.collect())  # the decision only; no counter
    specs = parse_events(["instructions", "page-faults:u", "timer-interrupts"])
    bench = Benchmark("true", ("/bin/true",), "/bin/true", "0" * 64, "0" * 64)
    report = audit_document(inv)
    path = audit_report.save_latest(audit_report.AuditResult.from_dict(report))
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)[1].endswith("audit cccccccc")

    os.chmod(path, 0o666)
    said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert said[0] is None and "the latest audit is not trusted" in said[1], said

    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps({**report, "audit_id": "d" * 8}))
    os.unlink(path)
    os.symlink(elsewhere, path)
    said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert said[0] is None and "the latest audit is not trusted" in said[1] and "dddddddd" not in said[1], said


def _kept_audit(inv, **fields) -> dict:
    return audit_document(inv, **fields)


HOSTILE_AUDITS = {
    "time_ns a word": {"time_ns": "soon"}, "time_ns a list": {"time_ns": [1]}, "time_ns true": {"time_ns": True},
    "fit a string": {"fit": "x"}, "fit without a": {"fit": {"b": 1.0}}, "fit.a NaN": {"fit": {"a": "NaN", "b": 1}},
    "fit.a a string": {"fit": {"a": "1", "b": None}}, "fit.b huge": {"fit": {"a": 1, "b": 10**400}},
    "no erratum": {"erratum": None}, "erratum a string": {"erratum": "x"}, "no audit id": {"audit_id": None},
    "audit id with escapes": {"audit_id": "\x1b[2Jx"},
}


@pytest.mark.parametrize("text", [*HOSTILE_AUDITS, "1e400", "deep", "binary"])
def test_a_damaged_audit_file_is_refused_with_a_reason_and_never_crashes_a_measurement(tmp_path, monkeypatch, text):
    """audit-latest.json is ours (owner, mode) but its content may be damaged or edited: `perfctl stat` and the
    agent read it before every measurement with a PMU, so each bad field is a reason, never a traceback."""
    from perfctl.agent import corrections, inventory
    from perfctl.agent.events import parse_events
    from perfctl.model import Benchmark

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("PERFCTL_CACHE_DIR", str(cache))
    inv = pmu_as_if(inventory.collect())  # the decision only; no counter
    if text in HOSTILE_AUDITS:
        content = json.dumps(_kept_audit(inv, **HOSTILE_AUDITS[text])).replace('"NaN"', "NaN")
    else:
        content = {"1e400": json.dumps(_kept_audit(inv)).replace('"a": 1.0', '"a": 1e400'),
                   "deep": "[" * 100_000 + "]" * 100_000, "binary": "\x00\xff{"}[text]
    (cache / "audit-latest.json").write_text(content, errors="surrogateescape")
    os.chmod(cache / "audit-latest.json", 0o644)
    specs = parse_events(["instructions", "page-faults:u", "timer-interrupts"])
    bench = Benchmark("true", ("/bin/true",), "/bin/true", "0" * 64, "0" * 64)
    corrector, said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert corrector is None, said
    assert said.startswith("instructions not corrected: ") and ("malformed" in said or "not JSON" in said), said
    assert "\x1b" not in said


def test_a_stop_signal_during_a_runs_start_kills_its_gate(monkeypatch):
    """A stop signal that lands while a run starts (the gate spawned, not yet handed to the code that kills
    it on every exit) used to leave the gate blocked until perfctl's exit, and a released one running after
    it (seen in CI as a calibration kernel outliving `perfctl audit`). The signal now waits for the start
    to finish: Interrupted is raised as start returns, and the gate is killed and reaped first. The signal
    is sent from inside the start, right after the spawn (the pidfd_open of the new gate)."""
    from perfctl.agent.runner import Runner, make_control
    from perfctl.output import Interrupted, stop_on_signals

    real_pidfd_open, spawned = os.pidfd_open, []

    def signalled_pidfd_open(pid, *args):
        spawned.append(pid)
        os.kill(os.getpid(), signal.SIGTERM)
        return real_pidfd_open(pid, *args)

    runner = Runner()
    try:
        with stop_on_signals(), pytest.raises(Interrupted) as stopped:
            monkeypatch.setattr(os, "pidfd_open", signalled_pidfd_open)
            runner.start(["/bin/sleep", "30"], make_control())
    finally:
        monkeypatch.undo()
        runner.close()
    assert stopped.value.signum == signal.SIGTERM and len(spawned) == 1
    with pytest.raises(ChildProcessError):  # killed and reaped: no such child any more
        os.waitpid(spawned[0], os.WNOHANG)
    assert not os.path.exists(f"/proc/{spawned[0]}")


def test_the_first_of_two_stop_signals_decides_the_exit_whatever_their_numbers():
    """Python runs the handlers of signals that are pending together in the order of their numbers: SIGHUP
    (1) before SIGINT (2), whichever came first. A stop signal caught by another thread while the main one
    waits in a system call (a run) stays pending until the call returns, and a second one can join it: the
    exit was then 129 for a SIGINT followed by a SIGHUP. The arrival order comes from the wakeup fd."""
    import threading

    from perfctl.output import STOP_SIGNALS, Interrupted, stop_on_signals

    go = threading.Event()

    def send():  # this thread leaves the signals unblocked: the kernel hands them to it, in arrival order
        go.wait()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGHUP)

    sender = threading.Thread(target=send)
    sender.start()
    with pytest.raises(Interrupted) as stopped, stop_on_signals():
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # the main thread, busy in a run
        try:
            go.set()
            sender.join()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        time.sleep(0.1)  # both handlers pending: Python runs SIGHUP's first
    assert stopped.value.signum == signal.SIGINT and stopped.value.exit_code == 130


def test_a_full_disk_leaves_the_samples_file_whole_for_the_next_run(tmp_path):
    """stat -o FILE on a filesystem that fills up: the line that did not fit is cut off again, so the file
    ends with a whole sample; a partial line left by a kill mid-write is cut off (and said) before the next
    run appends, and every reader then takes the file."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(small)], check=True)
    try:
        samples = small / "s.jsonl"
        full = perfctl("stat", "-r", "200", "-e", "page-faults,task-clock", "-o", str(samples), "--", "/bin/true")
        assert full.returncode == 2 and "No space left on device; measurement stopped after" in full.stderr
        kept = samples.read_bytes()
        assert kept.endswith(b"\n") and all(json.loads(line) for line in kept.splitlines())
        copy = tmp_path / "copy.jsonl"
        copy.write_bytes(kept + b'{"type":"sample","uuid":"cut sh')  # a write a kill cut short
    finally:
        subprocess.run(["umount", str(small)], check=True)
    more = perfctl("stat", "-r", "2", "-e", "page-faults", "-o", str(copy), "--", "/bin/true")
    assert more.returncode == 0 and "ended in a partial line (31 bytes" in more.stderr, more.stderr
    lines = copy.read_bytes().splitlines()
    assert copy.read_bytes().startswith(kept) and len(lines) == len(kept.splitlines()) + 3  # machine + 2 runs
    # read whole: compared with itself, it is refused only as the same runs on both sides (docs/samples.md)
    compared = perfctl("compare", str(copy), str(copy))
    assert compared.returncode == 2 and "A and B are the same" in compared.stderr, compared.stderr
