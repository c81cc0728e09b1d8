"""The server's tables (SQLAlchemy Core). Alembic migrations in server/migrations/ create and evolve them;
this metadata is what the code queries and what a migration is checked against (tests/test_storage.py).

Samples are append-only: one row per run, with the columns that queries filter on and the whole sample as
its wire encoding (``payload``, protobuf bytes: readings included, raw values never rewritten): the record
of what was received. Compare reads none of the payloads (migration 0004): each row also holds its values
(``vals``: wall time then each reading's value, float64) and two small dictionary ids, ``shape`` (what each
of those values is: label, event, unit, backend, status) and ``context`` (the labels of the run and the
kernel it ran on), so a selection by machine, benchmark, job, label and time reads a few dozen bytes per run
(server/selection.py). Storing the values per sample rather than one row per reading keeps ingest at tens
of thousands of samples per second on SQLite (bench/ingest_rate.py).
"""

from typing import NamedTuple

from sqlalchemy import (
                        BigInteger,
                        Boolean,
                        Column,
                        Double,
                        ForeignKey,
                        Index,
                        Integer,
                        LargeBinary,
                        MetaData,
                        String,
                        Table,
                        Text,
                        UniqueConstraint,
                        text,
)

metadata = MetaData()

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit key.
Key = BigInteger().with_variant(Integer(), "sqlite")

machines = Table(
    "machines", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("machine_id", String(64), nullable=False),
    Column("inventory", Text, nullable=False),
    Column("backends", Text, nullable=False),
    Column("events", Text, nullable=False),
    Column("agent_version", String(64), nullable=False),
    Column("first_seen_ns", BigInteger, nullable=False),
    Column("last_heard_ns", BigInteger, nullable=False),
    # the server replica holding the agent's job watch (server/jobs.py), NULL when none does (migration 0006)
    Column("watched_by", String(64)),
    # migration 0009: the agent's clock minus the server's at its last heartbeat (NULL: never said), and when
    # `perfctl machines --retire` took it out of service (NULL: in service)
    Column("clock_skew_ns", BigInteger),
    Column("retired_ns", BigInteger),
)

benchmarks = Table(
    "benchmarks", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False),
    Column("executable_sha256", String(64), nullable=False),
    Column("input_digest", String(64), nullable=False),
    Column("argv", Text, nullable=False),
    Column("executable", Text, nullable=False),
    UniqueConstraint("name", "executable_sha256", "input_digest", "argv", name="uq_benchmark_identity"),
)

