"""Performance history (issue 32): series, their points (one per ended job), their changes with stable ids and
triage, and the queue of ended jobs awaiting analysis (server/schema.py says what each column holds;
server/history.py, docs/history.md "On a fleet").

Jobs that ended before this revision are not queued: their history starts with the next job (a fleet's
past can be analysed from files: `perfctl history FILE...`).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "history_series",
        sa.Column("id", Key, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("benchmark", sa.String(256), nullable=False),
        sa.Column("argv", sa.Text, nullable=False),
        sa.Column("metric", sa.String(128), nullable=False),
        sa.Column("line", sa.Text, nullable=False),
        sa.Column("unit", sa.String(16), nullable=False))
    op.create_index("ix_history_series_machine", "history_series", ["machine", "benchmark"])
    op.create_table(
        "history_points",
        sa.Column("id", Key, primary_key=True, autoincrement=True),
        sa.Column("series", Key, sa.ForeignKey("history_series.id"), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("build", Key, nullable=False),
        sa.Column("commit", sa.String(256)),
        sa.Column("labels", sa.Text, nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        *(sa.Column(name, sa.Double, nullable=False) for name in ("median", "q1", "q3", "min", "max")),
        sa.Column("run_values", sa.LargeBinary, nullable=False),
        sa.UniqueConstraint("series", "job_id", name="uq_history_points"))
    op.create_index("ix_history_points_order", "history_points", ["series", "time_ns", "job_id"])
    op.create_table(
        "history_changes",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("series", Key, sa.ForeignKey("history_series.id"), nullable=False),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("benchmark", sa.String(256), nullable=False),
        sa.Column("after_job", sa.String(36), nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("triage", sa.String(16), nullable=False),
        sa.Column("regression", sa.Boolean, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("link", sa.Text, nullable=False),
        sa.Column("fixed_by", sa.String(16)),
        sa.Column("analysis", sa.Text, nullable=False),
        sa.Column("detected_ns", sa.BigInteger, nullable=False),
        sa.Column("updated_ns", sa.BigInteger, nullable=False))
    op.create_index("ix_history_changes_time", "history_changes", ["time_ns", "id"])
    op.create_index("ix_history_changes_machine_time", "history_changes", ["machine", "time_ns", "id"])
    op.create_index("ix_history_changes_series", "history_changes", ["series"])
    op.create_index("ix_history_changes_id_pattern", "history_changes", ["id"],
                    postgresql_ops={"id": "text_pattern_ops"})
    op.create_table(
        "history_queue",
        sa.Column("job_id", sa.String(36), primary_key=True),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("queued_ns", sa.BigInteger, nullable=False))
    op.create_index("ix_history_queue_queued", "history_queue", ["queued_ns"])


def downgrade() -> None:
    for table in ("history_queue", "history_changes", "history_points", "history_series"):
        op.drop_table(table)
