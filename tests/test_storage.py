"""Storage on real databases: SQLite in a data directory and a real PostgreSQL server."""

import asyncio
import contextlib
import time
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from conftest import measure, stored_long_ago

from perfctl import wire
from perfctl.server.delivery import Deliveries
from perfctl.server.schema import metadata
from perfctl.server.storage import Storage, StorageError
from perfctl.v1 import fleet_pb2 as pb


@pytest.fixture(scope="module")
def real_samples():
    return [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["page-faults", "task-clock"], runs=6)]


def _machine(storage, name="box"):
    storage.register(pb.MachineInfo(name=name, machine_id="m" * 16, inventory_json="{}", agent_version="t"), 1)


def test_migrations_build_exactly_the_schema_the_code_uses(database_url):
    storage = Storage(database_url)
    with storage.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    storage.upgrade()  # idempotent


def test_a_batch_sent_twice_is_stored_once(database_url, real_samples):
    storage = Storage(database_url)
    _machine(storage)
    assert storage.ingest("box", real_samples[:4]) == (4, 0)
    assert storage.ingest("box", real_samples) == (2, 4)
    assert storage.ingest("box", real_samples + real_samples[:1]) == (0, 7)
    assert storage.count_samples() == 6
    assert sorted(storage.sample_uuids()) == sorted(s.uuid for s in real_samples)
    stored = [pb.Sample.FromString(p) for p in storage.sample_payloads("box")]
    assert [s.uuid for s in stored] == [s.uuid for s in real_samples]  # append order, payload intact
    assert stored[0] == real_samples[0]
    (series,) = storage.series(storage.machine_pk("box"))  # one benchmark, one job, one context
    assert series[4] == 6 and series[5] <= series[6]


def test_ingest_for_an_unregistered_machine_is_refused(database_url, real_samples):
    storage = Storage(database_url)
    with pytest.raises(StorageError, match="register first"):
        storage.ingest("ghost", real_samples[:1])
    assert storage.count_samples() == 0


def test_jobs_move_through_their_states(database_url):
    storage = Storage(database_url)
    job = pb.Job(commands=[pb.Command(name="t", argv=["/bin/true"])], repetitions=3)
    job_id = storage.create_job("box", job)
    assert [(state, j.job_id) for state, j in storage.open_jobs("box")] == [("queued", job_id)]
    assert storage.update_job(job_id, "box", "running")
    assert not storage.update_job(job_id, "other", "done")  # not that machine's job
    assert storage.update_job(job_id, "box", "done", "3 runs", 3)
    assert storage.open_jobs("box") == [] and storage.list_jobs("box")[0]["samples"] == 3
    with pytest.raises(StorageError, match="unknown job state"):
        storage.update_job(job_id, "box", "exploded")


def test_machines_are_upserted_with_their_counts(database_url, real_samples):
    storage = Storage(database_url)
    _machine(storage, "a")
    _machine(storage, "a")
    _machine(storage, "b")
    storage.ingest("a", real_samples[:2])
    rows = {r["name"]: r["samples"] for r in storage.list_machines()}
    assert rows == {"a": 2, "b": 0}


def test_unreachable_database_is_one_line():
    with pytest.raises(StorageError, match="cannot open the database"):
        Storage("postgresql+psycopg://nobody@/nowhere?host=/nonexistent&port=1")


def test_uuid_dedup_holds_across_storage_objects(database_url, real_samples):
    first, second = Storage(database_url), Storage(database_url)
    _machine(first)
    _machine(second)
    fresh = pb.Sample()
    fresh.CopyFrom(real_samples[0])
    fresh.uuid = str(uuid.uuid4())
    assert first.ingest("box", [fresh]) == (1, 0)
    assert second.ingest("box", [fresh]) == (0, 1)


