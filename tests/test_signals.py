"""Stop signals (perfctl/output.py stop_on_signals, one policy for every command): a signal that lands while a run
starts kills its gate, the first of two stop signals decides the exit whatever their numbers, and `perfctl stat`
stopped by SIGTERM, SIGHUP or SIGINT keeps its finished runs and kills the benchmark's tree. An audit stopped by a
signal is tests/test_audit.py's."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import processes_with, signal_when


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

    def send():  # this thread leaves the signals unblocked and takes both, in the order they are sent
        go.wait()
        # sent to this thread itself: a signal sent to the process goes to any thread that does not block it,
        # and the pytest process may hold others (left by earlier tests) that, descheduled on a busy machine,
        # run the C-level handler of the first signal after this thread ran the second's
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(0.05)
        signal.pthread_kill(threading.get_ident(), signal.SIGHUP)

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


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_stops_stat_keeps_finished_runs_and_kills_the_benchmark_tree(tmp_path, signum, code):
    """The benchmark forks a child into its own session (as a daemon would) and waits for it: the signal
    arrives mid-run, after a few finished runs."""
    marker = f"0.3{os.getpid()}{signum}"  # a sleep duration no other process has: the child's name in /proc
    script = tmp_path / "bench.sh"
    script.write_text(f"#!/bin/sh\nsetsid sleep {marker} &\nwait\n")
    script.chmod(0o755)
    out = tmp_path / "s.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "1000", "-e", "task-clock",
                             "-o", str(out), "--", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # a few runs finished, then into the next one, whose child must be running
    stdout, stderr = signal_when(
        proc, lambda: out.exists() and out.read_text().count("\n") >= 4 and processes_with(marker), signum,
        "four finished runs", settle=0.1)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "interrupted after" in stderr and signal.Signals(signum).name in stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]  # nothing torn
    samples = [r for r in records if r["type"] == "sample"]
    assert len(samples) >= 3 and all(s["outcome"] == "ok" for s in samples)
    assert f"({len(samples)} runs" in " ".join(stdout.split())  # the summary of exactly the finished runs
    assert processes_with(marker) == [], "a process of the benchmark's tree survived"
