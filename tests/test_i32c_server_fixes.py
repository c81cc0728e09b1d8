"""Review findings on issue 32's server history (server/history_update.py, history_store.py, history.py), each
tested on real SQLite and PostgreSQL (conftest's ``database_url``): series written directly where thousands of
jobs through a server would take minutes, the analysis the server's own."""

from __future__ import annotations

import json

import numpy as np
from sqlalchemy import insert, select

from perfctl.server import history_update
from perfctl.server.schema import history_changes, history_points, history_series
from perfctl.server.storage import Storage


def _add_series(conn, name: str) -> int:
    return conn.execute(insert(history_series).values(
        digest=name * 8, machine="box", benchmark=name, argv="[]", metric="task-clock", line="{}",
        unit="ns").returning(history_series.c.id)).scalar_one()


def _add_points(conn, pk: int, name: str, start: int, levels, rng) -> None:
    rows = []
    for i, level in enumerate(levels, start):
        runs = level * rng.lognormal(0, 0.01, 10)
        rows.append(dict(series=pk, job_id=f"{name}-{i:06d}", build=1, commit=f"c{i}", labels="{}",
                         time_ns=1_000_000 + i, runs=10, median=float(np.median(runs)), q1=0.0, q3=0.0,
                         min=0.0, max=0.0, run_values=runs.astype("<f8").tobytes()))
    conn.execute(insert(history_points), rows)


def _changes(conn, pk: int) -> list[tuple]:
    return [(row.id, json.loads(row.analysis)["index"], row.state) for row in conn.execute(
        select(history_changes).where(history_changes.c.series == pk).order_by(history_changes.c.time_ns))]


def test_a_settled_change_further_back_than_an_update_reads_is_kept_and_found_again_at_no_job(database_url):
    """A 10% step at point 300 of 400, settled; then 2,002 flat points, so that the change lies more than
    MAX_UPDATE_POINTS back: every later job's update analyses its latest points on their own and neither finds
    the old change again as a new one nor deletes it (before the fix, a "new" change with the old ratio came
    and went at every other job)."""
    rng = np.random.default_rng(7)
    storage = Storage(database_url)
    try:
        with storage.engine.begin() as conn:
            pk = _add_series(conn, "step")
            _add_points(conn, pk, "step", 0, np.where(np.arange(400) < 300, 1e6, 1.1e6), rng)
            history_update.reanalyse(conn, pk, 1)
            first = _changes(conn, pk)
        assert [(index, state) for _, index, state in first] == [(300, "new")]
        with storage.engine.begin() as conn:
            _add_points(conn, pk, "step", 400, np.full(history_update.MAX_UPDATE_POINTS + 2, 1.1e6), rng)
        total = 400 + history_update.MAX_UPDATE_POINTS + 2
        for job in range(5):
            with storage.engine.begin() as conn:
                _add_points(conn, pk, "step", total + job, [1.1e6], rng)
                history_update.reanalyse(conn, pk, 2 + job)
                assert _changes(conn, pk) == first, f"job {job}"
    finally:
        storage.close()


class PausingConnection:
    """A real connection that, once the analysis has read the series' stored changes, waits (at most
    ``wait_s``) for ``event``: where a triage on another connection would land between the analysis' read and
    its write-back, if nothing held it."""

    def __init__(self, conn, event, wait_s: float):
        self.conn, self.event, self.wait_s, self.paused = conn, event, wait_s, False

    def execute(self, statement, *args, **kwargs):
        result = self.conn.execute(statement, *args, **kwargs)
        if not self.paused and str(statement).lstrip().startswith("SELECT history_changes.id, history_changes.series"):
            self.paused = True
            result = result.freeze()()
            self.event.wait(self.wait_s)
        return result


