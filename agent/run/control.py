"""RunControl: how every run of a measurement is controlled (environment, directory, ASLR, CPU, user,
timeout, output), validated once at the boundary by :func:`make_control`; and the benchmark's executable,
found and checked before any run (:func:`resolve_command`)."""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import stat
from dataclasses import dataclass

from perfctl.agent.run import RunError
from perfctl.agent.run.environment import default_size, env_block_size, normalized_environment

CLEAN_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "TERM", "TZ")


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
        env_size = default_size(base, cwd)
    if not 0 < env_size <= 1 << 20:
        raise RunError(f"--env-size must be between 1 and 1048576 bytes, got {env_size}")
    env = normalized_environment(base, env_size, cwd)
    return RunControl(env=tuple(env.items()), env_bytes=env_block_size(env), cwd=cwd, aslr_off=aslr_off,
                      pin_cpu=pin_cpu, user=user, timeout_s=timeout_s, show_output=show_output)


def locate_command(argv0: str, path: str | None) -> str:
    """Absolute path of the benchmark's executable as named (symlinks kept), without opening it: the agent
    resolves a command by it (resolve_command) before anything reads the file."""
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
