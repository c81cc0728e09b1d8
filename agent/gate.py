"""The exec gate's program: the static binary built from gate.c, or sh when no C compiler is at hand.

The binary is built once with the system's C compiler (agent/build.py). Both gates give identical counts
(counting starts at the benchmark's exec either way);
the binary only makes each run ~0.6 ms cheaper. Which one is in use is shown by `perfctl info`.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass

from perfctl.agent.build import BuildError, build_static

SH_GATE_SCRIPT = 'read _ || exit 125; exec "$@" </dev/null'
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.c")
CFLAGS = ("-O2", "-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
          "-fno-asynchronous-unwind-tables")


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
    try:
        binary, fresh = build_static(SOURCE, CFLAGS, "gate")
    except BuildError as err:
        return None, f"sh gate ({err})"
    return binary, f"static gate {binary}" + (" (built now)" if fresh else "")
