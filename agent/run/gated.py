"""GatedProcess: one run started by a gate of its own, spawned from perfctl and blocked in its ``read`` while
the backend attaches counters to its pid (``enable_on_exec`` makes them start at the benchmark's own exec)
and pins it; a newline releases it. If perfctl dies before releasing the gate, the gate's read sees EOF and
the gate exits 125 without running anything unmeasured."""

from __future__ import annotations

import os
import select
import signal
import struct
import time

from perfctl.agent import gate
from perfctl.agent.run.cgroup import RunCgroup
from perfctl.agent.run.control import RunControl
from perfctl.agent.run.outcome import Exit, Stop, ended, wait_status_terms
from perfctl.agent.run.reaping import (
    has_children,
    kill_leftovers,
    kill_tree,
    live_gates,
    orphan_roots,
    reap_exited_orphans,
    ticks_now,
)
from perfctl.agent.run.spawn import Persona, spawn, spawn_error
from perfctl.agent.run.started import StartedRun, StopWatch

EXEC_TIME = struct.Struct("=q")  # gate.c -T: CLOCK_MONOTONIC right before the execve


class GatedProcess(StartedRun):
    """One benchmark process, blocked in the gate until :meth:`release`."""

    def __init__(self, gate_to_use: gate.Gate, argv: list[str], control: RunControl, stderr_file,
                 persona: Persona, pass_fds: tuple[int, ...], cgroup: RunCgroup | None,
                 join: RunCgroup | None = None, cpus: set[int] | None = None) -> None:
        self._control = control
        self._stderr_file = stderr_file
        self._reaped = False
        self._start_time_ns = self._released = 0
        read_end, self._gate = os.pipe()
        # the static gate writes the time of its execve here (gate.c -T): where the wall time starts
        self._timing, timing_write = os.pipe() if gate_to_use.static else (-1, -1)
        if self._timing != -1:  # read once the run is over, and then never waited on (_exec_ns)
            os.set_blocking(self._timing, False)
        persona.ensure(control.aslr_off)
        self._born = ticks_now()  # what the benchmark leaves behind started no earlier (kill_leftovers)
        try:
            self.pid, self._popen = spawn(gate_to_use, argv, control, read_end, stderr_file, pass_fds,
                                          None if join is None else join.procs_fd(),
                                          timing_fd=None if timing_write == -1 else timing_write, cpus=cpus)
        except OSError as err:
            self._close_gate()
            self._close_timing()
            raise spawn_error(err, argv, control) from None
        finally:
            os.close(read_end)
            if timing_write != -1:
                os.close(timing_write)
        live_gates.add(self.pid)
        self._cleaned = False
        self._pidfd = -1
        try:
            # while the gate still blocks: everything the benchmark starts is born into the runner's cgroup; a
            # joining gate moves itself in just before its exec, or exits 126 without running anything
            if join is not None:
                self._cgroup = join
            else:
                self._cgroup = cgroup if cgroup is not None and cgroup.add(self.pid) else None
            self._pidfd = os.pidfd_open(self.pid)
            if control.pin_cpu is not None:
                os.sched_setaffinity(self.pid, {control.pin_cpu})
        except BaseException:  # the gate has run nothing yet: it goes, and nobody is left holding it
            self._close_gate()
            self._close_timing()
            kill_tree(self.pid)
            self._reap()
            if self._pidfd != -1:
                os.close(self._pidfd)
            raise

    def _exec_ns(self) -> int | None:
        """When the gate exec'd the benchmark (gate.c -T), on perf_counter_ns's clock (CLOCK_MONOTONIC);
        None from the sh gate or a gate that never got that far (the release is the start then). Never
        waits: a gate stopped before its execve still holds the write end, and waiting on it hung perfctl
        past its --timeout."""
        if self._timing == -1:
            return None
        try:
            data = os.read(self._timing, 8)
        except BlockingIOError:
            return None
        return EXEC_TIME.unpack(data)[0] if len(data) == EXEC_TIME.size else None

    def _close_timing(self) -> None:
        fd, self._timing = self._timing, -1
        if fd != -1:
            os.close(fd)

    def _close_gate(self) -> None:
        """Close the gate's write end, once. The descriptor leaves the object before it is closed: a stop
        signal raised inside os.close (the kernel has closed it by then; close is never retried) finds -1
        here, so kill() neither closes it again (EBADF) nor closes whatever has since reused its number."""
        fd, self._gate = self._gate, -1
        if fd != -1:
            os.close(fd)

    def release(self) -> None:
        """Let the gate exec the benchmark."""
        self._start_time_ns = time.time_ns()
        self._released = time.perf_counter_ns()
        try:
            os.write(self._gate, b"\n")
        except BrokenPipeError:  # the gate exited before its release (it refused its options): its status says why
            pass
        self._close_gate()

    def wait(self) -> Exit:
        """Wait for the exit, the timeout or a stop that would never end (both kill the whole tree); then kill
        what the benchmark left running."""
        timed_out, stop = self._watch(self._control.timeout_s)
        end = time.perf_counter_ns()
        exec_ns = self._exec_ns()
        start = self._released
        wall_ns = end - (exec_ns if exec_ns is not None and start <= exec_ns <= end else start)
        status, rusage = self._reap()
        outlived = len(self._kill_leftovers())  # none after a kill_tree, which took them
        si_code, si_status = wait_status_terms(status)
        return ended(start_time_ns=self._start_time_ns, wall_ns=wall_ns, si_code=si_code, si_status=si_status,
                     timed_out=timed_out, stop=stop, max_rss_kib=rusage.ru_maxrss, stderr_file=self._stderr_file,
                     outlived=outlived)

    def _ended(self, timeout_ms: int, stops: StopWatch | None) -> bool:
        # the exit is seen at once, through the pidfd
        return bool(select.select([self._pidfd], [], [], timeout_ms / 1000)[0])

    def _between(self, stops: StopWatch) -> bool:
        reap_exited_orphans(self._born)
        # WNOWAIT: only look; the stop stays reportable and the final wait4 still sees the exit
        try:
            stop = os.waitid(os.P_PID, self.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # it exited since the poll: waitid without WEXITED says ECHILD then
            return True
        if stop is None:
            stops.forget()
        else:
            stops.seen(Stop(self.pid, stop.si_code, stop.si_status))
        return False

    def _kill_run(self, stop: Stop | None) -> None:
        self._kill_tree()

    def _reap(self) -> tuple[int, object]:
        """wait4 the benchmark: its exit status and rusage. A traced child (PTRACE_TRACEME makes perfctl its
        tracer) can report one last ptrace stop before the exit of the kill; that is skipped."""
        while True:
            _, status, rusage = os.wait4(self.pid, 0)
            if not os.WIFSTOPPED(status):
                break
        self._reaped = True
        live_gates.discard(self.pid)
        if self._popen is not None:
            self._popen.returncode = os.waitstatus_to_exitcode(status)
        return status, rusage

    def _kill_tree(self) -> None:
        if self._cgroup is not None:
            self._cgroup.kill()
        kill_tree(self.pid)

    def _kill_leftovers(self) -> list[int]:
        """Kill and reap what the benchmark left running (it would disturb the next run and be counted as
        interference); the pids of those that were still running. With a cgroup, its list is the answer
        and cgroup.kill the means; the scan of perfctl's orphans then only reaps them."""
        self._cleaned = True
        if not has_children():  # nearly every run: nothing was left behind, nothing to scan /proc for
            return []
        if self._cgroup is None:
            return kill_leftovers(self._born)
        # Whatever of the benchmark still lives descends from a child of perfctl, its subreaper, that is
        # outside perfctl's session: with none (nearly every run), the cgroup is empty and left unread.
        if not orphan_roots(self._born):
            return []
        running = self._cgroup.kill()
        kill_leftovers(self._born)  # reaps them: they were reparented to perfctl, their subreaper
        return running

    def kill(self) -> None:
        """Kill and reap the process tree if it is still there (an error or an interrupt before the exit)."""
        self._close_gate()
        if not self._reaped and self._reaped_unrecorded():
            self._reaped = True
            live_gates.discard(self.pid)
        if not self._reaped:
            self._kill_tree()
            self._reap()
            if self._popen is not None:
                self._popen.returncode = -signal.SIGKILL
        if not self._cleaned:  # an interrupt between the benchmark's exit and the cleanup
            self._kill_leftovers()
        if self._pidfd != -1:
            os.close(self._pidfd)
            self._pidfd = -1
        self._close_timing()

    def _reaped_unrecorded(self) -> bool:
        """Reaped although _reaped says not: a stop signal's exception (output.stop_on_signals) is raised
        once wait4 has returned, before _reap records it. Asked of the pidfd, which names this process and
        never a later one given its pid, so nothing else is killed in its place."""
        try:
            os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return False
