"""The agent's durable local spool (SQLite, WAL): every sample is written here before it is sent, and
deleted only when the server acked the batch that carried it. Jobs and their progress live here too, so a
restarted agent resumes a job where it stopped instead of measuring runs twice.

A sample and its job's progress are committed in one transaction: after a crash either both are there or
neither, so no run is lost and none is repeated. WAL with synchronous=NORMAL: a commit survives the agent
being killed (the requirement), and costs no fsync per run; a power cut may lose the last runs, which were
then never acked and are simply measured again.
"""

from __future__ import annotations

import os
import sqlite3
import threading

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (seq INTEGER PRIMARY KEY AUTOINCREMENT, uuid TEXT UNIQUE NOT NULL,
                                    payload BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, spec BLOB NOT NULL, next_index INTEGER NOT NULL,
                                 state TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
                                 reported INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS rejected (seq INTEGER PRIMARY KEY, uuid TEXT NOT NULL, payload BLOB NOT NULL,
                                     reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audits (audit_id TEXT PRIMARY KEY, report TEXT NOT NULL,
                                   reported INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class Spool:
    def __init__(self, directory: str):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = os.path.join(directory, "spool.db")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def _tx(self, statements: list[tuple[str, tuple]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- samples ---

    def add_sample(self, uuid: str, payload: bytes, job_id: str | None = None, next_index: int | None = None) -> None:
        statements = [("INSERT OR IGNORE INTO samples (uuid, payload) VALUES (?, ?)", (uuid, payload))]
        if job_id is not None:
            statements.append(("UPDATE jobs SET next_index = ? WHERE job_id = ?", (next_index, job_id)))
        self._tx(statements)

    def pending(self, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        return self._query("SELECT seq, payload FROM samples WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit))

    def acked(self, seqs: list[int]) -> None:
        self._tx([("DELETE FROM samples WHERE seq = ?", (seq,)) for seq in seqs])

    def reject(self, seqs: list[int], reason: str) -> None:
        """Move samples the server refuses as invalid aside, so they stop blocking the stream."""
        statements = []
        for seq in seqs:
            statements.append(("INSERT OR REPLACE INTO rejected SELECT seq, uuid, payload, ? "
                               "FROM samples WHERE seq = ?",
                               (reason, seq)))
            statements.append(("DELETE FROM samples WHERE seq = ?", (seq,)))
        self._tx(statements)

    def count(self) -> int:
        return self._query("SELECT COUNT(*) FROM samples")[0][0]

    # --- jobs ---

    def add_job(self, job_id: str, spec: bytes) -> bool:
        """Remember a job; False if it was already known (a re-sent WatchJobs)."""
        before = self._query("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,))
        if before:
            return False
        # reported = 1: "queued" is the server's own state for it; the agent reports from "running" on
        self._tx([("INSERT OR IGNORE INTO jobs (job_id, spec, next_index, state, reported) "
                   "VALUES (?, ?, 0, 'queued', 1)", (job_id, spec))])
        return True

    def job(self, job_id: str) -> tuple[bytes, int, str] | None:
        rows = self._query("SELECT spec, next_index, state FROM jobs WHERE job_id = ?", (job_id,))
        return rows[0] if rows else None

    def set_job_state(self, job_id: str, state: str, message: str = "") -> None:
        self._tx([("UPDATE jobs SET state = ?, message = ?, reported = 0 WHERE job_id = ?", (state, message, job_id))])

    def unfinished_jobs(self) -> list[str]:
        rows = self._query("SELECT job_id FROM jobs WHERE state IN ('queued', 'running') ORDER BY rowid")
        return [row[0] for row in rows]

    def unreported(self) -> list[tuple[str, str, str, int]]:
        return self._query("SELECT job_id, state, message, next_index FROM jobs WHERE reported = 0")

    def mark_reported(self, job_id: str, state: str) -> None:
        self._tx([("UPDATE jobs SET reported = 1 WHERE job_id = ? AND state = ?", (job_id, state))])

    # --- audits ---

    def add_audit(self, audit_id: str, report_json: str, meta: dict[str, str]) -> None:
        """Keep an audit until the server has it, and remember what it was run against, in one transaction."""
        statements = [("INSERT OR IGNORE INTO audits (audit_id, report) VALUES (?, ?)", (audit_id, report_json))]
        statements += [("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", item) for item in meta.items()]
        self._tx(statements)

    def unreported_audits(self) -> list[tuple[str, str]]:
        return self._query("SELECT audit_id, report FROM audits WHERE reported = 0")

    def mark_audit_reported(self, audit_id: str) -> None:
        self._tx([("UPDATE audits SET reported = 1 WHERE audit_id = ?", (audit_id,))])

    def meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def close(self) -> None:
        with self._lock:
            self._db.close()
