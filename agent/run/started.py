"""What a started run offers, whichever way it was started (a gate of its own: GatedProcess; the gate's loop:
LoopedGate): ``release`` it, ``wait`` for how it ended (an Exit), ``kill`` what is left of it on the way
out; and the one wait for a released run's end, with the one stop-watcher.

A pidfd reports only exits, and the loop only exits and stops, so a benchmark that stops itself (SIGSTOP, or a
ptrace stop with perfctl as its tracer) would be waited for forever. The wait wakes every STOP_CHECK_S to
ask whether it is stopped: rarely, because each wake is perfctl running, maybe on the benchmark's CPU (the
ebpf backend counts that as interference). A stop is only final once it has lasted STOP_GRACE_S without the
benchmark running in between (its context switches unchanged): `perfctl cache --dynamic` (agent/pirate.py)
stops and continues the Target on purpose while its Pirate warms up, for milliseconds at a time.
"""

from __future__ import annotations

import abc
import math
import time

from perfctl.agent.run import RunError
from perfctl.agent.run.outcome import Exit, Stop
from perfctl.agent.run.reaping import REAP_SECONDS, context_switches

STOP_CHECK_S = 0.5
STOP_GRACE_S = 2.0


class StopWatch:
    """Tells a stop that would never end from a pause: the stop last seen, final once it has lasted
    STOP_GRACE_S with the stopped process's context switches unchanged."""

    def __init__(self) -> None:
        self._stop: Stop | None = None
        self._since = 0.0
        self._switches: int | None = None

    def seen(self, stop: Stop) -> None:
        """``stop.pid`` is stopped now: a new stop, unless it is the one watched and has not run since."""
        switches = context_switches(stop.pid)
        if self._stop is None or self._stop.pid != stop.pid or switches != self._switches:
            self._stop, self._since, self._switches = stop, time.monotonic(), switches

    def forget(self) -> None:
        self._stop = None

    def final(self) -> Stop | None:
        """The stop watched, once it has lasted STOP_GRACE_S; a stop left since (it ran) is forgotten."""
        if self._stop is None:
            return None
        if context_switches(self._stop.pid) != self._switches:  # it ran since: continued by someone
            self._stop = None
            return None
        return self._stop if time.monotonic() - self._since >= STOP_GRACE_S else None


class StartedRun(abc.ABC):
    """A benchmark run that waits for its release. ``pid``: the process a backend follows (GatedProcess: the
    gate, then the benchmark; LoopedGate: the loop, whose runs are followed through the cgroup)."""

    pid: int

    @abc.abstractmethod
    def release(self) -> None:
        """Let the benchmark run."""

    @abc.abstractmethod
    def wait(self) -> Exit:
        """Wait for the released run's end (its exit, its --timeout or a stop that would never end: both kill
        its tree), clean up what it left running, and say how it ended."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill and reap what is left of the run, if anything (an error or an interrupt on the way); after a
        run that ended, only what it holds is let go. Safe to call again."""

    def release_and_wait(self) -> Exit:
        self.release()
        return self.wait()

    @abc.abstractmethod
    def _ended(self, timeout_ms: int, stops: StopWatch | None) -> bool:
        """Wait up to ``timeout_ms`` for the run's end; True once it came. Stops reported meanwhile go to
        ``stops`` (None: the run is being killed, its stops no longer matter)."""

    @abc.abstractmethod
    def _between(self, stops: StopWatch) -> bool:
        """Look at the run while nothing came for STOP_CHECK_S: stops go to ``stops``; True when it ended."""

    @abc.abstractmethod
    def _kill_run(self, stop: Stop | None) -> None:
        """Kill the run's tree: its timeout came (``stop`` None), or ``stop`` would never end."""

    def _watch(self, timeout_s: float | None) -> tuple[bool, Stop | None]:
        """Wait for the run's end: (whether its timeout came first, the stop that would never end). Either
        kills its tree, and the end that follows is waited for, at most REAP_SECONDS after a timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        timed_out, killed_for, stops = False, None, StopWatch()
        while True:
            slice_s = STOP_CHECK_S if deadline is None else min(STOP_CHECK_S, deadline - time.monotonic())
            if slice_s <= 0:
                if timed_out:
                    raise RunError(f"the benchmark ran past --timeout {timeout_s:g}s and its processes could not "
                                   f"be killed within {REAP_SECONDS:g}s")
                self._kill_run(None)
                timed_out, deadline = True, time.monotonic() + REAP_SECONDS
                continue
            killing = timed_out or killed_for is not None
            if self._ended(math.ceil(slice_s * 1000), None if killing else stops):
                return timed_out, killed_for
            if killing:
                continue
            if self._between(stops):
                return timed_out, killed_for
            final = stops.final()
            if final is not None:
                killed_for = final
                self._kill_run(final)
