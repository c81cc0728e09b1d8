"""Exit: how a run ended, built in one place (:func:`ended`) from waitid's terms, whether they come from
perfctl's own wait (a gated run) or from the gate's loop's record (a looped run); and the stderr capture
whose last line an Exit carries."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Exit:
    """How a run ended. ``wall_ns`` runs from the benchmark's execve (its release where the gate cannot say)
    to the exit being observed."""

    start_time_ns: int
    wall_ns: int
    exit_status: int | None
    signal: int | None
    timed_out: bool
    max_rss_kib: int | None
    stderr_tail: str | None
    # processes of the benchmark's tree still running when it exited by itself, killed then (Sample.extra)
    outlived: int = 0

    @property
    def outcome(self) -> str:
        if self.timed_out:
            return "timeout"
        if self.signal is not None:
            return "signal"
        return "ok" if self.exit_status == 0 else "failed"


@dataclass(frozen=True)
class Stop:
    """A stop of ``pid`` in waitid's terms: si_code CLD_STOPPED or CLD_TRAPPED, si_status the signal."""

    pid: int
    si_code: int
    si_status: int


def wait_status_terms(status: int) -> tuple[int, int]:
    """A wait status (wait4) as waitid's (si_code, si_status), the terms :func:`ended` takes."""
    if os.WIFEXITED(status):
        return os.CLD_EXITED, os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return os.CLD_KILLED, os.WTERMSIG(status)
    return 0, 0


def ended(*, start_time_ns: int, wall_ns: int, si_code: int, si_status: int, timed_out: bool, stop: Stop | None,
          max_rss_kib: int | None, stderr_file, outlived: int) -> Exit:
    """The Exit of a run that ended as waitid says (``si_code``, ``si_status``). A run killed for its timeout
    has no signal; one killed for a stop that would never end is recorded as the signal that stopped it (the
    SIGKILL that ended it was perfctl's), with a line saying so in place of its stderr."""
    exit_status = si_status if si_code == os.CLD_EXITED else None
    signal_number = si_status if si_code in (os.CLD_KILLED, os.CLD_DUMPED) else None
    stderr_tail = stderr_tail_of(stderr_file)
    if stop is not None:
        signal_number, stderr_tail = stop.si_status, _describe_stop(stop)
    return Exit(start_time_ns=start_time_ns, wall_ns=wall_ns, exit_status=exit_status,
                signal=None if timed_out else signal_number, timed_out=timed_out, max_rss_kib=max_rss_kib,
                stderr_tail=stderr_tail, outlived=outlived)


def _describe_stop(stop: Stop) -> str:
    try:
        name = signal.Signals(stop.si_status).name
    except ValueError:
        name = f"signal {stop.si_status}"
    how = "stopped under ptrace with perfctl as its tracer" if stop.si_code == os.CLD_TRAPPED else "stopped"
    return f"perfctl: the benchmark {how} ({name}) and would never finish; killed with its process tree"


def clear(stderr_file) -> None:
    """Empty the stderr capture for the next run, and put its offset, which the runs share, back at 0; nearly
    every run wrote nothing, and then the file is empty at offset 0 already (an fstat and an lseek say so
    for less than a seek and truncate cost). Both are asked: a run that truncated its own stderr left the
    offset where it wrote, and the next run's line came after as many NULs."""
    fd = stderr_file.fileno()
    if os.fstat(fd).st_size or os.lseek(fd, 0, os.SEEK_CUR):
        stderr_file.seek(0)
        stderr_file.truncate()


def stderr_tail_of(stderr_file) -> str | None:
    """The last non-blank line the run wrote to stderr (at most 500 characters), or None."""
    if stderr_file is None:
        return None
    size = os.fstat(stderr_file.fileno()).st_size
    if size == 0:
        return None
    stderr_file.seek(max(0, size - 4096))
    lines = [line.strip() for line in stderr_file.read().decode(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:500] if lines else None
