"""The history's analysis across server replicas on one PostgreSQL (issue 32, server/history.py): each ended
job is analysed exactly once whichever replica it ended through, also when both replicas race for a queue of
many jobs ended at once, with the changes a single replica finds; and a replica killed (kill -9) inside its
analysis transaction leaves nothing half-written: no point, no series, the job still queued, which another
replica then analyses. Real `perfctl server` processes and a real PostgreSQL (conftest's ``postgres``)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

from fleet import Server, answered, free_port, wait_for
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError
from test_i32_server import analysed, ended_job, template_of

from perfctl.v1 import fleet_pb2 as pb


def _replica(fleet, url: str, key: str) -> Server:
    address = f"127.0.0.1:{free_port()}"
    fleet.agent_token("box")
    fleet.start_server(address, ["--db", url], key=key)
    server = Server(fleet, address)
    wait_for(lambda: answered(lambda: server.query.ListMachines(pb.ListMachinesRequest(), metadata=server.client_md,
                                                                timeout=5)), 60, f"{key} to answer")
    return server


def _analysed_in(log: str) -> list[str]:
    return re.findall(r"history: job ([0-9a-f-]{36}) on box analysed", log)


def test_two_replicas_analyse_each_ended_job_exactly_once(fleet, postgres, measured):
    url = postgres.new_database()
    one, two = _replica(fleet, url, "r1"), _replica(fleet, url, "r2")
    one.register("box")
    template, rng = template_of(measured), random.Random(5)
    levels = [1e6] * 10 + [1.2e6] * 10
    jobs = [ended_job(replica.query, replica.client_md, replica.agent, replica.agent_md("box"), template, "box",
                      level, {"branch": "main", "commit": f"c{i:02d}"}, rng=rng)
            for i, level in enumerate(levels) for replica in [(one, two)[i % 2]]]
    (series,) = analysed(one.query, one.client_md, len(levels))
    assert [p.job_id for p in series.points] == jobs
    by_one, by_two = _analysed_in(fleet.log("r1")), _analysed_in(fleet.log("r2"))
    assert sorted(by_one + by_two) == sorted(jobs)  # each once, by one replica or the other
    assert len(series.changes) == 1 and series.changes[0].after.commit == "c10"
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM history_queue")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM history_points")).scalar() == len(levels)
    engine.dispose()


def _changes(url: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(
                "SELECT c.id, s.line, c.after_job, c.state, c.fixed_by, c.regression, c.analysis "
                "FROM history_changes c JOIN history_series s ON s.id = c.series ORDER BY c.id"))]
    finally:
        engine.dispose()


def test_replicas_racing_for_jobs_ended_at_once_analyse_each_once_as_one_replica_would(fleet, postgres, measured):
    url = postgres.new_database()
    one, two = _replica(fleet, url, "r1"), _replica(fleet, url, "r2")
    one.register("box")
    template, rng = template_of(measured), random.Random(12)
    engine = create_engine(url)
    blocker = engine.connect()
    try:
        # the points table held: the replicas' keepers, each with a job taken, wait for it while every other
        # job ends and waits in the queue; released, both take from the one queue at once
        transaction = blocker.begin()
        blocker.execute(text("LOCK TABLE history_points IN ACCESS EXCLUSIVE MODE"))
        jobs = []
        for i in range(16):  # two series (branches), a step in each: main slower at c08, topic faster
            for branch, low, high in (("main", 1e6, 1.2e6), ("topic", 2e6, 1.6e6)):
                replica = (one, two)[len(jobs) % 2]
                jobs.append(ended_job(replica.query, replica.client_md, replica.agent, replica.agent_md("box"),
                                      template, "box", low if i < 8 else high,
                                      {"branch": branch, "commit": f"c{i:02d}"}, rng=rng))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM history_queue")).scalar() == len(jobs)
        transaction.commit()
    finally:
        blocker.close()
    wait_for(lambda: sum(len(s.points) for s in analysed(one.query, one.client_md, len(jobs))) == len(jobs), 120,
             "every job analysed")
    by_one, by_two = _analysed_in(fleet.log("r1")), _analysed_in(fleet.log("r2"))
    assert Counter(by_one + by_two) == Counter(jobs)  # each exactly once, by one replica or the other
    assert by_one and by_two, (len(by_one), len(by_two))  # both took part
    raced = _changes(url)
    assert sorted((json_line, json.loads(analysis)["after_side"]["commit"], regression)
                  for _, json_line, _, _, _, regression, analysis in raced) == \
        [('{"branch": "main"}', "c08", True), ('{"branch": "topic"}', "c08", False)]
    # one replica alone, on a copy of the database whose history is analysed again from the same queue
    fleet.kill("r1", 15)
    fleet.kill("r2", 15)
    engine.dispose()
    source = make_url(url)
    admin = create_engine(source.set(database="postgres"), isolation_level="AUTOCOMMIT")
    single = source.set(database="single").render_as_string(hide_password=False)

    def copied() -> bool:
        try:
            with admin.connect() as conn:
                conn.execute(text(f"CREATE DATABASE single TEMPLATE {source.database}"))
            return True
        except OperationalError:  # "being accessed by other users": a replica's connection not yet closed
            return False

    wait_for(copied, 60, "the copy (the replicas' connections closed)")
    admin.dispose()
    copy = create_engine(single)
    with copy.begin() as conn:
        for table in ("history_changes", "history_points", "history_series"):
            conn.execute(text(f"DELETE FROM {table}"))
        conn.execute(text("INSERT INTO history_queue (job_id, machine, queued_ns, attempts) "
                          "SELECT id, machine, updated_ns, 0 FROM jobs WHERE state = 'done'"))
    alone = _replica(fleet, single, "r3")
    wait_for(lambda: sum(len(s.points) for s in analysed(alone.query, alone.client_md, len(jobs))) == len(jobs), 120,
             "the single replica's analysis")
    assert Counter(_analysed_in(fleet.log("r3"))) == Counter(jobs)
    copy.dispose()
    assert [row[:6] for row in _changes(single)] == [row[:6] for row in raced]
    assert [_figures(row[6]) for row in _changes(single)] == [_figures(row[6]) for row in raced]


def _figures(analysis: str) -> dict:
    """A change's analysis but the times (detected when each replica got to it)."""
    return {k: v for k, v in json.loads(analysis).items() if k not in ("before_side", "after_side")}


