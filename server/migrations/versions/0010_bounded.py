"""Bounded answers (server/listings.py): the job listing is paged newest first along an index, and a job is
found by the first characters of its id without reading the others.

``ix_jobs_submitted`` (submitted_ns, id) and ``ix_jobs_machine_submitted`` (machine, submitted_ns, id): a page of
jobs, of every machine or of one, is an index range after the previous page's last job. ``ix_jobs_id_pattern``
(id, text_pattern_ops on PostgreSQL): `LIKE 'abc%'` uses it whatever the database's collation (the primary
key's index serves it only under the C collation); on SQLite it is a plain index, the schema being one.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_submitted", "jobs", ["submitted_ns", "id"])
    op.create_index("ix_jobs_machine_submitted", "jobs", ["machine", "submitted_ns", "id"])
    op.create_index("ix_jobs_id_pattern", "jobs", ["id"], postgresql_ops={"id": "text_pattern_ops"})


def downgrade() -> None:
    op.drop_index("ix_jobs_id_pattern", "jobs")
    op.drop_index("ix_jobs_machine_submitted", "jobs")
    op.drop_index("ix_jobs_submitted", "jobs")
