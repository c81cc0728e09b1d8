"""The exec gate's program: the static binary built from gate.c, or sh when no C compiler is at hand.

The binary is built once with the system's C compiler (agent/build.py). Both gates give identical counts
(counting starts at the benchmark's exec either way);
the binary only makes each run ~0.6 ms cheaper. Which one is in use is shown by `perfctl info`.

The binary runs as root before it drops to --user, so it is used only after agent/build.py has checked the
cached file (ours, not writable by others, not a symbolic link, content matching the digest recorded when
it was built), and it is executed through the descriptor that check read (/proc/PID/fd/N, PID being
perfctl's own, so a child spawned with close_fds can still reach it): replacing the file afterwards
changes nothing that runs. A refused gate is said (the sh gate is used) with the command that fixes it.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass

from perfctl.agent.build import BuildError, UntrustedError, build_static, open_artifact

SH_GATE_SCRIPT = 'read _ || exit 125; exec "$@" </dev/null'
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.c")
CFLAGS = ("-O2", "-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
          "-fno-asynchronous-unwind-tables")


@dataclass(frozen=True)
class Gate:
    """``prefix`` gates a command (its argv follows). The static gate also drops privileges and changes
    directory itself (``static``: options -u -g -G -C before ``--``), so benchmarks always start with
    posix_spawn; the sh gate leaves that to subprocess, which forks. ``fix``: the command that gets the
    static gate where the sh gate is used, when there is one."""

    prefix: tuple[str, ...]
    description: str
    static: bool
    fix: str | None = None


def sh_gate() -> tuple[str, ...]:
    return (shutil.which("sh") or "/bin/sh", "-c", SH_GATE_SCRIPT, "perfctl-gate")


def find_gate() -> Gate:
    return _find_gate(os.getpid())  # the static gate's prefix names this process's descriptor


@functools.lru_cache(maxsize=1)
def _find_gate(pid: int) -> Gate:
    try:
        binary, fresh = build_static(SOURCE, CFLAGS, "gate")
        descriptor = open_artifact(binary)  # kept open for the process's lifetime: every run execs it
    except UntrustedError as err:
        return Gate(sh_gate(), f"sh gate (static gate refused: {err.reason})", False, err.fix)
    except BuildError as err:
        return Gate(sh_gate(), f"sh gate ({err.reason})", False, err.fix)
    return Gate((f"/proc/{pid}/fd/{descriptor}",), f"static gate {binary}" + (" (built now)" if fresh else ""), True)
