"""The initial schema: machines, benchmarks, samples (append-only), jobs.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "machines",
        sa.Column("id", Key, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("machine_id", sa.String(64), nullable=False),
        sa.Column("inventory", sa.Text, nullable=False),
        sa.Column("backends", sa.Text, nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("agent_version", sa.String(64), nullable=False),
        sa.Column("first_seen_ns", sa.BigInteger, nullable=False),
        sa.Column("last_heard_ns", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "benchmarks",
        sa.Column("id", Key, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("executable_sha256", sa.String(64), nullable=False),
        sa.Column("input_digest", sa.String(64), nullable=False),
        sa.Column("argv", sa.Text, nullable=False),
        sa.Column("executable", sa.Text, nullable=False),
        sa.UniqueConstraint("name", "executable_sha256", "input_digest", "argv", name="uq_benchmark_identity"),
    )
    op.create_table(
        "samples",
        sa.Column("id", Key, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("machine", Key, sa.ForeignKey("machines.id"), nullable=False),
        sa.Column("benchmark", Key, sa.ForeignKey("benchmarks.id"), nullable=False),
        sa.Column("job_id", sa.String(36)),
        sa.Column("run_index", sa.Integer, nullable=False),
        sa.Column("warmup", sa.Boolean, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("start_time_ns", sa.BigInteger, nullable=False),
        sa.Column("received_ns", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_samples_machine_benchmark", "samples", ["machine", "benchmark"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("spec", sa.LargeBinary, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("submitted_ns", sa.BigInteger, nullable=False),
        sa.Column("updated_ns", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_jobs_machine_state", "jobs", ["machine", "state"])


def downgrade() -> None:
    op.drop_table("jobs")
    op.drop_table("samples")
    op.drop_table("benchmarks")
    op.drop_table("machines")
