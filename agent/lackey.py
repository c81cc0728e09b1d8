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
- the guest instruction count is kept, so the trace's mix (accesses per instruction) is known (StatCC);
  a log without it ended early (a full disk, a killed run) and is refused, never modelled as complete.

``trace`` never writes the log to a file: valgrind writes it to a pipe (``--log-fd``) that a thread parses
as it streams in. A full TMPDIR cannot cut it short, no other user can edit it, nothing is left on disk, and
the bytes are counted for progress and for the size cap.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from perfctl.agent.runner import Exit, RunControl, RunError, Runner, kill_tree

LINE_SHIFT = 6
_ACCESS = re.compile(rb"^ [LSM] ([0-9a-fA-F]+),(\d+)$", re.M)
_INSTRUCTIONS = re.compile(rb"guest instrs:\s+([\d,]+)")
_CHUNK = 64 << 20
_PIPE_READ = 1 << 20
PROGRESS_EVERY_S = 1.0
_READER_GRACE_S = 10.0  # after the tree is killed the pipe's last writer is gone; EOF follows at once


class TruncatedTrace(ValueError):
    """A lackey log that ends before its guest-instruction total: one line for the user."""


@dataclass(frozen=True)
class Trace:
    lines: np.ndarray  # cache-line id per data access, in program order
    accesses: int  # data accesses as lackey reported them (before line splitting)
    split: int  # extra accesses from line-crossing
    instructions: int

    @property
    def mix(self) -> float:
        return len(self.lines) / self.instructions


class _Parser:
    """Lackey's log fed in blocks of any size (a file read, a pipe read): the one parser of both routes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.chunks: list[np.ndarray] = []
        self.accesses = self.split = self.bytes = 0
        self.instructions: int | None = None
        self._tail = b""

    def feed(self, block: bytes) -> None:
        self.bytes += len(block)
        block = self._tail + block
        cut = block.rfind(b"\n") + 1
        self._tail = block[cut:]
        self._parse(block[:cut])

    def _parse(self, block: bytes) -> None:
        found = _ACCESS.findall(block)
        if found:
            addresses = np.array([int(a, 16) for a, _ in found], dtype=np.uint64)
            sizes = np.array([int(s) for _, s in found], dtype=np.uint64)
            self.chunks.append(_lines(addresses, sizes))
            self.accesses += len(found)
            self.split += len(self.chunks[-1]) - len(found)
        if (match := _INSTRUCTIONS.search(block)) is not None:
            self.instructions = int(match.group(1).replace(b",", b""))

    def finish(self) -> Trace:
        """The Trace; ValueError for a log with no data accesses, TruncatedTrace for one without its total."""
        self._parse(self._tail + b"\n")
        self._tail = b""
        if not self.chunks:
            raise ValueError(f"{self.source}: no data accesses in this lackey trace (empty or truncated)")
        if self.instructions is None:
            raise TruncatedTrace(f"{self.source}: the lackey trace ends after {self.accesses:,} data accesses "
                                 f"({self.bytes:,} bytes) without its 'guest instrs' total: it is truncated (a "
                                 "full disk or a killed run), not a complete trace")
        return Trace(np.concatenate(self.chunks).astype(np.int64), self.accesses, self.split, self.instructions)


def parse(path: str) -> Trace:
    """Read a lackey log into a Trace; raises ValueError for a file with no data accesses or truncated."""
    parser = _Parser(path)
    try:
        with open(path, "rb") as f:
            while block := f.read(_CHUNK):
                parser.feed(block)
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror}") from None
    return parser.finish()


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


class _Reader(threading.Thread):
    """Parses the pipe as valgrind writes it. Past ``max_bytes`` it kills valgrind's tree at once: reading
    stops, so valgrind could only block on the full pipe, and its output so far is no complete trace."""

    def __init__(self, fd: int, parser: _Parser, max_bytes: int, progress: Callable[[int, int], None] | None):
        super().__init__(name="lackey-reader", daemon=True)
        self._fd, self.parser, self._max_bytes, self._progress = fd, parser, max_bytes, progress
        self.pid: int | None = None
        self.over_cap = False
        self.failure: BaseException | None = None

    def run(self) -> None:
        shown = time.monotonic()
        try:
            while block := os.read(self._fd, _PIPE_READ):
                if self.parser.bytes + len(block) > self._max_bytes:
                    self.over_cap = True
                    # the gated process is alive (it is writing) and only the main thread reaps it, after
                    # its exit: the pid cannot have been reused yet
                    kill_tree(self.pid)
                    return
                self.parser.feed(block)
                if self._progress is not None and time.monotonic() - shown >= PROGRESS_EVERY_S:
                    shown = time.monotonic()
                    self._progress(self.parser.accesses, self.parser.bytes)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread, which raises it
            self.failure = err
            if self.pid is not None:
                kill_tree(self.pid)


def trace(runner: Runner, argv: list[str], control: RunControl, max_bytes: int,
          progress: Callable[[int, int], None] | None = None) -> tuple[Exit, Trace]:
    """Run the benchmark once under lackey and return its exit and its data-access trace.

    ``max_bytes`` caps lackey's log: beyond it valgrind's tree is killed and a RunError says so.
    ``progress(accesses, log_bytes)`` is called from the reader thread at most every PROGRESS_EVERY_S.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RunError("tracing needs valgrind: apt-get install valgrind")
    read_end, write_end = os.pipe()
    reader = _Reader(read_end, _Parser(f"lackey's trace of {argv[0]}"), max_bytes, progress)
    try:
        # --vgdb=no: no gdbserver FIFOs in TMPDIR, which a killed valgrind (cap, interrupt) would leave there
        target = [valgrind, "--tool=lackey", "--trace-mem=yes", "--vgdb=no", f"--log-fd={write_end}", "--", *argv]
        try:
            gated = runner.start(argv, control, gate_target=target, pass_fds=(write_end,))
        finally:
            os.close(write_end)  # valgrind holds the only write end: its exit is the reader's EOF
        try:
            reader.pid = gated.pid
            reader.start()
            exit_ = gated.release_and_wait()
        finally:
            gated.kill()
            if reader.ident is not None:
                reader.join(_READER_GRACE_S)
        if reader.is_alive():
            raise RunError(f"a process of {argv[0]} left valgrind's tree holding lackey's log open; trace abandoned")
    finally:
        if not reader.is_alive():
            os.close(read_end)
    if reader.failure is not None:
        raise reader.failure
    if reader.over_cap:
        raise RunError(f"lackey's trace of {argv[0]} passed --max-trace-bytes {max_bytes:,} after "
                       f"{reader.parser.accesses:,} data accesses; valgrind was stopped (raise the cap or trace "
                       "a shorter run)")
    try:
        return exit_, reader.parser.finish()
    except ValueError as err:
        raise RunError(f"{err} (the run {exit_.outcome}: {exit_.stderr_tail or 'no message'})") from None
