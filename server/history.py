"""The performance history on the server (issue 32; docs/history.md "On a fleet"): which replica analyses an
ended job, and when; the open-regressions gauge. What is written is server/history_store.py's.

A job recorded done is queued for analysis in the same transaction (Storage.update_job). Every replica's
``HistoryKeeper`` takes queued jobs in turn, each in ONE transaction: it takes the queue entry with SELECT ...
FOR UPDATE SKIP LOCKED (PostgreSQL: the database decides who, as a job's dispatch; a second replica skips an
entry taken and goes on to the next), writes the job's points, brings each touched series' changes up to date,
and deletes the entry. A replica killed meanwhile leaves nothing: its transaction is rolled back when its
connection drops, the entry's lock goes with it, and another replica (or this one restarted) takes the entry.
A replica hung inside the transaction is ended by PostgreSQL after ``IDLE_IN_TRANSACTION_S`` idle. On SQLite
(one server process) the write lock of the database orders the keeper and ingest.

A job whose analysis fails is tried again RETRY_S later (the other jobs, of its series too, go on meanwhile);
after MAX_ATTEMPTS failures it is set aside in history_set_aside with its error, logged once as an error and
counted by perfctl_history_set_aside (alert PerfctlHistorySetAside). The database's own failures (unreachable,
a dropped connection) are not the job's and count no attempt: the supervisor restarts the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sqlalchemy import delete, func, select, text, update

from perfctl.server import history_store as store
from perfctl.server import history_update
from perfctl.server.metrics import HISTORY_QUEUED, HISTORY_SET_ASIDE, OPEN_REGRESSIONS
from perfctl.server.schema import history_queue, history_set_aside
from perfctl.server.storage_errors import unavailable

log = logging.getLogger("perfctl.server")

HISTORY_POLL_S = 1.0  # how soon after a job ends its series are brought up to date
GAUGE_S = 30.0  # perfctl_open_regressions is read again at least this often (and after every analysis)
RETRY_S = 60.0  # a job whose analysis failed is tried again this much later
# a job whose analysis failed this many times is set aside (history_set_aside), its error kept: a failure that
# repeats 5 times over 4 minutes is the analysis', not a passing database error
MAX_ATTEMPTS = 5
MAX_ERROR = 2000  # characters of the error kept
IDLE_IN_TRANSACTION_S = 60  # PostgreSQL ends a replica's analysis transaction idle this long (a hung replica)


class HistoryKeeper:
    """This replica's share of the history work: every HISTORY_POLL_S, the queued ended jobs, one transaction
    each, until none is left to take; and the open-regressions gauge."""

    def __init__(self, storage, line_labels: tuple[str, ...] = store.DEFAULT_LINE, poll_s: float = HISTORY_POLL_S,
                 retry_s: float = RETRY_S):
        self.storage, self.line_labels, self.poll_s, self.retry_s = storage, tuple(line_labels), poll_s, retry_s
        self.shape_specs: dict = {}  # shapes never change once stored: cached across jobs
        self._gauge_due = 0.0

    async def run(self) -> None:
        self._gauge_due = 0.0
        while True:
            analysed = 0
            while await asyncio.to_thread(self.analyse_next) is not None:
                analysed += 1
            if analysed or time.monotonic() >= self._gauge_due:
                await asyncio.to_thread(self.gauge)
            await asyncio.sleep(self.poll_s)

    def analyse_next(self) -> str | None:
        """Take one queued ended job, write its points and its series' changes, and delete its entry, all in
        one transaction; the job's id, or None when no entry is left to take. A job whose analysis fails (a
        bug, or a stored point the analysis refuses) is put back ``retry_s`` later, so that it holds up no other
        job, the series' later jobs included; after MAX_ATTEMPTS failures it is set aside (``_failed``). A
        database that fails the putting back too is the supervisor's (server/jobs.py: backoff, then again)."""
        storage, entry = self.storage, None
        lock = storage._write_lock if storage.is_sqlite else contextlib.nullcontext()
        try:
            with lock, storage.engine.begin() as conn:
                if not storage.is_sqlite:
                    conn.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'"))
                now_ns = time.time_ns()
                entry = conn.execute(select(history_queue.c.job_id, history_queue.c.machine,
                                            history_queue.c.attempts)
                                     .where(history_queue.c.queued_ns <= now_ns)
                                     .order_by(history_queue.c.queued_ns, history_queue.c.job_id).limit(1)
                                     .with_for_update(skip_locked=True)).first()
                if entry is None:
                    return None
                points = store.job_points(conn, entry.job_id, entry.machine, self.line_labels, self.shape_specs)
                end_ns = store.job_end_ns(conn, entry.job_id, now_ns)
                for series_pk in store.add_points(conn, entry.job_id, end_ns, points, storage._insert_ignore):
                    history_update.reanalyse(conn, series_pk, now_ns)
                conn.execute(delete(history_queue).where(history_queue.c.job_id == entry.job_id))
        except Exception as err:
            if entry is None or unavailable(err) is not None:  # the database's, not the job's: not an attempt
                raise
            with lock, storage.engine.begin() as conn:
                self._failed(conn, entry, err)
            return entry.job_id
        log.info("history: job %s on %s analysed (%d series)", entry.job_id, entry.machine, len(points))
        return entry.job_id

    def _failed(self, conn, entry, err: Exception) -> None:
        """The job's analysis failed (its transaction rolled back): tried again ``retry_s`` later, or, at its
        MAX_ATTEMPTS-th failure, moved to history_set_aside with the error, logged once as an error (the
        traceback is logged at the first failure only: the same one each time).

        In a new transaction, after the rollback released the entry's lock: another replica may have taken
        the entry meanwhile and analysed the job (the entry gone) or failed it too (its attempts counted). So
        the attempt is counted, and the job set aside, only while the entry is still the one this replica
        took (same attempts); otherwise the other replica's outcome stands."""
        attempts = entry.attempts + 1
        error = f"{type(err).__name__}: {err}"[:MAX_ERROR]
        ours = (history_queue.c.job_id == entry.job_id) & (history_queue.c.attempts == entry.attempts)
        if attempts < MAX_ATTEMPTS:
            counted = conn.execute(update(history_queue).where(ours).values(
                queued_ns=time.time_ns() + int(self.retry_s * 1e9), attempts=attempts)).rowcount
            if not counted:
                log.info("history: job %s on %s not analysed here (%s); another replica took it meanwhile",
                         entry.job_id, entry.machine, error)
            elif attempts == 1:
                log.error("history: job %s on %s not analysed (attempt 1 of %d); tried again in %g s",
                          entry.job_id, entry.machine, MAX_ATTEMPTS, self.retry_s, exc_info=err)
            else:
                log.warning("history: job %s on %s not analysed (attempt %d of %d): %s; tried again in %g s",
                            entry.job_id, entry.machine, attempts, MAX_ATTEMPTS, error, self.retry_s)
            return
        if not conn.execute(delete(history_queue).where(ours)).rowcount:
            log.info("history: job %s on %s not analysed here (%s); another replica took it meanwhile",
                     entry.job_id, entry.machine, error)
            return
        log.error("history: job %s on %s set aside after %d failed analyses: %s (its series go on without it; "
                  "docs/history.md \"On a fleet\")", entry.job_id, entry.machine, attempts, error)
        conn.execute(self.storage._insert_ignore(history_set_aside).values(
            job_id=entry.job_id, machine=entry.machine, attempts=attempts, error=error, set_aside_ns=time.time_ns()))

    def gauge(self) -> None:
        open_regressions_gauge(self.storage)
        self._gauge_due = time.monotonic() + GAUGE_S


def open_regressions_gauge(storage) -> None:
    """perfctl_open_regressions{machine, benchmark}, set anew (a fixed regression's series goes),
    perfctl_history_queued and perfctl_history_set_aside."""
    with storage.engine.connect() as conn:
        counts = store.open_regressions(conn)
        queued = conn.execute(select(func.count()).select_from(history_queue)).scalar_one()
        set_aside = conn.execute(select(func.count()).select_from(history_set_aside)).scalar_one()
    OPEN_REGRESSIONS.clear()
    for (machine, benchmark), count in counts.items():
        OPEN_REGRESSIONS.labels(machine, benchmark).set(count)
    HISTORY_QUEUED.set(queued)
    HISTORY_SET_ASIDE.set(set_aside)
