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
  a log without it ended early (a full disk, a killed run, or, traced live, a program that exec'd another,
  which valgrind stops tracing at) and is refused, never modelled as complete.

``trace`` never writes the log to a file: valgrind writes it to a pipe that a thread parses as it streams
in. A full TMPDIR cannot cut it short, nothing is left on disk, and the bytes are counted for progress and
for the size cap. The pipe is out of the benchmark's reach (``_Channel``): the traced program holds no
descriptor of it that it may write to, so it cannot put accesses of its choosing into its own trace.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from perfctl.agent.run.reaping import kill_tree
from perfctl.agent.runner import Exit, RunControl, RunError, Runner
from perfctl.formats.rds import MAX_MIX

LINE_SHIFT = 6
_ACCESS = re.compile(rb"^ [LSM] ([0-9a-fA-F]+),(\d+)$", re.M)
# Every other line lackey's log may hold, by its start: instruction lines (ignored here: data accesses only),
# valgrind's own messages (==pid==, --pid-- with -v, **pid**) and VEX's unprefixed "vex amd64->IR: ..."
# notes. A line that is neither these nor a well-formed access is refused, never skipped: a skipped access
# is a trace that silently differs from the program's.
_OTHER_LINES = (b"I  ", b"==", b"--", b"**", b"vex ", b"valgrind: ")
_OTHER_LINE = re.compile(rb"(?:I  |==|--|\*\*|vex |valgrind: )[^\n]*|")  # the slow path's twin of the counts below
_INSTRUCTIONS = re.compile(rb"guest instrs:[ \t]*([^\n]*)")
_COUNT = re.compile(rb"\d{1,3}(?:,\d{3})+|\d+")  # lackey prints the total with thousands separators
_CHUNK = 64 << 20
_PIPE_READ = 1 << 20
PROGRESS_EVERY_S = 1.0
_READER_GRACE_S = 10.0  # after the tree is killed the pipe's last writer is gone; EOF follows at once
# Lackey reports one access per guest memory operation of the IR: at most 64 bytes for an AVX-512 load or
# store, 32 for a cmpxchg16b (its CAS is read and written as twice the 16 bytes), 108 and 464 for the x87
# FSAVE and FXSAVE helpers (XSAVE is split into those helpers and 16/32-byte stores). lk_main.c asserts every
# size is in [1, MAX_DSIZE = 512] before it writes the line, so a larger size (or 0) is not lackey's output,
# and the bound keeps an access to at most 9 lines: ` L 0400,4000000000` used to expand into 62 million.
MAX_ACCESS_BYTES = 512
_ADDRESS_LIMIT = 1 << 64
_COUNT_LIMIT = 1 << 63  # numpy's int64, and the .rds format's integers
_UINT64_MAX = np.uint64(_ADDRESS_LIMIT - 1)


class TruncatedTrace(ValueError):
    """A lackey log that ends before its guest-instruction total: one line for the user."""


@dataclass(frozen=True)
class Trace:
    lines: np.ndarray  # cache-line id per data access, in program order
    accesses: int  # data accesses as lackey reported them (before line splitting)
    split: int  # extra accesses from line-crossing
    instructions: int  # >= 1: the parser refuses a total of 0

    @property
    def mix(self) -> float:
        return len(self.lines) / self.instructions


def _shown(field: bytes) -> str:
    """A field of a hostile log as it appears in an error: printable and short."""
    text = field.decode("ascii", "replace")
    return text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"


