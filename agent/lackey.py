"""Address traces of a benchmark's data accesses from valgrind lackey (``--trace-mem=yes``): the collection
route for the cache models that works on every machine (../shared/notes/cache-models.md, "Data collection").

The run goes through the same exec gate and controls as every measurement. Lackey writes one line per
access: `` L addr,size`` (load), `` S addr,size`` (store), `` M addr,size`` (modify: a load and a store of
the same bytes by one instruction) and ``I`` lines for instructions, then ``guest instrs: N``. Here:

- data accesses only (L, S, M); an ``M`` is **one** access: the load brings the line in and the store
  that follows at once can only hit, so counting it twice would add a reuse of distance 0 that no cache
  ever misses on while inflating the access count;
- lines of 64 bytes (line = address >> 6); an access that crosses a line boundary is one access to each
  line it touches, in address order;
- the guest instruction count is kept, so the trace's mix (accesses per instruction) is known (StatCC).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from perfctl.agent.runner import Exit, RunControl, RunError, Runner

LINE_SHIFT = 6
_ACCESS = re.compile(rb"^ [LSM] ([0-9a-fA-F]+),(\d+)$", re.M)
_INSTRUCTIONS = re.compile(rb"guest instrs:\s+([\d,]+)")
_CHUNK = 64 << 20


@dataclass(frozen=True)
class Trace:
    lines: np.ndarray  # cache-line id per data access, in program order
    accesses: int  # data accesses as lackey reported them (before line splitting)
    split: int  # extra accesses from line-crossing
    instructions: int | None

    @property
    def mix(self) -> float | None:
        return len(self.lines) / self.instructions if self.instructions else None


def parse(path: str) -> Trace:
    """Read a lackey log into a Trace; raises ValueError for a file with no data accesses."""
    chunks, accesses, split, tail = [], 0, 0, b""
    instructions = None
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            block = tail + block
            cut = block.rfind(b"\n") + 1
            block, tail = block[:cut], block[cut:]
            found = _ACCESS.findall(block)
            if found:
                addresses = np.array([int(a, 16) for a, _ in found], dtype=np.uint64)
                sizes = np.array([int(s) for _, s in found], dtype=np.uint64)
                chunks.append(_lines(addresses, sizes))
                accesses += len(found)
                split += len(chunks[-1]) - len(found)
            if (match := _INSTRUCTIONS.search(block)) is not None:
                instructions = int(match.group(1).replace(b",", b""))
    if not chunks:
        raise ValueError(f"{path}: no data accesses in this lackey trace (empty or truncated)")
    return Trace(np.concatenate(chunks).astype(np.int64), accesses, split, instructions)


def _lines(addresses: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Line ids, one per line each access touches (a crossing access gives two or more, in order)."""
    first = addresses >> np.uint64(LINE_SHIFT)
    last = (addresses + np.maximum(sizes, 1) - np.uint64(1)) >> np.uint64(LINE_SHIFT)
    count = (last - first + np.uint64(1)).astype(np.int64)
    if (count == 1).all():
        return first
    starts = np.repeat(first, count)
    offsets = np.arange(len(starts)) - np.repeat(np.cumsum(count) - count, count)
    return starts + offsets.astype(np.uint64)


def trace(runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, Trace]:
    """Run the benchmark once under lackey and return its exit and its data-access trace."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RunError("tracing needs valgrind: apt-get install valgrind")
    fd, log = tempfile.mkstemp(prefix="perfctl-lackey-", suffix=".log")
    os.close(fd)
    os.chmod(log, 0o666)  # valgrind may run as --user and must write it
    try:
        target = [valgrind, "--tool=lackey", "--trace-mem=yes", f"--log-file={log}", "--", *argv]
        gated = runner.start(argv, control, gate_target=target)
        try:
            exit_ = gated.release_and_wait()
        finally:
            gated.kill()
        try:
            return exit_, parse(log)
        except ValueError:
            raise RunError(f"lackey recorded no data accesses of {argv[0]} (it exited "
                           f"{exit_.outcome}: {exit_.stderr_tail or 'no message'})") from None
    finally:
        os.unlink(log)