def test_a_resent_job_never_moves_back_to_dispatched(database_url):
    storage = Storage(database_url)
    _machine(storage, "box")
    storage.watching("box", "r", True)
    deliveries = Deliveries(storage, "r", lease_s=60, deadline_s=60)
    job_id = storage.create_job("box", pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=1))
    assert deliveries.claim(job_id, "box")
    assert storage.list_jobs("box")[0]["state"] == "dispatched"
    storage.update_job(job_id, "box", "done")
    assert not deliveries.claim(job_id, "box")  # the agent reconnected and the job was offered again
    assert storage.list_jobs("box")[0]["state"] == "done"


def test_one_claim_wins_among_replicas(database_url):
    """Two replicas (two Storage objects on one database) offering the same queued jobs from threads at once,
    both holding a watch of the machine's agent (the older one stale): each job is claimed exactly once, by
    the replica holding the newest watch (server/delivery.py)."""
    from concurrent.futures import ThreadPoolExecutor

    replicas = [Storage(database_url), Storage(database_url)]
    _machine(replicas[0], "box")
    replicas[0].watching("box", "old", True)
    replicas[1].watching("box", "new", True)
    deliveries = [Deliveries(replicas[0], "old", 60, 60), Deliveries(replicas[1], "new", 60, 60),
                  Deliveries(replicas[0], "new", 60, 60)]  # two connections of the replica "new"
    job_ids = [replicas[0].create_job("box", pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=1))
               for _ in range(40)]
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(lambda args: (args[0].replica, args[0].claim(args[1], "box")),
                               [(d, job_id) for job_id in job_ids for d in deliveries for _ in range(2)]))
    assert sum(won for _, won in claims) == len(job_ids)
    assert {replica for replica, won in claims if won} == {"new"}
    assert {row["state"] for row in replicas[1].list_jobs("box")} == {"dispatched"}


def test_a_lapsed_lease_loses_the_job_and_a_heartbeat_keeps_it(database_url):
    storage = Storage(database_url)
    _machine(storage, "box")
    _machine(storage, "quiet")
    job = pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=1)
    kept, lost = storage.create_job("box", job), storage.create_job("quiet", job)
    storage.watching("box", "r", True)
    storage.watching("quiet", "r", True)
    deliveries = Deliveries(storage, "r", lease_s=5, deadline_s=5)
    now = time.time_ns()
    assert deliveries.claim(kept, "box", now) and deliveries.claim(lost, "quiet", now)
    deliveries.heard("quiet", now, [lost])  # its agent has it (delivered), then falls silent
    assert storage.update_job(kept, "box", "running")
    deliveries.heard("box", now + 4 * 10**9)  # renewed until now + 9 s
    assert deliveries.expire(now + 6 * 10**9) == ([], [(lost, "quiet")])
    assert deliveries.expire(now + 6 * 10**9) == ([], [])  # marked once
    rows = {row["id"]: row for row in storage.list_jobs()}
    assert rows[kept]["state"] == "running" and rows[lost]["state"] == "lost"
    assert "no heartbeat from its agent for 5 s" in rows[lost]["message"]
    assert deliveries.expire(now + 10 * 10**9) == ([], [(kept, "box")])
    # the agent comes back after all and reports: its report is the truth, and a running job holds a lease
    # again (without one it could never be lost if the agent vanished before its next heartbeat)
    assert storage.update_job(kept, "box", "running", now_ns=now + 11 * 10**9, lease_s=5)
    assert deliveries.expire(now + 17 * 10**9) == ([], [(kept, "box")])
    assert storage.update_job(kept, "box", "done", "1 runs", 1)
    row = storage.list_jobs("box")[0]
    assert row["state"] == "done" and row["lease_ns"] is None


