"""A history analysis that fails (issue 32, server/history.py): the job is tried again, the series' other
jobs go on meanwhile, and after MAX_ATTEMPTS failures it is set aside with its error, logged once, counted by
perfctl_history_set_aside, and not tried again. The failure is a real one: a stored context (the job's labels)
that is not JSON, as a damaged row would be (a job whose runs read 0 no longer fails: that point alone is left
out, tests/test_i32c_server_fixes.py). A real server on SQLite and PostgreSQL ends and analyses the jobs; then
this process's keeper analyses the damaged job again, with no wait between attempts (the server's would wait
RETRY_S)."""

from __future__ import annotations

import logging
import random

from fleet import Server
from prometheus_client import REGISTRY
from sqlalchemy import text
from test_i32_server import analysed, ended_job, template_of

from perfctl.server.history import MAX_ATTEMPTS, HistoryKeeper, open_regressions_gauge
from perfctl.server.storage import Storage


def test_a_failing_analysis_is_set_aside_after_its_attempts_and_its_series_goes_on(served, measured, database_url,
                                                                                    caplog):
    fleet, address, query, md = served
    server = Server(fleet, address)
    template, rng = template_of(measured), random.Random(9)
    jobs = []
    for i, level in enumerate([1e6] * 4 + [0.0] + [1e6] * 4):
        jobs.append(ended_job(query, md, server.agent, server.agent_md("box"), template, "box", level,
                              {"branch": "main", "commit": f"c{i}"}, rng=rng))
    poisoned, later = jobs[3], jobs[5]
    (series,) = analysed(query, md, 8)  # the job whose runs read 0 has no point; the others do
    assert [p.job_id for p in series.points] == jobs[:4] + jobs[5:]
    storage = Storage(database_url)
    try:
        fleet.kill("server", 15)
        with storage.engine.begin() as conn:  # the poisoned job's labels damaged, a later job of its series
            conn.execute(text("UPDATE contexts SET labels = '{not json' WHERE id IN (SELECT context FROM samples "
                              "WHERE job_id = :job)"), {"job": poisoned})
            conn.execute(text("DELETE FROM history_points WHERE job_id IN (:a, :b)"), {"a": poisoned, "b": later})
            conn.execute(text("INSERT INTO history_queue (job_id, machine, queued_ns, attempts) VALUES "
                              "(:a, 'box', 0, 0), (:b, 'box', 1, 0)"), {"a": poisoned, "b": later})
        keeper = HistoryKeeper(storage, retry_s=0.0)
        with caplog.at_level(logging.INFO, logger="perfctl.server"):
            taken = []
            while (job := keeper.analyse_next()) is not None:
                taken.append(job)
                assert len(taken) < 10, taken  # never for ever
        # the later job is analysed while the poisoned one waits for its next attempt
        assert taken == [poisoned, later] + [poisoned] * (MAX_ATTEMPTS - 1)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        error = "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
        assert errors == [f"history: job {poisoned} on box not analysed (attempt 1 of {MAX_ATTEMPTS}); tried "
                          "again in 0 s",
                          f"history: job {poisoned} on box set aside after {MAX_ATTEMPTS} failed analyses: "
                          f"{error} (its series go on without it; docs/history.md \"On a fleet\")"]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert [w.split(":")[1] for w in warnings] == [f" job {poisoned} on box not analysed (attempt {k} of "
                                                       f"{MAX_ATTEMPTS})" for k in range(2, MAX_ATTEMPTS)]
        with storage.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM history_queue")).scalar() == 0
            (row,) = conn.execute(text("SELECT job_id, machine, attempts, error FROM history_set_aside")).all()
            assert tuple(row) == (poisoned, "box", MAX_ATTEMPTS, error)
            assert conn.execute(text("SELECT count(*) FROM history_points")).scalar() == 7
        assert keeper.analyse_next() is None  # set aside: not tried again
        open_regressions_gauge(storage)
        assert REGISTRY.get_sample_value("perfctl_history_set_aside") == 1
        assert REGISTRY.get_sample_value("perfctl_history_queued") == 0
        # a run whose values are not stored is left out of its job's point, and the log says so
        with storage.engine.begin() as conn:
            conn.execute(text("UPDATE samples SET vals = NULL WHERE job_id = :job AND run_index = 0"), {"job": jobs[0]})
            conn.execute(text("INSERT INTO history_queue (job_id, machine, queued_ns, attempts) VALUES "
                              "(:job, 'box', 0, 0)"), {"job": jobs[0]})
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="perfctl.server"):
            assert keeper.analyse_next() == jobs[0]
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
            f"history: job {jobs[0]} on box, work: 1 of 12 runs left out of its point (1 no stored values)"]
    finally:
        storage.close()
        server.channel.close()
