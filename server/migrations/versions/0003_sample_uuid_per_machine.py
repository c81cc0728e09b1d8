"""A sample's uuid is unique per machine, not across the database.

A job's run uuids are predictable (uuid5 of the job id and the run's index, agent/daemon.py) and job ids are
visible to clients: with one uuid space for every machine, an agent could store another machine's uuids
first and have that machine's real samples acked as duplicates and dropped. Deduplicated per (machine, uuid),
one machine's samples can only ever collide with its own re-sends.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _samples(uuid_unique: bool) -> sa.Table:
    """The samples table as 0001 built it, with or without the column-level UNIQUE on uuid: SQLite's batch
    mode rebuilds the table from this (the reflected UNIQUE has no name to drop it by)."""
    return sa.Table(
        "samples", sa.MetaData(),
        sa.Column("id", Key, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=uuid_unique),
        sa.Column("machine", Key, sa.ForeignKey("machines.id"), nullable=False),
        sa.Column("benchmark", Key, sa.ForeignKey("benchmarks.id"), nullable=False),
        sa.Column("job_id", sa.String(36)),
        sa.Column("run_index", sa.Integer, nullable=False),
        sa.Column("warmup", sa.Boolean, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("start_time_ns", sa.BigInteger, nullable=False),
        sa.Column("received_ns", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Index("ix_samples_machine_benchmark", "machine", "benchmark"),
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("samples", copy_from=_samples(uuid_unique=False), recreate="always") as batch:
            batch.create_unique_constraint("uq_samples_machine_uuid", ["machine", "uuid"])
    else:
        # PostgreSQL named 0001's column-level UNIQUE TABLE_COLUMN_key
        op.drop_constraint("samples_uuid_key", "samples", type_="unique")
        op.create_unique_constraint("uq_samples_machine_uuid", "samples", ["machine", "uuid"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("samples", copy_from=_samples(uuid_unique=True), recreate="always"):
            pass
    else:
        op.drop_constraint("uq_samples_machine_uuid", "samples", type_="unique")
        op.create_unique_constraint("samples_uuid_key", "samples", ["uuid"])
