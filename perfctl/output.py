"""What every perfctl command shares for its output: exit codes, the usage error, the signal policy,
one-line messages on stderr, and the one console factory: colour, progress bars and live displays only on a
terminal, and no colour when NO_COLOR is set (https://no-color.org); the layout for the reader's width
(``width``, ``paragraph``, and ``show``, a table or, where it does not fit whole, its rows as lines).
perfctl/cli/ and perfctl/report/ take them from here."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported when a console is made: the server and the agent use this module's
    from rich.console import Console  # signal policy and print nothing with rich
    from rich.table import Table

from perfctl.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE  # noqa: F401 - re-exported

# Errors of writing to a full or failing destination (stdout redirected to /dev/full, a full disk): the
# user's to fix, so one line and exit 2 rather than a traceback.
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP during a command. A KeyboardInterrupt, so it unwinds the way Ctrl-C does:
    every ``finally`` runs, which kills a run's whole process tree (agent/run/reaping.py), closes counters and
    removes temporary files, and every finished run is already written. The command then exits 128 + the
    signal's number, as a shell or timeout(1) reports a process that a signal stopped: 130 SIGINT, 143
    SIGTERM, 129 SIGHUP. systemd, timeout(1) and CI cancellation send SIGTERM; a closed terminal SIGHUP."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _StopState:
    """What stop_on_signals received: the first stop signal's number (None: none yet), and whether its
    Interrupted is known not to have unwound the command (``lost``)."""

    def __init__(self):
        self.signum: int | None = None
        self.lost = False


_stop_state: _StopState | None = None  # the innermost stop_on_signals block's (signal handlers: main thread)


class _AtStart:
    """What hold_stops_at_start received and replaced: the first stop signal's number, and the handlers that
    were there before (Python's own)."""

    signum: int | None = None
    previous: dict = {}


def hold_stops_at_start() -> None:
    """The first thing perfctl's entry point does: until a command's stop_on_signals (or a server's or an
    agent's own handlers, take_stop_held_at_start) is in place, a stop signal is only remembered; stop_on_signals
    raises it as it starts, so the command stops there (one line, 128 + N) before it runs anything. Without
    it, a Ctrl-C in the first ~0.25 s (the imports and the parse) printed a KeyboardInterrupt traceback from
    wherever the imports were, and a SIGTERM ended perfctl without a word. Remembered rather than raised: an
    exception raised in the middle of an import (numpy's C extensions) leaves half-made modules behind, and
    outside any code that would say what happened."""

    def remember(signum, frame):
        if _AtStart.signum is None:
            _AtStart.signum = signum

    _AtStart.previous = {number: signal.signal(number, remember) for number in STOP_SIGNALS}


def take_stop_held_at_start() -> int | None:
    """For the commands that stop on signals their own way (server, agent), once their own handlers are in
    place (asyncio's add_signal_handler, which replaces hold_stops_at_start's): the stop signal received since
    hold_stops_at_start, if any, for them to stop on at once, as on one received now. Until then a stop is
    only remembered: releasing Python's own handlers first ended an agent stopped in its first second with
    143 or killed by the signal itself (-15), where a stopped agent or server exits 0."""
    _AtStart.previous = {}
    signum, _AtStart.signum = _AtStart.signum, None
    return signum


@contextlib.contextmanager
def stop_on_signals():
    """The one signal policy of every command that is not a server (server and agent stop their event loop
    on SIGTERM, SIGINT and SIGHUP instead). Within the block the first of STOP_SIGNALS raises Interrupted;
    later ones are ignored while it unwinds, so that the cleanup it starts (killing the benchmark's tree,
    closing counters and files) runs to its end.

    A stop must not be lost, or the command could be stopped by SIGKILL only (seen under load: `perfctl ab`
    ran on for 14 minutes after a SIGINT). Python runs a signal's handler wherever the main thread runs
    Python code, finalisers included (a ``__del__``, a weakref or GC callback, a generator closed as it is
    collected), and drops an exception raised there ("Exception ignored in ..."). So:
    - the measuring loops (stat, ab) call :func:`raise_received_stop` before every run: a stop received
      ends them there, whatever happened to its exception;
    - an Interrupted that Python drops (sys.unraisablehook sees it) is not taken for one that unwinds: the
      next signal raises Interrupted again (a second Ctrl-C stops a long run whose first stop was lost);
    - a stop is never raised inside an import (a C extension's init may crash on it): the signal is sent
      again a few ms later, and raised once the import is done."""
    global _stop_state
    state, outer = _StopState(), _stop_state
    # Python runs the handlers of signals that arrived together in the order of their numbers, not of their
    # arrival (SIGHUP, 1, before SIGINT, 2); the C-level handler writes each number to the wakeup fd as the
    # signal arrives, so the first byte there names the signal that came first
    arrivals, arrivals_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous_wakeup = signal.set_wakeup_fd(arrivals_write, warn_on_full_buffer=False)

    def stop(signum, frame):
        if state.signum is None:
            try:
                first = os.read(arrivals, 64)[:1]
            except BlockingIOError:
                first = b""
            state.signum = first[0] if first and first[0] in STOP_SIGNALS else signum
        elif not state.lost:
            return  # the first stop unwinds: its cleanup runs to its end
        state.lost = False
        if _held.depth:
            _held.pending = state.signum
            return
        if _importing(frame):
            # an exception raised inside an import can crash the interpreter: a C extension's init uses the
            # modules it imports unchecked (orjson's takes uuid.UUID from a NULL module: SIGSEGV, exit 139, seen
            # for a SIGTERM as `ab -o` first wrote a sample). Not raised there: the signal comes again once
            # the import is done, and this stop (``lost``: not unwound yet) is raised then
            state.lost = True
            _signal_again(signum)
            return
        raise Interrupted(state.signum)

    previous_hook = sys.unraisablehook

    def dropped(unraisable) -> None:
        if isinstance(unraisable.exc_value, Interrupted) and state.signum is not None and \
                threading.current_thread() is threading.main_thread():
            # raised inside a finaliser: the next run of a measuring loop (raise_received_stop) or the next
            # signal raises it again. Not printed: no bug, and not ignored. (Not raised again from here: a
            # simulated signal would run its handler inside this hook, where its exception is dropped too.)
            state.lost = True
            return
        previous_hook(unraisable)

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    if _AtStart.previous:  # the hold at start ends here: Python's own handlers are back after the block
        previous, _AtStart.previous = _AtStart.previous, {}
    sys.unraisablehook, _stop_state = dropped, state
    try:
        if _AtStart.signum is not None:  # received before these handlers existed (hold_stops_at_start)
            signum, _AtStart.signum = _AtStart.signum, None
            stop(signum, None)
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook, _stop_state = previous_hook, outer
        signal.set_wakeup_fd(previous_wakeup)
        os.close(arrivals)
        os.close(arrivals_write)


# the frames of Python's import system: a frame below one of them runs inside an import
_IMPORT_SYSTEM = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
_AGAIN_SECONDS = 0.005  # a stop held off by an import is signalled again this much later


def _importing(frame) -> bool:
    """Whether the main thread's ``frame`` (where a signal handler interrupted it) runs inside an import."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_SYSTEM:
            return True
        frame = frame.f_back
    return False


def _signal_again(signum: int) -> None:
    """Send ``signum`` to this process again shortly, from a thread (the main one is inside an import)."""
    timer = threading.Timer(_AGAIN_SECONDS, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def raise_received_stop() -> None:
    """Raise Interrupted if a stop signal was received in stop_on_signals and the code still runs the
    loop it should have ended (its Interrupted swallowed on the way). The measuring loops call it at every
    run: a received stop ends them, whatever happened to its exception. Inside stops_held, the stop waits
    for the block's end as a signal would."""
    state = _stop_state
    if state is None or state.signum is None:
        return
    if _held.depth:
        _held.pending = state.signum
        return
    state.lost = False
    raise Interrupted(state.signum)


class _Held(threading.local):
    """stops_held's state. Signal handlers run on the main thread, so only its own depth can defer a stop;
    per thread, so an agent's worker threads holding stops never touch it."""

    depth = 0
    pending: int | None = None


_held = _Held()


@contextlib.contextmanager
def stops_held():
    """Within the block, a stop signal (stop_on_signals) is remembered rather than raised; Interrupted is
    raised as the block ends. For steps that must not be cut in two: a benchmark's gate is spawned and
    handed to the code that kills it on every exit in one piece (agent/run/reaping.py), since an Interrupted
    raised between the spawn and the hand-over would leave the gate running with nobody to kill it."""
    _held.depth += 1
    try:
        yield
    finally:
        _held.depth -= 1
        if not _held.depth and _held.pending is not None:
            signum, _held.pending = _held.pending, None
            raise Interrupted(signum)


def exit_code_of(interrupt: KeyboardInterrupt) -> int:
    """128 + N for a stop signal N; 130 for a KeyboardInterrupt raised some other way."""
    return interrupt.exit_code if isinstance(interrupt, Interrupted) else EXIT_INTERRUPTED


def say(line: str) -> None:
    """One unwrapped line on stderr: messages a user (or a script) must be able to grep. They quote names
    from files and servers, so control characters are shown, never sent to the terminal."""
    from perfctl.text import visible

    print(visible(line.replace("\n", " ")), file=sys.stderr, flush=True)


_STDOUT_CLOSED: list[bool] = []


def reopen_closed_stdout() -> None:
    """A perfctl started with stdout closed (``>&-``): Python then has no sys.stdout, and every print would
    fail with an AttributeError. Point fd 1 at /dev/null (what is printed is lost, as the caller chose) and
    remember it, so that a command whose output is the point (--json samples) can refuse to run."""
    if sys.stdout is None:
        fd = os.open(os.devnull, os.O_WRONLY)
        if fd != 1:
            os.dup2(fd, 1)
            os.close(fd)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        _STDOUT_CLOSED.append(True)


def stdout_closed() -> bool:
    """Whether perfctl was started with stdout closed (reopen_closed_stdout)."""
    return bool(_STDOUT_CLOSED)


def quiet_stdout() -> None:
    """Point stdout at /dev/null once writing to it failed: what is still buffered, or printed on the way
    out, must not fail again (or be reported at exit with a traceback)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@functools.cache
def _console_class():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """A reader that stopped early (`| head`) loses the rest of the table, nothing else: rich's default
            would exit 1, which here means "a run failed", so the exit code keeps describing the measurement."""
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), (sys.stderr if self.stderr else sys.stdout).fileno())

    return _Console


def no_color() -> bool:
    """NO_COLOR set and not empty (https://no-color.org): no colour, whatever the terminal."""
    return bool(os.environ.get("NO_COLOR"))


def interactive(stderr: bool = True) -> bool:
    """Whether the stream is a terminal: progress bars and live displays only then (in a file or a pipe they
    would only fill a log with redrawn lines)."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False


# The width every table and paragraph is laid out for when output does not go to a terminal: a CI log or a
# file is read in a window of about this much, and a table wider than it wraps there anyway.
PIPED_WIDTH = 100
# --width, when a command was given one (perfctl/cli/__init__.py sets it before the command runs)
_asked_width: int | None = None


def set_width(columns: int | None) -> None:
    """Lay out every console of this process for ``columns`` (--width); None: follow the terminal."""
    global _asked_width
    _asked_width = columns


def width(stderr: bool = False) -> int | None:
    """The columns output is laid out for: --width, else COLUMNS, else the terminal's (None: rich asks
    the terminal), else ``PIPED_WIDTH`` when piped."""
    if _asked_width:
        return _asked_width
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= 20:
        return int(columns)
    return None if interactive(stderr) else PIPED_WIDTH


def console(stderr: bool = False) -> Console:
    """The console every table and message is printed on. Colour only on a terminal and without NO_COLOR;
    laid out for ``width``'s columns. No emoji codes: a benchmark's argument such as ":fire:" is printed as
    given (and rich's table of them is not loaded, ~3 ms of every start)."""
    terminal = interactive(stderr)
    return _console_class()(stderr=stderr, highlight=False, emoji=False, width=width(stderr),
                            color_system="auto" if terminal and not no_color() else None, no_color=no_color(),
                            force_terminal=terminal)


def paragraph(console: Console, text: str, indent: int = 0, hang: int = 2) -> None:
    """Print prose wrapped to the console's width, its continuation lines indented ``hang`` more than its
    first, so a wrapped sentence never restarts at column 0 and reads as one item. ``text`` is printed as
    given (no markup): pass strings from files through perfctl/text.py first."""
    import re
    import textwrap

    # an interval "[0.699, 0.993]" is read as one number: never broken across lines (its ", " held as two
    # characters that are not spaces while wrapping)
    held = re.sub(r"\[([^\[\]\s]*), ([^\[\]\s]*)\]", "[\\1,\x00\\2]", text)
    lines = textwrap.wrap(held, width=max(20, console.width), initial_indent=" " * indent,
                          subsequent_indent=" " * (indent + hang), break_on_hyphens=False,
                          break_long_words=False) or [""]
    console.print("\n".join(lines).replace("\x00", " "), markup=False, highlight=False, soft_wrap=True)


def fits(console: Console, table: Table) -> bool:
    """Whether ``table`` fits the console's width with every cell of a column that may not fold whole (rich
    would crop them). Each such column is held at its widest cell (so rich never crops it), a column that
    folds at its header's width or its own minimum; then its padding and rules are added as rich lays them
    (rich's own measure takes a folding column's longest word, a digest, as its least width)."""
    from rich.measure import Measurement

    need = 0
    for column in table.columns:
        widths = [Measurement.get(console, console.options, part).maximum for part in (column.header, *column.cells)]
        header = Measurement.get(console, console.options, column.header).maximum
        column.min_width = max(widths) if column.no_wrap else min(max(widths), max(header, column.min_width or 0))
        need += column.min_width
    _, right, _, left = table.padding
    count = len(table.columns)
    need += count * (left + right) - (0 if table.pad_edge else left + right)
    if table.box is not None:  # a rule between columns, and at the edges when shown
        need += count - 1 + (2 if table.show_edge else 0)
    return need <= console.width


def show(console: Console, table: Table, lead: int | None = None) -> None:
    """Print ``table``, or, where it does not fit the console whole (numbers of many digits, a narrow
    terminal), each row as a paragraph: its first cell, then column ``lead``'s cell (the verdict), then
    "header value" pairs. A number cut or a verdict cropped would mislead; a longer row does not."""
    if fits(console, table):
        console.print(table)
        return
    if table.title:
        paragraph(console, str(table.title))
    # a value that may not fold is one word: a number never apart from its unit ("42.785 ms"), held as
    # paragraph holds an interval; a name (a command line) folds at its spaces
    columns = [(column.header, [str(getattr(part, "plain", part)).replace(" ", "\x00") if column.no_wrap
                                else str(getattr(part, "plain", part)) for part in column.cells])
               for column in table.columns]
    first = columns.pop(0)
    led = columns.pop(lead) if lead is not None else None
    for index in range(table.row_count):
        said = [led[1][index]] if led and led[1][index] else []
        said += [f"{header} {cells[index]}" for header, cells in columns if cells[index]]
        paragraph(console, f"{first[1][index]}: " + "; ".join(said))
    if table.caption:
        paragraph(console, str(table.caption))