class _Parser:
    """Lackey's log fed in blocks of any size (a file read, a pipe read): the one parser of both routes.

    Every field is checked, on the arrays of a whole block (numpy), and a bad one raises a ValueError naming
    its line and field: address < 2^64, size in [1, MAX_ACCESS_BYTES], address + size - 1 < 2^64 (no access
    wraps), and exactly one ``guest instrs`` total, a count in [1, 2^63), after the last access.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.chunks: list[np.ndarray] = []
        self.accesses = self.split = self.bytes = 0
        self.instructions: int | None = None
        self._total_line: int | None = None
        self._lines_before = 0  # newlines in the blocks parsed so far: line numbers for errors
        self._tail = b""

    def feed(self, block: bytes) -> None:
        self.bytes += len(block)
        block = self._tail + block
        cut = block.rfind(b"\n") + 1
        self._tail = block[cut:]
        self._parse(block[:cut])

    def _line(self, block: bytes, position: int) -> int:
        return self._lines_before + block.count(b"\n", 0, position) + 1

    def _refuse(self, block: bytes, position: int, reason: str) -> ValueError:
        return ValueError(f"{self.source}: line {self._line(block, position):,}: {reason}")

    def _parse(self, block: bytes) -> None:
        if not block:
            return
        self._totals(block)
        found = _ACCESS.findall(block)
        if found:
            try:
                addresses = np.array([int(a, 16) for a, _ in found], dtype=np.uint64)
                sizes = np.array([int(s) for _, s in found], dtype=np.uint64)
            except (OverflowError, ValueError):  # a field past 2^64 (or past int()'s 4300 digits)
                raise self._bad_field(block) from None
            spans = np.clip(sizes, 1, MAX_ACCESS_BYTES) - np.uint64(1)  # clipped: no wrap in this check
            bad = (sizes < 1) | (sizes > MAX_ACCESS_BYTES) | (addresses > _UINT64_MAX - spans)
            if bad.any():
                raise self._bad_access(block, int(np.flatnonzero(bad)[0]))
            self.chunks.append(_lines(addresses, sizes))
            self.accesses += len(found)
            self.split += len(self.chunks[-1]) - len(found)
        lines = block.count(b"\n")
        # every line is an access or one of _OTHER_LINES (or empty): counted, which costs far less than a
        # second regex over the block; only a block that fails the count is searched for its first bad line
        others = sum(block.count(b"\n" + start) + block.startswith(start) for start in _OTHER_LINES)
        if len(found) + others + block.count(b"\n\n") + block.startswith(b"\n") != lines:
            raise self._bad_line(block)
        self._lines_before += lines

    def _totals(self, block: bytes) -> None:
        """The ``guest instrs`` totals of a block: exactly one in the log, a count, after every access."""
        after = 0 if self._total_line is not None else None  # where accesses are refused in this block
        for match in _INSTRUCTIONS.finditer(block):
            where = "'guest instrs' total"
            if self._total_line is not None:
                raise self._refuse(block, match.start(), f"a second {where} (the first is on line "
                                   f"{self._total_line:,}): lackey prints one, at exit")
            field = match.group(1).strip()
            if _COUNT.fullmatch(field) is None:
                raise self._refuse(block, match.start(), f"{where} {_shown(field)!r} is not a count")
            instructions = int(field.replace(b",", b""))
            if instructions < 1:
                raise self._refuse(block, match.start(), f"{where} is 0: a complete trace ran at least 1 "
                                   "instruction")
            if instructions >= _COUNT_LIMIT:
                raise self._refuse(block, match.start(), f"{where} is not below 2^63")
            self.instructions, self._total_line = instructions, self._line(block, match.start())
            after = match.end()
        if after is not None and (access := _ACCESS.search(block, after)) is not None:
            raise self._refuse(block, access.start(), f"a data access after the 'guest instrs' total (line "
                               f"{self._total_line:,}): lackey prints the total at exit, after every access")

    def _bad_line(self, block: bytes) -> ValueError:
        """The first line of a block that is neither an access lackey writes nor one of its other lines."""
        position = 0
        for line in block.split(b"\n")[:-1]:
            if _ACCESS.fullmatch(line) is None and _OTHER_LINE.fullmatch(line) is None:
                return self._refuse(block, position, f"{_shown(line)!r} is not a line lackey writes (' L|S|M "
                                    "hexaddress,size' for a data access, 'I  hexaddress,size', or a '==pid==' "
                                    "message)")
            position += len(line) + 1
        raise AssertionError("the block's line count disagrees but no line is bad")  # pragma: no cover

    def _truncated(self) -> TruncatedTrace:
        return TruncatedTrace(f"{self.source}: the lackey trace ends after {self.accesses:,} data accesses "
                              f"({self.bytes:,} bytes) without its 'guest instrs' total: it is truncated (a "
                              "full disk or a killed run), not a complete trace")

    def _nth_access(self, block: bytes, index: int) -> re.Match:
        return next(itertools.islice(_ACCESS.finditer(block), index, None))

    def _bad_field(self, block: bytes) -> ValueError:
        """The first access of a block whose address or size does not fit 64 bits (the slow path of an error)."""
        for index, (address, size) in enumerate(_ACCESS.findall(block)):
            if len(address.lstrip(b"0")) > 16 or int(address, 16) >= _ADDRESS_LIMIT:
                return self._refuse(block, self._nth_access(block, index).start(),
                                    f"address {_shown(address)} is beyond 64 bits")
            if len(size) > 20 or int(size) >= _ADDRESS_LIMIT:
                return self._bad_access(block, index)
        raise AssertionError("no access of the block is out of range")  # pragma: no cover

    def _bad_access(self, block: bytes, index: int) -> ValueError:
        match = self._nth_access(block, index)
        address, size = match.group(1), match.group(2)
        if len(size) > 20 or not 1 <= int(size) <= MAX_ACCESS_BYTES:  # 20 digits: past 2^64, and int()'s limit
            return self._refuse(block, match.start(), f"size {_shown(size)} of the access at {_shown(address)}: "
                                f"lackey reports 1 to {MAX_ACCESS_BYTES} bytes per access")
        return self._refuse(block, match.start(), f"the {int(size)}-byte access at {_shown(address)} runs past "
                            "the end of the 64-bit address space")

    def finish(self) -> Trace:
        """The Trace; ValueError for a log with no data accesses, TruncatedTrace for one without its total."""
        tail, self._tail = self._tail, b""
        try:
            self._parse(tail + b"\n")
        except ValueError:
            if self.instructions is None and tail:  # a log cut inside its last line: say it is truncated
                raise self._truncated() from None
            raise
        if not self.chunks:
            raise ValueError(f"{self.source}: no data accesses in this lackey trace (empty or truncated)")
        if self.instructions is None:
            raise self._truncated()
        lines = np.concatenate(self.chunks).astype(np.int64)
        if len(lines) > MAX_MIX * self.instructions:
            raise ValueError(f"{self.source}: line {self._total_line:,}: 'guest instrs' total of "
                             f"{self.instructions:,} for {len(lines):,} data accesses, "
                             f"{len(lines) / self.instructions:.4g} per instruction, more than {MAX_MIX}: no x86 "
                             "instruction touches that many lines (docs/cache.md)")
        return Trace(lines, self.accesses, self.split, self.instructions)


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
    last = (addresses + sizes - np.uint64(1)) >> np.uint64(LINE_SHIFT)  # sizes >= 1, no wrap: _Parser checks
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


class TraceFailed(RunError):
    """The traced run left no complete trace: ``exit`` says how the run ended (the CLI puts it in words)."""

    def __init__(self, message: str, exit_: Exit):
        super().__init__(message)
        self.exit = exit_


class _Channel:
    """The pipe lackey writes to, passed as ``--log-fd`` at a descriptor number the guest may not use.

    Valgrind reserves the top of the descriptor table for itself (from its limit minus N_RESERVED_FDS up
    to its limit, which is the hard RLIMIT_NOFILE where the soft one is within N_RESERVED_FDS of it) and
    refuses every guest system call on those numbers. It dups its log descriptor into that range but leaves
    the one it was given (with --log-file, the one it opened: fd 3) open in the guest, which could then
    write accesses of its choosing into its own trace (issue 28: 3,000 lines moved a miss ratio from 0.003
    to 0.115). So the descriptor is placed at hard − 1, the soft limit raised to the hard one while the gate
    is spawned (valgrind reads it at start), and the guest holds no descriptor of the trace it may use.

    Not closed: a guest that opens the magic link /proc/self/fd/N of valgrind's own descriptor (or takes it
    with pidfd_getfd) reaches the pipe; it shares valgrind's process and could as well write its memory. A
    socket would refuse the /proc reopen (ENXIO), but lackey writes one line per write(2), and a unix
    socket's per-write cost made ``sort 20000`` trace in 63 s instead of 24 s here."""

    def __init__(self) -> None:
        read_end, write_end = os.pipe()
        self.read_end = os.fdopen(read_end, "rb", buffering=0)
        self._soft, self._hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.log_fd: int | None = None
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self._hard, self._hard))
            try:
                os.fstat(self._hard - 1)
            except OSError:  # free, as expected: dup2 would otherwise close what holds it
                pass
            else:
                raise RunError(f"descriptor {self._hard - 1} (the last RLIMIT_NOFILE allows) is in use: lackey's "
                               "trace needs it out of the traced program's reach")
            self.log_fd = self._hard - 1
            os.dup2(write_end, self.log_fd, inheritable=False)
        except BaseException:
            self.close_write_end()
            self.read_end.close()
            raise
        finally:
            os.close(write_end)

    def close_write_end(self) -> None:
        """After the spawn: valgrind holds the only write end (its exit is the reader's EOF), and perfctl's
        own limit is back to what it was."""
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self._soft, self._hard))


