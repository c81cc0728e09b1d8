"""A failing history analysis is set aside (issue 32): each queued ended job counts the analyses of it that
failed, and one that failed server/history.py MAX_ATTEMPTS times moves to history_set_aside with its error,
instead of being tried again every minute for ever (server/schema.py says what each column holds).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("history_queue", sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "history_set_aside",
        sa.Column("job_id", sa.String(36), primary_key=True),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("set_aside_ns", sa.BigInteger, nullable=False))


def downgrade() -> None:
    op.drop_table("history_set_aside")
    with op.batch_alter_table("history_queue") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("attempts")
