"""Storage of machines, samples and jobs: SQLAlchemy 2 over SQLite (WAL, the embedded default, in a data
directory) or PostgreSQL (psycopg 3) for fleets. The schema is created and migrated by Alembic at start.

Samples are append-only and stored once per machine and uuid: a batch is inserted in one transaction, and the caller
acks it only after that transaction committed (server/ingest.py). SQLite runs with synchronous=FULL so a
commit survives a crash of the machine, not only of the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from alembic import command
from alembic.config import Config
from sqlalchemy import LargeBinary, and_, cast, create_engine, event, func, literal_column, or_, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.types import BigInteger

from perfctl.server import history_store, migrations, schema_version
from perfctl.server.clock import ahead_by
from perfctl.server.decode import SampleRow, row_fields
from perfctl.server.machine_records import LEASED_JOB_STATES, MachineRecords
from perfctl.server.schema import SampleRecord, benchmarks, contexts, jobs, machines, samples, series, shapes
from perfctl.server.storage_errors import (  # noqa: F401 - the storage's errors, imported from here by its users
    DatabaseUnavailable,
    JobReportError,
    NoSuchJob,
    StorageError,
    database_errors,
)
from perfctl.v1 import fleet_pb2 as pb
from perfctl.wire import inventory_of, job_run_uuid

SAMPLE_COLUMNS = SampleRecord._fields
JOB_STATES = ("queued", "dispatched", "running", "done", "failed", "refused", "lost")
OPEN_JOB_STATES = ("queued", "dispatched", "running")
MAX_CACHED_JOBS = 100_000
# Retention deletes this many runs per transaction, then lets other writers in: ingest waits for one batch at
# most, never for a whole prune.
PRUNE_BATCH = 2000
PRUNE_PAUSE_S = 0.01
_NO_INTEGERS = np.zeros(0, np.int64)
SQLITE_PAGE_SIZE = 16384
SQLITE_CACHE_KIB = 65536


# A job moves only forward: queued/dispatched -> running -> done, failed or refused, which are final. A lost
# job (its lease lapsed: server/jobs.py) takes its agent's report when the agent comes back after all; it
# goes back to queued only by `perfctl jobs --retry` (retry_job). A dispatched job its agent never confirmed
# goes back to queued at its delivery deadline (server/delivery.py).
JOB_MOVES = {"queued": {"running", "done", "failed", "refused"},
             "dispatched": {"running", "done", "failed", "refused"},
             "running": {"running", "done", "failed", "refused"},
             "lost": {"running", "done", "failed", "refused"}}
FINAL_COUNTED_STATES = ("done", "failed")  # a job ending so has its failed runs counted (jobs.failed_runs)
MIGRATION_LOCK = 0x70657266  # pg_advisory_xact_lock key of schema upgrades ("perf")


def database_url(data_dir: str | None, url: str | None) -> str:
    if url:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
        return url
    if not data_dir:
        raise StorageError("give --data-dir (SQLite in that directory) or --db (a PostgreSQL URL)")
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{os.path.join(os.path.abspath(data_dir), 'perfctl.db')}"


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    # A sample row holds its 1.3 KB payload: 4 KiB pages took two or three rows each, and the inserts of a
    # batch touched (and wrote to the WAL) several times more pages. 16 KiB pages raise the rate of the
    # same inserts by ~40% (bench/ingest_rate.py, raw insert). It applies to a new database only, before
    # its first table; an existing one keeps its size (docs/operations.md says how to change it).
    cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    # pages of the uuid index are hit at random by inserts: cached up to this size (KiB), taken as used
    cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    cursor.close()


@database_errors  # an unreachable database is DatabaseUnavailable from every method (server/storage_errors.py)
class Storage(MachineRecords):
    def __init__(self, url: str, migrate: bool = True):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        try:
            self.engine: Engine = create_engine(url, pool_pre_ping=True)
            if self.is_sqlite:
                event.listen(self.engine, "connect", _sqlite_pragmas)
            self.upgrade(migrate)
        except StorageError:
            raise
        except Exception as err:  # noqa: BLE001 - driver errors vary; the user needs the one line
            raise StorageError(f"cannot open the database {self._safe_url()}: {str(err).splitlines()[0]}") from None
        self._write_lock = threading.Lock()
        columns = ", ".join(SAMPLE_COLUMNS)
        if self.is_sqlite:
            marks = ", ".join("?" * len(SAMPLE_COLUMNS))
            self._insert_sql = f"INSERT OR IGNORE INTO samples ({columns}) VALUES ({marks})"
        else:
            self._insert_sql = (f"INSERT INTO samples ({columns}) VALUES ({', '.join(['%s'] * len(SAMPLE_COLUMNS))}) "
                                "ON CONFLICT (machine, uuid) DO NOTHING")
        # widen a series (schema.py): SQLite's min() and max() of several arguments are PostgreSQL's least()
        # and greatest()
        smaller, larger, mark = ("min", "max", "?") if self.is_sqlite else ("least", "greatest", "%s")
        self._series_sql = ("INSERT INTO series (machine, benchmark, job_id, context, first_ns, last_ns, received_ns) "
                            f"VALUES ({', '.join([mark] * 7)}) ON CONFLICT (machine, benchmark, job_id, context) DO "
                            f"UPDATE SET first_ns = {smaller}(series.first_ns, excluded.first_ns), "
                            f"last_ns = {larger}(series.last_ns, excluded.last_ns), "
                            f"received_ns = {larger}(coalesce(series.received_ns, 0), excluded.received_ns)")
        self._ahead_sql = f"UPDATE samples SET clock_ahead_ns = {mark} WHERE machine = {mark} AND uuid = {mark}"
        self._machine_ids: dict[str, int] = {}
        self._machine_kernels: dict[str, str] = {}
        self._benchmark_ids: dict[tuple, int] = {}
        self._dictionary_ids: dict[tuple, int] = {}  # (table name, digest) -> id, for shapes and contexts
        # (machine name, job id) pairs known to exist: checked for every sample that names a job
        self._machine_jobs: set[tuple[str, str]] = set()

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True) if hasattr(self, "engine") else self.url

    def upgrade(self, migrate: bool = True) -> None:
        """Bring the schema to the newest Alembic revision; StorageError for a schema this perfctl must not
        serve (server/schema_version.py: a newer perfctl's, or, unless ``migrate``, an older one)."""
        config = Config()
        config.set_main_option("script_location", str(Path(migrations.__file__).parent))
        with self.engine.begin() as connection:
            if not self.is_sqlite:
                # server replicas starting together on one new database: one migrates, the others wait for
                # its commit and find the schema current (the lock ends with this transaction)
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            schema_version.refuse_unknown(connection, migrate)  # its one line: __init__'s "cannot open"
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def _insert_ignore(self, table):
        dialect = sqlite if self.is_sqlite else postgresql
        return dialect.insert(table).on_conflict_do_nothing()

    # --- machines ---

    def register(self, info: pb.MachineInfo, now_ns: int) -> int:
        values = dict(machine_id=info.machine_id, inventory=info.inventory_json,
                      backends=json.dumps(list(info.backends)),
                      events=json.dumps([{"event": e.event, "supported": e.supported, "reason": e.reason}
                                         for e in info.events]),
                      agent_version=info.agent_version, last_heard_ns=now_ns, retired_ns=None)
        with self._write_lock, self.engine.begin() as conn:
            conn.execute(self._insert_ignore(machines).values(name=info.name, first_seen_ns=now_ns, **values))
            conn.execute(update(machines).where(machines.c.name == info.name).values(**values))
            pk = conn.execute(select(machines.c.id).where(machines.c.name == info.name)).scalar_one()
        self._machine_ids[info.name] = pk
        self._machine_kernels[info.name] = _kernel(info.inventory_json)
        return pk

    @contextlib.contextmanager
    def write(self):
        """A write transaction, one at a time in this process (SQLite has a single writer)."""
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    def machine_pk(self, name: str) -> int | None:
        if name not in self._machine_ids:
            with self.engine.connect() as conn:
                pk = conn.execute(select(machines.c.id).where(machines.c.name == name)).scalar_one_or_none()
            if pk is None:
                return None
            self._machine_ids[name] = pk
        return self._machine_ids[name]

    def forget_machine(self, name: str) -> None:
        """Drop a cached machine id: the next use looks the machine up again (its row may be gone)."""
        self._machine_ids.pop(name, None)
        self._machine_kernels.pop(name, None)

    def _kernel_of(self, conn, name: str) -> str:
        """The kernel release the machine reported when it last registered: stored with each of its runs."""
        if name not in self._machine_kernels:
            inventory = conn.execute(select(machines.c.inventory).where(machines.c.name == name)).scalar_one_or_none()
            self._machine_kernels[name] = _kernel(inventory or "")
        return self._machine_kernels[name]

    def watching(self, name: str, replica: str, watching: bool) -> None:
        """The machine's job watch is open at ``replica`` now, or no longer (if it still was there: a newer
        watch at another replica stays marked)."""
        with self._write_lock, self.engine.begin() as conn:
            if watching:
                conn.execute(update(machines).where(machines.c.name == name).values(watched_by=replica))
            else:
                conn.execute(update(machines).where(machines.c.name == name, machines.c.watched_by == replica)
                             .values(watched_by=None))

    def size(self) -> int:
        """Bytes the database takes: SQLite's file with its write-ahead log, PostgreSQL's pg_database_size."""
        if self.is_sqlite:
            path = self.engine.url.database
            return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        with self.engine.connect() as conn:
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar())

    # --- samples ---

    def _dictionary_pk(self, conn, table, values: dict, fresh: dict) -> int:
        """The id of a shape or a context (server/schema.py), created if new; unique by the digest of its values."""
        key = (table.name, *values.values())
        pk = self._dictionary_ids.get(key) or fresh.get(key)
        if pk is None:
            digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
            conn.execute(self._insert_ignore(table).values(digest=digest, **values))
            pk = conn.execute(select(table.c.id).where(table.c.digest == digest)).scalar_one()
            fresh[key] = pk
        return pk

    def _benchmark_pk(self, conn, identity: tuple, fresh: dict) -> int:
        """The id of a benchmark (name, executable sha256, input digest, argv, executable), created if new."""
        name, executable_sha256, input_digest, argv, executable = identity
        key = (name, executable_sha256, input_digest, argv)  # the executable's path is not its identity
        pk = self._benchmark_ids.get(key) or fresh.get(key)
        if pk is None:
            argv_json = json.dumps(list(argv))
            conn.execute(self._insert_ignore(benchmarks).values(
                name=name, executable_sha256=executable_sha256, input_digest=input_digest, argv=argv_json,
                executable=executable))
            pk = conn.execute(select(benchmarks.c.id).where(
                benchmarks.c.name == name, benchmarks.c.executable_sha256 == executable_sha256,
                benchmarks.c.input_digest == input_digest, benchmarks.c.argv == argv_json)).scalar_one()
            fresh[key] = pk
        return pk

    def ingest(self, machine: str, batch: list[pb.Sample], now_ns: int | None = None) -> tuple[int, int]:
        """Store a batch in one transaction: (new samples stored, duplicates skipped). Returns only after
        the commit, so an ack sent after it never covers an unstored sample."""
        rows = [row_fields(m) for m in batch]
        return self.ingest_many([(machine, rows, [m.SerializeToString() for m in batch])], now_ns)[0]

    def ingest_many(self, requests: list[tuple[str, list[SampleRow], list[bytes]]],
                    now_ns: int | None = None) -> list[tuple[int, int]]:
        """Several decoded batches (machine, SampleRows from server/decode.py, payloads) in one transaction:
        one commit instead of one per batch (group commit). Results (stored, duplicates) in request order."""
        now_ns = now_ns or time.time_ns()
        machine_pks = []
        for machine, _, _ in requests:
            pk = self.machine_pk(machine)
            if pk is None:
                raise StorageError(f"unknown machine {machine!r}: it must register first")
            machine_pks.append(pk)
        fresh: dict = {}
        fresh_dictionary: dict = {}
        results = []
        with self._write_lock, self.engine.begin() as conn:
            for (machine, fields, payloads), machine_pk in zip(requests, machine_pks):
                kernel = self._kernel_of(conn, machine)
                # the runs of a batch share a few (benchmark, labels, shape): their ids are looked up once
                # per combination, not per row (that was 7 µs a row)
                ids: dict[tuple, tuple[int, int, int]] = {}
                rows = []
                for (uuid, identity, job_id, run_index, warmup, outcome, start_time_ns, labels, shape, vals), \
                        payload in zip(fields, payloads):
                    key = (identity, labels, shape)
                    pks = ids.get(key)
                    if pks is None:
                        pks = ids[key] = (
                            self._benchmark_pk(conn, identity, fresh),
                            self._dictionary_pk(conn, contexts, {"labels": labels, "kernel": kernel}, fresh_dictionary),
                            self._dictionary_pk(conn, shapes, {"spec": shape}, fresh_dictionary))
                    benchmark_pk, context_pk, shape_pk = pks
                    rows.append(SampleRecord(uuid, machine_pk, benchmark_pk, job_id, run_index, warmup, outcome,
                                             start_time_ns, now_ns, payload, context_pk, shape_pk, vals))
                stored = self.insert_rows(conn, rows)
                results.append((stored, len(rows) - stored))
                # a batch of runs all stored before (re-sent after a lost ack) does not make its job recent
                self._extend_series(conn, rows, now_ns if stored else 0)
                self._flag_clock_ahead(conn, rows)
        self._benchmark_ids.update(fresh)  # only ids whose transaction committed
        self._dictionary_ids.update(fresh_dictionary)
        return results

    def _flag_clock_ahead(self, conn, rows: list[SampleRecord]) -> None:
        """Runs whose agent-stamped start is after their receipt (server/clock.py): stored as sent, flagged
        with by how much. Rare, so a statement only then; a duplicate already stored is flagged as it was."""
        ahead = [(by, row.machine, row.uuid) for row in rows
                 if (by := ahead_by(row.start_time_ns, row.received_ns)) is not None]
        if ahead:
            cursor = conn.connection.driver_connection.cursor()
            try:
                cursor.executemany(self._ahead_sql, ahead)
            finally:
                cursor.close()

    def _extend_series(self, conn, rows: list[SampleRecord], received_ns: int) -> None:
        """Widen the (machine, benchmark, job, context) series these rows belong to (schema.py ``series``), and
        mark it received now: the server's clock, not the runs' starts, says which job is a machine's latest."""
        starts: dict[tuple, list[int]] = {}
        for row in rows:
            key = (row.machine, row.benchmark, row.job_id or "", row.context)
            found = starts.get(key)
            if found is None:
                starts[key] = [row.start_time_ns]
            else:
                found.append(row.start_time_ns)
        if not starts:
            return
        # through the driver's cursor, as the samples: SQLAlchemy's upsert construct cost 4 ms per batch
        cursor = conn.connection.driver_connection.cursor()
        try:
            cursor.executemany(self._series_sql, sorted((*key, min(times), max(times), received_ns)
                                                        for key, times in starts.items()))
        finally:
            cursor.close()

    def insert_rows(self, conn, rows: list[SampleRecord]) -> int:
        """Insert sample rows through the driver's executemany, skipping (machine, uuid)
        pairs already stored; returns how many were new. The same call is bench/ingest_rate.py's raw-insert baseline."""
        if not rows:
            return 0
        cursor = conn.connection.driver_connection.cursor()
        try:
            cursor.executemany(self._insert_sql, rows)
            return cursor.rowcount
        finally:
            cursor.close()

    def sample_payloads(self, machine: str, benchmark_names: list[str] | None = None) -> Iterator[bytes]:
        query = (select(samples.c.payload).join(machines, samples.c.machine == machines.c.id)
                 .join(benchmarks, samples.c.benchmark == benchmarks.c.id).where(machines.c.name == machine)
                 .order_by(samples.c.id))
        if benchmark_names:
            query = query.where(benchmarks.c.name.in_(benchmark_names))
        with self.engine.connect() as conn:
            for (payload,) in conn.execution_options(stream_results=True).execute(query):
                yield bytes(payload)

    def latest_series(self, machine_pk: int, benchmark_pks=None, context_pks=None) -> list:
        """(benchmark, job_id or None, context, received) per series of the machine, from the table kept at
        ingest: ``received`` is when the server last stored a run of it (its last start where no server said)."""
        query = select(series.c.benchmark, series.c.job_id, series.c.context,
                       func.coalesce(series.c.received_ns, series.c.last_ns)).where(series.c.machine == machine_pk)
        if benchmark_pks is not None:
            query = query.where(series.c.benchmark.in_(sorted(benchmark_pks)))
        if context_pks is not None:
            query = query.where(series.c.context.in_(sorted(context_pks)))
        with self.engine.connect() as conn:
            return [(b, j or None, context, received) for b, j, context, received in conn.execute(query)]

    def series(self, machine_pk: int | None = None, benchmark_pks=None, context_pks=None, since_ns: int = 0,
               until_ns: int = 0) -> list:
        """Runs stored per (machine, benchmark, job, context): rows of (machine, benchmark, job_id, context,
        runs, first start, last start). Read from the index ix_samples_series alone (server/schema.py)."""
        query = (select(samples.c.machine, samples.c.benchmark, samples.c.job_id, samples.c.context, func.count(),
                        func.min(samples.c.start_time_ns), func.max(samples.c.start_time_ns))
                 .group_by(samples.c.machine, samples.c.benchmark, samples.c.job_id, samples.c.context))
        query = self._filtered(query, machine_pk, benchmark_pks, None, context_pks, since_ns, until_ns)
        with self.engine.connect() as conn:
            return conn.execute(query).all()

    def stored_values(self, machine_pk: int, jobs: dict | None = None, benchmark_pks=None, context_pks=None,
                      since_ns: int = 0, until_ns: int = 0, chunk: int = 50_000, payloads: bool = False,
                      measured: bool = False):
        """The selected runs in chunks of rows (benchmark, context, shape, warmup, outcome, start_time_ns,
        vals or payload), in the order of the index ix_samples_series (per benchmark, job and context, by
        start time), so the database reads them without sorting. ``jobs`` maps a job id (None: runs stored
        without a job) to the benchmark ids whose runs of that job are wanted. Streams: the server's
        memory holds one chunk of rows at a time. ``measured``: only measured runs that ended ok (the others
        are counted by ``left_out``)."""
        query = select(samples.c.benchmark, samples.c.context, samples.c.shape, samples.c.warmup, samples.c.outcome,
                       samples.c.start_time_ns, samples.c.payload if payloads else samples.c.vals)
        query = self._selected(query, machine_pk, jobs, benchmark_pks, context_pks, since_ns, until_ns)
        if measured:
            query = query.where(samples.c.warmup.is_(False), samples.c.outcome == "ok")
        # the index's order (runs that started in the same nanosecond in either order): read, never sorted
        query = query.order_by(samples.c.machine, samples.c.benchmark, samples.c.job_id, samples.c.context,
                               samples.c.start_time_ns)
        # through the driver's own cursor: SQLAlchemy's row objects cost more than the database's read here
        # (10^6 runs: 1.2 s of 3.2); PostgreSQL's cursor is a named, server-side one, so rows stream
        compiled = query.compile(dialect=self.engine.dialect, compile_kwargs={"render_postcompile": True})
        parameters = ([compiled.params[name] for name in compiled.positiontup] if self.is_sqlite
                      else compiled.params)
        with self.engine.connect() as conn:
            driver = conn.connection.driver_connection
            cursor = driver.cursor() if self.is_sqlite else driver.cursor(name=f"values_{uuid_module.uuid4().hex}")
            try:
                cursor.execute(str(compiled), parameters)
                while rows := cursor.fetchmany(chunk):
                    yield rows
            finally:
                cursor.close()

    def grouped_values(self, machine_pk: int, jobs: dict | None = None, benchmark_pks=None, context_pks=None,
                       since_ns: int = 0, until_ns: int = 0, run_indexes: bool = False):
        """The values of the selected measured runs that ended ok, concatenated by the database per
        (benchmark, job, context): runs, values (bytes: each run's vals in turn), shapes and starts (int64
        arrays: each run's shape id and start), all three in one order, which need not be the runs' start
        order (the caller sorts: server/selection.py). One row per series instead of one per run: 10^6 runs
        cost 0.3 s to read, not 2.6 s of Python row objects. Rows (benchmark, job_id, context, runs, values,
        shapes, starts); a run without a shape is missing from shapes (shorter than runs). SQLite sends
        shapes and starts as text; PostgreSQL as 8-byte integers (int8send), not text to print and parse
        again. Neither is asked to order the runs: PostgreSQL 15 sorts every group of an ordered aggregate
        again even when the index already gives that order, three times per series here. With ``run_indexes``
        an eighth field holds the runs' run_index in the same order (for --paired: a run pairs with the other
        side's run of the same index, perfctl/pairing.py); it is not in the covering index, so only then are the
        table's rows read. Without it the eighth field is None."""
        if self.is_sqlite:
            vals = cast(func.group_concat(samples.c.vals, ""), LargeBinary)
            shape_list, start_list = func.group_concat(samples.c.shape), func.group_concat(samples.c.start_time_ns)
        else:
            empty = literal_column("''::bytea")
            vals = func.string_agg(samples.c.vals, empty)
            shape_list = func.string_agg(func.int8send(samples.c.shape), empty)
            start_list = func.string_agg(func.int8send(samples.c.start_time_ns), empty)
        if not run_indexes:
            index_list = literal_column("NULL")
        elif self.is_sqlite:
            index_list = func.group_concat(samples.c.run_index)
        else:
            index_list = func.string_agg(func.int8send(cast(samples.c.run_index, BigInteger)), empty)
        query = select(samples.c.benchmark, samples.c.job_id, samples.c.context, func.count(), vals, shape_list,
                       start_list, index_list).where(samples.c.warmup.is_(False), samples.c.outcome == "ok")
        query = self._selected(query, machine_pk, jobs, benchmark_pks, context_pks, since_ns, until_ns)
        query = query.group_by(samples.c.machine, samples.c.benchmark, samples.c.job_id, samples.c.context).order_by(
            samples.c.machine, samples.c.benchmark, samples.c.job_id, samples.c.context)
        if self.is_sqlite:
            with self.engine.connect() as conn:
                for benchmark, job_id, context, runs, values, shape_text, start_text, index_text in conn.execute(query):
                    yield (benchmark, job_id, context, runs, values,
                           np.fromstring(shape_text, dtype=np.int64, sep=",") if shape_text else _NO_INTEGERS,
                           np.fromstring(start_text, dtype=np.int64, sep=",") if start_text else _NO_INTEGERS,
                           None if not run_indexes else
                           np.fromstring(index_text, dtype=np.int64, sep=",") if index_text else _NO_INTEGERS)
            return
        # PostgreSQL sends bytea as hex text unless asked for binary: 10^6 runs' values are 200 MB of hex
        # to decode (1.3 s of the 1.7 s this took per 300,000 runs)
        compiled = query.compile(dialect=self.engine.dialect, compile_kwargs={"render_postcompile": True})
        with self.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor(binary=True)
            try:
                cursor.execute(str(compiled), compiled.params)
                while rows := cursor.fetchmany(100):
                    for benchmark, job_id, context, runs, values, shape_bytes, start_bytes, index_bytes in rows:
                        yield (benchmark, job_id, context, runs, values,
                               np.frombuffer(shape_bytes or b"", dtype=">i8").astype(np.int64),
                               np.frombuffer(start_bytes or b"", dtype=">i8").astype(np.int64),
                               None if not run_indexes else
                               np.frombuffer(index_bytes or b"", dtype=">i8").astype(np.int64))
            finally:
                cursor.close()

    def clock_ahead(self, machine_pk: int, jobs: dict | None = None, benchmark_pks=None, context_pks=None,
                    since_ns: int = 0, until_ns: int = 0) -> tuple[int, int]:
        """(runs, most ns ahead) of the selected runs flagged at ingest with a start after their receipt
        (server/clock.py); read through the partial index that holds only those (ix_samples_clock_ahead)."""
        query = select(func.count(), func.coalesce(func.max(samples.c.clock_ahead_ns), 0)).where(
            samples.c.clock_ahead_ns.isnot(None))
        query = self._selected(query, machine_pk, jobs, benchmark_pks, context_pks, since_ns, until_ns)
        with self.engine.connect() as conn:
            return tuple(conn.execute(query).one())

    def run_counts(self, machine_pk: int, jobs: dict | None = None, benchmark_pks=None, context_pks=None,
                   since_ns: int = 0, until_ns: int = 0) -> list:
        """(benchmark, warmup, outcome, runs) of the selected runs, counted by the database from the index: how
        many ``grouped_values`` will send, and what it leaves out (warm-ups, runs that did not end ok)."""
        query = select(samples.c.benchmark, samples.c.warmup, samples.c.outcome, func.count())
        query = self._selected(query, machine_pk, jobs, benchmark_pks, context_pks, since_ns, until_ns)
        with self.engine.connect() as conn:
            return conn.execute(query.group_by(samples.c.benchmark, samples.c.warmup, samples.c.outcome)).all()

    def _selected(self, query, machine_pk, jobs, benchmark_pks, context_pks, since_ns, until_ns):
        query = self._filtered(query, machine_pk, benchmark_pks, None, context_pks, since_ns, until_ns)
        if jobs is not None:
            query = query.where(or_(*(and_(samples.c.job_id.is_(None) if job is None else samples.c.job_id == job,
                                           samples.c.benchmark.in_(sorted(pks)))
                                      for job, pks in jobs.items())))
        return query

    @staticmethod
    def _filtered(query, machine_pk, benchmark_pks, job_ids, context_pks, since_ns: int, until_ns: int):
        if machine_pk is not None:
            query = query.where(samples.c.machine == machine_pk)
        if benchmark_pks is not None:
            query = query.where(samples.c.benchmark.in_(sorted(benchmark_pks)))
        if job_ids is not None:
            named = sorted(j for j in job_ids if j is not None)
            condition = samples.c.job_id.in_(named)
            query = query.where(or_(condition, samples.c.job_id.is_(None)) if None in job_ids else condition)
        if context_pks is not None:
            query = query.where(samples.c.context.in_(sorted(context_pks)))
        if since_ns:
            query = query.where(samples.c.start_time_ns >= since_ns)
        if until_ns:
            query = query.where(samples.c.start_time_ns < until_ns)
        return query

    def benchmark_rows(self, names: list[str] | None = None) -> dict[int, dict]:
        """Benchmarks by id: name, executable_sha256, input_digest, argv (a list), executable."""
        query = select(benchmarks)
        if names is not None:
            query = query.where(benchmarks.c.name.in_(sorted(set(names))))
        with self.engine.connect() as conn:
            return {row["id"]: {**row, "argv": json.loads(row["argv"])} for row in conn.execute(query).mappings()}

    def contexts(self) -> dict[int, dict]:
        """Contexts by id: labels (a dict) and kernel."""
        with self.engine.connect() as conn:
            return {row.id: {"labels": json.loads(row.labels), "kernel": row.kernel}
                    for row in conn.execute(select(contexts.c.id, contexts.c.labels, contexts.c.kernel))}

    def shapes(self) -> dict[int, list]:
        """Shapes by id: per reading [label, event, backend, unit, status, reason] (server/decode.py)."""
        with self.engine.connect() as conn:
            return {row.id: json.loads(row.spec) for row in conn.execute(select(shapes.c.id, shapes.c.spec))}

    def machine_names(self) -> dict[int, tuple[str, str]]:
        """Machines by id: (name, machine_id)."""
        with self.engine.connect() as conn:
            return {row.id: (row.name, row.machine_id)
                    for row in conn.execute(select(machines.c.id, machines.c.name, machines.c.machine_id))}

    def count_samples(self) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(samples)).scalar_one()

    def sample_uuids(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(samples.c.uuid)).scalars())

    # --- jobs ---

    def create_job(self, machine: str, job: pb.Job, now_ns: int | None = None, job_id: str | None = None) -> str:
        now_ns = now_ns or time.time_ns()
        job_id = job_id or str(uuid_module.uuid4())  # given: server/submissions.py's, once per submission
        spec = pb.Job()
        spec.CopyFrom(job)
        spec.job_id = job_id
        with self._write_lock, self.engine.begin() as conn:
            conn.execute(jobs.insert().values(id=job_id, machine=machine, spec=spec.SerializeToString(),
                                              state="queued", message="", samples=0, submitted_ns=now_ns,
                                              updated_ns=now_ns))
        self._remember_jobs(machine, [job_id])
        return job_id

    def _remember_jobs(self, machine: str, job_ids) -> None:
        if len(self._machine_jobs) >= MAX_CACHED_JOBS:
            self._machine_jobs.clear()
        self._machine_jobs.update((machine, job_id) for job_id in job_ids)

    def knows_jobs(self, machine: str, job_ids) -> bool:
        """True if every one of ``job_ids`` is known (from memory, no query) to be a job of ``machine``."""
        return all((machine, job_id) in self._machine_jobs for job_id in job_ids)

    def foreign_jobs(self, machine: str, job_ids) -> set[str]:
        """Those of ``job_ids`` that are not jobs of ``machine``: a sample may only name its own machine's
        jobs. Jobs never change machine and are never deleted, so a pair found once is remembered."""
        unknown = {job_id for job_id in job_ids if (machine, job_id) not in self._machine_jobs}
        if not unknown:
            return set()
        with self.engine.connect() as conn:
            found = set(conn.execute(select(jobs.c.id).where(jobs.c.machine == machine,
                                                             jobs.c.id.in_(sorted(unknown)))).scalars())
        self._remember_jobs(machine, found)
        return unknown - found

    def job_spec(self, job_id: str, machine: str) -> pb.Job | None:
        with self.engine.connect() as conn:
            spec = conn.execute(select(jobs.c.spec).where(jobs.c.id == job_id, jobs.c.machine == machine)).scalar()
        return None if spec is None else pb.Job.FromString(bytes(spec))

    def open_jobs(self, machine: str) -> list[tuple[str, pb.Job]]:
        """(state, job) of the machine's queued, dispatched and running jobs, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.state, jobs.c.spec).where(jobs.c.machine == machine,
                                                                        jobs.c.state.in_(OPEN_JOB_STATES))
                                .order_by(jobs.c.submitted_ns)).all()
        return [(state, pb.Job.FromString(bytes(spec))) for state, spec in rows]

    def update_job(self, job_id: str, machine: str, state: str, message: str = "", samples_count: int | None = None,
                   now_ns: int | None = None, lease_s: float | None = None) -> bool:
        """Record a job's new state, reported by the machine it was given to; False if it is not that
        machine's job. JobReportError if the job cannot move to ``state`` (JOB_MOVES) or has fewer runs
        than ``samples_count``. The same final state reported again (an agent that re-sends after a
        reconnect) changes nothing and is not an error."""
        if state not in JOB_STATES:
            raise StorageError(f"unknown job state {state!r}")
        now_ns = now_ns or time.time_ns()
        values = dict(state=state, message=message[:1000], updated_ns=now_ns)
        # a job its agent reports running holds a lease (one back from lost, or retried, had none); a final
        # one holds none
        if state in LEASED_JOB_STATES and lease_s is not None:
            values["lease_ns"] = now_ns + int(lease_s * 1e9)
        elif state not in LEASED_JOB_STATES:
            values["lease_ns"] = None
        with self._write_lock, self.engine.begin() as conn:
            row = conn.execute(select(jobs.c.state, jobs.c.spec).where(jobs.c.id == job_id, jobs.c.machine == machine)
                               .with_for_update()).one_or_none()
            if row is None:
                return False
            if row.state == state and state not in JOB_MOVES:
                return True
            if state not in JOB_MOVES.get(row.state, ()):
                raise JobReportError(f"job {job_id} is {row.state}: it cannot become {state} (a job moves only "
                                     "forward: queued, running, then done, failed or refused)")
            if samples_count is not None:
                spec = pb.Job.FromString(bytes(row.spec))
                runs = (spec.repetitions + spec.warmups) * len(spec.commands)
                if not 0 <= samples_count <= runs:
                    raise JobReportError(f"job {job_id}: {samples_count} samples reported, the job has {runs} runs")
                values["samples"] = samples_count
            if state in FINAL_COUNTED_STATES:
                values["failed_runs"] = self._failed_runs(conn, job_id, machine)
            conn.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.machine == machine).values(**values))
            if state == "done":  # its history is written by a replica's keeper (server/history.py)
                history_store.enqueue(conn, self._insert_ignore, job_id, machine, now_ns)
        return True

    @staticmethod
    def _failed_runs(conn, job_id: str, machine: str) -> int:
        """The job's measured runs stored that did not end ok. Its agent reports the job ended only once every
        run of it was acked, so this is all of them. Read along ix_samples_series (machine, benchmark, job):
        the benchmarks from the job's series, not from a scan of the machine's every run."""
        machine_pk = select(machines.c.id).where(machines.c.name == machine).scalar_subquery()
        benchmarks_run = select(series.c.benchmark).where(series.c.machine == machine_pk, series.c.job_id == job_id)
        return conn.execute(select(func.count()).select_from(samples).where(
            samples.c.machine == machine_pk, samples.c.benchmark.in_(benchmarks_run), samples.c.job_id == job_id,
            samples.c.warmup.is_(False), samples.c.outcome != "ok")).scalar_one()

    def queued_jobs(self, machines: set[str]) -> list[tuple[str, pb.Job]]:
        """(machine, job) of the queued jobs of ``machines``, oldest first: what a replica with those machines'
        agents connected offers them (submitted through any replica)."""
        if not machines:
            return []
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.machine, jobs.c.spec).where(jobs.c.state == "queued")
                                .order_by(jobs.c.submitted_ns)).all()
        return [(machine, pb.Job.FromString(bytes(spec))) for machine, spec in rows if machine in machines]

    def retry_job(self, job_id: str, now_ns: int | None = None) -> dict:
        """A lost job queued again under its id, its spec naming the runs already stored (Job.stored_runs:
        the agent skips them); the job's row after. JobReportError if it is not lost, NoSuchJob if there is
        no such job."""
        now_ns = now_ns or time.time_ns()
        with self._write_lock, self.engine.begin() as conn:
            row = conn.execute(select(jobs.c.state, jobs.c.machine, jobs.c.spec).where(jobs.c.id == job_id)
                               .with_for_update()).one_or_none()
            if row is None:
                raise NoSuchJob(f"no job {job_id}")
            if row.state != "lost":
                raise JobReportError(f"job {job_id} is {row.state}: only a lost job can be retried")
            spec = pb.Job.FromString(bytes(row.spec))
            total = (spec.warmups + spec.repetitions) * len(spec.commands)
            position = {job_run_uuid(job_id, k): k for k in range(total)}
            machine_pk = conn.execute(select(machines.c.id).where(machines.c.name == row.machine)).scalar()
            stored = conn.execute(select(samples.c.uuid).where(samples.c.machine == machine_pk,
                                                               samples.c.job_id == job_id)).scalars()
            del spec.stored_runs[:]
            spec.stored_runs.extend(sorted(position[u] for u in stored if u in position))
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(
                state="queued", spec=spec.SerializeToString(), samples=len(spec.stored_runs), lease_ns=None,
                message=f"retried: {len(spec.stored_runs)} of {total} runs stored are kept", updated_ns=now_ns))
            return dict(conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one())

    def list_jobs(self, machine: str | None = None, job_ids: list[str] | None = None) -> list[dict]:
        """The jobs, oldest first: of ``machine``, and only ``job_ids`` (whole ids) when given."""
        query = select(jobs).order_by(jobs.c.submitted_ns)
        if machine:
            query = query.where(jobs.c.machine == machine)
        if job_ids:
            query = query.where(jobs.c.id.in_(job_ids))
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(query).mappings().all()]

    def job_counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state)).all())

    # --- retention ---

    def prune(self, before_ns: int, machine: str | None = None, dry_run: bool = False,
              pause_s: float = PRUNE_PAUSE_S) -> dict[str, int]:
        """Delete the runs that started before ``before_ns`` and that the server received before it too (of
        ``machine``, or of every machine), PRUNE_BATCH per transaction, series by series along ix_samples_series
        (machine, benchmark, job, context, start): each batch reads an index range, never the whole table.
        Audits, jobs, machines and benchmarks stay; each series' first start is moved up to its oldest run
        left, or the series goes with its last run. {machine name: runs deleted} (with ``dry_run``, that would
        be deleted; nothing changes).

        The start is the agent's clock: an agent days slow stamps the runs it makes now days old, and by start
        alone they went at the next prune, measured and lost (issue 29). The receipt is the server's own clock
        (received_ns, set at ingest), so a run is kept for the whole retention after it reached the server,
        whatever the agent's clock said. The start stays in the condition: it is what the index ranges are
        read by (the receipt is checked on the rows of that range), and a run started long ago but received
        lately (an agent's backlog) is as fresh to the server as any."""
        names = dict(self._machine_names())
        # series.received_ns is the latest receipt of a series, not its oldest: it cannot exclude a series
        query = select(series).where(series.c.first_ns < before_ns)
        if machine is not None:
            pk = self.machine_pk(machine)
            if pk is None:
                raise StorageError(f"no machine named {machine!r}")
            query = query.where(series.c.machine == pk)
        with self.engine.connect() as conn:
            touched = conn.execute(query).all()
        removed: dict[str, int] = {}
        for row in touched:
            count = self._delete_in_batches([*_runs_of(row), *_older(before_ns)], dry_run, pause_s)
            if not dry_run:
                self._narrow_series(row)
            removed[names[row.machine]] = removed.get(names[row.machine], 0) + count
        # runs whose payload did not decode (context NULL, migration 0004) belong to no series
        where = [samples.c.context.is_(None), *_older(before_ns)]
        if machine is not None:
            where.append(samples.c.machine == self.machine_pk(machine))
        with self.engine.connect() as conn:
            undecoded = conn.execute(select(samples.c.machine, func.count()).where(*where)
                                     .group_by(samples.c.machine)).all()
        if undecoded and not dry_run:
            self._delete_in_batches(where, dry_run, pause_s)
            for pk, count in undecoded:
                removed[names[pk]] = removed.get(names[pk], 0) + count
        return {name: count for name, count in removed.items() if count}

    def _machine_names(self) -> list[tuple[int, str]]:
        with self.engine.connect() as conn:
            return conn.execute(select(machines.c.id, machines.c.name)).all()

    def _delete_in_batches(self, where: list, dry_run: bool, pause_s: float) -> int:
        if dry_run:
            with self.engine.connect() as conn:
                return conn.execute(select(func.count()).select_from(samples).where(*where)).scalar()
        deleted = 0
        while True:
            with self._write_lock, self.engine.begin() as conn:
                ids = select(samples.c.id).where(*where).limit(PRUNE_BATCH).scalar_subquery()
                count = conn.execute(samples.delete().where(samples.c.id.in_(ids))).rowcount
            deleted += count
            if count < PRUNE_BATCH:
                return deleted
            time.sleep(pause_s)

    def _narrow_series(self, row) -> None:
        """A series after its old runs went: gone if none is left, else starting at its oldest run left
        (compare's default selection and `perfctl benchmarks` read first and last starts here)."""
        with self._write_lock, self.engine.begin() as conn:
            # The series row is written (locked) before its runs are read: an ingest that adds a run to it
            # either committed before (its run is read below) or waits for this commit (and re-creates the row
            # if it went). Read first, a run committed between the read and the delete lost its row (11 of
            # 740 prunes racing ingest on PostgreSQL). On SQLite the write takes the database's write lock.
            conn.execute(update(series).where(series.c.id == row.id).values(first_ns=series.c.first_ns))
            # from the runs left, not from row: a late run (an agent's backlog) may have joined the series
            first = conn.execute(select(func.min(samples.c.start_time_ns)).where(*_runs_of(row))).scalar()
            if first is None:
                conn.execute(series.delete().where(series.c.id == row.id))
            else:
                conn.execute(update(series).where(series.c.id == row.id).values(first_ns=first))

    def close(self) -> None:
        self.engine.dispose()


def _runs_of(series_row) -> list:
    """The conditions that select a series' runs (schema.py ``series``: job_id '' for runs without a job),
    in the order of ix_samples_series."""
    job = samples.c.job_id.is_(None) if series_row.job_id == "" else samples.c.job_id == series_row.job_id
    return [samples.c.machine == series_row.machine, samples.c.benchmark == series_row.benchmark, job,
            samples.c.context == series_row.context]


def _older(before_ns: int) -> list:
    """What makes a run old enough to prune: started before ``before_ns`` (the agent's clock; the index range)
    and received before it (the server's clock; checked on the rows read): Storage.prune says why both."""
    return [samples.c.start_time_ns < before_ns, samples.c.received_ns < before_ns]


def _kernel(inventory_json: str) -> str:
    kernel = inventory_of(inventory_json).get("kernel")
    release = kernel.get("release") if isinstance(kernel, dict) else None
    if not isinstance(release, str) or not release:
        return "unknown"
    # shown in listings and notes: an agent's control characters must not reach a terminal from here
    return "".join(c if c.isprintable() else "?" for c in release[:256])