def trace(runner: Runner, argv: list[str], control: RunControl, max_bytes: int,
          progress: Callable[[int, int], None] | None = None) -> tuple[Exit, Trace]:
    """Run the benchmark once under lackey and return its exit and its data-access trace.

    ``max_bytes`` caps lackey's log: beyond it valgrind's tree is killed and a RunError says so.
    ``progress(accesses, log_bytes)`` is called from the reader thread at most every PROGRESS_EVERY_S.
    A run that leaves no complete trace raises TraceFailed, which carries the run's Exit.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RunError("tracing needs valgrind: apt-get install valgrind")
    channel = _Channel()
    reader = _Reader(channel.read_end.fileno(), _Parser(f"lackey's trace of {argv[0]}"), max_bytes, progress)
    try:
        # --vgdb=no: no gdbserver FIFOs in TMPDIR, which a killed valgrind (cap, interrupt) would leave there
        target = [valgrind, "--tool=lackey", "--trace-mem=yes", "--vgdb=no", f"--log-fd={channel.log_fd}", "--",
                  *argv]
        try:
            with runner.started(argv, control, gate_target=target, pass_fds=(channel.log_fd,)) as run:
                channel.close_write_end()
                reader.pid = run.pid
                reader.start()
                exit_ = run.release_and_wait()
        finally:
            channel.close_write_end()  # where the start failed
            if reader.ident is not None:
                reader.join(_READER_GRACE_S)
        if reader.is_alive():
            raise RunError(f"a process of {argv[0]} left valgrind's tree holding lackey's log open; trace abandoned")
    finally:
        if not reader.is_alive():
            channel.read_end.close()
    if reader.failure is not None:
        raise reader.failure
    if reader.over_cap:
        raise RunError(f"lackey's trace of {argv[0]} passed --max-trace-bytes {max_bytes:,} after "
                       f"{reader.parser.accesses:,} data accesses; valgrind was stopped (raise the cap or trace "
                       "a shorter run)")
    try:
        return exit_, reader.parser.finish()
    except TruncatedTrace as err:
        if exit_.signal is None and not exit_.timed_out:
            # The pipe cannot fill a disk, and the run was not killed: valgrind (without --trace-children)
            # stops where the program execs another, which then runs natively, and no total is printed.
            # Following the exec would trace the first program's accesses and the second's as one address
            # space, so the trace is refused and the user names the program itself.
            raise TraceFailed(f"lackey's trace of {argv[0]} ends after {reader.parser.accesses:,} data accesses "
                              "without its 'guest instrs' total, though the run exited by itself: the program "
                              "replaced itself with another (exec, as env, nice, exec or a wrapper script do), "
                              "which valgrind does not trace; name the program to trace after 'cache mrc --'",
                              exit_) from None
        raise TraceFailed(str(err), exit_) from None
    except ValueError as err:
        raise TraceFailed(str(err), exit_) from None
