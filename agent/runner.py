"""Controlled runs of a benchmark: the Runner, which starts each run through the exec gate and owns what its
runs share (the stderr capture, the ASLR setting, the cgroup, the gate's loops). The concerns it puts
together live in agent/run/ (its docstring lists them); their public names are re-exported here, the import
path the backends and the CLI use.

The benchmark is started through an exec gate (agent/gate.c, or ``sh -c 'read _ || exit 125; exec "$@"
</dev/null' perfctl-gate CMD...`` where no compiler could build it) with its stdin on a pipe
(../shared/notes/counter-artifacts.md, section 4): a gate of its own per run (run.gated.GatedProcess), or the
gate's loop (run.looped.LoopedGate) where the caller chose it and counts by cgroup. Either is started, released
and waited for the same way (run.started.StartedRun), and :meth:`Runner.started` kills what is left of it on
the way out.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from perfctl.agent import gate
from perfctl.agent.run import RunError, libc
from perfctl.agent.run.cgroup import RunCgroup
from perfctl.agent.run.control import RunControl, make_control, resolve_command
from perfctl.agent.run.environment import ENV_SIZE_STEP
from perfctl.agent.run.gated import GatedProcess
from perfctl.agent.run.looped import LoopedGate
from perfctl.agent.run.outcome import Exit, clear
from perfctl.agent.run.reaping import become_subreaper, kill_tree, live_gates
from perfctl.agent.run.spawn import Persona
from perfctl.agent.run.started import StartedRun
from perfctl.output import stops_held

# The names the backends, the agent and the CLI import from here, where they were defined before agent/run/.
__all__ = ["ENV_SIZE_STEP", "Exit", "RunControl", "RunError", "Runner", "make_control", "resolve_command"]

MAX_LOOPS = 8  # LoopedGate processes a Runner keeps (perfctl ab: one per command)


class Runner:
    """Starts a benchmark's runs, each from a gate of its own or from the gate's loop, and owns what they share:
    the stderr capture, the spawning thread's ASLR setting, the cgroup they are born in, the loops."""

    def __init__(self, gate_to_use: gate.Gate | None = None) -> None:
        self._stderr = tempfile.TemporaryFile(prefix="perfctl-stderr-")
        self._gate = gate_to_use or gate.find_gate()
        self._persona = Persona()
        self._on_start = None
        self.loop_runs = False  # Runner.looped: the caller's choice (agent/measurement.py makes it)
        self.starts = 0  # runs started (start, looped): counters that saw none since need not read again
        self._loops: dict[tuple[str, ...], LoopedGate] = {}
        self._home_cpus: set[int] | None = None  # this thread's CPUs before the loops pinned it (Runner.looped)
        become_subreaper()
        self._cgroup = RunCgroup.make()

    @contextlib.contextmanager
    def watching(self, on_start):
        """Within the block, every start calls ``on_start(pid)`` while the benchmark still waits in the gate
        (how a second backend follows the run the first one starts: session.Combined)."""
        self._on_start = on_start
        try:
            yield
        finally:
            self._on_start = None

    def start(self, argv: list[str], control: RunControl, gate_target: list[str] | None = None,
              pass_fds: tuple[int, ...] = (), join_cgroup: bool = False) -> GatedProcess:
        """Start ``argv`` blocked in the exec gate. ``gate_target`` replaces argv as what the gate execs
        (the perf-stat backend execs ``perf stat ... -- argv``). ``pass_fds``: descriptors of ours (3 and up)
        the gated program inherits under the same numbers: how valgrind writes its log to a file only perfctl
        can open (--log-fd), rather than to a path anyone could edit between runs. The static gate moves
        itself into the runner's cgroup just before its execve (gate.c -J): counters scoped to the cgroup then
        count nothing of the gate's wait, and the move costs less than perfctl moving a blocked gate (~0.3 ms
        a run here, with cgroup counters open). The sh gate is moved in while it blocks. ``join_cgroup``: the
        caller counts by cgroup and needs the gate to join itself (a RunError where it cannot:
        :meth:`counting_cgroup` says why)."""
        self.starts += 1
        # the static gate runs as root before it drops to --user: its content is checked before every run
        refused = self._gate.verify()
        if refused:
            raise RunError(refused)
        clear(self._stderr)
        join = self._cgroup if self._gate.static else None
        if join_cgroup and join is None:
            raise RunError("a gate joining the run cgroup needs the static gate and a cgroup (counting_cgroup)")
        gated = None
        try:
            # a stop signal waits until the gate is in hands that kill it on every exit: the caller's
            with stops_held():
                # where a loop pinned this thread (looped), the gate takes back the CPUs the run may use
                cpus = self._home_cpus if self._gate.static and control.pin_cpu is None else None
                gated = GatedProcess(self._gate, gate_target or argv, control,
                                     None if control.show_output else self._stderr, self._persona, pass_fds,
                                     self._cgroup, join, cpus)
                if self._on_start is not None:
                    self._on_start(gated.pid)
        except BaseException:
            if gated is not None:
                gated.kill()
            raise
        return gated

    @contextlib.contextmanager
    def started(self, argv: list[str], control: RunControl, gate_target: list[str] | None = None,
                pass_fds: tuple[int, ...] = (), join_cgroup: bool = False, loop: bool = False) -> Iterator[StartedRun]:
        """One run of ``argv``, waiting for its release (``release_and_wait``): from the gate's loop where
        ``loop`` asks for it and :meth:`looped` gives one, else a gate of its own (:meth:`start`, whose
        arguments the others are). Whatever is left of it is killed and reaped on the way out of the block
        (an error, an interrupt); a loop that ran its run to the end stays for the next."""
        run = self.looped(argv, control) if loop else None
        if run is None:
            run = self.start(argv, control, gate_target, pass_fds, join_cgroup)
        try:
            yield run
        finally:
            run.kill()

    def looped(self, argv: list[str], control: RunControl) -> LoopedGate | None:
        """The loop that starts ``argv`` under ``control`` (started on first use; it clones the gate's image it
        started with for every run, and the gate's file is checked before every run all the same), or None
        where runs are started one gate at a time: the caller did not set ``loop_runs`` (agent/measurement.py does),
        no cgroup for the counting, not the static gate, or a second backend that follows each run from its
        pid (ebpf: watching). One loop per command; at most MAX_LOOPS, the oldest ended first. Starting a loop
        pins this thread to its CPU (below) until :meth:`close`."""
        if not self.loop_runs or self._on_start is not None or self.counting_cgroup()[0] is None:
            return None
        self.starts += 1
        # checked before every run as a gated run's gate is, though the loop forks the image it checked when
        # it started: a gate chmod'ed or chown'ed in the cache is said at once, and no more runs start (exit
        # 2). Its content is hashed again only for a new loop: a running loop's file cannot be written.
        key = tuple(argv)
        loop = self._loops.get(key)
        reuse = loop is not None and loop.alive and loop.control is control
        refused = self._gate.verify(content=not reuse)
        if refused:
            raise RunError(refused)
        if reuse:
            return loop
        if loop is not None:
            loop.close()
            del self._loops[key]
        while len(self._loops) >= MAX_LOOPS:
            self._loops.pop(next(iter(self._loops))).close()
        # perfctl's thread, the loop it spawns (which inherits the CPU) and each run until its release share one
        # CPU, as perf stat and its child do: no wake-up between them crosses CPUs. The run then takes the CPUs
        # it is allowed (gate.c -A) before it joins the cgroup; --pin pins all three to that CPU.
        if self._home_cpus is None:
            self._home_cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {control.pin_cpu if control.pin_cpu is not None else libc.sched_getcpu()})
        cpus = {control.pin_cpu} if control.pin_cpu is not None else self._home_cpus
        with stops_held():  # started and kept in one piece: Runner.close ends every loop it keeps
            loop = self._loops[key] = LoopedGate(self._gate, argv, control,
                                                 None if control.show_output else self._stderr, self._persona,
                                                 self._cgroup, cpus)
        return loop

    @contextlib.contextmanager
    def unpinned(self):
        """Within the block this thread has back the CPUs a loop pinned it away from (:meth:`looped`), so that
        what it starts there (a --prepare hook: agent/hooks.py) may run on every CPU, as it would without
        perfctl; pinned again after."""
        if self._home_cpus is None:
            yield
            return
        pinned = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self._home_cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, pinned)

    def counting_cgroup(self) -> tuple[RunCgroup | None, str | None]:
        """(the cgroup every run's benchmark is born in, None) when a gate can move itself into it right
        before its exec (the static gate, a cgroup made for this runner): how the perf_event backend opens its
        counters once, scoped to that cgroup, rather than per run. Else (None, why not)."""
        if self._cgroup is None:
            return None, f"no cgroup for runs: {RunCgroup.unavailable or 'not made'}"
        if not self._gate.static:
            return None, f"the gate is the {self._gate.description}: only the static gate can join the cgroup itself"
        return self._cgroup, None

    def kill_running(self) -> None:
        """Kill the tree of every run in progress; safe from another thread (how a stopped agent ends the run
        its worker waits for). The waiting thread sees the exit, reaps it and cleans up as after any run."""
        if self._cgroup is not None:
            self._cgroup.kill()
        for pid in list(live_gates):
            kill_tree(pid)

    def close_loops(self) -> None:
        """End every loop this runner keeps and give the calling thread back the CPUs the first loop pinned it
        away from; the runner stays usable (how an agent ends a job's loops: agent/measurement.py)."""
        for loop in self._loops.values():
            loop.close()
        self._loops.clear()
        if self._home_cpus is not None:
            os.sched_setaffinity(0, self._home_cpus)
            self._home_cpus = None

    def close(self) -> None:
        self.close_loops()
        self._stderr.close()
        self._persona.restore()
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
