"""A job's failed runs: ``jobs.failed_runs``, the measured runs of a job done or failed that did not end ok
(an exit status other than 0, a signal, a timeout), counted by the server when the job ends
(Storage.update_job). `perfctl submit --wait` and `perfctl jobs --wait` exit 1 when it is not 0, as `perfctl
stat` does for a run that failed.

NULL while the job is open, and for the jobs that ended before this revision: counting each of them here
would read their runs again at the upgrade, which on a long history is a long wait for nothing anyone asks.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("failed_runs", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("failed_runs")
