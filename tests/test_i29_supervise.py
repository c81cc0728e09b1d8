"""perfctl/supervise.py, the one supervisor of the server's and the agent's long-lived tasks: whatever ends a
task is logged (with its traceback when it is a new failure), counted, and the task starts again with a
capped backoff; cancelling (or the stop event) ends it, and the exceptions named fatal are raised."""

import asyncio
import logging
import threading
import time

import pytest

from perfctl.supervise import TASK_RESTARTS, Backoff, supervised, supervised_thread


def _restarts(task: str) -> float:
    return TASK_RESTARTS.labels(task)._value.get()


def test_any_exception_restarts_the_task_with_its_traceback_logged_and_counted(caplog):
    runs = []

    async def flaky() -> None:
        runs.append(time.monotonic())
        if len(runs) <= 3:
            raise (KeyError("gone") if len(runs) == 1 else OSError("database down"))
        await asyncio.sleep(3600)

    async def main() -> None:
        task = asyncio.create_task(supervised("test flaky", flaky, backoff=Backoff(first=0.05, most=0.1)))
        while len(runs) < 4:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.ERROR, logger="perfctl.supervise"):
        asyncio.run(main())
    assert _restarts("test flaky") == 3
    gaps = [b - a for a, b in zip(runs, runs[1:])]
    assert 0.04 < gaps[0] < 0.5 and 0.09 < gaps[1] and 0.09 < gaps[2] < 0.6, gaps  # 0.05, then capped at 0.1
    tracebacks = [r for r in caplog.records if r.exc_info]
    # KeyError and the first OSError with their tracebacks; the same OSError again in one line
    assert [type(r.exc_info[1]) for r in tracebacks] == [KeyError, OSError]
    assert "test flaky failed again (database down); restarting it in" in caplog.text


def test_a_thread_task_restarts_until_stopped_and_a_fatal_error_ends_it():
    stopping, runs = threading.Event(), []

    def loop() -> None:
        runs.append(1)
        if len(runs) == 3:
            stopping.set()
            return
        raise RuntimeError("a bug")

    supervised_thread("test thread", loop, stopping, backoff=Backoff(first=0.01, most=0.02))
    assert len(runs) == 3 and _restarts("test thread") == 2

    class Damaged(Exception):
        pass

    def damaged() -> None:
        raise Damaged("spool damaged")

    with pytest.raises(Damaged):
        supervised_thread("test fatal", damaged, threading.Event(), fatal=(Damaged,))
    assert _restarts("test fatal") == 0
