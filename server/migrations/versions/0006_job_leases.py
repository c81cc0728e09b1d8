"""Job leases: a dispatched or running job holds a lease its machine's heartbeats renew (any server replica
takes them); once it lapses the job is "lost" (server/jobs.py).

- ``jobs.lease_ns``: when the lease lapses (unix ns); NULL while the job is queued or final.
- ``machines.watched_by``: the replica an agent's job watch is open at, so that every replica can say
  whether the machine is connected (one that crashed leaves its mark, which the heartbeats' age outdates).
- ``ix_jobs_state_lease``: what every replica asks every second or so, the queued jobs and the lapsed leases,
  read from an index rather than the whole (never pruned) job history.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("lease_ns", sa.BigInteger, nullable=True))
    op.add_column("machines", sa.Column("watched_by", sa.String(64), nullable=True))
    # jobs dispatched before leases existed get the default lease from their last change: their agents'
    # heartbeats renew it, and one whose agent is gone becomes lost instead of staying dispatched forever
    op.execute("UPDATE jobs SET lease_ns = updated_ns + 300000000000 WHERE state IN ('dispatched', 'running')")
    op.create_index("ix_jobs_state_lease", "jobs", ["state", "lease_ns"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state_lease", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("lease_ns")
    with op.batch_alter_table("machines") as batch:
        batch.drop_column("watched_by")
