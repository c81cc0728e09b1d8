"""The performance history on a real server (issue 32, docs/history.md "On a fleet"): a job ended through the
real AgentService becomes one point per series (machine x benchmark name and argv x metric x line), each
commit's build a new executable digest and still the same series; the changes found keep their ids and their
triage while later jobs arrive; a regression brought back is fixed; prune deletes runs and keeps points and
changes; the RPCs validate what they take and page what they answer. SQLite and PostgreSQL (conftest's
``served``).

The change points themselves are analysis/changepoints.py's (ALGO): these tests use steps of 10-30% on 1% noise,
which any sound detector finds at the step; `ended_job` is shared by tests/test_i32_server_*.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import grpc
import pytest
from fleet import Server, raised, wait_for

from perfctl.v1 import fleet_pb2 as pb
from perfctl.wire import job_run_uuid

RUNS = 12


def ended_job(query, client_md, agent, agent_md, template: pb.Sample, machine: str, level: float,
              labels: dict, build: str = "0", rng: random.Random | None = None, runs: int = RUNS) -> str:
    """A job submitted through QueryService and ended through AgentService as an agent does: its runs'
    task-clock (and wall time) about ``level`` (1% noise), each sample labelled ``labels``, the executable's
    digest ``build`` (each commit a new build). Its id."""
    rng = rng or random.Random(0)
    job = pb.Job(commands=[pb.Command(name="work", argv=["/bin/true", "--n"])], repetitions=runs, labels=labels)
    job_id = query.SubmitJob(pb.SubmitJobRequest(machines=[machine], job=job), metadata=client_md).job_ids[0]
    agent.ReportJob(pb.JobReport(job_id=job_id, state="running"), metadata=agent_md)
    batch = []
    for k in range(runs):
        sample = pb.Sample()
        sample.CopyFrom(template)
        sample.uuid, sample.job_id, sample.run_index, sample.warmup = job_run_uuid(job_id, k), job_id, k, False
        sample.benchmark.name, sample.benchmark.executable_sha256 = "work", (build * 64)[:64]
        del sample.benchmark.argv[:]
        sample.benchmark.argv.extend(["/bin/true", "--n"])
        value = level * rng.lognormvariate(0, 0.01)
        sample.wall_ns = int(value)
        sample.start_time_ns = time.time_ns()
        for reading in sample.readings:
            if reading.event == "task-clock":
                reading.value = int(value)
        sample.labels.clear()
        sample.labels.update(labels)
        batch.append(sample)
    acks = list(agent.StreamSamples(iter([pb.SampleBatch(sequence=1, samples=batch)]), metadata=agent_md))
    assert acks[-1].stored == runs, acks
    agent.ReportJob(pb.JobReport(job_id=job_id, state="done", samples=runs), metadata=agent_md)
    return job_id


def template_of(measured) -> pb.Sample:
    sample = next(s for s in measured if not s.warmup)
    assert any(r.event == "task-clock" and r.status == "ok" for r in sample.readings)
    return sample


def changes(query, md, **filters) -> list[pb.Change]:
    found, request = [], pb.ListChangesRequest(**filters)
    while True:
        answer = query.ListChanges(request, metadata=md)
        found += answer.changes
        if not answer.next_page_token:
            return found
        request.page_token = answer.next_page_token


def history(query, md, machine="box", **fields) -> list[pb.HistorySeries]:
    return list(query.GetHistory(pb.GetHistoryRequest(machine=machine, **fields), metadata=md).series)


def queue_empty(url: str) -> bool:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM history_queue")).scalar() == 0
    finally:
        engine.dispose()


def analysed(query, md, jobs: int, machine="box") -> list[pb.HistorySeries]:
    """The machine's history once it holds ``jobs`` points in all."""
    return wait_for(lambda: (found := history(query, md, machine)) and
                    sum(len(s.points) for s in found) >= jobs and found, 60, f"{jobs} points analysed")


@pytest.fixture
def box(served, measured):
    fleet, address, query, md = served
    server = Server(fleet, address)
    yield server, query, md, template_of(measured)
    server.channel.close()