def test_a_retried_job_keeps_the_runs_stored(database_url, real_samples):
    from perfctl.server.storage import JobReportError
    from perfctl.wire import job_run_uuid

    storage = Storage(database_url)
    _machine(storage, "box")
    job_id = storage.create_job("box", pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=5,
                                              warmups=1))
    with pytest.raises(JobReportError, match="only a lost job can be retried"):
        storage.retry_job(job_id)
    with pytest.raises(StorageError, match="no job"):
        storage.retry_job(str(uuid.uuid4()))
    stored = []
    for k in (0, 2, 3):  # runs 0, 2 and 3 reached the server before the agent vanished
        sample = pb.Sample()
        sample.CopyFrom(real_samples[k])
        sample.uuid, sample.job_id = job_run_uuid(job_id, k), job_id
        stored.append(sample)
    assert storage.ingest("box", stored) == (3, 0)
    now = time.time_ns()
    storage.watching("box", "r", True)
    deliveries = Deliveries(storage, "r", lease_s=1, deadline_s=1)
    assert deliveries.claim(job_id, "box", now)
    deliveries.heard("box", now, [job_id])
    assert deliveries.expire(now + 2 * 10**9) == ([], [(job_id, "box")])
    row = storage.retry_job(job_id)
    assert row["state"] == "queued" and row["samples"] == 3 and row["lease_ns"] is None
    assert list(pb.Job.FromString(bytes(row["spec"])).stored_runs) == [0, 2, 3]
    assert [(state, list(j.stored_runs)) for state, j in storage.open_jobs("box")] == [("queued", [0, 2, 3])]
    assert storage.queued_jobs({"box"})[0][1].job_id == job_id and storage.queued_jobs({"other"}) == []


def test_a_uuid_is_deduplicated_per_machine(database_url, real_samples):
    """Run uuids are predictable: another machine storing a uuid first must not suppress this machine's run."""
    storage = Storage(database_url)
    _machine(storage, "box")
    _machine(storage, "evil")
    assert storage.ingest("evil", real_samples[:3]) == (3, 0)
    assert storage.ingest("box", real_samples) == (6, 0)
    assert storage.ingest("box", real_samples[:2]) == (0, 2)  # its own re-send is still a duplicate
    assert len(list(storage.sample_payloads("box"))) == 6 and len(list(storage.sample_payloads("evil"))) == 3


