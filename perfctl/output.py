"""What every perfctl command shares for its output: exit codes, the usage error, the signal policy,
one-line messages on stderr, and the one console factory: colour, progress bars and live displays only on a
terminal, and no colour when NO_COLOR is set (https://no-color.org). perfctl/cli/ and perfctl/report/ take
them from here."""

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
    """The first thing perfctl's entry point does: until a command's stop_on_signals (or a server's own
    handlers, release_stops_held_at_start) is in place, a stop signal is only remembered; stop_on_signals
    raises it as it starts, so the command stops there (one line, 128 + N) before it runs anything. Without
    it, a Ctrl-C in the first ~0.25 s (the imports and the parse) printed a KeyboardInterrupt traceback from
    wherever the imports were, and a SIGTERM ended perfctl without a word. Remembered rather than raised: an
    exception raised in the middle of an import (numpy's C extensions) leaves half-made modules behind, and
    outside any code that would say what happened."""

    def remember(signum, frame):
        if _AtStart.signum is None:
            _AtStart.signum = signum

    _AtStart.previous = {number: signal.signal(number, remember) for number in STOP_SIGNALS}


def release_stops_held_at_start() -> None:
    """For the commands that stop on signals their own way (server, agent): Python's handlers back, then
    Interrupted for a stop received since hold_stops_at_start."""
    previous, _AtStart.previous = _AtStart.previous, {}
    for number, handler in previous.items():
        signal.signal(number, handler)
    if _AtStart.signum is not None:
        signum, _AtStart.signum = _AtStart.signum, None
        raise Interrupted(signum)


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


def console(stderr: bool = False) -> Console:
    """The console every table and message is printed on. Colour only on a terminal and without NO_COLOR;
    wide enough for the tables when output goes to a file or pipe (rich would assume 80 columns). No emoji
    codes: a benchmark's argument such as ":fire:" is printed as given (and rich's table of them is not
    loaded, ~3 ms of every start)."""
    terminal = interactive(stderr)
    return _console_class()(stderr=stderr, highlight=False, emoji=False, width=None if terminal else 150,
                    color_system="auto" if terminal and not no_color() else None, no_color=no_color(),
                    force_terminal=terminal)
