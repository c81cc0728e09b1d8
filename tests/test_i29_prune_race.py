"""Retention and ingest on one series at once (issue 29, point 7): no run is left without its series row.

Two Storage objects on one database, as two server replicas (or `perfctl prune` beside a server) are: one
stores a run into the same (machine, benchmark, job, labels) series again and again, the other prunes that
series' old runs meanwhile. A prune that read "no run left" and then deleted the series row, while an ingest
committed a run to it in between, left that run without a row (compare's default selection and `perfctl
benchmarks` read the series table): 11 of 740 prunes did on PostgreSQL before the fix."""

import threading
import time
import uuid

import pytest
from conftest import measure

from perfctl import wire
from perfctl.server.schema import series
from perfctl.server.storage import Storage
from perfctl.v1 import fleet_pb2 as pb

RACE_S = 6.0


@pytest.fixture(scope="module")
def real_sample():
    return wire.sample_to_proto(measure(["/bin/true"], ["task-clock"], runs=1)[0])


def _old_copy(sample: pb.Sample, days: float) -> pb.Sample:
    copy = pb.Sample()
    copy.CopyFrom(sample)
    copy.uuid = str(uuid.uuid4())
    copy.start_time_ns = time.time_ns() - int(days * 86400e9)
    return copy


def _orphans(storage: Storage) -> list:
    """The (machine, benchmark, job, context) groups of stored runs that have no series row."""
    with storage.engine.connect() as conn:
        rows = {(r.machine, r.benchmark, r.job_id, r.context) for r in conn.execute(series.select())}
    return [group[:4] for group in storage.series() if (group[0], group[1], group[2] or "", group[3]) not in rows]


def test_a_run_stored_while_its_series_is_pruned_keeps_its_series_row(database_url, real_sample):
    ingesting, pruning = Storage(database_url), Storage(database_url)
    ingesting.register(pb.MachineInfo(name="box", machine_id="m" * 16, inventory_json="{}", agent_version="t"), 1)
    stop = threading.Event()
    prunes, stored, failures = [0], [0], []

    def ingest() -> None:
        try:
            while not stop.is_set():
                ingesting.ingest("box", [_old_copy(real_sample, 10)])
                stored[0] += 1
        except Exception as err:  # noqa: BLE001 - reported by the test
            failures.append(err)

    def prune() -> None:
        try:
            while not stop.is_set():
                pruning.prune(time.time_ns() - int(86400e9), pause_s=0)
                prunes[0] += 1
        except Exception as err:  # noqa: BLE001 - reported by the test
            failures.append(err)

    threads = [threading.Thread(target=ingest), threading.Thread(target=prune)]
    for thread in threads:
        thread.start()
    time.sleep(RACE_S)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not failures, failures
    assert prunes[0] >= 20 and stored[0] >= 20, (prunes, stored)
    orphans = _orphans(ingesting)
    assert orphans == [], f"{len(orphans)} series of stored runs have no series row after {prunes[0]} prunes " \
                          f"racing {stored[0]} ingests"
    ingesting.close()
    pruning.close()