def test_an_ended_job_is_one_point_of_its_series_whatever_its_build(box):
    server, query, md, template = box
    rng = random.Random(1)
    levels = [1e6] * 8 + [1.2e6] * 8
    jobs = [ended_job(query, md, server.agent, server.agent_md("box"), template, "box", level,
                      {"branch": "main", "commit": f"c{i:02d}"}, build=f"{i % 16:x}", rng=rng)
            for i, level in enumerate(levels)]
    ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 5e6,
              {"branch": "topic", "commit": "t0"}, rng=rng)
    found = analysed(query, md, len(levels) + 1)
    assert sorted(dict(s.line)["branch"] for s in found) == ["main", "topic"]
    main = next(s for s in found if dict(s.line) == {"branch": "main"})
    assert (main.benchmark, list(main.argv), main.metric) == ("work", ["/bin/true", "--n"], "task-clock")
    assert [p.job_id for p in main.points] == jobs  # ordered by the server's time of each job's end
    assert [p.commit for p in main.points] == [f"c{i:02d}" for i in range(len(levels))]
    assert all(p.runs == RUNS and p.min <= p.q1 <= p.median <= p.q3 <= p.max for p in main.points)
    assert abs(main.points[0].median / 1e6 - 1) < 0.02 and abs(main.points[-1].median / 1.2e6 - 1) < 0.02
    # the step of +20% at c08 (ALGO's detection): slower after, A/B about 1/1.2
    (change,) = main.changes
    assert (change.after.commit, change.before.commit, change.regression) == ("c08", "c07", True)
    assert abs(change.ratio - 1 / 1.2) < 0.02 and change.state == "new"
    assert (change.before.points, change.after.points, change.before.runs) == (8, 8, 8 * RUNS)


def _connection(fleet, address: str):
    from perfctl.client import Connection

    return Connection("changes", server=address, token_file=fleet.client_token)


def test_triage_and_ids_survive_new_jobs_and_a_regression_brought_back_is_fixed(box, served):
    from perfctl import client

    server, query, md, template = box
    connection = _connection(served[0], server.address)
    rng = random.Random(2)

    def run(levels, start):
        for i, level in enumerate(levels):
            ended_job(query, md, server.agent, server.agent_md("box"), template, "box", level,
                      {"branch": "main", "commit": f"c{start + i:02d}"}, rng=rng)
        return analysed(query, md, start + len(levels))

    run([1e6] * 8 + [1.3e6] * 8, 0)
    (first,) = list(client.list_changes(connection, machine="box"))
    assert (first["state"], first["regression"], first["after"]["commit"]) == ("new", True, "c08")
    short = first["id"][:6]  # a unique prefix names it
    acked = client.update_change(connection, short, state="acknowledged", note="known: the new allocator",
                                 link="https://bugs.example/123")
    assert (acked["id"], acked["state"], acked["note"], acked["link"]) == \
        (first["id"], "acknowledged", "known: the new allocator", "https://bugs.example/123")
    run([1.3e6] * 8, 16)  # later jobs at the same level: the same change, its id and triage kept
    (again,) = list(client.list_changes(connection, machine="box"))
    assert {k: again[k] for k in ("id", "state", "note", "link", "detected_ns")} == \
        {k: acked[k] for k in ("id", "state", "note", "link", "detected_ns")}
    assert again["after"]["points"] == 16
    run([1e6] * 8, 24)  # the level comes back: the regression is fixed by the change that brought it back
    listed = {c["id"]: c for c in client.list_changes(connection, machine="box")}
    assert len(listed) == 2 and listed[first["id"]]["state"] == "fixed"
    (back,) = (c for c in listed.values() if c["id"] != first["id"])
    assert listed[first["id"]]["fixed_by"] == back["id"] and not back["regression"]
    assert back["before"]["commit"] == "c23" and back["after"]["commit"] == "c24"
    assert [c["id"] for c in client.list_changes(connection, states=["fixed"])] == [first["id"]]
    assert [c["id"] for c in client.list_changes(connection, states=["new"])] == [back["id"]]
    # newest first; since_ns after the first change's time leaves only the second
    assert list(listed) == [back["id"], first["id"]]
    assert [c["id"] for c in client.list_changes(connection, since_ns=back["after"]["time_ns"])] == [back["id"]]
    whole = client.history(connection, "box", {"branch": "main"}, benchmark="work", metric="task-clock")
    (series,) = whole["series"]
    assert len(series["points"]) == 32 and [c["id"] for c in series["changes"]] == [first["id"], back["id"]]
    assert client.history(connection, "box", {"branch": "other"})["series"] == []
    # a false positive stays one, whatever fixes it
    assert client.update_change(connection, first["id"], state="false positive")["state"] == "false positive"
    assert client.update_change(connection, first["id"], state="new")["state"] == "fixed"


