"""Controlled runs: the exec gate, ASLR, environment size, pinning, user, stdin, timeout.

The benchmark is started through an exec gate (agent/gate.c, or ``sh -c 'read _ || exit 125; exec "$@"
</dev/null' perfctl-gate CMD...`` where no compiler could build it) with its stdin on a pipe
(../shared/notes/counter-artifacts.md, section 4). The gate blocks in ``read`` while
the backend attaches counters to its pid (``enable_on_exec`` makes them start at the benchmark's own exec)
and pins it; a newline releases it. No ``os.fork()`` and no ``preexec_fn``: the gate is started with
posix_spawn and switches user and directory itself, so this is safe in a process that holds gRPC threads
(only the sh fallback gate, used without a C compiler, needs subprocess's forking child for --user).
If perfctl dies before
releasing the gate, the gate's read sees EOF and the gate exits 125 without running anything unmeasured.

ASLR is turned off for the benchmark only: personality(ADDR_NO_RANDOMIZE) is set on the spawning thread
(personality is per task, inherited across fork and exec, and read only at exec), so perfctl itself keeps
the randomized layout it was exec'd with and the system setting is untouched; Runner.close() restores it.

perfctl is a child subreaper (become_subreaper), so what a benchmark leaves running, daemons included, ends
up among perfctl's children, and every run ends with it killed and reaped (kill_leftovers, kill_tree).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import functools
import itertools
import math
import os
import pwd
import select
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass

from perfctl.agent import gate
from perfctl.output import stops_held

ADDR_NO_RANDOMIZE = 0x0040000
PR_SET_CHILD_SUBREAPER = 36
ENV_PAD_VARIABLE = "PERFCTL_ENV_PAD"
# Linux refuses (E2BIG) an exec whose environment holds one "NAME=value" string longer than MAX_ARG_STRLEN,
# 32 pages = 131072 bytes counting its NUL; a larger pad is split over PERFCTL_ENV_PAD, PERFCTL_ENV_PAD_1, ...
MAX_ENV_STRING = 32 * 4096
# Without --env-size the environment block (sum of len("NAME=value") + 1 per variable) is padded to the
# smallest multiple of ENV_SIZE_STEP that holds it: 4096 for a typical login shell, 8192 for a CI job's.
# The size is fixed for the whole measurement and recorded in every sample; see docs/stat.md.
ENV_SIZE_STEP = 4096
CLEAN_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "TERM", "TZ")
# A pidfd reports only exits, so a benchmark that stops itself (SIGSTOP, or a ptrace stop with perfctl as its
# tracer) would be waited for forever. The wait wakes every STOP_CHECK_S to ask waitid whether it is stopped:
# rarely, because each wake is perfctl running, maybe on the benchmark's CPU (the ebpf backend counts that as
# interference). A stop is only final once it has lasted STOP_GRACE_S without the benchmark running in between
# (its context switches unchanged): `perfctl cache --dynamic` (agent/pirate.py) stops and continues the Target
# on purpose while its Pirate warms up, for milliseconds at a time.
STOP_CHECK_S = 0.5
STOP_GRACE_S = 2.0
# How long killed processes get to end (a task in uninterruptible sleep dies only when it wakes); one still
# there is reaped by a later run's cleanup, as a leftover.
REAP_SECONDS = 5.0
MAX_LOOPS = 8  # LoopedGate processes a Runner keeps (perfctl ab: one per command)

_libc = ctypes.CDLL(None, use_errno=True)


class RunError(Exception):
    """A run cannot be started as asked (bad command, bad option); the message is one line for the user."""


@dataclass(frozen=True)
class RunControl:
    """How every run of a benchmark is controlled; the same object for all runs of a measurement."""

    env: tuple[tuple[str, str], ...]
    env_bytes: int
    cwd: str
    aslr_off: bool = True
    pin_cpu: int | None = None
    user: str | None = None
    timeout_s: float | None = None
    show_output: bool = False

    @functools.cached_property
    def env_map(self) -> dict[bytes, bytes]:
        """The environment, encoded once rather than on every spawn."""
        return {os.fsencode(k): os.fsencode(v) for k, v in self.env}

    @functools.cached_property
    def user_ids(self) -> tuple[int, int, list[int]] | None:
        """(uid, gid, groups) of --user, looked up once per measurement rather than per run."""
        if self.user is None:
            return None
        entry = pwd.getpwnam(self.user)
        return entry.pw_uid, entry.pw_gid, os.getgrouplist(entry.pw_name, entry.pw_gid)

    @property
    def user_name(self) -> str:
        return self.user or pwd.getpwuid(os.geteuid()).pw_name


@dataclass(frozen=True)
class Exit:
    """How a run ended. ``wall_ns`` runs from the gate's release to the exit being observed (LoopedGate: from
    the loop's fork to its wait returning)."""

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