def test_a_triage_during_an_analysis_of_its_series_is_not_undone_on_postgresql(postgres):
    """The analysis of a job (series locked, as add_points locks it) reads a change it no longer finds, untriaged;
    a user acknowledges it meanwhile on another connection. The triage waits for the series' lock, and then is
    either applied to the change (kept) or refused as no change: never reported done and then lost, as when the
    analysis deleted the change on its stale read."""
    import threading

    from perfctl.server import history_store as store

    rng = np.random.default_rng(3)
    storage = Storage(postgres.new_database())
    try:
        with storage.engine.begin() as conn:
            pk = _add_series(conn, "flat")
            _add_points(conn, pk, "flat", 0, np.full(200, 1e6), rng)
            conn.execute(insert(history_changes).values(  # a change the runs no longer confirm: deleted if untriaged
                id="abcdef012345", series=pk, machine="box", benchmark="flat", after_job="flat-000150",
                time_ns=1_000_150, state="new", triage="new", regression=True, note="", link="", fixed_by=None,
                analysis=json.dumps({"index": 150, "settled": False}), detected_ns=1, updated_ns=1))
        triaged, outcome = threading.Event(), {}

        def triage():
            try:
                with storage.engine.begin() as conn:
                    outcome["id"] = store.set_triage(conn, "abcdef", "acknowledged", "mine", None, 5, False)
            except store.ChangeError as err:
                outcome["refused"] = str(err)
            triaged.set()

        with storage.engine.begin() as conn:
            conn.execute(select(history_series.c.id).where(history_series.c.id == pk).with_for_update())
            user = threading.Thread(target=triage)
            user.start()
            history_update.reanalyse(PausingConnection(conn, triaged, 2.0), pk, 2)
            assert not triaged.is_set(), "the triage did not wait for the series' lock"
        user.join(30)
        with storage.engine.connect() as conn:
            row = conn.execute(select(history_changes).where(history_changes.c.id == "abcdef012345")).first()
        if "id" in outcome:  # done: then it stands
            assert row is not None and (row.triage, row.note) == ("acknowledged", "mine"), (outcome, row)
        else:
            assert row is None and "no change" in outcome["refused"]
    finally:
        storage.close()


def test_a_benchmark_whose_runs_read_0_has_no_point_and_the_jobs_other_benchmarks_do(served, measured, database_url):
    """A job of two benchmarks, one whose task-clock reads 0 in every run (a counter that counted nothing):
    its point is left out (changepoints refuses a level of 0), the other's is stored, and the job is analysed
    at its first attempt (before the fix, the whole job failed five times and was set aside)."""
    import time

    from fleet import Server, wait_for
    from sqlalchemy import text
    from test_i32_server import analysed, template_of

    from perfctl.v1 import fleet_pb2 as pb
    from perfctl.wire import job_run_uuid

    fleet, address, query, md = served
    server = Server(fleet, address)
    try:
        template, runs = template_of(measured), 6
        commands = [pb.Command(name="zero", argv=["/bin/true", "--zero"]),
                    pb.Command(name="work", argv=["/bin/true", "--work"])]
        job = pb.Job(commands=commands, repetitions=runs, labels={"branch": "main"})
        job_id = query.SubmitJob(pb.SubmitJobRequest(machines=["box"], job=job), metadata=md).job_ids[0]
        agent_md = server.agent_md("box")
        server.agent.ReportJob(pb.JobReport(job_id=job_id, state="running"), metadata=agent_md)
        batch = []
        for c, (command, level) in enumerate(zip(commands, (0.0, 1e6))):
            for k in range(runs):
                sample = pb.Sample()
                sample.CopyFrom(template)
                sample.uuid, sample.job_id = job_run_uuid(job_id, c * runs + k), job_id
                sample.run_index, sample.warmup = c * runs + k, False
                sample.benchmark.name, sample.benchmark.executable_sha256 = command.name, "0" * 64
                del sample.benchmark.argv[:]
                sample.benchmark.argv.extend(command.argv)
                sample.wall_ns, sample.start_time_ns = int(1e6 * (1 + 0.01 * k)), time.time_ns()
                for reading in sample.readings:
                    if reading.event == "task-clock":
                        reading.value = int(level * (1 + 0.01 * k))
                sample.labels.clear()
                sample.labels.update({"branch": "main"})
                batch.append(sample)
        acks = list(server.agent.StreamSamples(iter([pb.SampleBatch(sequence=1, samples=batch)]), metadata=agent_md))
        assert acks[-1].stored == 2 * runs, acks
        server.agent.ReportJob(pb.JobReport(job_id=job_id, state="done", samples=2 * runs), metadata=agent_md)
        (series,) = analysed(query, md, 1)
        assert (series.benchmark, series.metric, [p.job_id for p in series.points]) == ("work", "task-clock", [job_id])
        assert abs(series.points[0].median / 1.025e6 - 1) < 1e-3
        storage = Storage(database_url)
        try:
            def queue() -> tuple:
                with storage.engine.connect() as conn:
                    return (conn.execute(text("SELECT count(*) FROM history_queue")).scalar(),
                            conn.execute(text("SELECT count(*) FROM history_set_aside")).scalar(),
                            conn.execute(text("SELECT count(*) FROM history_points")).scalar())
            assert wait_for(lambda: queue() == (0, 0, 1), 30, "the job analysed, one point")
        finally:
            storage.close()
    finally:
        server.channel.close()


