"""Starting the exec gate: with posix_spawn (vfork-based: no fork handlers, no Python in the child), so this
is safe in a process that holds gRPC threads; only the sh fallback gate, used without a C compiler, needs
subprocess's forking child for --user. And the spawning thread's personality, which sets the benchmark's ASLR.

ASLR is turned off for the benchmark only: personality(ADDR_NO_RANDOMIZE) is set on the spawning thread
(personality is per task, inherited across fork and exec, and read only at exec), so perfctl itself keeps
the randomized layout it was exec'd with and the system setting is untouched; Runner.close() restores it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess

from perfctl.agent import gate
from perfctl.agent.run import RunError, libc
from perfctl.agent.run.control import RunControl
from perfctl.agent.run.environment import MAX_ENV_STRING

ADDR_NO_RANDOMIZE = 0x0040000


class Persona:
    """The spawning thread's personality, changed only when a run asks for another ASLR setting.

    personality(2) is per thread and only shapes programs exec'd later, never perfctl itself; keeping
    ADDR_NO_RANDOMIZE set between runs saves two syscalls per run (~60 µs on these VMs). Runner.close()
    puts the original back.
    """

    def __init__(self) -> None:
        self.original = self.current = libc.personality(ctypes.c_ulong(0xFFFFFFFF))

    def ensure(self, aslr_off: bool) -> None:
        wanted = self.original | ADDR_NO_RANDOMIZE if aslr_off else self.original & ~ADDR_NO_RANDOMIZE
        if wanted != self.current:
            libc.personality(ctypes.c_ulong(wanted))
            self.current = wanted

    def restore(self) -> None:
        if self.current != self.original:
            libc.personality(ctypes.c_ulong(self.original))
            self.current = self.original


def spawn(gate_to_use: gate.Gate, argv: list[str], control: RunControl, stdin_fd: int,
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


def spawn_error(err: OSError, argv: list[str], control: RunControl) -> RunError:
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