def _database_at(database_url: str, revision: str):
    """An engine on a new database migrated up to ``revision`` only: what an older server left."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from perfctl.server import migrations

    engine = create_engine(database_url)
    config = Config()
    config.set_main_option("script_location", migrations.__path__[0])
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return engine


def test_upgrading_a_database_of_revision_0002_keeps_its_samples(database_url, real_samples):
    """Migration 0003 (unique uuid -> unique machine and uuid) on a database with samples in it."""
    from perfctl.server import schema

    engine = _database_at(database_url, "0002")
    with engine.begin() as connection:  # the 0002 tables have the columns these inserts name
        machine = connection.execute(schema.machines.insert().values(
            name="box", machine_id="m", inventory="{}", backends="[]", events="[]", agent_version="t",
            first_seen_ns=1, last_heard_ns=1)).inserted_primary_key[0]
        benchmark = connection.execute(schema.benchmarks.insert().values(
            name="true", executable_sha256="a", input_digest="b", argv="[]", executable="/bin/true")
        ).inserted_primary_key[0]
        connection.execute(schema.samples.insert().values(
            uuid=real_samples[0].uuid, machine=machine, benchmark=benchmark, job_id=None, run_index=0, warmup=False,
            outcome="ok", start_time_ns=1, received_ns=1, payload=real_samples[0].SerializeToString()))
    engine.dispose()
    storage = Storage(database_url)  # upgrades to head
    with storage.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    assert storage.sample_uuids() == [real_samples[0].uuid]
    assert [pb.Sample.FromString(p) for p in storage.sample_payloads("box")] == [real_samples[0]]
    _machine(storage, "other")
    assert storage.ingest("box", real_samples[:2]) == (1, 1)
    assert storage.ingest("other", real_samples[:2]) == (2, 0)
    storage.close()


def test_a_job_moves_only_forward(database_url):
    from perfctl.server.storage import JobReportError

    storage = Storage(database_url)
    job_id = storage.create_job("box", pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=2, warmups=1))
    assert storage.update_job(job_id, "box", "running", samples_count=1)
    with pytest.raises(JobReportError, match="4 samples reported, the job has 3 runs"):
        storage.update_job(job_id, "box", "running", samples_count=4)
    assert storage.update_job(job_id, "box", "done", samples_count=3)
    assert storage.update_job(job_id, "box", "done", samples_count=3)  # re-sent: nothing changes
    with pytest.raises(JobReportError, match="is done: it cannot become running"):
        storage.update_job(job_id, "box", "running")
    assert [(j["state"], j["samples"]) for j in storage.list_jobs("box")] == [("done", 3)]


def _aged(sample: pb.Sample, days: float, job_id: str | None = None) -> pb.Sample:
    """A copy of a real run that started ``days`` ago, under a uuid of its own."""
    copy = pb.Sample()
    copy.CopyFrom(sample)
    copy.uuid = str(uuid.uuid4())
    copy.start_time_ns = time.time_ns() - int(days * 86400e9)
    if job_id is not None:
        copy.job_id = job_id
    return copy


def test_prune_deletes_old_runs_in_batches_and_keeps_everything_else(database_url, real_samples, monkeypatch):
    from perfctl.server import storage as storage_module

    monkeypatch.setattr(storage_module, "PRUNE_BATCH", 4)  # several batches per series
    storage = Storage(database_url)
    for name in ("a", "b"):
        _machine(storage, name)
    job_id = storage.create_job("a", pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=1))
    old_a = [_aged(s, 100 + i) for i, s in enumerate(real_samples)] + [_aged(real_samples[0], 95, job_id)] * 1
    new_a = [_aged(s, 10) for s in real_samples[:3]]
    old_b = [_aged(s, 200) for s in real_samples]
    storage.ingest("a", old_a + new_a)
    storage.ingest("b", old_b)
    stored_long_ago(database_url, 365)  # their starts alone decide here: every run was received a year ago
    storage.add_audit("a", str(uuid.uuid4()), time.time_ns() - int(300 * 86400e9), "trusted", "{}")
    before_ns = time.time_ns() - int(90 * 86400e9)
    assert storage.prune(before_ns, dry_run=True) == {"a": 7, "b": 6}
    assert storage.count_samples() == 16  # a dry run changes nothing
    assert storage.prune(before_ns, machine="b") == {"b": 6}
    with pytest.raises(StorageError, match="no machine named 'ghost'"):
        storage.prune(before_ns, machine="ghost")
    assert storage.prune(before_ns) == {"a": 7}
    assert sorted(storage.sample_uuids()) == sorted(s.uuid for s in new_a)
    assert storage.prune(before_ns) == {}
    # each series starts at its oldest run left; a series with none left is gone
    (series_row,) = storage.series(storage.machine_pk("a"))
    assert series_row[5] == min(s.start_time_ns for s in new_a) and storage.series(storage.machine_pk("b")) == []
    # audits, jobs and machines stay
    assert len(storage.list_audits("a")) == 1 and storage.list_jobs("a")[0]["id"] == job_id
    assert {m["name"] for m in storage.list_machines()} == {"a", "b"}


def test_jobs_dispatched_before_leases_get_one_at_the_upgrade(database_url):
    """Migration 0006: a job dispatched under 0005 had no lease; it gets the default one from its last change,
    so a job whose agent never comes back becomes lost instead of staying dispatched forever."""
    from perfctl.server import schema

    engine = _database_at(database_url, "0005")
    spec = pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=1).SerializeToString()
    with engine.begin() as connection:
        for job_id, state in (("d" * 36, "dispatched"), ("q" * 36, "queued"), ("f" * 36, "done")):
            connection.execute(schema.jobs.insert().values(id=job_id, machine="box", spec=spec, state=state,
                                                           message="", samples=0, submitted_ns=1, updated_ns=5))
    engine.dispose()
    storage = Storage(database_url)
    leases = {row["id"][0]: row["lease_ns"] for row in storage.list_jobs()}
    assert leases == {"d": 5 + 300 * 10**9, "q": None, "f": None}
    # 0007: jobs that ended before failed runs were counted say nothing of them (not 0: they were not counted)
    assert [row["failed_runs"] for row in storage.list_jobs()] == [None] * 3
    # 0008: it was never confirmed by its agent (delivery was not acknowledged then): once the lease lapses it
    # is offered again, rather than lost (server/delivery.py)
    assert [row["delivered_ns"] for row in storage.list_jobs()] == [None] * 3
    assert Deliveries(storage, "r", 300, 30).expire(now_ns=5 + 301 * 10**9) == ([("d" * 36, "box")], [])
    storage.close()


def test_a_job_ending_counts_its_measured_runs_that_failed(database_url, real_samples):
    """jobs.failed_runs (migration 0007): counted when the job ends done or failed, from its runs stored,
    warm-ups and other jobs' runs of the same benchmark aside; absent while it is open."""
    from perfctl.wire import job_run_uuid

    storage = Storage(database_url)
    _machine(storage, "box")
    spec = pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=5, warmups=1)
    job_id, other = storage.create_job("box", spec), storage.create_job("box", spec)

    def run(job, k, outcome, warmup=False):
        sample = pb.Sample()
        sample.CopyFrom(real_samples[k])
        sample.uuid, sample.job_id, sample.outcome, sample.warmup = job_run_uuid(job, k), job, outcome, warmup
        return sample

    assert storage.ingest("box", [run(job_id, 0, "failed", warmup=True), run(job_id, 1, "ok"),
                                  run(job_id, 2, "failed"), run(job_id, 3, "timeout"), run(job_id, 4, "signal"),
                                  run(job_id, 5, "ok"), run(other, 0, "failed"), run(other, 1, "ok")]) == (8, 0)
    assert storage.update_job(job_id, "box", "running")
    assert storage.list_jobs(job_ids=[job_id])[0]["failed_runs"] is None
    assert storage.update_job(job_id, "box", "done", "6 runs", 6)
    assert storage.update_job(other, "box", "failed", "the agent stopped", 2)
    counted = {row["id"]: row["failed_runs"] for row in storage.list_jobs("box")}
    assert counted == {job_id: 3, other: 1}
    assert [row["id"] for row in storage.list_jobs(job_ids=[other, str(uuid.uuid4())])] == [other]
    storage.close()


