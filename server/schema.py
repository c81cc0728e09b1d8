"""The server's tables (SQLAlchemy Core). Alembic migrations in server/migrations/ create and evolve them;
this metadata is what the code queries and what a migration is checked against (tests/test_storage.py).

Samples are append-only: one row per run, with the columns that queries filter on and the whole sample as
its wire encoding (``payload``, protobuf bytes: readings included, raw values never rewritten). Storing the
readings inside the payload rather than one row each keeps ingest at tens of thousands of samples per
second on SQLite (bench/ingest_rate.py).
"""

from sqlalchemy import (
                        BigInteger,
                        Boolean,
                        Column,
                        ForeignKey,
                        Index,
                        Integer,
                        LargeBinary,
                        MetaData,
                        String,
                        Table,
                        Text,
                        UniqueConstraint,
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
    Index("ix_samples_machine_benchmark", "machine", "benchmark"),
    UniqueConstraint("machine", "uuid", name="uq_samples_machine_uuid"),
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
    Index("ix_jobs_machine_state", "machine", "state"),
)

audits = Table(
    "audits", metadata,
    Column("id", String(36), primary_key=True),
    Column("machine", String(128), nullable=False),
    Column("time_ns", BigInteger, nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("report", Text, nullable=False),
    Index("ix_audits_machine_time", "machine", "time_ns"),
)
