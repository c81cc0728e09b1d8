"""Audits: each machine's counter-trust audits, kept as history (drift is read across them).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audits",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("report", sa.Text, nullable=False),
    )
    op.create_index("ix_audits_machine_time", "audits", ["machine", "time_ns"])


def downgrade() -> None:
    op.drop_table("audits")
