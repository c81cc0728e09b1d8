"""Each benchmark's most recent job at once, and compare's rows read from an index alone.

- ``series``: first and last start per (machine, benchmark, job, context), widened at ingest (min/max, so a
  re-sent batch changes nothing); compare's default selection reads it instead of grouping every run.
  job_id '' stands for runs stored without a job (a NULL would never conflict in the unique constraint).
- ``ix_samples_series`` also holds what compare reads of each run (warmup, outcome, shape, values): the
  rows of a selection are read from the index in its order, never from the table, whose rows carry the
  payload (1.3 KB a run: reading past them cost 1.7 s per 600,000 runs on SQLite). On PostgreSQL that is
  an index-only scan once (auto)vacuum has marked the table's pages all-visible.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
KEY_COLUMNS = ["machine", "benchmark", "job_id", "context", "start_time_ns"]
READ_COLUMNS = ["warmup", "outcome", "shape", "vals"]


def upgrade() -> None:
    op.create_table("series",
                    sa.Column("id", Key, primary_key=True, autoincrement=True),
                    sa.Column("machine", Key, nullable=False),
                    sa.Column("benchmark", Key, nullable=False),
                    sa.Column("job_id", sa.String(36), nullable=False),
                    sa.Column("context", Key, nullable=False),
                    sa.Column("first_ns", sa.BigInteger, nullable=False),
                    sa.Column("last_ns", sa.BigInteger, nullable=False),
                    sa.UniqueConstraint("machine", "benchmark", "job_id", "context", name="uq_series"))
    op.execute("INSERT INTO series (machine, benchmark, job_id, context, first_ns, last_ns) "
               "SELECT machine, benchmark, COALESCE(job_id, ''), context, min(start_time_ns), max(start_time_ns) "
               "FROM samples WHERE context IS NOT NULL GROUP BY machine, benchmark, COALESCE(job_id, ''), context")
    op.drop_index("ix_samples_series", table_name="samples")
    op.create_index("ix_samples_series", "samples", KEY_COLUMNS + READ_COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_samples_series", table_name="samples")
    op.create_index("ix_samples_series", "samples", KEY_COLUMNS)
    op.drop_table("series")