def env_block_size(env: dict[str, str]) -> int:
    """Bytes the kernel copies for this environment: each ``NAME=value`` plus its terminating NUL."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def _is_pad(name: str) -> bool:
    suffix = name.removeprefix(ENV_PAD_VARIABLE)
    return name.startswith(ENV_PAD_VARIABLE) and (suffix == "" or (suffix[:1] == "_" and suffix[1:].isdigit()))


def _unpadded(base: dict[str, str], cwd: str) -> tuple[dict[str, str], int]:
    """``base`` without pad variables (perfctl's own, when it runs under perfctl) plus PWD, and the bytes it
    needs with one (empty) pad variable."""
    env = {k: v for k, v in base.items() if not _is_pad(k)}
    env["PWD"] = cwd
    return env, env_block_size(env) + len(ENV_PAD_VARIABLE) + 2


def _pad_name(index: int) -> str:
    return ENV_PAD_VARIABLE if index == 0 else f"{ENV_PAD_VARIABLE}_{index}"


def pad_variables(pad_bytes: int) -> dict[str, str]:
    """Variables whose block is exactly ``pad_bytes`` (at least one variable's name, ``=`` and NUL), none
    longer than the kernel takes (MAX_ENV_STRING)."""
    pads: dict[str, str] = {}
    while pad_bytes > 0:
        name, next_overhead = _pad_name(len(pads)), len(_pad_name(len(pads) + 1)) + 2
        entry = min(pad_bytes, MAX_ENV_STRING)
        if 0 < pad_bytes - entry < next_overhead:
            # too little left for the next variable's own name: leave it enough for an empty one
            entry -= next_overhead - (pad_bytes - entry)
        pads[name] = "x" * (entry - len(name) - 2)
        pad_bytes -= entry
    return pads


def normalized_environment(base: dict[str, str], size: int, cwd: str) -> dict[str, str]:
    """``base`` plus PWD, padded with PERFCTL_ENV_PAD (and PERFCTL_ENV_PAD_1, ... beyond the kernel's
    limit on one variable) to exactly ``size`` bytes.

    PWD is set explicitly because sh adds it when missing, which would make the size depend on the
    directory. A fixed-size environment keeps the benchmark's stack at the same address run to run
    (Weaver & McKee, ../shared/seeds/003_7d2f7057436bc279.txt, padded theirs to 422 bytes).
    """
    env, used = _unpadded(base, cwd)
    if used > size:
        raise RunError(f"the environment needs {used} bytes, more than --env-size {size}; "
                       "raise --env-size or use --clean-env")
    env.update(pad_variables(size - env_block_size(env)))
    return env


def locate_command(argv0: str, path: str | None) -> str:
    """Absolute path of the benchmark's executable as named (symlinks kept), without opening it: the agent
    checks its allowlist on this before anything reads the file."""
    if "/" in argv0:
        candidate = os.path.abspath(argv0)
        if not os.path.lexists(candidate):
            raise RunError(f"command not found: {argv0}")
        return candidate
    found = shutil.which(argv0, path=path)
    if found is None:
        raise RunError(f"command not found in PATH: {argv0}")
    return os.path.abspath(found)


def resolve_command(argv0: str, path: str | None) -> str:
    """Absolute path of the benchmark's executable, or a RunError saying why there is none."""
    candidate = locate_command(argv0, path)
    try:
        status = os.stat(candidate)
    except OSError as err:
        raise RunError(f"command not found: {argv0} ({err.strerror})") from None
    if stat.S_ISDIR(status.st_mode):
        raise RunError(f"not an executable file (a directory): {argv0}")
    if not stat.S_ISREG(status.st_mode):
        # opening a FIFO or a device to read its magic could block the caller forever
        raise RunError(f"not an executable file (not a regular file): {argv0}")
    if not os.access(candidate, os.X_OK):
        raise RunError(f"not executable (no execute permission): {argv0}")
    try:
        fd = os.open(candidate, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            magic = os.read(fd, 4)
        finally:
            os.close(fd)
    except OSError as err:
        raise RunError(f"cannot read {argv0}: {err.strerror}") from None
    if magic != b"\x7fELF" and not magic.startswith(b"#!"):
        # execve(2) would fail with ENOEXEC in every run.
        raise RunError(f"not an ELF executable or a script starting with #!: {argv0}")
    return candidate


def make_control(*, env_size: int | None = None, clean_env: bool = False, aslr_off: bool = True,
                 pin_cpu: int | None = None, user: str | None = None, timeout_s: float | None = None,
                 show_output: bool = False, cwd: str | None = None,
                 base_env: dict[str, str] | None = None) -> RunControl:
    """Validate options once, at the boundary, and build the RunControl every run will use."""
    cwd = cwd or os.getcwd()
    base = dict(os.environ if base_env is None else base_env)
    if clean_env:
        base = {k: v for k, v in base.items() if k in CLEAN_ENV_KEEP}
        base["LANG"] = "C"
    if user is not None:
        if os.geteuid() != 0:
            raise RunError("--user needs root: the counters are opened by perfctl, the benchmark runs as the user")
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise RunError(f"unknown user: {user}") from None
        base.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    if pin_cpu is not None and pin_cpu not in os.sched_getaffinity(0):
        raise RunError(f"--pin {pin_cpu}: not a CPU this process may use "
                       f"(allowed: {', '.join(map(str, sorted(os.sched_getaffinity(0))))})")
    if timeout_s is not None and not timeout_s > 0:
        raise RunError(f"--timeout must be a positive number of seconds, got {timeout_s}")
    if env_size is None:
        _, needed = _unpadded(base, cwd)
        env_size = -(-needed // ENV_SIZE_STEP) * ENV_SIZE_STEP
    if not 0 < env_size <= 1 << 20:
        raise RunError(f"--env-size must be between 1 and 1048576 bytes, got {env_size}")
    env = normalized_environment(base, env_size, cwd)
    return RunControl(env=tuple(env.items()), env_bytes=env_block_size(env), cwd=cwd, aslr_off=aslr_off,
                      pin_cpu=pin_cpu, user=user, timeout_s=timeout_s, show_output=show_output)


class Runner:
    """Starts gated benchmark processes; owns the files they share (stderr capture, /dev/null)."""

    def __init__(self, gate_to_use: gate.Gate | None = None) -> None:
        self._stderr = tempfile.TemporaryFile(prefix="perfctl-stderr-")
        self._gate = gate_to_use or gate.find_gate()
        self._persona = _Persona()
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
        _clear(self._stderr)
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
        os.sched_setaffinity(0, {control.pin_cpu if control.pin_cpu is not None else _libc.sched_getcpu()})
        cpus = {control.pin_cpu} if control.pin_cpu is not None else self._home_cpus
        with stops_held():  # started and kept in one piece: Runner.close ends every loop it keeps
            loop = self._loops[key] = LoopedGate(self._gate, argv, control,
                                                 None if control.show_output else self._stderr, self._persona,
                                                 self._cgroup, cpus)
        return loop

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
        for pid in list(_live_gates):
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


class _Persona:
    """The spawning thread's personality, changed only when a run asks for another ASLR setting.

    personality(2) is per thread and only shapes programs exec'd later, never perfctl itself; keeping
    ADDR_NO_RANDOMIZE set between runs saves two syscalls per run (~60 µs on these VMs). Runner.close()
    puts the original back.
    """

    def __init__(self) -> None:
        self.original = self.current = _libc.personality(ctypes.c_ulong(0xFFFFFFFF))

    def ensure(self, aslr_off: bool) -> None:
        wanted = self.original | ADDR_NO_RANDOMIZE if aslr_off else self.original & ~ADDR_NO_RANDOMIZE
        if wanted != self.current:
            _libc.personality(ctypes.c_ulong(wanted))
            self.current = wanted

    def restore(self) -> None:
        if self.current != self.original:
            _libc.personality(ctypes.c_ulong(self.original))
            self.current = self.original


# gate.c struct record: kind, pid, si_code, si_status, max_rss_kib, start_ns (at the execve), end_ns
# (CLOCK_MONOTONIC)
LOOP_RECORD = struct.Struct("=7q")
EXEC_TIME = struct.Struct("=q")  # gate.c -T: CLOCK_MONOTONIC right before the execve
_LOOP_STOPPED = 1
LOOP_END_S = 1.0  # a loop ends this soon after its release pipe closes, or is killed


@dataclass(frozen=True)
class _Stop:
    """A stop as gate.c's loop reports it, in the terms _describe_stop reads off os.waitid's result."""

    si_code: int
    si_status: int


class LoopedGate:
    """The static gate in its loop (gate.c -L): one process, started once for a command and its controls,
    that keeps a child ready which, at every byte perfctl writes, sets up and execs the benchmark, and that
    writes back how each run ended (LOOP_RECORD). A run then costs perfctl a write and a read, where a gated
    run costs a posix_spawn from this process and the gate's own exec (~0.3 ms a run on these VMs,
    bench/stat_rate.py).

    Only runs counted by cgroup take this way (Runner.looped): the child joins the cgroup as its last step
    before execve, as the single-run gate does, so the counts are the same. The benchmark is the loop's child,
    not perfctl's, so what perfctl reads of it comes from the loop: its exit, signal, stop and ru_maxrss,
    and its wall time from its execve to the loop's wait returning. A timeout and a stop that would never end
    kill the run's tree through the cgroup; what the benchmark left behind is killed through the cgroup and
    reaped by perfctl, its subreaper, as for a gated run.
    """

    def __init__(self, gate_to_use: gate.Gate, argv: list[str], control: RunControl, stderr_file,
                 persona: _Persona, cgroup: RunCgroup, cpus: set[int]) -> None:
        self.control = control  # held: Runner.looped tells loops apart by this object
        self._stderr_file = stderr_file
        self._cgroup = cgroup
        self._open = False
        ctl_read, self._ctl = os.pipe()
        self._records, records_write = os.pipe()
        persona.ensure(control.aslr_off)
        try:
            self.pid, _ = _spawn(gate_to_use, argv, control, ctl_read, stderr_file, (), cgroup.procs_fd(),
                                 records_write, cpus=cpus)
        except OSError as err:
            os.close(self._ctl)
            os.close(self._records)
            raise _spawn_error(err, argv, control) from None
        finally:
            os.close(ctl_read)
            os.close(records_write)
        _live_gates.add(self.pid)
        self._open = True

    def run(self) -> Exit:
        """One run: release it, wait for its record, clean up what it left. Anything raised on the way (a stop
        signal's Interrupted) kills the run's tree and ends the loop; RunError when the loop itself is gone."""
        if self._stderr_file is not None:
            _clear(self._stderr_file)
        born = _ticks_now()
        start_time_ns = time.time_ns()
        try:
            try:
                os.write(self._ctl, b"\n")
            except BrokenPipeError:
                raise RunError(self._gone()) from None
            record, timed_out, stop = self._wait()
        except BaseException:
            self._cgroup.kill()
            self.close()
            raise
        _, _, code, status, max_rss_kib, start_ns, end_ns = record
        outlived = self._kill_leftovers(born)
        exit_status = status if code == os.CLD_EXITED else None
        signal_number = status if code in (os.CLD_KILLED, os.CLD_DUMPED) else None
        stderr_tail = _stderr_tail(self._stderr_file)
        if stop is not None:  # recorded as the signal that stopped it: the SIGKILL that ended it was perfctl's
            signal_number, stderr_tail = stop.si_status, _describe_stop(stop)
        return Exit(start_time_ns=start_time_ns, wall_ns=end_ns - start_ns, exit_status=exit_status,
                    signal=None if timed_out else signal_number, timed_out=timed_out, max_rss_kib=max_rss_kib,
                    stderr_tail=stderr_tail, outlived=outlived)

    def _wait(self) -> tuple[tuple[int, ...], bool, _Stop | None]:
        """The run's exit record, whether the timeout came first, and the stop that would never end (both
        kill the tree; the exit record follows). A stopped run is watched as GatedProcess._wait does."""
        poller = select.poll()
        poller.register(self._records, select.POLLIN)
        timeout_s = self.control.timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        timed_out, killed_for = False, None
        stopped: tuple[float, int | None, _Stop, int] | None = None  # since, switches then, the stop, its pid
        while True:
            slice_s = STOP_CHECK_S if deadline is None else min(STOP_CHECK_S, deadline - time.monotonic())
            if slice_s <= 0:  # the timeout: the tree goes, and its exit record follows
                self._cgroup.kill()
                timed_out, deadline = True, time.monotonic() + REAP_SECONDS
                continue
            if poller.poll(math.ceil(slice_s * 1000)):
                data = os.read(self._records, LOOP_RECORD.size)
                if len(data) != LOOP_RECORD.size:
                    raise RunError(self._gone())
                record = LOOP_RECORD.unpack(data)
                if record[0] != _LOOP_STOPPED:
                    return record, timed_out, killed_for
                if not timed_out and killed_for is None:
                    stopped = (time.monotonic(), _context_switches(record[1]), _Stop(record[2], record[3]), record[1])
                continue
            if timed_out:  # REAP_SECONDS after the kill and still no exit: the tree cannot be killed
                raise RunError(f"the benchmark ran past --timeout {timeout_s:g}s and its processes could not be "
                               f"killed within {REAP_SECONDS:g}s")
            if _stopped(self.pid):  # the loop times the run: stopped, it would record the stop as run time
                raise RunError(f"the exec gate's loop (pid {self.pid}) was stopped during a run, whose wall time "
                               "it measures; the run's outcome is unknown")
            if stopped is not None and killed_for is None:
                since, switches, stop, pid = stopped
                now, switches_now = time.monotonic(), _context_switches(pid)
                if switches_now != switches:  # it ran since: continued by someone
                    stopped = None
                elif now - since >= STOP_GRACE_S:
                    killed_for = stop
                    self._cgroup.kill()
                    # and by its pid: a child stopped while it waited for its release is not in the cgroup yet
                    # (the loop has not reaped it, so the pid is still that child's)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def _kill_leftovers(self, born: int) -> int:
        """Kill what the run left running (through the cgroup) and reap what was reparented to perfctl; how
        many were still running. Nearly every run leaves nothing: the cgroup is empty, no child exited."""
        try:
            exited = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
        except ChildProcessError:
            exited = None
        if exited is None and not self._cgroup.populated():
            return 0
        running = self._cgroup.kill()
        kill_leftovers(born)  # reaps them: they were reparented to perfctl, their subreaper
        return len(running)

    @property
    def alive(self) -> bool:
        """Open and its process still there (one that something killed between runs is replaced)."""
        if not self._open:
            return False
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def _gone(self) -> str:
        self.close()
        return "the exec gate's loop ended before the run did (killed?); the run's outcome is unknown"

    def close(self) -> None:
        """End the loop (it has no run in progress, or that run was killed) and reap it."""
        if not self._open:
            return
        self._open = False
        # the child waiting for the next release reads EOF and exits, and the loop ends after it (gate.c)
        os.close(self._ctl)
        os.close(self._records)
        ended = False
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(self.pid)
            try:
                ended = bool(select.select([pidfd], [], [], LOOP_END_S)[0])
            finally:
                os.close(pidfd)
        if not ended:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        _live_gates.discard(self.pid)


class GatedProcess:
    """One benchmark process, blocked in the gate until :meth:`release_and_wait`."""

    def __init__(self, gate_to_use: gate.Gate, argv: list[str], control: RunControl, stderr_file,
                 persona: _Persona, pass_fds: tuple[int, ...], cgroup: RunCgroup | None,
                 join: RunCgroup | None = None, cpus: set[int] | None = None) -> None:
        self._control = control
        self._stderr_file = stderr_file
        self._reaped = False
        read_end, self._gate = os.pipe()
        # the static gate writes the time of its execve here (gate.c -T): where the wall time starts
        self._timing, timing_write = os.pipe() if gate_to_use.static else (-1, -1)
        if self._timing != -1:  # read once the run is over, and then never waited on (_exec_ns)
            os.set_blocking(self._timing, False)
        persona.ensure(control.aslr_off)
        self._born = _ticks_now()  # what the benchmark leaves behind started no earlier (kill_leftovers)
        try:
            self.pid, self._popen = _spawn(gate_to_use, argv, control, read_end, stderr_file, pass_fds,
                                           None if join is None else join.procs_fd(),
                                           timing_fd=None if timing_write == -1 else timing_write, cpus=cpus)
        except OSError as err:
            self._close_gate()
            self._close_timing()
            raise _spawn_error(err, argv, control) from None
        finally:
            os.close(read_end)
            if timing_write != -1:
                os.close(timing_write)
        _live_gates.add(self.pid)
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

    def release_and_wait(self) -> Exit:
        """Let the gate exec the benchmark; wait for the exit, the timeout or a stop that would never end
        (both kill the whole tree); then kill what the benchmark left running."""
        start_time_ns = time.time_ns()
        start = time.perf_counter_ns()
        try:
            os.write(self._gate, b"\n")
        except BrokenPipeError:  # the gate exited before its release (it refused its options): its status says why
            pass
        self._close_gate()
        timed_out, stop = self._wait()
        end = time.perf_counter_ns()
        if timed_out or stop is not None:
            self._kill_tree()
        exec_ns = self._exec_ns()
        wall_ns = end - (exec_ns if exec_ns is not None and start <= exec_ns <= end else start)
        status, rusage = self._reap()
        outlived = len(self._kill_leftovers())  # none after a kill_tree, which took them
        exit_status = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        stderr_tail = self._stderr_tail()
        if stop is not None:
            # recorded as the signal that stopped it: the SIGKILL that ended it was perfctl's
            signal_number, stderr_tail = stop.si_status, _describe_stop(stop)
        return Exit(start_time_ns=start_time_ns, wall_ns=wall_ns, exit_status=exit_status,
                    signal=None if timed_out else signal_number, timed_out=timed_out,
                    max_rss_kib=rusage.ru_maxrss, stderr_tail=stderr_tail, outlived=outlived)

    def _wait(self) -> tuple[bool, os.waitid_result | None]:
        """Wait for the benchmark to exit: (whether the timeout came first, the stop that would never end).
        The exit is seen at once (the pidfd); the stop check runs only every STOP_CHECK_S."""
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        timeout_s = self._control.timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        stopped_since: tuple[float, int] | None = None  # when a stop was first seen, and the switches then
        while True:
            slice_s = STOP_CHECK_S if deadline is None else min(STOP_CHECK_S, deadline - time.monotonic())
            if slice_s <= 0:
                return True, None
            if poller.poll(math.ceil(slice_s * 1000)):
                return False, None
            reap_exited_orphans(self._born)
            # WNOWAIT: only look; the stop stays reportable and the final wait4 still sees the exit
            try:
                stop = os.waitid(os.P_PID, self.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # it exited since the poll: waitid without WEXITED says ECHILD then
                return False, None
            if stop is None:
                stopped_since = None
                continue
            now, switches = time.monotonic(), _context_switches(self.pid)
            if stopped_since is None or stopped_since[1] != switches:
                stopped_since = (now, switches)
            elif now - stopped_since[0] >= STOP_GRACE_S:
                return False, stop

    def _reap(self) -> tuple[int, object]:
        """wait4 the benchmark: its exit status and rusage. A traced child (PTRACE_TRACEME makes perfctl its
        tracer) can report one last ptrace stop before the exit of the kill; that is skipped."""
        while True:
            _, status, rusage = os.wait4(self.pid, 0)
            if not os.WIFSTOPPED(status):
                break
        self._reaped = True
        _live_gates.discard(self.pid)
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
        if not _has_children():  # nearly every run: nothing was left behind, nothing to scan /proc for
            return []
        if self._cgroup is None:
            return kill_leftovers(self._born)
        # Whatever of the benchmark still lives descends from a child of perfctl, its subreaper, that is
        # outside perfctl's session: with none (nearly every run), the cgroup is empty and left unread.
        if not _orphan_roots(self._born):
            return []
        running = self._cgroup.kill()
        kill_leftovers(self._born)  # reaps them: they were reparented to perfctl, their subreaper
        return running

    def _stderr_tail(self) -> str | None:
        return _stderr_tail(self._stderr_file)

    def kill(self) -> None:
        """Kill and reap the process tree if it is still there (an error or an interrupt before the exit)."""
        self._close_gate()
        if not self._reaped and self._reaped_unrecorded():
            self._reaped = True
            _live_gates.discard(self.pid)
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


def _spawn_error(err: OSError, argv: list[str], control: RunControl) -> RunError:
    """Why a gate (single-run or loop) could not be spawned, in the user's terms."""
    if err.errno == errno.E2BIG:
        return RunError(_too_big(argv, control))
    return RunError(f"cannot start the benchmark: {err.strerror}: {err.filename or argv[0]}")


def _too_big(argv: list[str], control: RunControl) -> str:
    """Why an exec failed with E2BIG, in the user's terms rather than as the gate's path."""
    arg_bytes = sum(len(os.fsencode(arg)) + 1 for arg in argv)
    longest = max([len(os.fsencode(arg)) + 1 for arg in argv] +
                  [len(name) + len(value) + 2 for name, value in control.env_map.items()])
    limit = os.sysconf("SC_ARG_MAX")
    why = (f"one argument or variable of {longest} bytes is longer than the kernel's {MAX_ENV_STRING}"
           if longest > MAX_ENV_STRING else
           f"the arguments ({arg_bytes} bytes) and environment ({control.env_bytes} bytes) together are more "
           f"than the kernel's {limit} (a quarter of the stack limit, ulimit -s)")
    return f"cannot start the benchmark: its arguments and environment are too large: {why}; lower --env-size " \
           "or shorten the arguments"


def _clear(stderr_file) -> None:
    """Empty the stderr capture for the next run, and put its offset, which the runs share, back at 0; nearly
    every run wrote nothing, and then the file is empty at offset 0 already (an fstat and an lseek say so
    for less than a seek and truncate cost). Both are asked: a run that truncated its own stderr left the
    offset where it wrote, and the next run's line came after as many NULs."""
    fd = stderr_file.fileno()
    if os.fstat(fd).st_size or os.lseek(fd, 0, os.SEEK_CUR):
        stderr_file.seek(0)
        stderr_file.truncate()


def _stderr_tail(stderr_file) -> str | None:
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


def _describe_stop(stop: os.waitid_result) -> str:
    try:
        name = signal.Signals(stop.si_status).name
    except ValueError:
        name = f"signal {stop.si_status}"
    how = "stopped under ptrace with perfctl as its tracer" if stop.si_code == os.CLD_TRAPPED else "stopped"
    return f"perfctl: the benchmark {how} ({name}) and would never finish; killed with its process tree"


def _context_switches(pid: int) -> int | None:
    """Voluntary plus involuntary context switches of ``pid``: unchanged while it stays stopped, since running
    even once in between (a SIGCONT, then a new stop) takes a switch out."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            return sum(int(line.split()[1]) for line in f if b"ctxt_switches:" in line)
    except OSError:
        return None


def _spawn(gate_to_use: gate.Gate, argv: list[str], control: RunControl, stdin_fd: int,
           stderr_file, pass_fds: tuple[int, ...], join_fd: int | None = None,
           loop_fd: int | None = None, timing_fd: int | None = None,
           cpus: set[int] | None = None) -> tuple[int, subprocess.Popen | None]:
    """Start the gate with posix_spawn (vfork-based: no fork handlers, no Python in the child). The static
    gate switches user and directory itself; only the sh fallback needs subprocess's forking child for
    that, and says so in `perfctl info`."""
    stdout = None if control.show_output else subprocess.DEVNULL
    options: list[str] = []
    if gate_to_use.static:
        if control.user_ids is not None:
            uid, gid, groups = control.user_ids
            options += ["-u", str(uid), "-g", str(gid), "-G", ",".join(map(str, groups))]
        if control.cwd != os.getcwd():
            options += ["-C", control.cwd]
        if cpus is not None:
            options += ["-A", ",".join(map(str, sorted(cpus)))]
        if join_fd is not None:
            options += ["-J", str(join_fd)]
            pass_fds = (*pass_fds, join_fd)
        if timing_fd is not None:
            options += ["-T", str(timing_fd)]
            pass_fds = (*pass_fds, timing_fd)
        if loop_fd is not None:  # the loop (LoopedGate): its records go to loop_fd
            options += ["-L", str(loop_fd)]
            pass_fds = (*pass_fds, loop_fd)
        options.append("--")
    command = [*gate_to_use.prefix, *options, *argv]
    if gate_to_use.static or (control.user is None and control.cwd == os.getcwd()):
        actions = [(os.POSIX_SPAWN_DUP2, stdin_fd, 0)]
        if stdout is not None:
            actions.append((os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0))
        if stderr_file is not None:
            actions.append((os.POSIX_SPAWN_DUP2, stderr_file.fileno(), 2))
        # dup2 of a descriptor onto itself clears its close-on-exec flag (POSIX 2018; glibc >= 2.29)
        actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in pass_fds]
        return os.posix_spawn(command[0], command, control.env_map, file_actions=actions, setsid=True), None
    user_args = {}
    if control.user_ids is not None:
        uid, gid, groups = control.user_ids
        user_args = dict(user=uid, group=gid, extra_groups=groups)
    popen = subprocess.Popen(command, stdin=stdin_fd, stdout=stdout, stderr=stderr_file, env=control.env_map,
                             cwd=control.cwd, start_new_session=True, close_fds=True, pass_fds=pass_fds,
                             **user_args)
    return popen.pid, popen


class RunCgroup:
    """The cgroup (v2) a Runner's runs are born in: a directory perfctl makes below its own cgroup,
    perfctl-PID/runner-N, empty between runs.

    The static gate moves itself in as its last step before execve (gate.c -J, through cgroup.procs held
    open here: the cgroup then holds nothing between runs, which the perf_event backend's cgroup counting
    needs), the sh gate is moved in while it still blocks, so the benchmark and everything it starts are born
    inside, whatever session, process group or parent they move to. After the run, what is still inside
    is what it left behind, and ``cgroup.kill`` (Linux 5.14) kills it all in one step, forks in flight
    included: a /proc scan (kill_tree) freezes what it finds, but a benchmark that forks and exits in a loop
    moves on faster than /proc can be walked. One cgroup per Runner rather than per run: a mkdir and an
    rmdir fewer per run (~0.1 ms here). Where no cgroup can be made (not root, no cgroup2 mount, a kernel
    without cgroup.kill, a cgroup perfctl may not write), runs are contained by the subreaper and the scan
    alone: ``RunCgroup.unavailable`` says why (perfctl info).
    """

    made: list[RunCgroup] = []
    unavailable: str | None = None
    _numbers = itertools.count()

    def __init__(self, path: str) -> None:
        self.path = path
        self._procs_fd = -1
        self._events_fd = -1

    def procs_fd(self) -> int:
        """Its cgroup.procs, opened once (close-on-exec; perfctl's credentials, which the kernel checks
        when a gate writes "0" to it to move itself in): what a joining gate gets as -J."""
        if self._procs_fd == -1:
            self._procs_fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        return self._procs_fd

    @classmethod
    def make(cls) -> RunCgroup | None:
        """A new empty cgroup, or None (the reason in RunCgroup.unavailable)."""
        parent = _cgroup_parent()
        if parent is None:
            return None
        path = os.path.join(parent, f"runner-{next(cls._numbers)}")
        try:
            os.mkdir(path)
        except OSError as err:
            RunCgroup.unavailable = f"cannot make a cgroup for runs in {parent}: {err.strerror}"
            return None
        cgroup = cls(path)
        try:
            cgroup.procs_fd()
        except OSError as err:
            RunCgroup.unavailable = f"cannot open {path}/cgroup.procs for writing: {err.strerror}"
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        cls.made.append(cgroup)
        return cgroup

    def add(self, pid: int) -> bool:
        """Move ``pid`` in; False (the reason in RunCgroup.unavailable) when the kernel refuses."""
        try:
            _write(os.path.join(self.path, "cgroup.procs"), str(pid))
        except OSError as err:
            RunCgroup.unavailable = f"cannot move a benchmark into {self.path}: {err.strerror}"
            return False
        return True

    def kill(self) -> list[int]:
        """Kill every process in the cgroup and wait until it is empty; the pids that were in it."""
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                inside = [int(line) for line in f]
        except OSError:
            return []
        if inside:
            _write(os.path.join(self.path, "cgroup.kill"), "1")
            deadline = time.monotonic() + REAP_SECONDS
            while time.monotonic() < deadline and self.populated():
                time.sleep(0.001)
        return inside

    def populated(self) -> bool:
        """Whether anything is in the cgroup, from cgroup.events held open and re-read in place (~2 µs here;
        opening it each time cost ~40 µs, once per run of the gate's loop)."""
        try:
            if self._events_fd == -1:
                self._events_fd = os.open(os.path.join(self.path, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC)
            return b"populated 1" in os.pread(self._events_fd, 256, 0)
        except OSError:
            return False

    def remove(self) -> None:
        self.kill()
        if self._procs_fd != -1:
            os.close(self._procs_fd)
            self._procs_fd = -1
        if self._events_fd != -1:
            os.close(self._events_fd)
            self._events_fd = -1
        with contextlib.suppress(OSError):
            os.rmdir(self.path)


def containment() -> tuple[str, str | None]:
    """How runs are contained here: ("cgroup", None), or ("scan", why no cgroup per run can be made)."""
    return ("cgroup", None) if _cgroup_parent() is not None else ("scan", RunCgroup.unavailable)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@functools.cache
def _cgroup_parent() -> str | None:
    """perfctl-PID below the cgroup v2 perfctl runs in, made once per process and removed at its exit; None
    with RunCgroup.unavailable set when it cannot be made or lacks cgroup.kill."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"]]
        with open("/proc/self/cgroup") as f:
            own = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
    except OSError as err:
        RunCgroup.unavailable = f"cannot read /proc/self/mounts or /proc/self/cgroup: {err.strerror}"
        return None
    if not mounts or own is None:
        RunCgroup.unavailable = "no cgroup v2 hierarchy is mounted"
        return None
    here = os.path.join(mounts[0], own.lstrip("/"))
    _remove_stale(here)
    parent = os.path.join(here, f"perfctl-{os.getpid()}")
    try:
        os.mkdir(parent, 0o755)
    except FileExistsError:
        pass
    except OSError as err:
        RunCgroup.unavailable = f"cannot make a cgroup in {here}: {err.strerror}"
        return None
    if not os.path.exists(os.path.join(parent, "cgroup.kill")):
        os.rmdir(parent)
        RunCgroup.unavailable = "this kernel has no cgroup.kill (Linux 5.14 or later)"
        return None
    atexit.register(_remove_parent, parent)
    return parent


def _remove_parent(parent: str) -> None:
    for cgroup in RunCgroup.made:
        cgroup.remove()
    with contextlib.suppress(OSError):
        os.rmdir(parent)


def _remove_stale(here: str) -> None:
    """perfctl-PID cgroups of perfctl processes that died without removing theirs (SIGKILL): empty ones go."""
    with contextlib.suppress(OSError):
        for entry in os.listdir(here):
            if entry.startswith("perfctl-") and entry[8:].isdigit() and not os.path.exists(f"/proc/{entry[8:]}"):
                stale = os.path.join(here, entry)
                with contextlib.suppress(OSError):
                    for runner in os.listdir(stale):
                        if runner.startswith("runner-"):  # what its runs left behind dies now
                            RunCgroup(os.path.join(stale, runner)).remove()
                    os.rmdir(stale)


# Pids of gated processes (benchmarks) started and not yet reaped, across every Runner of this process.
_live_gates: set[int] = set()


@functools.cache
def become_subreaper() -> None:
    """Make perfctl the child subreaper of everything it starts, once per process.

    A daemon (fork, setsid, fork again) leaves the benchmark's tree: its parent exits and it would be
    reparented to init, where no /proc walk from the benchmark finds it. As a subreaper perfctl inherits
    such orphans instead, so after every run they are among its own children (kill_leftovers).
    """
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise RunError(f"cannot make perfctl a child subreaper (prctl): {os.strerror(ctypes.get_errno())}; "
                       "processes a benchmark leaves behind could not be found")


def _parents() -> dict[int, list[int]]:
    """Every live process's children, from one walk of /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                task_stat = f.read()
        except OSError:
            continue
        ppid = int(task_stat[task_stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid``, from /proc (they may have left its session or process group)."""
    return _below([pid], _parents())


def _below(roots: list[int], children: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


_WALL = 0x40000000  # __WALL (linux/wait.h): children of every kind, whatever signal they send their parent


def _has_children() -> bool:
    """Whether perfctl has any child process, running or exited (one waitid that reaps nothing). Whatever a
    benchmark leaves behind is perfctl's child (its subreaper) once the benchmark is reaped, so without any
    there is nothing to kill or reap and the /proc scan (~50 µs a run here) is skipped."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
    except ChildProcessError:
        return False
    return True


def _own_children() -> list[int]:
    """perfctl's children: those of each of its threads (a child belongs to the thread that started it or
    inherited it), from /proc/self/task/*/children; a walk of all of /proc (~30 µs a process) only where
    the kernel lacks those files (CONFIG_PROC_CHILDREN)."""
    found: list[int] = []
    for thread in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{thread}/children", "rb") as f:
                found += map(int, f.read().split())
        except FileNotFoundError:
            if os.path.exists(f"/proc/self/task/{thread}/stat"):  # the thread is there, the file is not
                return _parents().get(os.getpid(), [])
    return found


def _ticks_now() -> int:
    """The boot-time clock in the clock ticks of /proc/PID/stat's start time (field 22), which the kernel
    derives from the same clock: a process started after this call reports at least this."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // (10**9 // _CLOCK_TICKS)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (/proc/PID/stat field 22); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            task_stat = f.read()
    except OSError:
        return None
    return int(task_stat[task_stat.rindex(b")") + 2:].split()[19])


def _orphans(born_since: int) -> list[int]:
    """Processes a benchmark started no earlier than ``born_since`` (clock ticks) left behind, reparented to
    perfctl (its subreaper), with their own descendants.

    perfctl's other children are told apart without a per-run cgroup (root only, a delegated cgroup v2
    tree, a mkdir and rmdir per run): a benchmark starts a session of its own (setsid in _spawn) and a
    process can stay in its session or start a new one but never join perfctl's, so a child of perfctl
    outside perfctl's session is a benchmark's (or one of Runner's gates: only Runner starts new sessions).
    That keeps a Pirate or perf that subprocess started. A process reparented to perfctl that started
    before the run (a server a test fixture daemonized, whose parent exited) is no leftover of it; a
    benchmark still running (another Runner's) is left to its owner.
    """
    roots = _orphan_roots(born_since)
    return [*roots, *_below(roots, _parents())] if roots else []


def _orphan_roots(born_since: int) -> list[int]:
    """perfctl's children that are a benchmark's orphans (see _orphans)."""
    own_session = os.getsid(0)
    roots = []
    for child in _own_children():
        if child in _live_gates:
            continue
        try:
            foreign = os.getsid(child) != own_session
        except ProcessLookupError:  # a zombie has no session any more: its start time still tells
            foreign = True
        started = _start_ticks(child)
        if foreign and started is not None and started >= born_since:
            roots.append(child)
    return roots


def reap_exited_orphans(born_since: int) -> None:
    """Reap the benchmark's orphans that have exited, while it runs. As their subreaper perfctl inherits
    them as zombies, where init would have reaped them at once: a benchmark that starts daemons in a loop
    would otherwise fill the pid table before the run ends."""
    for pid in _orphan_roots(born_since):
        if _is_zombie(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def kill_leftovers(born_since: int) -> list[int]:
    """Kill and reap what benchmarks started no earlier than ``born_since`` (clock ticks since boot) left
    behind after they exited; the pids of those that were still running (not the zombies, which only
    needed reaping)."""
    running: set[int] = set()

    def scan() -> list[int]:
        found = _orphans(born_since)
        running.update(pid for pid in found if not _is_zombie(pid))
        return found

    _kill_frozen(scan)
    return sorted(running)


def _state(pid: int) -> bytes | None:
    """The process's state letter (field 3 of /proc/PID/stat), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            task_stat = f.read()
    except OSError:
        return None
    return task_stat[task_stat.rindex(b")") + 2:task_stat.rindex(b")") + 3]


def _stopped(pid: int) -> bool:
    """Stopped by a signal (state T); checked once per STOP_CHECK_S without a record, so a shorter stop of
    the loop goes unseen (and into that run's wall time)."""
    return _state(pid) == b"T"


def _is_zombie(pid: int) -> bool:
    """Exited, waiting only to be reaped (state Z); a process gone already counts too."""
    return _state(pid) in (None, b"Z", b"X")


def kill_tree(pid: int) -> None:
    """SIGKILL a process, every descendant, its process group and what it left behind reparented to perfctl,
    and reap them (all but ``pid``, which its owner reaps): a timeout leaves nothing running."""
    born = _start_ticks(pid)
    _kill_frozen(lambda: [pid, *descendants(pid), *(_orphans(born) if born is not None else ())], pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_frozen(scan, owned: int | None = None) -> list[int]:
    """SIGKILL every process ``scan()`` finds, then reap them but ``owned``; their pids.

    The processes are frozen with SIGSTOP first, rescanning until no new one appears, so a forking
    benchmark cannot outrun the kill.
    """
    stopped: set[int] = set()
    for _ in range(10):
        found = set(scan())
        if found <= stopped:
            break
        for target in found - stopped:
            _signal(target, signal.SIGSTOP)
        stopped |= found
    for target in stopped:
        _signal(target, signal.SIGKILL)
    _reap_killed(stopped - {owned})
    return sorted(stopped)


def _reap_killed(pids: set[int]) -> None:
    """Reap killed processes, by pid only (never a wait for any child: subprocess.Popen objects elsewhere in
    perfctl own theirs). A process killed with its parent becomes perfctl's child when that parent exits,
    so one that is not ours yet is waited for until it is, or is gone."""
    deadline = time.monotonic() + REAP_SECONDS
    pending = set(pids)
    while pending:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    pending.discard(pid)
            except ChildProcessError:
                if not os.path.exists(f"/proc/{pid}"):
                    pending.discard(pid)
        if pending:
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
