"""The exec gate's program: the static binary built from gate.c, or sh when no C compiler is at hand.

The binary is built once with the system's C compiler (agent/build.py). Both gates give identical counts
(counting starts at the benchmark's exec either way);
the binary only makes each run ~0.6 ms cheaper. Which one is in use is shown by `perfctl info`.

The binary runs as root before it drops to --user, so it is used only after agent/build.py has checked the
cached file (ours, not writable by others, not a symbolic link, a regular file, content matching the
digest recorded when it was built), and it is executed through the descriptor that check read
(/proc/PID/fd/N, PID being perfctl's own, so a child spawned with close_fds can still reach it): replacing
the file by another (a rename) afterwards changes nothing that runs. Rewriting it in place (same inode) does,
so the runner calls :meth:`Gate.verify` before every spawn: the held descriptor's content is hashed again and
a gate that changed refuses the run. What remains is the window between that check and the kernel's execve
of the gate, microseconds, open only to who can write the file: root or the cache's owner, since the cache
directory and the entry must not be writable by anyone else (docs/inventory.md). A gate refused when it is
first found is said (the sh gate is used) with the command that fixes it.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass, field

from perfctl.agent.build import BuildError, UntrustedError, build_static, check_descriptor, open_artifact_with_digest

SH_GATE_SCRIPT = 'read _ || exit 125; exec "$@" </dev/null'
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.c")
CFLAGS = ("-O2", "-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
          "-fno-asynchronous-unwind-tables")


@dataclass(frozen=True)
class Gate:
    """``prefix`` gates a command (its argv follows). The static gate also drops privileges and changes
    directory itself (``static``: options -u -g -G -C before ``--``), so benchmarks always start with
    posix_spawn; the sh gate leaves that to subprocess, which forks. ``fix``: the command that gets the
    static gate where the sh gate is used, when there is one. The static gate also holds ``descriptor``
    (the checked binary, open for the process's lifetime), its ``path`` in the cache and the ``digest`` its
    content was checked against, for :meth:`verify`."""

    prefix: tuple[str, ...]
    description: str
    static: bool
    fix: str | None = None
    descriptor: int | None = field(default=None, compare=False)
    path: str | None = field(default=None, compare=False)
    digest: str | None = field(default=None, compare=False)

    def verify(self, content: bool = True) -> str | None:
        """None when this gate may start another run; else why not, one line with its fix (the runner refuses
        the run with it). The static gate's held descriptor is checked again (build.check_descriptor: owner,
        mode, regular file, and its content re-read with pread from offset 0 and hashed against the digest
        checked when it was opened): microseconds for a gate of a few KB. ``content=False`` leaves out the
        content, for a gate a running loop executes: the kernel refuses every write to it meanwhile
        (ETXTBSY). The sh gate has nothing cached to check: always None. Never raises."""
        if self.descriptor is None or self.path is None or self.digest is None:
            return None
        try:
            check_descriptor(self.descriptor, self.path, self.digest if content else None)
        except UntrustedError as err:
            return f"static gate refused: {err}"
        return None


def sh_gate() -> tuple[str, ...]:
    return (shutil.which("sh") or "/bin/sh", "-c", SH_GATE_SCRIPT, "perfctl-gate")


def find_gate() -> Gate:
    return _find_gate(os.getpid())  # the static gate's prefix names this process's descriptor


@functools.lru_cache(maxsize=1)
def _find_gate(pid: int) -> Gate:
    return open_gate(pid)


def open_gate(pid: int) -> Gate:
    """The gate to use now, uncached (:func:`find_gate` keeps one per process): the static gate built or
    found in the cache and checked, its descriptor left open (every run execs it; closing it is the
    caller's business), or the sh gate saying why not."""
    try:
        binary, fresh = build_static(SOURCE, CFLAGS, "gate")
        descriptor, digest = open_artifact_with_digest(binary)
    except UntrustedError as err:
        return Gate(sh_gate(), f"sh gate (static gate refused: {err.reason})", False, err.fix)
    except BuildError as err:
        return Gate(sh_gate(), f"sh gate ({err.reason})", False, err.fix)
    return Gate((f"/proc/{pid}/fd/{descriptor}",), f"static gate {binary}" + (" (built now)" if fresh else ""), True,
                descriptor=descriptor, path=binary, digest=digest)