def test_a_replica_killed_inside_its_analysis_leaves_nothing_and_another_does_it(fleet, postgres, measured):
    url = postgres.new_database()
    one = _replica(fleet, url, "r1")
    one.register("box")
    template = template_of(measured)
    engine = create_engine(url)
    blocker = engine.connect()
    try:
        # the test holds the changes table: the replica's analysis transaction, once it has taken the queue
        # entry and written the job's series and points, waits here for it
        transaction = blocker.begin()
        blocker.execute(text("LOCK TABLE history_changes IN ACCESS EXCLUSIVE MODE"))
        job_id = ended_job(one.query, one.client_md, one.agent, one.agent_md("box"), template, "box", 1e6,
                           {"branch": "main", "commit": "c0"})

        def waiting() -> list[int]:
            with engine.connect() as conn:
                return list(conn.execute(text(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND state = 'active' AND "
                    "query LIKE '%history_changes.series =%'")).scalars())

        (backend,) = wait_for(waiting, 60, "the replica's analysis to wait on the changes table")
        with engine.connect() as conn:  # inside its transaction: the series and point written, not committed
            assert conn.execute(text("SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = :pid"),
                                {"pid": backend}).scalar()
        fleet.kill("r1", 9)
        transaction.commit()  # the lock released: the killed replica's backend finds its client gone
        wait_for(lambda: not waiting() and not _alive(engine, backend), 60, "the killed replica's backend to end")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM history_points")).scalar() == 0
            assert conn.execute(text("SELECT count(*) FROM history_series")).scalar() == 0
            assert conn.execute(text("SELECT job_id FROM history_queue")).scalars().all() == [job_id]
    finally:
        blocker.close()
    two = _replica(fleet, url, "r2")
    (series,) = analysed(two.query, two.client_md, 1)
    assert [p.job_id for p in series.points] == [job_id] and series.points[0].commit == "c0"
    assert _analysed_in(fleet.log("r2")) == [job_id] and _analysed_in(fleet.log("r1")) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM history_queue")).scalar() == 0
    engine.dispose()


def _alive(engine, pid: int) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}).scalar() > 0
