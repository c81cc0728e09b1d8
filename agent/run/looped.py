"""LoopedGate: runs started by the static gate in its loop (gate.c -L), one process per command and its
controls that keeps a child ready which, at every byte perfctl writes, sets up and execs the benchmark, and
that writes back how each run ended (gate.c ``struct record``, read through agent/gate.py's loop_record)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import time

from perfctl.agent import gate
from perfctl.agent.run import RunError
from perfctl.agent.run.cgroup import RunCgroup
from perfctl.agent.run.control import RunControl
from perfctl.agent.run.outcome import Exit, Stop, clear, ended
from perfctl.agent.run.reaping import REAP_SECONDS, has_exited_child, kill_leftovers, live_gates, stopped, ticks_now
from perfctl.agent.run.spawn import Persona, spawn, spawn_error
from perfctl.agent.run.started import StartedRun, StopWatch

LOOP_END_S = 1.0  # a loop ends this soon after its release pipe closes, or is killed
_RECORD_SIZE = struct.Struct("=q")  # what the loop writes first: sizeof(struct record), a C long
_GONE = "the exec gate's loop ended before the run did (killed?); the run's outcome is unknown"


class LoopedGate(StartedRun):
    """The static gate in its loop (gate.c -L). A run then costs perfctl a write and a read, where a gated
    run costs a posix_spawn from this process and the gate's own exec (~0.3 ms a run on these VMs,
    bench/stat_rate.py). The same object starts every run of its command: :meth:`release`, :meth:`wait`.

    Only runs counted by cgroup take this way (Runner.looped): the child joins the cgroup as its last step
    before execve, as the single-run gate does, so the counts are the same. The benchmark is the loop's child,
    not perfctl's, so what perfctl reads of it comes from the loop: its exit, signal, stop and ru_maxrss,
    and its wall time from its execve to the loop's wait returning. A timeout and a stop that would never end
    kill the run's tree through the cgroup; what the benchmark left behind is killed through the cgroup and
    reaped by perfctl, its subreaper, as for a gated run.
    """

    def __init__(self, gate_to_use: gate.Gate, argv: list[str], control: RunControl, stderr_file,
                 persona: Persona, cgroup: RunCgroup, cpus: set[int]) -> None:
        self.control = control  # held: Runner.looped tells loops apart by this object
        self._layout = gate.loop_record()  # a gate.c perfctl cannot read is refused before anything starts
        self._stopped_kind = self._layout.kinds["RECORD_STOPPED"]
        self._stderr_file = stderr_file
        self._cgroup = cgroup
        self._open = self._in_run = False
        self._born = self._start_time_ns = 0
        self._record = None
        ctl_read, self._ctl = os.pipe()
        self._records, records_write = os.pipe()
        persona.ensure(control.aslr_off)
        try:
            self.pid, _ = spawn(gate_to_use, argv, control, ctl_read, stderr_file, (), cgroup.procs_fd(),
                                records_write, cpus=cpus)
        except OSError as err:
            os.close(self._ctl)
            os.close(self._records)
            raise spawn_error(err, argv, control) from None
        finally:
            os.close(ctl_read)
            os.close(records_write)
        live_gates.add(self.pid)
        self._open = True
        self._poller = select.poll()
        self._poller.register(self._records, select.POLLIN)
        self._check_layout()

    def _check_layout(self) -> None:
        """The loop's first word is the size of the records it was compiled to write: a binary built from
        another gate.c than the one whose layout perfctl read is refused before its first run."""
        if not self._poller.poll(REAP_SECONDS * 1000):  # alive and silent: a loop that writes no size first
            self.close()
            raise RunError(f"the exec gate's loop wrote no record size within {REAP_SECONDS:g} s: the gate binary "
                           f"was built from an older {gate.SOURCE} (perfctl info shows its cache)")
        data = os.read(self._records, _RECORD_SIZE.size)
        if len(data) != _RECORD_SIZE.size:
            self.close()
            raise RunError(_GONE)
        size, expected = _RECORD_SIZE.unpack(data)[0], self._layout.format.size
        if size != expected:
            self.close()
            raise RunError(f"the exec gate's loop writes {size}-byte records, but {gate.SOURCE} defines "
                           f"{expected}-byte ones: the gate binary was built from another gate.c (perfctl info "
                           "shows its cache)")

    def release(self) -> None:
        if self._stderr_file is not None:
            clear(self._stderr_file)
        self._born = ticks_now()
        self._start_time_ns = time.time_ns()
        self._in_run = True
        try:
            os.write(self._ctl, b"\n")
        except BrokenPipeError:
            self.kill()
            raise RunError(_GONE) from None

    def wait(self) -> Exit:
        """The run's Exit. Anything raised on the way (a stop signal's Interrupted) kills the run's tree and
        ends the loop; RunError when the loop itself is gone."""
        try:
            timed_out, stop = self._watch(self.control.timeout_s)
        except BaseException:
            self.kill()
            raise
        self._in_run = False
        record, self._record = self._record, None
        return ended(start_time_ns=self._start_time_ns, wall_ns=record.end_ns - record.start_ns,
                     si_code=record.code, si_status=record.status, timed_out=timed_out, stop=stop,
                     max_rss_kib=record.max_rss_kib, stderr_file=self._stderr_file,
                     outlived=self._kill_leftovers(self._born))

    def _ended(self, timeout_ms: int, stops: StopWatch | None) -> bool:
        if not self._poller.poll(timeout_ms):
            return False
        data = os.read(self._records, self._layout.format.size)
        if len(data) != self._layout.format.size:
            raise RunError(_GONE)
        record = self._layout.unpack(data)
        if record.kind != self._stopped_kind:
            self._record = record
            return True
        if stops is not None:
            stops.seen(Stop(record.pid, record.code, record.status))
        return False

    def _between(self, stops: StopWatch) -> bool:
        if stopped(self.pid):  # the loop times the run: stopped, it would record the stop as run time
            raise RunError(f"the exec gate's loop (pid {self.pid}) was stopped during a run, whose wall time "
                           "it measures; the run's outcome is unknown")
        return False

    def _kill_run(self, stop: Stop | None) -> None:
        self._cgroup.kill()
        if stop is not None:
            # and by its pid: a child stopped while it waited for its release is not in the cgroup yet (the
            # loop has not reaped it, so the pid is still that child's)
            with contextlib.suppress(ProcessLookupError):
                os.kill(stop.pid, signal.SIGKILL)

    def _kill_leftovers(self, born: int) -> int:
        """Kill what the run left running (through the cgroup) and reap what was reparented to perfctl; how
        many were still running. Nearly every run leaves nothing: the cgroup is empty, no child exited."""
        if not has_exited_child() and not self._cgroup.populated():
            return 0
        running = self._cgroup.kill()
        kill_leftovers(born)  # reaps them: they were reparented to perfctl, their subreaper
        return len(running)

    def kill(self) -> None:
        """A run in progress: kill its tree and end the loop. Between runs: nothing (the loop stays)."""
        if self._in_run:
            self._in_run = False
            self._cgroup.kill()
            self.close()

    @property
    def alive(self) -> bool:
        """Open and its process still there (one that something killed between runs is replaced)."""
        if not self._open:
            return False
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def close(self) -> None:
        """End the loop (it has no run in progress, or that run was killed) and reap it."""
        if not self._open:
            return
        self._open = False
        # the child waiting for the next release reads EOF and exits, and the loop ends after it (gate.c)
        os.close(self._ctl)
        os.close(self._records)
        ended_now = False
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(self.pid)
            try:
                ended_now = bool(select.select([pidfd], [], [], LOOP_END_S)[0])
            finally:
                os.close(pidfd)
        if not ended_now:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        live_gates.discard(self.pid)