def test_update_change_refuses_what_it_cannot_take(box, served, database_url):
    from sqlalchemy import create_engine, text

    server, query, md, template = box
    engine = create_engine(database_url)
    with engine.begin() as conn:  # two changes whose ids share their first 6 characters
        conn.execute(text("INSERT INTO history_series (digest, machine, benchmark, argv, metric, line, unit) "
                          "VALUES ('d', 'box', 'work', '[]', 'task-clock', '{}', 'ns')"))
        analysis = json.dumps({"before_side": {"job": "j0", "commit": None, "time_ns": 1, "points": 1, "runs": 1,
                                               "median": 1.0},
                               "after_side": {"job": "j1", "commit": None, "time_ns": 2, "points": 1, "runs": 1,
                                              "median": 2.0},
                               "ratio": 0.5, "low": 0.4, "high": 0.6, "confidence": 0.95, "margin": 0.01,
                               "verdict": "relevant difference", "finding": "after slower", "p_value": 0.001})
        for change_id in ("abcdef000001", "abcdef000002"):
            conn.execute(text("INSERT INTO history_changes (id, series, machine, benchmark, after_job, time_ns, state, "
                              "triage, regression, note, link, analysis, detected_ns, updated_ns) VALUES (:id, "
                              "(SELECT id FROM history_series), 'box', 'work', 'j1', 2, 'new', 'new', :r, '', '', "
                              ":a, 1, 1)"), {"id": change_id, "a": analysis, "r": True})
    engine.dispose()

    def update(**fields):
        return query.UpdateChange(pb.UpdateChangeRequest(**fields), metadata=md)

    for fields, code, words in (
            (dict(change_id="abcdef"), grpc.StatusCode.INVALID_ARGUMENT, "'abcdef' is ambiguous"),
            (dict(change_id="ffff0000"), grpc.StatusCode.NOT_FOUND, "no change 'ffff0000'"),
            (dict(change_id="abc"), grpc.StatusCode.INVALID_ARGUMENT, "4 to 16 hex digits"),
            (dict(change_id="x" * (1 << 20)), grpc.StatusCode.INVALID_ARGUMENT, "4 to 16 hex digits"),
            (dict(change_id="abcdef000001", state="fixed"), grpc.StatusCode.INVALID_ARGUMENT, "not one of new"),
            (dict(change_id="abcdef000001", note="n" * 4097), grpc.StatusCode.INVALID_ARGUMENT,
             "note longer than 4096"),
            (dict(change_id="abcdef000001", note="\x1b[2J"), grpc.StatusCode.INVALID_ARGUMENT, "control"),
            (dict(change_id="abcdef000001", link="https://x/\n"), grpc.StatusCode.INVALID_ARGUMENT, "link"),
            (dict(change_id="abcdef000001", link="l" * 2049), grpc.StatusCode.INVALID_ARGUMENT, "link longer")):
        error = raised(lambda fields=fields: update(**fields))
        assert error.code() == code and words in error.details(), (fields.get("change_id", "")[:20], error.details())
        assert len(error.details()) < 200
    changed = update(change_id="ABCDEF000002", state="acknowledged", note="tab\tand\nnewline").change
    assert (changed.id, changed.state, changed.note) == ("abcdef000002", "acknowledged", "tab\tand\nnewline")
    assert (changed.before.median, changed.after.median, changed.regression) == (1.0, 2.0, True)
    assert not changed.before.HasField("commit")


