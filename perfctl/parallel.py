"""One piece of work done in a forked child on another core while this process does the rest.

`perfctl compare` of two files reads one file in a child while it reads the other, and compares half of the
benchmarks in a child while it compares the other half (``halves``, the map-like ``workers`` it hands to
analysis/compare.py, which starts no process itself): on two cores the command takes about half as long
(bench/compare_speed.py). A fork, not a pool of spawned workers: the child starts in a millisecond with
every module and the data already there, and gives back only its result (pickled through a pipe).

Done in this process instead when there is one CPU to run on, or when this process runs other Python
threads (a fork copies only the calling thread, and a lock another thread held stays held in the child).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Forked:
    """``function(*args)`` computed in a forked child; ``result()`` returns its value or raises its
    exception. Use as a context manager: leaving the block early (an error here, Ctrl-C) kills the child.
    ``worth`` False (work too small to gain from a fork) computes it here, as does a single CPU."""

    def __init__(self, function, *args, worth: bool = True):
        self._pid, self._pipe, self._outcome = None, None, None
        if not worth or _cpus() < 2 or threading.active_count() > 1:
            self._outcome = _run(function, args)
            return
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, send, and leave without running this process's exit handlers
            os.close(read_end)
            for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
                signal.signal(number, signal.SIG_DFL)  # stopped with its parent, never by raising here
            code = 0
            try:
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(_pickled(_run(function, args)))
            except BaseException:  # noqa: BLE001 - nothing of the child may run on past this point
                code = 1
            os._exit(code)
        os.close(write_end)
        self._pid, self._pipe = pid, os.fdopen(read_end, "rb")

    def result(self):
        if self._outcome is None:
            data = self._pipe.read()
            self._pipe.close()
            _, status = os.waitpid(self._pid, 0)
            self._pid = None
            if not data:
                raise ChildProcessError(f"perfctl: a worker process ended without a result (wait status {status})")
            self._outcome = pickle.loads(data)
        failed, value = self._outcome
        if failed:
            raise value
        return value

    def cancel(self) -> None:
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self._pid, 0)
            self._pid = None
            self._pipe.close()

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


def halves(function, items, at_least: int = 2) -> list:
    """``list(map(function, items))``, the second half of the items computed in a forked child (``Forked``)
    while this process computes the first; all of them here when there are fewer than ``at_least`` (too
    little work to gain from a fork). A map-like ``workers``, as scipy's, for analysis/compare.py."""
    items = list(items)
    half = len(items) // 2 if len(items) >= at_least else 0
    with Forked(_mapped, function, items[half:], worth=half > 0) as rest:
        return _mapped(function, items[:half]) + rest.result()


def _mapped(function, items) -> list:
    return [function(item) for item in items]


def _run(function, args) -> tuple[bool, object]:
    try:
        return False, function(*args)
    except Exception as err:  # noqa: BLE001 - handed to result(), which raises it in the parent
        return True, err


def _pickled(outcome: tuple[bool, object]) -> bytes:
    """The outcome as bytes; an exception that does not pickle goes as a RuntimeError with its message."""
    try:
        return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - pickling fails in many ways (lambdas, locks, open files)
        failed, value = outcome
        if not failed:
            raise
        return pickle.dumps((True, RuntimeError(f"{type(value).__name__}: {value}")))
