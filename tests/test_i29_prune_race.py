"""Retention and ingest on one series at once (issue 29, point 7): no run is left without its series row.

A prune that read "no run of this series left" and then deleted the series row, while an ingest committed a
run to that series in between, left the run without its row: compare's default selection and `perfctl
benchmarks` read the series table, and prune itself goes series by series, so such a run is never pruned
(11 of 740 prunes racing ingest on PostgreSQL). Here the race is made certain, not hoped for: a real ingest
transaction (the storage's own insert and series upsert) is held open on PostgreSQL while another Storage (a
second replica, or `perfctl prune`) prunes the series' old runs, and commits a second later."""

import threading
import time
import uuid

import pytest
from conftest import measure, stored_long_ago
from sqlalchemy import select

from perfctl import wire
from perfctl.server.schema import SampleRecord, samples, series
from perfctl.server.storage import SAMPLE_COLUMNS, Storage
from perfctl.v1 import fleet_pb2 as pb


@pytest.fixture(scope="module")
def real_sample():
    return wire.sample_to_proto(measure(["/bin/true"], ["task-clock"], runs=1)[0])


def _orphans(storage: Storage) -> list:
    """The (machine, benchmark, job, context) groups of stored runs that have no series row."""
    with storage.engine.connect() as conn:
        rows = {(r.machine, r.benchmark, r.job_id, r.context) for r in conn.execute(series.select())}
    return [group[:4] for group in storage.series() if (group[0], group[1], group[2] or "", group[3]) not in rows]


def test_a_run_stored_while_its_series_is_pruned_keeps_its_series_row(postgres, real_sample):
    url = postgres.new_database()
    ingesting, pruning = Storage(url), Storage(url)
    ingesting.register(pb.MachineInfo(name="box", machine_id="m" * 16, inventory_json="{}", agent_version="t"), 1)
    old = pb.Sample()
    old.CopyFrom(real_sample)
    old.start_time_ns = time.time_ns() - int(10 * 86400e9)
    ingesting.ingest("box", [old])
    stored_long_ago(url, 10)  # the old run was received when it ran, 10 days ago
    with ingesting.engine.connect() as conn:
        stored = SampleRecord(*conn.execute(select(*(samples.c[name] for name in SAMPLE_COLUMNS))).one())
    # a new run of the same series, in flight: inserted and its series row upserted, not yet committed
    stored = stored._replace(uuid=str(uuid.uuid4()), start_time_ns=time.time_ns(), received_ns=time.time_ns())
    pruned = []
    with ingesting.engine.begin() as conn:
        ingesting.insert_rows(conn, [stored])
        ingesting._extend_series(conn, [stored], stored.received_ns)
        prune = threading.Thread(target=lambda: pruned.append(pruning.prune(time.time_ns() - int(86400e9))))
        prune.start()
        time.sleep(1.5)  # the prune deletes the old run and reaches the series row meanwhile
    prune.join(30)
    assert pruned == [{"box": 1}]
    assert _orphans(ingesting) == [], "the run stored while its series was pruned has no series row"
    (row,) = ingesting.series()
    assert row[4] == 1 and row[5] == stored.start_time_ns
    with ingesting.engine.connect() as conn:
        assert conn.execute(select(series.c.first_ns)).scalar_one() == stored.start_time_ns
    ingesting.close()
    pruning.close()