def test_list_changes_and_history_are_validated_and_paged(box):
    server, query, md, template = box
    rng = random.Random(3)
    levels = [1e6] * 8 + [1.3e6] * 8 + [1.6e6] * 8 + [2e6] * 8  # a staircase: three changes
    for i, level in enumerate(levels):
        ended_job(query, md, server.agent, server.agent_md("box"), template, "box", level,
                  {"commit": f"c{i}", "build": str(100 + i)}, rng=rng)
    (series,) = analysed(query, md, len(levels))
    assert dict(series.line) == {} and len(series.changes) == 3
    one_by_one = changes(query, md, page_size=1)
    assert [c.id for c in one_by_one] == [c.id for c in reversed(series.changes)]  # newest first, in 3 pages
    assert query.ListChanges(pb.ListChangesRequest(page_size=1), metadata=md).next_page_token
    for order_by in ("", "build"):  # in the server's time, and in the (here the same) order of a label
        parts, request = [], pb.GetHistoryRequest(machine="box", page_size=5, order_by=order_by)
        while True:  # 32 points, 5 a page: 7 pages of one series, its changes with the first
            answer = query.GetHistory(request, metadata=md)
            parts += answer.series
            if not answer.next_page_token:
                break
            request.page_token = answer.next_page_token
        assert [len(p.points) for p in parts] == [5, 5, 5, 5, 5, 5, 2]
        assert [len(p.changes) for p in parts] == [3, 0, 0, 0, 0, 0, 0]
        assert [p.commit for part in parts for p in part.points] == [f"c{i}" for i in range(32)]
        assert [p.order for part in parts for p in part.points] == ([str(100 + i) for i in range(32)] if order_by
                                                                     else [""] * 32)
        assert {(p.ordered, c.on_request) for p in parts for c in p.changes} == {(bool(order_by),) * 2}
        assert [(c.after.commit, round(c.ratio, 2)) for c in parts[0].changes] == \
            [(c.after.commit, round(c.ratio, 2)) for c in series.changes]
    for request, words in (
            (pb.ListChangesRequest(states=["open"]), "states: each one of new"),
            (pb.ListChangesRequest(machine="m\x1b"), "machine has control"),
            (pb.ListChangesRequest(benchmark="b" * 300), "benchmark longer than 256"),
            (pb.ListChangesRequest(since_ns=-1), "since_ns: negative"),
            (pb.ListChangesRequest(page_token="bm90IGEgdG9rZW4="), "page_token: not one this server gave")):
        error = raised(lambda request=request: query.ListChanges(request, metadata=md))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and words in error.details(), error.details()
    for request, words in (
            (pb.GetHistoryRequest(), "machine: required"),
            (pb.GetHistoryRequest(machine="box", labels={"bad key": "x"}), "labels"),
            (pb.GetHistoryRequest(machine="box", metric="x" * 200), "metric longer than 128"),
            (pb.GetHistoryRequest(machine="box", page_token="e30="), "page_token")):
        error = raised(lambda request=request: query.GetHistory(request, metadata=md))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and words in error.details(), error.details()
    error = raised(lambda: query.ListChanges(pb.ListChangesRequest(), metadata=(("authorization", "Bearer x"),)))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_prune_deletes_the_runs_and_keeps_the_points_and_changes(box, served, database_url):
    from fleet import server_database_args

    server, query, md, template = box
    rng = random.Random(4)
    for i, level in enumerate([1e6] * 8 + [1.25e6] * 8):
        ended_job(query, md, server.agent, server.agent_md("box"), template, "box", level,
                  {"branch": "main", "commit": f"c{i}"}, rng=rng)
    (before,) = analysed(query, md, 16)
    assert len(before.changes) == 1
    time.sleep(1.1)
    pruned = subprocess.run([sys.executable, "-m", "perfctl", "prune", "--older-than", "1s",
                             *server_database_args(database_url)], capture_output=True, text=True, timeout=120)
    assert pruned.returncode == 0, pruned.stderr
    assert not list(query.GetSamples(pb.GetSamplesRequest(machine="box"), metadata=md))
    (after,) = history(query, md)
    assert after.points == before.points and after.changes == before.changes
    # a later job is analysed on top of a history whose runs are gone: the change is confirmed again on the
    # run values its points keep, its id and its segment before unchanged, its segment after one point longer
    ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 1.25e6,
              {"branch": "main", "commit": "c16"}, rng=rng)
    (grown,) = analysed(query, md, 17)
    (change,) = grown.changes
    first = before.changes[0]
    assert change.id == first.id and (change.before.job_id, change.before.commit, change.before.points) == \
        (first.before.job_id, first.before.commit, first.before.points)
    assert change.after.points == 9 and change.after.runs > first.after.runs
    assert abs(change.ratio / before.changes[0].ratio - 1) < 0.01