def test_a_failed_analysis_counts_no_attempt_on_an_entry_another_replica_took_meanwhile(database_url, monkeypatch):
    """A replica's analysis fails; after its rollback released the queue entry and before it counts the
    attempt, another replica takes the entry: it analysed the job (entry deleted), or failed it too (attempt
    counted). This replica then neither sets the job aside nor counts its attempt again."""
    from sqlalchemy import text

    from perfctl.server import history_store as store
    from perfctl.server.history import MAX_ATTEMPTS, HistoryKeeper

    def damaged(*args, **kwargs):
        raise ValueError("a damaged row")

    monkeypatch.setattr(store, "job_points", damaged)
    storage = Storage(database_url)
    try:
        keeper = HistoryKeeper(storage, retry_s=0.0)
        failed = keeper._failed
        for other, expected in [("DELETE FROM history_queue", ([], [])),  # the other replica analysed it
                                (f"UPDATE history_queue SET attempts = {MAX_ATTEMPTS}", ([("j", MAX_ATTEMPTS)], [])),
                                ("SELECT 1", ([], [("j", MAX_ATTEMPTS)]))]:  # nobody: set aside, as before
            with storage.engine.begin() as conn:
                conn.execute(text("DELETE FROM history_queue"))
                conn.execute(text("DELETE FROM history_set_aside"))
                conn.execute(text(f"INSERT INTO history_queue (job_id, machine, queued_ns, attempts) VALUES "
                                  f"('j', 'box', 0, {MAX_ATTEMPTS - 1})"))

            def meanwhile(conn, entry, err, other=other):
                with storage.engine.begin() as replica:  # the other replica, between rollback and count
                    replica.execute(text(other))
                failed(conn, entry, err)

            monkeypatch.setattr(keeper, "_failed", meanwhile)
            assert keeper.analyse_next() == "j"
            with storage.engine.connect() as conn:
                queued = [tuple(r) for r in conn.execute(text("SELECT job_id, attempts FROM history_queue"))]
                aside = [tuple(r) for r in conn.execute(text("SELECT job_id, attempts FROM history_set_aside"))]
            assert (queued, aside) == expected, other
    finally:
        storage.close()


