"""The agent's durable local spool (SQLite, WAL): every sample is written here before it is sent, and
deleted only when the server acked the batch that carried it. Jobs and their progress live here too, so a
restarted agent resumes a job where it stopped instead of measuring runs twice.

A sample and its job's progress are committed in one transaction: after a crash either both are there or
neither, so no run is lost and none is repeated. WAL with synchronous=NORMAL: a commit survives the agent
being killed (the requirement), and costs no fsync per run; a power cut may lose the last runs, which were
then never acked and are simply measured again. A job's short runs are committed a few together
(GroupCommit): an agent killed meanwhile measures those again too, under the same uuids.

A full disk makes a write raise SpoolFull and changes nothing: the caller waits, gives back the space the
WAL holds (release_wal) and tries it again. The WAL is kept small (WAL_AUTOCHECKPOINT_PAGES, JOURNAL_SIZE_LIMIT):
with SQLite's default of 1000 pages (4 MB) a WAL on a small filesystem grew into every byte freed, and the
checkpoint that would have emptied it could then never grow the database, so measuring never resumed.

A spool that filled its own filesystem (the server away for long) must still drain once acks come: each
delete needs room in the WAL, and the WAL's frames a checkpoint could not land need the database to grow,
on a filesystem with no byte left (the agent then waited forever, acked but unable to delete). So the spool
holds a reserve: a file of RESERVE_BYTES (a sixteenth of a small filesystem) kept for acks alone. An ack's
delete that finds the disk full gives the reserve back (new samples, job and audit records never take it), so
acks always free samples; a new sample is written only while the reserve is held, or while the database's
own free pages (what the acks freed) cover as much, and the reserve is taken again once the filesystem has
twice its size free.

A spool damaged while the agent runs (a read or write fails with any database error but a full disk) raises
SpoolError: the agent stops with one line rather than going on with a spool it cannot trust.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
import threading
import time
from dataclasses import dataclass

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
CREATE TABLE IF NOT EXISTS round_values (job_id TEXT NOT NULL, run INTEGER NOT NULL, value REAL NOT NULL,
                                         PRIMARY KEY (job_id, run));
"""


# round_values: an --until-settled job's metric value of each run (by its index in the job's order), kept
# with the sample in one transaction: the sample itself leaves the spool once acked, and an agent restarted
# in mid-job must decide on all the rounds, not only on those it measures after the restart.
_TABLES = {"samples", "jobs", "rejected", "audits", "meta", "round_values"}
RESERVE_BYTES = 1 << 20  # at most: 4 times the WAL's autocheckpoint, room for a checkpoint and an ack's delete
FULL_DISK_DELETES = 8  # samples deleted per transaction when a batch's delete finds the disk full
RESERVE_RETRY_S = 1.0  # while the reserve is given back, how often a new sample tries to take it again
WAL_AUTOCHECKPOINT_PAGES = 64  # 256 KiB of WAL at most between checkpoints (SQLite's default: 1000 pages)
JOURNAL_SIZE_LIMIT = 1 << 20  # bytes of WAL file kept after a checkpoint empties it
# GroupCommit's bounds: what an agent killed in mid-job (-9) has measured and not committed, at most
GROUP_SECONDS = 0.05
GROUP_RUNS = 64
LONG_RUN_NS = 10_000_000  # a run of this long or longer is committed at once: the commit is under 2% of it


class SpoolError(Exception):
    """The spool cannot be opened (not a database, damaged, unwritable); the message is one line."""


class SpoolFull(Exception):
    """A write failed because the spool's filesystem is full; nothing of that write was kept, nothing
    written before was lost. The same write can be tried again once there is space."""


