"""perfctl's in-process spawner: gate.c built as a shared object (-DPERFCTL_SPAWNER) and loaded into perfctl.

`perfctl stat` and `perfctl ab` start every run counted by cgroup through it (runner.ClonedProcess): a child
cloned from perfctl's own process, sharing its memory until its execve, that takes the gate's steps itself
(signals to their defaults, a session, its standard descriptors, its CPU, its user and directory, the move
into the cgroup, the time of its execve) and execs the benchmark. No gate process is exec'd and no pipe is
crossed, and since the benchmark starts on perfctl's CPU and wakes perfctl there when it exits, no wake-up
crosses CPUs: the way perf stat's own child runs (docs/stat.md, "Per-run cost").

Trust: the object is built into perfctl's cache like the gate (agent/build.py) and checked when opened (owner,
mode, the digest recorded at build). Its checked bytes are then copied into a sealed memfd, which is what is
loaded: nothing written to the cache afterwards reaches the code perfctl runs, so, unlike the gate's file,
it need not be checked again before each run.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
from dataclasses import dataclass

from perfctl.agent import gate
from perfctl.agent.build import BuildError, UntrustedError, build_static, open_artifact_with_digest

CFLAGS = ("-O2", "-shared", "-fPIC", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
          "-fno-asynchronous-unwind-tables", "-DPERFCTL_SPAWNER")
_MEMFD_NAME = "perfctl-spawner"
_PAGE = os.sysconf("SC_PAGE_SIZE")
_CPU_MASK_BYTES = 128  # a cpu_set_t: 1024 CPUs


class SpawnArgs(ctypes.Structure):
    """gate.c struct spawn_args."""

    _fields_ = [("command", ctypes.POINTER(ctypes.c_char_p)), ("envp", ctypes.POINTER(ctypes.c_char_p)),
                ("group_count", ctypes.c_long), ("groups", ctypes.POINTER(ctypes.c_uint)),
                ("gid", ctypes.c_long), ("uid", ctypes.c_long), ("directory", ctypes.c_char_p),
                ("join", ctypes.c_long), ("stdin_fd", ctypes.c_long), ("stdout_fd", ctypes.c_long),
                ("stderr_fd", ctypes.c_long), ("cpu_mask_bytes", ctypes.c_long),
                ("cpu_mask", ctypes.POINTER(ctypes.c_ulong))]


def _strings(items: list[bytes]):
    return (ctypes.c_char_p * (len(items) + 1))(*items, None)


class Command:
    """One command under one RunControl, as gate.c's spawn_args: built once, and every array it points to
    kept alive here for as long as a child may read it (it does until its execve)."""

    def __init__(self, argv: list[str], control, join_fd: int, stdin_fd: int, stdout_fd: int, stderr_fd: int,
                 home_cpus: set[int]):
        self.control = control  # held: Runner.cloned tells commands apart by this object
        self._argv = _strings([os.fsencode(arg) for arg in argv])
        self._envp = _strings([name + b"=" + value for name, value in control.env_map.items()])
        uid = gid = -1
        self._groups = None
        if control.user_ids is not None:
            uid, gid, groups = control.user_ids
            self._groups = (ctypes.c_uint * max(1, len(groups)))(*groups)
        self._directory = os.fsencode(control.cwd) if control.cwd != os.getcwd() else None
        cpus = {control.pin_cpu} if control.pin_cpu is not None else home_cpus
        self._mask = (ctypes.c_ulong * (_CPU_MASK_BYTES // 8))()
        for cpu in cpus:
            self._mask[cpu // 64] |= 1 << (cpu % 64)
        self.args = SpawnArgs(self._argv, self._envp, -1 if self._groups is None else len(control.user_ids[2]),
                              self._groups, gid, uid, self._directory, join_fd, stdin_fd, stdout_fd, stderr_fd,
                              _CPU_MASK_BYTES, self._mask)


@dataclass
class Spawner:
    """The loaded object. One child at a time: the child reads what perfctl_spawn stored and runs on the
    object's one stack until its execve, so the next spawn waits for the last child's exit (ClonedProcess)."""

    library: ctypes.CDLL
    description: str

    def __post_init__(self) -> None:
        self._spawn = self.library.perfctl_spawn
        self._spawn.restype = ctypes.c_long
        self._spawn.argtypes = (ctypes.POINTER(SpawnArgs), ctypes.POINTER(ctypes.c_int))
        self._exec_ns = ctypes.c_long.in_dll(self.library, "perfctl_exec_ns")
        self._pidfd = ctypes.c_int(-1)
        self.busy = False

    def spawn(self, command: Command) -> tuple[int, int]:
        """Start ``command``: (pid, pidfd). Raises OSError when the clone fails."""
        if self.busy:
            raise RuntimeError("a spawned child may still be running on the spawner's stack")
        pid = self._spawn(ctypes.byref(command.args), ctypes.byref(self._pidfd))
        if pid < 0:
            raise OSError(-pid, os.strerror(-pid))
        self.busy = True
        return pid, self._pidfd.value

    def exec_ns(self) -> int | None:
        """CLOCK_MONOTONIC right before the last child's execve, or None when it did not get that far."""
        return self._exec_ns.value or None


@functools.lru_cache(maxsize=1)
def load() -> Spawner | str:
    """The spawner, built or found in the cache, checked and loaded; or why it cannot be (a string)."""
    try:
        path, fresh = build_static(gate.SOURCE, CFLAGS, "spawner")
        descriptor, digest = open_artifact_with_digest(path)
    except (BuildError, UntrustedError) as err:
        return f"no in-process spawner: {err.reason}"
    try:
        content = os.pread(descriptor, os.fstat(descriptor).st_size, 0)
    finally:
        os.close(descriptor)
    if hashlib.sha256(content).hexdigest() != digest:
        return f"no in-process spawner: {path} changed while it was read"
    try:
        library = _load_sealed(content)
    except OSError as err:
        return f"no in-process spawner: it cannot be loaded: {err}"
    return Spawner(library, f"in-process spawner {path}" + (" (built now)" if fresh else ""))


def _load_sealed(content: bytes) -> ctypes.CDLL:
    """Load ``content`` from a memfd sealed against every change, and read its pages in (_touch)."""
    memfd = os.memfd_create(_MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(memfd, content)
        fcntl.fcntl(memfd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        library = ctypes.CDLL(f"/proc/self/fd/{memfd}")
    finally:
        os.close(memfd)  # the mapping holds it
    _touch()
    library.perfctl_spawner_touch()
    return library


def _touch() -> None:
    """Read every page of the loaded object now: a page of code its child first runs after joining the cgroup
    would be faulted in there, and counted as the benchmark's."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or _MEMFD_NAME not in line or not fields[1].startswith("r"):
                continue
            start, end = (int(part, 16) for part in fields[0].split("-"))
            for page in range(start, end, _PAGE):
                ctypes.string_at(page, 1)
