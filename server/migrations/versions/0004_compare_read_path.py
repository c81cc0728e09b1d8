"""Compare reads values, not payloads: each sample row gets its values, a shape and a context.

Compare used to decode every stored payload of both machines (21.9 s for 20,000 runs per machine). Each row
now also holds ``vals`` (float64: wall time, then each reading's value), ``shape`` (what those values are)
and ``context`` (the run's labels and its machine's kernel), written at ingest by server/decode.py; the
index ``ix_samples_series`` (machine, benchmark, job, context, start time) serves compare's default
selection (per benchmark, the most recent job) and `perfctl benchmarks` without reading the table.

Existing rows are backfilled from their payloads, in batches; their kernel is the one their machine last
reported (the only one known). A payload that does not decode, or that ingest would refuse today (an older
server checked less), keeps NULLs and is never compared (compare says how many such runs it skipped).

Revision ID: 0004
Revises: 0003
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
BATCH = 5000


def upgrade() -> None:
    op.create_table("shapes",
                    sa.Column("id", Key, primary_key=True, autoincrement=True),
                    sa.Column("spec", sa.Text, nullable=False),
                    sa.Column("digest", sa.String(64), nullable=False, unique=True))
    op.create_table("contexts",
                    sa.Column("id", Key, primary_key=True, autoincrement=True),
                    sa.Column("labels", sa.Text, nullable=False),
                    sa.Column("kernel", sa.String(256), nullable=False),
                    sa.Column("digest", sa.String(64), nullable=False, unique=True))
    op.add_column("samples", sa.Column("context", Key))
    op.add_column("samples", sa.Column("shape", Key))
    op.add_column("samples", sa.Column("vals", sa.LargeBinary))
    _backfill(op.get_bind())
    op.drop_index("ix_samples_machine_benchmark", table_name="samples")
    op.create_index("ix_samples_series", "samples", ["machine", "benchmark", "job_id", "context", "start_time_ns"])


def _backfill(conn) -> None:
    from perfctl.server.decode import row_fields
    from perfctl.server.storage import _kernel
    from perfctl.server.validation import validate_sample
    from perfctl.v1 import fleet_pb2 as pb

    kernels = {pk: _kernel(inventory) for pk, inventory in conn.execute(sa.text("SELECT id, inventory FROM machines"))}
    ids: dict[tuple, int] = {}

    def dictionary_id(table: str, values: dict) -> int:
        key = (table, *values.values())
        if key not in ids:
            digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
            found = conn.execute(sa.text(f"SELECT id FROM {table} WHERE digest = :d"), {"d": digest}).scalar()
            if found is None:
                columns = ", ".join(values)
                conn.execute(sa.text(f"INSERT INTO {table} ({columns}, digest) VALUES "
                                     f"({', '.join(':' + c for c in values)}, :digest)"), {**values, "digest": digest})
                found = conn.execute(sa.text(f"SELECT id FROM {table} WHERE digest = :d"), {"d": digest}).scalar()
            ids[key] = found
        return ids[key]

    last = 0
    while True:
        rows = conn.execute(sa.text("SELECT id, machine, payload FROM samples WHERE id > :last ORDER BY id LIMIT :n"),
                            {"last": last, "n": BATCH}).all()
        if not rows:
            return
        updates = []
        for pk, machine, payload in rows:
            try:
                sample = pb.Sample.FromString(bytes(payload))
            except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends: the row stays uncompared
                continue
            if validate_sample(sample):  # what ingest refuses today (stored by a server that checked less)
                continue
            fields = row_fields(sample)
            labels, shape, vals = fields[7:]
            context = {"labels": labels, "kernel": kernels.get(machine, "unknown")}
            updates.append({"pk": pk, "vals": vals, "context": dictionary_id("contexts", context),
                            "shape": dictionary_id("shapes", {"spec": shape})})
        if updates:
            conn.execute(sa.text("UPDATE samples SET context = :context, shape = :shape, vals = :vals WHERE id = :pk"),
                         updates)
        last = rows[-1][0]


def downgrade() -> None:
    op.drop_index("ix_samples_series", table_name="samples")
    op.create_index("ix_samples_machine_benchmark", "samples", ["machine", "benchmark"])
    with op.batch_alter_table("samples") as batch:
        batch.drop_column("vals")
        batch.drop_column("shape")
        batch.drop_column("context")
    op.drop_table("contexts")
    op.drop_table("shapes")