def is_disk_full(err: BaseException) -> bool:
    if isinstance(err, sqlite3.Error):
        return (getattr(err, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_FULL
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


class Spool:
    def __init__(self, directory: str):
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as err:
            raise SpoolError(f"spool directory {directory}: {err.strerror}") from None
        self.path = os.path.join(directory, "spool.db")
        self._reserve = os.path.join(directory, "spool.reserve")
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as err:
            raise SpoolError(f"cannot open spool {self.path}: {err}") from None
        try:
            self._open()
        except sqlite3.Error as err:
            self._db.close()
            code = getattr(err, "sqlite_errorcode", 0) & 0xFF
            if code == sqlite3.SQLITE_FULL:
                raise SpoolFull(f"spool {self.path}: {err}") from None
            if code == sqlite3.SQLITE_NOTADB:
                raise SpoolError(f"spool {self.path} is not an SQLite database: {err}") from None
            if code == sqlite3.SQLITE_BUSY:
                raise SpoolError(f"spool {self.path} is in use by another process (another agent with this "
                                 "--spool?)") from None
            if code == sqlite3.SQLITE_CORRUPT:
                raise SpoolError(f"spool {self.path} is damaged: {err} (move it aside to start an empty one; "
                                 "its unsent samples stay in it)") from None
            raise SpoolError(f"cannot open spool {self.path}: {err}") from None

    def _open(self) -> None:
        """Writes only what a new spool needs: an agent restarted on a full disk must still start (it then
        waits for space before measuring). Exclusive locking keeps SQLite's WAL index in memory instead of a
        -shm file, which could not be created on a full disk; it also keeps a second agent off this spool."""
        self._db.execute("PRAGMA locking_mode=EXCLUSIVE")
        if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self._db.execute("PRAGMA journal_mode=WAL")
        # settings of this connection, as the locking mode: nothing is written
        self._db.execute("PRAGMA synchronous=NORMAL")
        # a quarter of the reserve at most (RESERVE_BYTES' rule, on a filesystem small enough to shrink it)
        page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        pages = max(1, min(WAL_AUTOCHECKPOINT_PAGES, self._reserve_size() // (4 * page_size)))
        self._db.execute(f"PRAGMA wal_autocheckpoint={pages}")
        self._db.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not _TABLES <= tables:
            self._db.executescript(_SCHEMA)
        self._reserve_tried = 0.0
        self._reserved = self._hold_reserve(self._reserve_is_held())

    def _reserve_is_held(self) -> bool:
        """A regular file at the reserve's path (a directory or symbolic link put there holds nothing)."""
        try:
            return stat.S_ISREG(os.lstat(self._reserve).st_mode)
        except OSError:
            return False

    def _reserve_size(self) -> int:
        fs = os.statvfs(os.path.dirname(self.path))
        return min(RESERVE_BYTES, fs.f_blocks * fs.f_frsize // 16)

    def _hold_reserve(self, held: bool) -> bool:
        """Whether the reserve is held: the file is there, or it was made now (only with twice its size
        free: taken back the moment an ack freed it, it would leave the acks no room again)."""
        if held:
            return True
        self._reserve_tried = time.monotonic()
        size = self._reserve_size()
        fs = os.statvfs(os.path.dirname(self.path))
        if fs.f_bavail * fs.f_frsize < 2 * size:
            return False
        partial = self._reserve + ".new"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)  # what a crash left, or whatever was put there: a new file, not through a link
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
            os.replace(partial, self._reserve)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            # a filesystem that cannot hold one (no fallocate, no room for the file's name) must not stop
            # measuring for good: the spool goes on without a reserve, as it did before it had one
            return not is_disk_full(err)
        return True

    def room_for_samples(self) -> bool:
        """Whether a new sample may be written now: as far as the reserve goes, and the filesystem not full."""
        with self._lock:
            fs = os.statvfs(os.path.dirname(self.path))
            return self._room_for_samples() and fs.f_bavail > 0

    def _room_for_samples(self) -> bool:
        """A new sample may be written: the reserve is held (or taken again now), or the database's free pages,
        freed by acks, hold as much as the reserve would."""
        if self._wal_unlanded() > self._reserve_size() // 2:
            return False
        if self._reserved:
            return True
        if time.monotonic() - self._reserve_tried >= RESERVE_RETRY_S:
            self._reserved = self._hold_reserve(False)
            if self._reserved:
                return True
        free_pages, page_size = (self._db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count",
                                                                                         "page_size"))
        return free_pages * page_size >= self._reserve_size()

    def _wal_unlanded(self) -> int:
        """Bytes of WAL frames not yet in the database, when the filesystem is nearly full (checkpoints failing
        there let the WAL grow): once the reserve is given back, a checkpoint must land them all, or the WAL can
        never be reused and no ack's delete finds room (a 397 KiB WAL beside a 100 KiB reserve left an agent
        waiting for good, silent). Else 0, after one statvfs() per transaction."""
        fs = os.statvfs(os.path.dirname(self.path))
        if fs.f_bavail * fs.f_frsize >= 2 * self._reserve_size():
            return 0
        try:
            _, frames, landed = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.DatabaseError as err:
            self._raise_if_damaged(err)  # a damaged spool stops the agent, as any other read of it does
            return 1 << 62  # full: not even a passive checkpoint, so nothing more goes into the WAL
        page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return max(0, frames - landed) * (page_size + 24)  # a frame: its page and a 24-byte header

    def group_bytes(self) -> int:
        """The most a transaction of samples should hold (GroupCommit): a quarter of the reserve, so that a
        WAL the reserve can land is not outgrown by one commit."""
        return max(4096, self._reserve_size() // 4)

    def _give_back_reserve(self) -> bool:
        """The reserve's space, given to the filesystem for an ack's delete; False if none was held."""
        if not self._reserved:
            return False
        with contextlib.suppress(OSError):  # gone, or not a file (a directory put there): nothing to give
            os.unlink(self._reserve)
        self._reserved = False
        self._reserve_tried = time.monotonic()
        return True

    def _tx(self, statements: list[tuple[str, tuple]], kind: str = "record") -> None:
        """Run ``statements`` in one transaction; SpoolFull on a full disk. ``kind``: "sample" (a new sample:
        refused while the reserve is not held and the database has not as much free), "ack" (deletes: a
        full disk gives the reserve back and lands the checkpoint it held back, for acked's next tries), or
        "record" (a job's or an audit's: never the reserve; they fit in the pages acks free)."""
        with self._lock:
            if kind == "sample" and not self._room_for_samples():
                raise SpoolFull(f"spool {self.path}: database or disk is full (the space left is kept for "
                                "acks to free samples)")
            try:
                self._commit(statements)
            except SpoolFull:
                if kind == "ack" and self._give_back_reserve():
                    # the database grows into the reserve's space by the pages the WAL added, and the WAL
                    # (kept at its size) is written from its start again
                    with contextlib.suppress(sqlite3.DatabaseError):
                        self._db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                raise

    def _commit(self, statements: list[tuple[str, tuple]]) -> None:
        """One transaction, with the lock held."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                self._db.execute(sql, args)
            self._db.execute("COMMIT")
        except BaseException as err:
            # SQLite rolls back by itself after some errors (a full disk among them); a ROLLBACK then
            # would fail with "no transaction is active" and hide the error that matters.
            if self._db.in_transaction:
                try:
                    self._db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # a damaged spool may fail this too; err, raised below, is the one to report
            if is_disk_full(err):
                raise SpoolFull(f"spool {self.path}: {err}") from err
            self._raise_if_damaged(err)
            raise

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as err:
                self._raise_if_damaged(err)
                raise

    def _raise_if_damaged(self, err: BaseException) -> None:
        """A database error other than a full disk (and other than a misuse, a bug of ours) means the spool
        cannot be trusted: SpoolError. Called with the lock held."""
        if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.ProgrammingError) \
                and not is_disk_full(err):
            raise SpoolError(f"spool {self.path} is damaged: {err} (move it aside to start an empty one; its "
                             "unsent samples stay in it)") from None

    def release_wal(self) -> None:
        """Checkpoint the WAL into the database and truncate it to nothing, giving its space back to a full
        filesystem before a write is tried again. SpoolFull if the database cannot grow by what the WAL
        holds (the WAL is then kept whole: nothing is lost)."""
        with self._lock:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.DatabaseError as err:
                if is_disk_full(err):
                    raise SpoolFull(f"spool {self.path}: {err}") from None
                self._raise_if_damaged(err)
                raise

    # --- samples ---

    def add_sample(self, uuid: str, payload: bytes, job_id: str | None = None, next_index: int | None = None,
                   value: float | None = None) -> None:
        """A sample, and its job's progress: run next_index - 1 is done; ``value`` its metric value for an
        --until-settled job."""
        self.add_samples([SpooledRun(uuid, payload, job_id, next_index, value)])

    def add_samples(self, runs: list[SpooledRun]) -> None:
        """Samples and their job's progress (add_sample's), in one transaction."""
        statements = []
        for run in runs:
            statements.append(("INSERT OR IGNORE INTO samples (uuid, payload) VALUES (?, ?)", (run.uuid, run.payload)))
            if run.job_id is not None:
                statements.append(("UPDATE jobs SET next_index = ? WHERE job_id = ?", (run.next_index, run.job_id)))
                if run.value is not None:
                    statements.append(("INSERT OR REPLACE INTO round_values (job_id, run, value) VALUES (?, ?, ?)",
                                       (run.job_id, run.next_index - 1, run.value)))
        self._tx(statements, "sample")

    def round_values(self, job_id: str) -> dict[int, float]:
        """The metric values add_sample kept for a job, by run index."""
        return dict(self._query("SELECT run, value FROM round_values WHERE job_id = ?", (job_id,)))

    def pending(self, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        return self._query("SELECT seq, payload FROM samples WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit))

    def acked(self, seqs: list[int]) -> None:
        def deleted(some: list[int]) -> list[tuple[str, tuple]]:
            return [("DELETE FROM samples WHERE seq = ?", (seq,)) for seq in some]

        if self._reserved:
            try:
                self._tx(deleted(seqs), "ack")
                return
            except SpoolFull:
                pass  # the reserve is given back
        # A batch's delete rewrites every page it touches into the WAL (~0.5 MB for 500 samples), more than
        # the reserve, and a failed one leaves the WAL grown into the space it took: without the reserve, a
        # few samples per transaction, which the checkpoints after them land in the database in place (what
        # is deleted stays deleted; a sample deleted twice is no matter).
        for start in range(0, len(seqs), FULL_DISK_DELETES):
            self._tx(deleted(seqs[start:start + FULL_DISK_DELETES]), "ack")

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

    def set_job_state(self, job_id: str, state: str, message: str = "", *, report: bool = True) -> None:
        """``report=False`` for the agent's own states (``preparing``), which the server does not know. A
        final state remembers the last sample spooled by then (``runs_unsent``)."""
        statements = [("UPDATE jobs SET state = ?, message = ?, reported = reported * ? WHERE job_id = ?",
                       (state, message, 0 if report else 1, job_id))]
        if state in ("done", "failed"):
            statements.append(("INSERT OR REPLACE INTO meta (key, value) "
                               "SELECT ?, COALESCE(MAX(seq), 0) FROM samples", (f"last_seq:{job_id}",)))
            statements.append(("DELETE FROM round_values WHERE job_id = ?", (job_id,)))
        self._tx(statements)

    def runs_unsent(self, job_id: str) -> bool:
        """Whether samples spooled before the job ended (its own among them) still wait for the server's
        ack: seq grows (AUTOINCREMENT), so later samples never hold the job's report back."""
        row = self._query("SELECT EXISTS (SELECT 1 FROM samples WHERE seq <= "
                          "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?))", (f"last_seq:{job_id}",))
        return bool(row[0][0])

    def unfinished_jobs(self) -> list[str]:
        rows = self._query("SELECT job_id FROM jobs WHERE state IN ('queued', 'preparing', 'running') "
                           "ORDER BY rowid")
        return [row[0] for row in rows]

    def held_jobs(self, limit: int) -> list[str]:
        """The newest ``limit`` unfinished jobs' ids: what the agent's heartbeats confirm it holds (an older one
        was confirmed while it was among the newest)."""
        rows = self._query("SELECT job_id FROM jobs WHERE state IN ('queued', 'preparing', 'running') "
                           "ORDER BY rowid DESC LIMIT ?", (limit,))
        return [row[0] for row in rows]

    def unreported(self) -> list[tuple[str, str, str, int]]:
        return self._query("SELECT job_id, state, message, next_index FROM jobs "
                           "WHERE reported = 0 AND state != 'preparing'")

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


@dataclass(frozen=True)
class SpooledRun:
    """A sample to spool (Spool.add_samples): its uuid and wire bytes, and its job's progress (run next_index - 1
    is done; ``value``: its metric value for an --until-settled job)."""

    uuid: str
    payload: bytes
    job_id: str | None = None
    next_index: int | None = None
    value: float | None = None


class GroupCommit:
    """A job's samples measured and not yet committed, for one Spool.add_samples. A transaction costs ~0.2 ms
    here (WAL frames written and locks taken: ~15 system calls), a third of perfctl's own cost of a short run,
    where `perfctl stat -o` pays one write (bench/stat_rate.py). Runs are held at most GROUP_SECONDS, GROUP_RUNS
    and ``max_bytes`` (Spool.group_bytes), and a run of LONG_RUN_NS or longer is committed at once: an agent
    killed (-9) in mid-job loses at most those, and measures them again when it restarts (their job's progress
    was not advanced: the same uuids, so no run is stored twice). A clean stop commits what is held."""

    def __init__(self, max_bytes: int = 1 << 20) -> None:
        self.runs: list[SpooledRun] = []
        self.max_bytes = max_bytes  # Spool.group_bytes: what the spool's reserve allows a transaction
        self._since = 0.0
        self._bytes = 0

    def add(self, run: SpooledRun, wall_ns: int) -> bool:
        """``run`` held; True when what is held is due to be committed (take)."""
        now = time.monotonic()
        if not self.runs:
            self._since = now
        self.runs.append(run)
        self._bytes += len(run.payload)
        return (wall_ns >= LONG_RUN_NS or len(self.runs) >= GROUP_RUNS or self._bytes >= self.max_bytes
                or now - self._since >= GROUP_SECONDS)

    def take(self) -> list[SpooledRun]:
        runs, self.runs, self._bytes = self.runs, [], 0
        return runs
