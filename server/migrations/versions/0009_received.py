"""The server's clock orders what agents report (issue 29, point 4): an agent's clock may be days off, and
its stamps must not decide which job is a machine's most recent or which audit is its latest.

- ``series.received_ns``: when the server last stored a run of the series (its own clock). Compare's default
  selection (server/selection.py) takes, per benchmark, the job whose runs were received last, not the one
  whose runs claim the latest start. Filled for the series stored before from their runs' ``received_ns``
  (kept since revision 0001), or their last start where no run says.
- ``audits.received_ns``: when the server stored the audit; the latest audit of a machine (its verdict
  gauge, the compare warning, `perfctl machines`) is the one received last. Filled with the audit's own
  time for the audits stored before (nothing else knew better).
- ``samples.clock_ahead_ns``: for a run that, by its agent's clock, started more than the server's tolerance
  (server/clock.py) after the server received it, by how much; NULL for every other run. Kept with the
  run (nothing is refused: the measurement is good, its date is not), counted per machine in `perfctl
  machines` from the partial index ``ix_samples_clock_ahead``, which holds those runs alone.
- ``machines.clock_skew_ns``: the agent's clock minus the server's at its last heartbeat (agents that send
  their time: HeartbeatRequest.agent_time_ns); NULL until one did.
- ``machines.retired_ns``: when `perfctl machines --retire NAME` retired it (NULL: in service). A retired
  machine leaves the heartbeat and audit gauges; its runs, jobs and audits stay; its agent registering again
  puts it back in service.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("series", sa.Column("received_ns", sa.BigInteger, nullable=True))
    op.add_column("audits", sa.Column("received_ns", sa.BigInteger, nullable=True))
    op.add_column("samples", sa.Column("clock_ahead_ns", sa.BigInteger, nullable=True))
    op.add_column("machines", sa.Column("clock_skew_ns", sa.BigInteger, nullable=True))
    op.add_column("machines", sa.Column("retired_ns", sa.BigInteger, nullable=True))
    # one pass over the runs, along ix_samples_series per series (the received time itself is in the rows)
    op.execute("UPDATE series SET received_ns = COALESCE((SELECT max(samples.received_ns) FROM samples "
               "WHERE samples.machine = series.machine AND samples.benchmark = series.benchmark "
               "AND (samples.job_id = series.job_id OR (series.job_id = '' AND samples.job_id IS NULL)) "
               "AND samples.context = series.context), last_ns)")
    op.execute("UPDATE audits SET received_ns = time_ns")
    op.create_index("ix_audits_machine_received", "audits", ["machine", "received_ns"])
    op.create_index("ix_samples_clock_ahead", "samples", ["machine"],
                    sqlite_where=sa.text("clock_ahead_ns IS NOT NULL"),
                    postgresql_where=sa.text("clock_ahead_ns IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_samples_clock_ahead", table_name="samples")
    op.drop_index("ix_audits_machine_received", table_name="audits")
    for table, columns in (("series", ["received_ns"]), ("audits", ["received_ns"]), ("samples", ["clock_ahead_ns"]),
                           ("machines", ["clock_skew_ns", "retired_ns"])):
        with op.batch_alter_table(table) as batch:  # SQLite drops a column by copying the table
            for column in columns:
                batch.drop_column(column)