def test_the_count_of_every_sample_costs_at_most_a_share_of_the_time(database_url, real_samples, monkeypatch):
    """perfctl_samples_stored reads a whole index: counted every 30 s on months of history, it took seconds
    of each replica's and the database's time every 30 s, and held up the job keeper's dispatch meanwhile. A
    count that took 0.4 s is not taken again for 40 s (1/COUNT_SHARE times as long), in its own task."""
    from perfctl.server import jobs
    from perfctl.server.metrics import SAMPLES_STORED

    storage = Storage(database_url)
    _machine(storage)
    storage.ingest("box", real_samples[:2])
    keeper = jobs.JobKeeper(storage, jobs.JobHub(), poll_s=0.05)
    counted, counts = storage.count_samples, []

    def slow_count():  # stands in for a count over months of history
        counts.append(time.monotonic())
        time.sleep(0.4)
        return counted()

    monkeypatch.setattr(storage, "count_samples", slow_count)
    ticks = []
    tick = keeper.tick

    async def counted_tick():
        ticks.append(time.monotonic())
        await tick()

    monkeypatch.setattr(keeper, "tick", counted_tick)

    async def keep_for(seconds):
        running = asyncio.create_task(keeper.run())
        await asyncio.sleep(seconds)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

    asyncio.run(keep_for(1.5))
    assert len(counts) == 1 and SAMPLES_STORED._value.get() == 2
    assert keeper._count_due - counts[0] >= 0.4 / jobs.COUNT_SHARE
    # the job keeper went on ticking while the count ran (its first 0.4 s)
    assert any(counts[0] < t < counts[0] + 0.4 for t in ticks), (counts, ticks)
    storage.close()
