"""What a run leaves behind, found through /proc and killed and reaped: perfctl is a child subreaper
(become_subreaper), so what a benchmark leaves running, daemons included, ends up among perfctl's children,
and every run ends with it killed and reaped (kill_leftovers, kill_tree). One reader of /proc/PID/stat
(:func:`_stat_fields`) serves the parent, state and start-time lookups.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import time

from perfctl.agent.run import RunError, libc

PR_SET_CHILD_SUBREAPER = 36
# How long killed processes get to end (a task in uninterruptible sleep dies only when it wakes); one still
# there is reaped by a later run's cleanup, as a leftover.
REAP_SECONDS = 5.0
_WALL = 0x40000000  # __WALL (linux/wait.h): children of every kind, whatever signal they send their parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Pids of gated processes (benchmarks and loops) started and not yet reaped, across every Runner of this
# process: a run's cleanup leaves them to their owners.
live_gates: set[int] = set()


@functools.cache
def become_subreaper() -> None:
    """Make perfctl the child subreaper of everything it starts, once per process.

    A daemon (fork, setsid, fork again) leaves the benchmark's tree: its parent exits and it would be
    reparented to init, where no /proc walk from the benchmark finds it. As a subreaper perfctl inherits
    such orphans instead, so after every run they are among its own children (kill_leftovers).
    """
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise RunError(f"cannot make perfctl a child subreaper (prctl): {os.strerror(ctypes.get_errno())}; "
                       "processes a benchmark leaves behind could not be found")


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses): [0] is the
    state (field 3), [1] the parent (field 4), [19] the start time (field 22); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            task_stat = f.read()
    except OSError:
        return None
    return task_stat[task_stat.rindex(b")") + 2:].split()


def _parents() -> dict[int, list[int]]:
    """Every live process's children, from one walk of /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(entry)) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
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


def _exited_child() -> bool | None:
    """One waitid that reaps nothing: None when perfctl has no child at all, else whether one has exited."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL) is not None
    except ChildProcessError:
        return None


def has_children() -> bool:
    """Whether perfctl has any child process, running or exited. Whatever a benchmark leaves behind is
    perfctl's child (its subreaper) once the benchmark is reaped, so without any there is nothing to kill or
    reap and the /proc scan (~50 µs a run here) is skipped."""
    return _exited_child() is not None


def has_exited_child() -> bool:
    """Whether a child of perfctl has exited and waits to be reaped."""
    return bool(_exited_child())


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


def ticks_now() -> int:
    """The boot-time clock in the clock ticks of /proc/PID/stat's start time (field 22), which the kernel
    derives from the same clock: a process started after this call reports at least this."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // (10**9 // _CLOCK_TICKS)


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (/proc/PID/stat field 22); None when it is gone."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def _state(pid: int) -> bytes | None:
    """The process's state letter (field 3 of /proc/PID/stat), or None when it is gone."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[0][:1]


def stopped(pid: int) -> bool:
    """Stopped by a signal (state T)."""
    return _state(pid) == b"T"


def _is_zombie(pid: int) -> bool:
    """Exited, waiting only to be reaped (state Z); a process gone already counts too."""
    return _state(pid) in (None, b"Z", b"X")


def context_switches(pid: int) -> int | None:
    """Voluntary plus involuntary context switches of ``pid``: unchanged while it stays stopped, since running
    even once in between (a SIGCONT, then a new stop) takes a switch out."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            return sum(int(line.split()[1]) for line in f if b"ctxt_switches:" in line)
    except OSError:
        return None


def _orphans(born_since: int) -> list[int]:
    """Processes a benchmark started no earlier than ``born_since`` (clock ticks) left behind, reparented to
    perfctl (its subreaper), with their own descendants.

    perfctl's other children are told apart without a per-run cgroup (root only, a delegated cgroup v2
    tree, a mkdir and rmdir per run): a benchmark starts a session of its own (setsid in spawn) and a
    process can stay in its session or start a new one but never join perfctl's, so a child of perfctl
    outside perfctl's session is a benchmark's (or one of Runner's gates: only Runner starts new sessions).
    That keeps a Pirate or perf that subprocess started. A process reparented to perfctl that started
    before the run (a server a test fixture daemonized, whose parent exited) is no leftover of it; a
    benchmark still running (another Runner's) is left to its owner.
    """
    roots = orphan_roots(born_since)
    return [*roots, *_below(roots, _parents())] if roots else []


def orphan_roots(born_since: int) -> list[int]:
    """perfctl's children that are a benchmark's orphans (see _orphans)."""
    own_session = os.getsid(0)
    roots = []
    for child in _own_children():
        if child in live_gates:
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
    for pid in orphan_roots(born_since):
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
    frozen: set[int] = set()
    for _ in range(10):
        found = set(scan())
        if found <= frozen:
            break
        for target in found - frozen:
            _signal(target, signal.SIGSTOP)
        frozen |= found
    for target in frozen:
        _signal(target, signal.SIGKILL)
    _reap_killed(frozen - {owned})
    return sorted(frozen)


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
