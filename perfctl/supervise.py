"""The one supervisor of perfctl's long-lived background work, on the server and on the agent.

A background loop (the server's job keeper, sample count, retention and group commit; the agent's
measurement worker and its connection to the servers) that ends on an exception it did not expect stops
for good, and nobody hears it: the fleet's jobs stay queued, leases never lapse, gauges freeze. So each such
loop runs under ``supervised`` (a coroutine) or ``supervised_thread`` (a thread): any exception is logged
with its traceback, counted in the process's ``perfctl_task_restarts_total{task=...}`` (the server's and the
agent's own metrics endpoint export it), and the loop is started again after a backoff that doubles from
``Backoff.first`` to ``Backoff.most``, and starts over once the loop ran ``healthy_after`` seconds without
failing. Cancellation (asyncio) or the stop event (threads) still ends it, and the exceptions the caller
names as ``fatal`` are raised, not restarted (a damaged spool must stop the agent).

A loop that fails the same way again (a database that stays down) logs its traceback once and then one
line per restart, so an hour's outage is not an hour of tracebacks.

Cancellation is how these loops end, so it must never be lost: perfctl waits with a time limit through
``asyncio.timeout``, never ``asyncio.wait_for``. On Python 3.11, wait_for returns the inner result when the
inner awaitable completes in the same loop iteration as the cancellation (CPython gh-86296, fixed by 3.12's
rewrite of wait_for on timeouts): the cancellation is swallowed. That hung an agent's stop (its sender's
wait for new samples was woken by the very commit the stop makes, about one stop in 40 on a busy machine),
and would take a job off a watch's queue for a call that had ended. tests/test_lost_cancellation.py
reproduces the race and checks that no module uses wait_for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

TASK_RESTARTS = Counter("perfctl_task_restarts_total",
                        "Background tasks restarted after an exception (each logged with its traceback)", ["task"])

FIRST_DELAY_S = 0.5
MOST_DELAY_S = 30.0
HEALTHY_AFTER_S = 60.0

log = logging.getLogger("perfctl.supervise")


class Backoff:
    """The delays between restarts: doubling from ``first`` to ``most``, back to ``first`` after a run of
    ``healthy_after`` seconds without a failure."""

    def __init__(self, first: float = FIRST_DELAY_S, most: float = MOST_DELAY_S,
                 healthy_after: float = HEALTHY_AFTER_S):
        self.first, self.most, self.healthy_after = first, most, healthy_after
        self.delay = first

    def after(self, ran_s: float) -> float:
        """The delay before the next start, of a loop that ran ``ran_s`` seconds before it failed."""
        if ran_s >= self.healthy_after:
            self.delay = self.first
        delay, self.delay = self.delay, min(self.delay * 2, self.most)
        return delay


class _Report:
    """Logs and counts one task's failures: the traceback when the failure differs from the one before."""

    def __init__(self, task: str, logger: logging.Logger):
        self.task, self.logger, self._last = task, logger, None
        TASK_RESTARTS.labels(task)  # at 0 from the start: increase() sees the first restart

    def failed(self, err: BaseException, delay: float) -> None:
        TASK_RESTARTS.labels(self.task).inc()
        said = (type(err), str(err))
        if said != self._last:
            self._last = said
            self.logger.error("%s failed; restarting it in %.1f s", self.task, delay, exc_info=err)
        else:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            self.logger.error("%s failed again (%s); restarting it in %.1f s", self.task, first, delay)

    def ran(self) -> None:
        self._last = None


async def supervised(task: str, loop: Callable[[], Awaitable[None]], *, logger: logging.Logger = log,
                     backoff: Backoff | None = None, fatal: tuple[type[BaseException], ...] = (),
                     stopping: threading.Event | None = None) -> None:
    """Run ``loop()`` until cancelled (or, given ``stopping``, until it is set), started again after any
    exception (``fatal`` ones are raised). A loop that returns is started again too, after the same backoff:
    long-lived work is not meant to end."""
    backoff = backoff or Backoff()
    report = _Report(task, logger)
    while stopping is None or not stopping.is_set():
        started = time.monotonic()
        try:
            await loop()
            err: BaseException = RuntimeError(f"{task} returned")
        except fatal:
            raise
        except Exception as failure:  # noqa: BLE001 - the point of a supervisor: log, count, restart
            err = failure
        if stopping is not None and stopping.is_set():
            return
        ran = time.monotonic() - started
        if ran >= backoff.healthy_after:
            report.ran()
        delay = backoff.after(ran)
        report.failed(err, delay)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not (stopping is not None and stopping.is_set()):
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def supervised_thread(task: str, loop: Callable[[], None], stopping: threading.Event, *,
                      logger: logging.Logger = log, backoff: Backoff | None = None,
                      fatal: tuple[type[BaseException], ...] = ()) -> None:
    """``supervised`` for a thread: ``loop()`` is started again after any exception until ``stopping`` is
    set (the backoff's wait ends at once then); ``fatal`` exceptions are raised."""
    backoff = backoff or Backoff()
    report = _Report(task, logger)
    while not stopping.is_set():
        started = time.monotonic()
        try:
            loop()
            if stopping.is_set():
                return
            err: BaseException = RuntimeError(f"{task} returned")
        except fatal:
            raise
        except Exception as failure:  # noqa: BLE001 - the point of a supervisor: log, count, restart
            err = failure
        ran = time.monotonic() - started
        if ran >= backoff.healthy_after:
            report.ran()
        delay = backoff.after(ran)
        report.failed(err, delay)
        stopping.wait(delay)