def test_open_regressions_are_exported_until_dismissed(fleet, measured):
    from fleet import free_port, scrape, start_server

    port = free_port()
    server = start_server(fleet, extra=["--metrics", f"127.0.0.1:{port}"])
    server.register("box-a")
    template, rng = template_of(measured), random.Random(6)
    for i, level in enumerate([1e6] * 8 + [1.3e6] * 8):
        ended_job(server.query, server.client_md, server.agent, server.agent_md("box-a"), template, "box-a", level,
                  {"branch": "main", "commit": f"c{i}"}, rng=rng)
    (series,) = analysed(server.query, server.client_md, 16, machine="box-a")
    line = 'perfctl_open_regressions{benchmark="work",machine="box-a"}'
    wait_for(lambda: f"{line} 1.0" in scrape(port), 30, "the open regression exported")
    assert "perfctl_history_queued 0.0" in scrape(port)
    change = series.changes[0]
    server.query.UpdateChange(pb.UpdateChangeRequest(change_id=change.id, state="acknowledged"),
                              metadata=server.client_md)
    assert line not in scrape(port)  # someone owns it: closed (refreshed by the call, on the replica that took it)
    server.query.UpdateChange(pb.UpdateChangeRequest(change_id=change.id, state="new"), metadata=server.client_md)
    assert f"{line} 1.0" in scrape(port)  # reopened
    server.query.UpdateChange(pb.UpdateChangeRequest(change_id=change.id, state="false positive"),
                              metadata=server.client_md)
    assert line not in scrape(port)
    server.channel.close()


def test_history_line_names_the_labels_of_a_line_or_none(fleet, measured):
    from conftest import perfctl
    from fleet import start_server

    refused = perfctl("server", "--history-line", "bad key", "--data-dir", str(fleet.dir / "nowhere"))
    assert refused.returncode == 2 and "--history-line" in refused.stderr and "'bad key'" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) <= 2, refused.stderr  # usage and the one error line
    server = start_server(fleet, extra=["--history-line", "none"])
    server.register("box-a")
    template = template_of(measured)
    for branch in ("main", "topic"):
        ended_job(server.query, server.client_md, server.agent, server.agent_md("box-a"), template, "box-a", 1e6,
                  {"branch": branch})
    (series,) = analysed(server.query, server.client_md, 2, machine="box-a")
    assert dict(series.line) == {} and len(series.points) == 2
    error = raised(lambda: server.query.ListChanges(pb.ListChangesRequest(machine="a\x00b"),
                                                    metadata=server.client_md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in error.details()
    server.channel.close()


def test_a_change_no_longer_found_goes_unless_a_user_triaged_it(box, database_url):
    from sqlalchemy import create_engine, text

    server, query, md, template = box
    rng = random.Random(7)
    for i in range(10):  # one level: no change is there to be found
        ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 1e6, {"commit": f"c{i}"}, rng=rng)
    (series,) = analysed(query, md, 10)
    assert not series.changes
    engine = create_engine(database_url)
    analysis = json.dumps({"before_side": {"job": series.points[4].job_id, "commit": "c4", "time_ns": 1, "points": 5,
                                           "runs": 60, "median": 1e6},
                           "after_side": {"job": series.points[5].job_id, "commit": "c5", "time_ns": 2, "points": 5,
                                          "runs": 60, "median": 1.1e6},
                           "ratio": 0.9, "low": 0.89, "high": 0.91, "confidence": 0.95, "margin": 0.01,
                           "verdict": "relevant difference", "finding": "after slower", "p_value": 0.001, "index": 99})
    with engine.begin() as conn:  # two changes stored as if found before: one a user acknowledged, one not
        for change_id, triage, note in (("aaaa00000001", "acknowledged", "seen"), ("bbbb00000002", "new", "")):
            conn.execute(text("INSERT INTO history_changes (id, series, machine, benchmark, after_job, time_ns, state, "
                              "triage, regression, note, link, analysis, detected_ns, updated_ns) VALUES (:id, "
                              "(SELECT id FROM history_series), 'box', 'work', :job, 2, :t, :t, :r, :n, '', :a, 1, 1)"),
                         {"id": change_id, "a": analysis, "r": True, "t": triage, "n": note,
                          "job": series.points[5].job_id})
    engine.dispose()
    ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 1e6, {"commit": "c10"}, rng=rng)
    (grown,) = analysed(query, md, 11)
    assert [(c.id, c.state, c.note) for c in grown.changes] == [("aaaa00000001", "acknowledged", "seen")]


