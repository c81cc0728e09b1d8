"""The cgroup (v2) a Runner's runs are born in, killed through and counted by (RunCgroup), below one
perfctl-PID cgroup per perfctl process, made on first use and removed at its exit."""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import time

from perfctl.agent.run.reaping import REAP_SECONDS


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
