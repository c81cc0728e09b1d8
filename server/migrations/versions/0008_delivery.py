"""Acknowledged job delivery (server/delivery.py): ``jobs.delivered_ns``, when the job's agent first confirmed
holding it (a heartbeat naming it); NULL while it is queued, or dispatched and not yet confirmed.

Heartbeats renew the leases of delivered and running jobs only, and a dispatched job not confirmed within the
delivery deadline is queued again. Jobs dispatched before this revision are left unconfirmed: one that reached
its agent is confirmed by the agent's next heartbeat (or was reported running), and one stuck in a connection
nobody read is offered again once its old lease lapses, instead of being renewed forever.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("delivered_ns", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("delivered_ns")
