"""The exec gate's program: the static binary built from gate.c, or sh when no C compiler is at hand.

The binary is built once per source digest with the system's C compiler into a cache directory owned by
the current user (root: /var/cache/perfctl, mode 755, so a benchmark run with --user can execute it; others:
~/.cache/perfctl). Both gates give identical counts (counting starts at the benchmark's exec either way);
the binary only makes each run ~0.6 ms cheaper. Which one is in use is shown by `perfctl info`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

SH_GATE_SCRIPT = 'read _ || exit 125; exec "$@" </dev/null'
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.c")
CFLAGS = ("-O2", "-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
          "-fno-asynchronous-unwind-tables")


def _cache_dir() -> str:
    if os.geteuid() == 0:
        return "/var/cache/perfctl"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "perfctl")


def _trusted(path: str) -> bool:
    """Ours and not writable by anyone else: perfctl (often root) is about to exec it."""
    st = os.stat(path)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


@dataclass(frozen=True)
class Gate:
    """``prefix`` gates a command (its argv follows). The static gate also drops privileges and changes
    directory itself (``static``: options -u -g -G -C before ``--``), so benchmarks always start with
    posix_spawn; the sh gate leaves that to subprocess, which forks."""

    prefix: tuple[str, ...]
    description: str
    static: bool


def sh_gate() -> tuple[str, ...]:
    return (shutil.which("sh") or "/bin/sh", "-c", SH_GATE_SCRIPT, "perfctl-gate")


def gate_command() -> tuple[tuple[str, ...], str]:
    """(argv prefix that gates a command, how it was obtained)."""
    gate = find_gate()
    return gate.prefix, gate.description


@functools.lru_cache(maxsize=1)
def find_gate() -> Gate:
    built, how = _build()
    if built is None:
        return Gate(sh_gate(), how, False)
    return Gate((built,), how, True)


def _build() -> tuple[str | None, str]:
    fallback = None
    try:
        with open(SOURCE, "rb") as f:
            digest = hashlib.sha256(f.read() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    except OSError as err:
        return fallback, f"sh gate ({SOURCE} unreadable: {err.strerror})"
    directory = _cache_dir()
    binary = os.path.join(directory, f"gate-{digest}")
    if os.path.exists(binary):
        if _trusted(binary) and _trusted(directory):
            return binary, f"static gate {binary}"
        return fallback, f"sh gate ({binary} is not owned by us or is writable by others)"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return fallback, "sh gate (no C compiler to build the static gate: apt-get install gcc)"
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=".gate-")
        os.close(fd)
        result = subprocess.run([compiler, *CFLAGS, "-o", temporary, SOURCE], capture_output=True, text=True)
        if result.returncode != 0:
            os.unlink(temporary)
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return fallback, f"sh gate (building the static gate failed: {last})"
        os.chmod(temporary, 0o755)
        os.replace(temporary, binary)
    except OSError as err:
        return fallback, f"sh gate (cannot build the static gate in {directory}: {err.strerror})"
    return binary, f"static gate {binary} (built now)"
