"""The exec gate's program: the static binary built from gate.c, or sh when no C compiler is at hand.

The binary is built once with the system's C compiler (agent/build.py). Counting starts at the benchmark's
exec with either gate, but only the binary moves itself into the run's cgroup right before its execve (-J:
the perf_event backend's counters, opened once for the cgroup rather than per run), times the run from its
execve (-T) and loops (-L: agent/run/looped.py, a run started by a write rather than a spawn); under the sh
gate every run is a spawn with counters opened for it. Which one is in use is shown by `perfctl info`.

The loop's record (gate.c ``struct record``) has one definition, in gate.c: :func:`loop_record` reads its
fields and kinds off the source the binary is built from, and the loop reports the size it was compiled with
before its first run, which agent/run/looped.py checks against it (as libbpf-tools share one header between
a BPF program and its loader).

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

import collections
import functools
import os
import re
import shutil
import struct
from dataclasses import dataclass, field

from perfctl.agent.build import BuildError, UntrustedError, build_static, check_descriptor, open_artifact_with_digest
from perfctl.agent.run import RunError

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


# What agent/run/looped.py reads of a record: a gate.c without one of these is refused at load.
RECORD_FIELDS_READ = ("kind", "pid", "code", "status", "max_rss_kib", "start_ns", "end_ns")
RECORD_KINDS_READ = ("RECORD_EXITED", "RECORD_STOPPED")
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_RECORD = re.compile(r"^struct record \{\n(.*?)^\};", re.S | re.M)
_KINDS = re.compile(r"^enum record_kind \{(.*?)\};", re.S | re.M)


@dataclass(frozen=True)
class RecordLayout:
    """gate.c's ``struct record``: its fields in order (each a C long, 8 bytes on x86-64), the values of
    ``enum record_kind``, and ``unpack`` for the bytes the loop writes (a named tuple of the fields)."""

    fields: tuple[str, ...]
    kinds: dict[str, int]

    @functools.cached_property
    def format(self) -> struct.Struct:
        return struct.Struct("=" + "q" * len(self.fields))

    @functools.cached_property
    def _tuple(self):
        return collections.namedtuple("LoopRecord", self.fields)

    def unpack(self, data: bytes):
        return self._tuple._make(self.format.unpack(data))


def record_layout(text: str) -> RecordLayout:
    """The record layout a gate.c source defines; a RunError naming what is missing or not a long."""
    text = _COMMENT.sub("", text)
    body, kinds = _RECORD.search(text), _KINDS.search(text)
    if body is None or kinds is None:
        raise RunError(f"{SOURCE} defines no struct record or enum record_kind: the exec gate's loop cannot be read")
    fields = []
    for line in filter(None, (line.strip() for line in body.group(1).splitlines())):
        declared = re.fullmatch(r"long (\w+);", line)
        if declared is None:
            raise RunError(f"{SOURCE}: struct record's '{line}' is not one long: perfctl reads every field as a "
                           "64-bit long")
        fields.append(declared.group(1))
    values = {}
    for item in filter(None, (item.strip() for item in kinds.group(1).split(","))):
        declared = re.fullmatch(r"(\w+) = (\d+)", item)
        if declared is None:
            raise RunError(f"{SOURCE}: enum record_kind's '{item}' has no explicit value: perfctl reads 'NAME = N'")
        values[declared.group(1)] = int(declared.group(2))
    missing = [name for name in (*RECORD_FIELDS_READ, *RECORD_KINDS_READ) if name not in (*fields, *values)]
    if missing:
        raise RunError(f"{SOURCE}: struct record or enum record_kind lacks {', '.join(missing)}, which perfctl reads")
    return RecordLayout(tuple(fields), values)


@functools.cache
def loop_record() -> RecordLayout:
    """The layout of the records of the loop built from :data:`SOURCE`, read once per process."""
    with open(SOURCE) as f:
        return record_layout(f.read())