samples = Table(
    "samples", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    # unique per machine (migration 0003): run uuids are predictable, so one machine must not be able to
    # take another's
    Column("uuid", String(36), nullable=False),
    Column("machine", Key, ForeignKey("machines.id"), nullable=False),
    Column("benchmark", Key, ForeignKey("benchmarks.id"), nullable=False),
    Column("job_id", String(36)),
    Column("run_index", Integer, nullable=False),
    Column("warmup", Boolean, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("start_time_ns", BigInteger, nullable=False),
    Column("received_ns", BigInteger, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    # migration 0004; NULL only for a stored payload that does not decode (kept, never compared)
    Column("context", Key),
    Column("shape", Key),
    Column("vals", LargeBinary),
    # migration 0009: how far ahead of the server's receive time its agent's clock put its start, when
    # beyond server/clock.py's tolerance; NULL for every other run
    Column("clock_ahead_ns", BigInteger),
    # covers the per-benchmark, per-job grouping of compare's default selection and of `perfctl benchmarks`
    # what compare reads of a run is held in the index itself (migration 0005): a selection reads the
    # index alone, in its order, never the table rows that carry the payloads
    Index("ix_samples_series", "machine", "benchmark", "job_id", "context", "start_time_ns", "warmup", "outcome",
          "shape", "vals"),
    UniqueConstraint("machine", "uuid", name="uq_samples_machine_uuid"),
    Index("ix_samples_clock_ahead", "machine", sqlite_where=text("clock_ahead_ns IS NOT NULL"),
          postgresql_where=text("clock_ahead_ns IS NOT NULL")),
)


class SampleRecord(NamedTuple):
    """A samples row as ingest inserts it, in the order of its INSERT's columns (Storage.insert_rows)."""

    uuid: str
    machine: int
    benchmark: int
    job_id: str | None
    run_index: int
    warmup: bool
    outcome: str
    start_time_ns: int
    received_ns: int
    payload: bytes
    context: int
    shape: int
    vals: bytes | None


# When each (machine, benchmark, job, context) series of runs started and last ran, kept at ingest (min/max:
# a re-sent batch changes nothing): compare's default selection, each benchmark's most recent job, reads
# this instead of grouping the samples. job_id '' for runs stored without a job.
series = Table(
    "series", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("machine", Key, nullable=False),
    Column("benchmark", Key, nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("context", Key, nullable=False),
    Column("first_ns", BigInteger, nullable=False),
    Column("last_ns", BigInteger, nullable=False),
    # when the server last stored a run of it, by its own clock (migration 0009): what orders jobs
    Column("received_ns", BigInteger),
    UniqueConstraint("machine", "benchmark", "job_id", "context", name="uq_series"),
)

# What the values of a sample are (JSON list of [label, event, backend, unit, status, reason] per reading,
# after the wall time): one row per distinct layout, typically one per job.
shapes = Table(
    "shapes", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("spec", Text, nullable=False),
    Column("digest", String(64), nullable=False, unique=True),
)

# Under what a run ran: its labels (JSON object, keys sorted) and the kernel release its machine reported
# when the run was stored.
contexts = Table(
    "contexts", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("labels", Text, nullable=False),
    Column("kernel", String(256), nullable=False),
    Column("digest", String(64), nullable=False, unique=True),
)

jobs = Table(
    "jobs", metadata,
    Column("id", String(36), primary_key=True),
    Column("machine", String(128), nullable=False),
    Column("spec", LargeBinary, nullable=False),
    Column("state", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("submitted_ns", BigInteger, nullable=False),
    Column("updated_ns", BigInteger, nullable=False),
    Column("lease_ns", BigInteger),  # a dispatched or running job's lease lapses then (migration 0006)
    Column("failed_runs", Integer),  # of a job done or failed: its measured runs not ok (migration 0007)
    Column("delivered_ns", BigInteger),  # its agent first confirmed holding it then (server/delivery.py, 0008)
    Index("ix_jobs_machine_state", "machine", "state"),
    Index("ix_jobs_state_lease", "state", "lease_ns"),
    # the job listing's pages, newest first, of every machine or one, and ids looked up by their first
    # characters (LIKE 'abc%' on PostgreSQL whatever its collation) (migration 0010, server/listings.py)
    Index("ix_jobs_submitted", "submitted_ns", "id"),
    Index("ix_jobs_machine_submitted", "machine", "submitted_ns", "id"),
    Index("ix_jobs_id_pattern", "id", postgresql_ops={"id": "text_pattern_ops"}),
)

audits = Table(
    "audits", metadata,
    Column("id", String(36), primary_key=True),
    Column("machine", String(128), nullable=False),
    Column("time_ns", BigInteger, nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("report", Text, nullable=False),
    Column("received_ns", BigInteger),  # the server's clock when stored: what orders audits (migration 0009)
    Index("ix_audits_machine_time", "machine", "time_ns"),
    Index("ix_audits_machine_received", "machine", "received_ns"),
)

# --- performance history (issue 32, migration 0011; server/history_store.py, docs/history.md "On a fleet") ---
# A series of the history: one machine x benchmark (name and argv, not the benchmarks row: each commit's build
# has a new executable digest) x metric x line of development (the `--history-line` labels' values, JSON,
# keys sorted). ``digest`` is the sha256 of that identity: one row per series whichever replica makes it.
history_series = Table(
    "history_series", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("digest", String(64), nullable=False, unique=True),
    Column("machine", String(128), nullable=False),
    Column("benchmark", String(256), nullable=False),
    Column("argv", Text, nullable=False),
    Column("metric", String(128), nullable=False),
    Column("line", Text, nullable=False),
    Column("unit", String(16), nullable=False),
    Index("ix_history_series_machine", "machine", "benchmark"),
)

# One point per ended job per series: the summary of the metric over the job's measured runs that ended ok,
# and their values. Kept when retention deletes the runs (the history outlives them). ``time_ns``: the job's
# end by the server's clock, what orders a series. ``build``: the benchmarks row the runs were of.
history_points = Table(
    "history_points", metadata,
    Column("id", Key, primary_key=True, autoincrement=True),
    Column("series", Key, ForeignKey("history_series.id"), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("build", Key, nullable=False),
    Column("commit", String(256)),
    Column("labels", Text, nullable=False),
    Column("time_ns", BigInteger, nullable=False),
    Column("runs", Integer, nullable=False),
    Column("median", Double, nullable=False),
    Column("q1", Double, nullable=False),
    Column("q3", Double, nullable=False),
    Column("min", Double, nullable=False),
    Column("max", Double, nullable=False),
    # the metric's value of each of those runs (float64, little-endian, in the order stored): what confirms a
    # change on the runs (analysis.changepoints runs_of) without reading the samples' rows, and after
    # retention deleted them (8 bytes a run where a stored run is kilobytes)
    Column("run_values", LargeBinary, nullable=False),
    UniqueConstraint("series", "job_id", name="uq_history_points"),
    Index("ix_history_points_order", "series", "time_ns", "job_id"),
)

# The changes found in a series, each under a stable id. ``triage`` is what a user said (new, acknowledged,
# false positive); ``state`` what is shown: "fixed" when ``fixed_by`` (a later change brought the level back)
# and not a false positive, else the triage. ``analysis``: the rest of the contract's change row (JSON:
# analysis.changepoints.Change's fields, the before/after sides). ``time_ns``: the first point after the change.
history_changes = Table(
    "history_changes", metadata,
    Column("id", String(16), primary_key=True),
    Column("series", Key, ForeignKey("history_series.id"), nullable=False),
    Column("machine", String(128), nullable=False),
    Column("benchmark", String(256), nullable=False),
    Column("after_job", String(36), nullable=False),
    Column("time_ns", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("triage", String(16), nullable=False),
    Column("regression", Boolean, nullable=False),
    Column("note", Text, nullable=False),
    Column("link", Text, nullable=False),
    Column("fixed_by", String(16)),
    Column("analysis", Text, nullable=False),
    Column("detected_ns", BigInteger, nullable=False),
    Column("updated_ns", BigInteger, nullable=False),
    # ListChanges' pages, newest first, of every machine or one; UpdateChange's id prefixes
    Index("ix_history_changes_time", "time_ns", "id"),
    Index("ix_history_changes_machine_time", "machine", "time_ns", "id"),
    Index("ix_history_changes_series", "series"),
    Index("ix_history_changes_id_pattern", "id", postgresql_ops={"id": "text_pattern_ops"}),
)

# Jobs ended (done) and not yet analysed: inserted in the transaction that records the job done
# (Storage.update_job), deleted in the one that writes its points and changes (server/history.py).
# ``attempts``: analyses of it that failed (migration 0012); at MAX_ATTEMPTS it is moved to history_set_aside.
history_queue = Table(
    "history_queue", metadata,
    Column("job_id", String(36), primary_key=True),
    Column("machine", String(128), nullable=False),
    Column("queued_ns", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Index("ix_history_queue_queued", "queued_ns"),
)

# Ended jobs whose analysis failed server/history.py MAX_ATTEMPTS times: kept with the last error (at most
# 2,000 characters) and when they were set aside, out of the queue so that the keeper does not try them again
# every minute; perfctl_history_set_aside counts them (migration 0012; docs/history.md "On a fleet").
history_set_aside = Table(
    "history_set_aside", metadata,
    Column("job_id", String(36), primary_key=True),
    Column("machine", String(128), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("error", Text, nullable=False),
    Column("set_aside_ns", BigInteger, nullable=False),
)