def test_a_series_first_part_carries_its_newest_changes_and_counts_the_others(database_url, monkeypatch):
    """GetHistory's first part of a series reads at most MAX_SERIES_CHANGES of its stored changes, the newest,
    oldest first, and says in changes_capped how many earlier ones it left out (before: all of them, unbounded)."""
    from perfctl.server import history_service
    from perfctl.v1 import fleet_pb2 as pb

    rng = np.random.default_rng(5)
    storage = Storage(database_url)
    try:
        with storage.engine.begin() as conn:
            pk = _add_series(conn, "many")
            _add_points(conn, pk, "many", 0, np.full(20, 1e6), rng)
            one = {"job": "many-000000", "commit": "c0", "time_ns": 1, "points": 3, "runs": 30, "median": 1e6}
            side = {"before_side": one, "after_side": one, "ratio": 1.0, "low": 0.99, "high": 1.01,
                    "confidence": 0.99, "margin": 0.01, "verdict": "same", "finding": "", "p_value": 0.5}
            for i in range(5):
                conn.execute(insert(history_changes).values(
                    id=f"{i:012x}", series=pk, machine="box", benchmark="many", after_job=f"many-{3 * i:06d}",
                    time_ns=1_000_000 + 3 * i, state="new", triage="new", regression=False, note="", link="",
                    fixed_by=None, analysis=json.dumps({**side, "index": 3 * i}), detected_ns=1, updated_ns=1))
        request = pb.GetHistoryRequest(machine="box")
        monkeypatch.setattr(history_service, "MAX_SERIES_CHANGES", 3)
        (part,), token = history_service.history_page(storage, request, 10, None)
        assert [c.id for c in part.changes] == ["000000000002", "000000000003", "000000000004"]
        assert part.changes_capped == 2 and len(part.points) == 10 and token
        (rest,), _ = history_service.history_page(storage, request, 10, (pk, 10))  # later parts: no changes
        assert (len(rest.changes), rest.changes_capped, len(rest.points)) == (0, 0, 10)
        monkeypatch.setattr(history_service, "MAX_SERIES_CHANGES", 5)
        (part,), _ = history_service.history_page(storage, request, 10, None)
        assert (len(part.changes), part.changes_capped) == (5, 0)
    finally:
        storage.close()


def test_the_client_and_the_report_say_how_many_stored_changes_a_server_left_out(served, database_url):
    """A series with 1,001 stored changes, written into a real server's database: perfctl/client.py ``history``
    gets the newest 1,000 and changes_capped 1, and the report's note on the series says so."""
    from perfctl import client
    from perfctl.client import Connection
    from perfctl.report.history import order_note

    fleet, address, _, _ = served
    rng = np.random.default_rng(1)
    one = {"job": "many-000000", "commit": "c0", "time_ns": 1, "points": 3, "runs": 30, "median": 1e6}
    analysis = {"before_side": one, "after_side": one, "ratio": 1.0, "low": 0.99, "high": 1.01, "confidence": 0.99,
                "margin": 0.01, "verdict": "same", "finding": "", "p_value": 0.5}
    storage = Storage(database_url)
    try:
        with storage.engine.begin() as conn:
            pk = _add_series(conn, "many")
            _add_points(conn, pk, "many", 0, np.full(10, 1e6), rng)
            conn.execute(insert(history_changes), [dict(
                id=f"{i:012x}", series=pk, machine="box", benchmark="many", after_job="many-000005",
                time_ns=1_000_000 + i, state="new", triage="new", regression=False, note="", link="",
                fixed_by=None, analysis=json.dumps({**analysis, "index": 5}), detected_ns=1, updated_ns=1)
                for i in range(1001)])
    finally:
        storage.close()
    found = client.history(Connection("history", server=address, token_file=fleet.client_token), "box", {})
    (series,) = found["series"]
    assert series["changes_capped"] == 1 and len(series["changes"]) == 1000
    assert series["changes"][0]["id"] == f"{1:012x}" and series["changes"][-1]["id"] == f"{1000:012x}"
    assert order_note(series, str) == ("The earliest 1 stored change left out: the server gives a series' newest "
                                       "ones (perfctl changes lists them all).")