def test_order_by_a_label_orders_and_analyses_the_series_on_request(box, database_url, monkeypatch):
    from sqlalchemy import create_engine

    from perfctl.server import history_ordered

    server, query, md, template = box
    rng = random.Random(8)
    # builds 0-15, 20% slower from build 8, ended interleaved (0, 8, 1, 9, ...): in the server's time the
    # level alternates, in build order it steps once, at build 8
    order = [b for pair in zip(range(8), range(8, 16)) for b in pair]
    for build in order:
        ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 1.2e6 if build >= 8 else 1e6,
                  {"commit": f"c{build:02d}", "build": f"{build}.0" if build == 3 else str(build)}, rng=rng)
    ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 1e6, {"commit": "nobuild"}, rng=rng)
    (stored,) = analysed(query, md, 17)
    assert [p.commit for p in stored.points][:4] == ["c00", "c08", "c01", "c09"]
    assert not stored.ordered and all(c.id and not c.on_request for c in stored.changes)
    (series,) = history(query, md, order_by="build")
    assert series.ordered and (series.points_without_order, series.points_capped) == (1, 0)
    assert [p.commit for p in series.points] == [f"c{b:02d}" for b in range(16)]  # numeric: "3.0" is 3
    assert series.points[3].order == "3.0" and series.points[10].order == "10"  # not "10" before "2"
    (change,) = series.changes  # found on request in build order: no id, no state, no triage
    assert change.on_request and (change.id, change.state, change.note, change.link) == ("", "", "", "")
    assert not change.HasField("fixed_by") and change.detected_ns == change.updated_ns > 0
    assert (change.before.commit, change.after.commit, change.regression) == ("c07", "c08", True)
    assert abs(change.ratio - 1 / 1.2) < 0.02 and (change.before.points, change.after.points) == (8, 8)
    assert change.before.runs == 8 * RUNS
    # the cap: only the latest ended points are read and analysed, and the answer says how many were not
    monkeypatch.setattr(history_ordered, "MAX_ORDERED_POINTS", 6)
    engine = create_engine(database_url)
    with engine.connect() as conn:
        head = {"id": series.series_id, "benchmark": "work"}
        capped = history_ordered.ordered_points(conn, head, "build", values=False)
    engine.dispose()
    # the last 6 ended: 14, 7, 15 and "nobuild" (without), before them 6, 13 (ended 6, 14, 7, 15, nobuild)
    assert (capped.capped, capped.without) == (11, 1)
    assert [row["commit"] for row in capped.rows] == ["c06", "c07", "c13", "c14", "c15"]
    # a value that is not a number: left out and counted with those without the label, so that one mislabelled
    # job of one benchmark does not refuse the machine's every series (it did: INVALID_ARGUMENT for all)
    ended_job(query, md, server.agent, server.agent_md("box"), template, "box", 1e6,
              {"commit": "cx", "build": "7b"}, rng=rng)
    analysed(query, md, 18)
    (series,) = history(query, md, order_by="build")
    assert series.ordered and (series.points_without_order, series.points_capped) == (2, 0)
    assert "cx" not in [point.commit for point in series.points]
