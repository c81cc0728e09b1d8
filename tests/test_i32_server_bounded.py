"""The history's update reads a bounded number of rows whatever the series' length (issue 32; server/
history_update.py): from LOOKBACK_POINTS before the last settled change on, at most MAX_UPDATE_POINTS points,
and finds what detect over the whole series finds. Real SQLite and PostgreSQL (conftest's ``database_url``);
the series are written directly (thousands of jobs through a server would take minutes), the update is the
server's own ``reanalyse``, its reads counted on a real connection."""

from __future__ import annotations

import json

import numpy as np
from sqlalchemy import insert, select

from perfctl.analysis import changepoints
from perfctl.server import history_update
from perfctl.server.schema import history_changes, history_points, history_series
from perfctl.server.storage import Storage


class CountingConnection:
    """A real connection whose row-returning statements' rows are counted (each result read in full, then
    handed on as the caller would have had it)."""

    def __init__(self, conn):
        self.conn, self.rows, self.point_rows = conn, 0, 0

    def execute(self, statement, *args, **kwargs):
        result = self.conn.execute(statement, *args, **kwargs)
        if not result.returns_rows:
            return result
        frozen = result.freeze()
        self.rows += len(frozen.data)
        if "history_points.run_values" in str(statement):
            self.point_rows += len(frozen.data)
        return frozen()


def _series(conn, name: str, levels: np.ndarray, rng) -> int:
    pk = conn.execute(insert(history_series).values(
        digest=name * 8, machine="box", benchmark=name, argv="[]", metric="task-clock", line="{}",
        unit="ns").returning(history_series.c.id)).scalar_one()
    rows = []
    for i, level in enumerate(levels):
        runs = level * rng.lognormal(0, 0.01, 10)
        rows.append(dict(series=pk, job_id=f"{name}-{i:06d}", build=1, commit=f"c{i}", labels="{}",
                         time_ns=1_000_000 + i, runs=10, median=float(np.median(runs)), q1=0.0, q3=0.0,
                         min=0.0, max=0.0, run_values=runs.astype("<f8").tobytes()))
    conn.execute(insert(history_points), rows)
    return pk


def _append(conn, pk: int, name: str, i: int, level: float, rng) -> None:
    runs = level * rng.lognormal(0, 0.01, 10)
    conn.execute(insert(history_points).values(
        series=pk, job_id=f"{name}-{i:06d}", build=1, commit=f"c{i}", labels="{}", time_ns=1_000_000 + i, runs=10,
        median=float(np.median(runs)), q1=0.0, q3=0.0, min=0.0, max=0.0, run_values=runs.astype("<f8").tobytes()))


def test_an_update_reads_a_bounded_number_of_rows_of_a_long_series(database_url):
    rng = np.random.default_rng(11)
    storage = Storage(database_url)
    long = 3000
    try:
        with storage.engine.begin() as conn:
            stepped = _series(conn, "stepped", np.where(np.arange(long) < long - 200, 1e6, 1.1e6), rng)
            flat = _series(conn, "flat", np.full(long, 1e6), rng)
        with storage.engine.begin() as conn:  # the first analysis of each: no settled change to resume at
            for pk in (stepped, flat):
                history_update.reanalyse(conn, pk, 1)
        for n in range(3):  # then one job at a time, as jobs end
            with storage.engine.begin() as conn:
                _append(conn, stepped, "stepped", long + n, 1.1e6, rng)
                _append(conn, flat, "flat", long + n, 1e6, rng)
                counting = CountingConnection(conn)
                history_update.reanalyse(counting, stepped, 2 + n)
                # the points from LOOKBACK_POINTS before the settled change on: 50 + 201..203 of 3001..3003
                assert counting.point_rows == history_update.LOOKBACK_POINTS + 201 + n, counting.point_rows
                assert counting.rows < counting.point_rows + 10
                counting = CountingConnection(conn)
                history_update.reanalyse(counting, flat, 2 + n)
                assert counting.point_rows == history_update.MAX_UPDATE_POINTS  # no change: the latest 2,000
        with storage.engine.connect() as conn:
            stored = [json.loads(row.analysis) for row in conn.execute(
                select(history_changes.c.analysis, history_changes.c.series).where(
                    history_changes.c.series.in_([stepped, flat])))]
            medians = conn.execute(select(history_points.c.median).where(history_points.c.series == stepped)
                                   .order_by(history_points.c.time_ns)).scalars().all()
            values = b"".join(conn.execute(select(history_points.c.run_values).where(
                history_points.c.series == stepped).order_by(history_points.c.time_ns)).scalars())
        # what detect over the whole series finds, from the points read
        runs = np.frombuffer(values, dtype="<f8").reshape(-1, 10)
        (whole,) = changepoints.detect(medians, lambda a, b: runs[a:b].ravel())
        (change,) = stored
        assert (change["index"], change["settled"]) == (long - 200, True) == (whole.index, whole.settled)
        assert (change["ratio"], change["low"], change["high"]) == (whole.ratio, whole.low, whole.high)
        assert change["before"] == list(whole.before) and change["after"] == list(whole.after)
    finally:
        storage.close()


def test_a_machines_series_are_read_a_chunk_at_a_time_and_at_most_so_many_a_page(database_url, monkeypatch):
    from perfctl.server import history_store as store

    storage = Storage(database_url)
    try:
        with storage.engine.begin() as conn:
            for i in range(23):  # 23 series of box, every third on branch topic; one of another machine
                conn.execute(insert(history_series).values(
                    digest=f"{i:064x}", machine="box", benchmark=f"b{i % 5}", argv=json.dumps(["/bin/x", str(i)]),
                    metric="task-clock", line=json.dumps({"branch": "topic" if i % 3 == 0 else "main"}), unit="ns"))
            conn.execute(insert(history_series).values(digest="f" * 64, machine="other", benchmark="b0", argv="[]",
                                                       metric="task-clock", line="{}", unit="ns"))
        monkeypatch.setattr(store, "SERIES_CHUNK", 4)
        monkeypatch.setattr(store, "MAX_SERIES_SCANNED", 10)
        with storage.engine.connect() as conn:
            pages, start = [], None
            while True:
                page = list(store.matching_series(conn, "box", {"branch": "main"}, "", "", start=start))
                pages.append([s for s in page if isinstance(s, dict)])
                if not page or not isinstance(page[-1], store.ScanCut):
                    break
                start = page[-1].resume
            assert list(store.matching_series(conn, "box", {}, "", "", start=10**9)) == []  # no such series
            monkeypatch.setattr(store, "MAX_SERIES_SCANNED", 1000)
            whole = list(store.matching_series(conn, "box", {"branch": "main"}, "", "task-clock"))
        # 23 series read 10 at a time: three calls; every main series once, in order
        assert len(pages) == 3
        assert sum(len(page) for page in pages) == 15
        assert [s["id"] for page in pages for s in page] == [s["id"] for s in whole]
        names = [(s["benchmark"], s["argv"][1]) for page in pages for s in page]
        assert names == sorted(names, key=lambda n: (n[0], json.dumps(["/bin/x", n[1]])))
        assert all(s["line"] == {"branch": "main"} and s["machine"] == "box" for page in pages for s in page)
    finally:
        storage.close()


def test_a_stored_change_an_update_cannot_resume_from_is_said_once_and_the_series_analysed_again(database_url,
                                                                                                caplog, monkeypatch):
    import logging

    monkeypatch.setattr(history_update, "_SAID", set())  # once per process and series: this database's series
    rng = np.random.default_rng(12)
    storage = Storage(database_url)
    try:
        with storage.engine.begin() as conn:
            pk = _series(conn, "odd", np.where(np.arange(80) < 20, 1e6, 1.2e6), rng)
            # a settled change as another perfctl might have stored it: in place (its job is the 20th point),
            # its analysis lacking this perfctl's fields
            conn.execute(insert(history_changes).values(
                id="0dd000000001", series=pk, machine="box", benchmark="odd", after_job="odd-000020",
                time_ns=1_000_020, state="new", triage="new", regression=True, note="", link="",
                analysis=json.dumps({"index": 20, "settled": True, "margin": 0.01}), detected_ns=1, updated_ns=1))
        with caplog.at_level(logging.WARNING, logger="perfctl.server"):
            for n in range(2):
                with storage.engine.begin() as conn:
                    _append(conn, pk, "odd", 80 + n, 1.2e6, rng)
                    history_update.reanalyse(conn, pk, 2 + n)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and said[0].startswith(f"history: series {pk} (odd on box): its stored changes "
                                                      "cannot be resumed from (KeyError: "), said
        assert said[0].endswith("its latest 2000 points are analysed again")
        with storage.engine.connect() as conn:
            (row,) = conn.execute(select(history_changes.c.id, history_changes.c.analysis)).all()
        # found again at the same point from the points themselves: the same change, its id kept
        assert row.id == "0dd000000001" and json.loads(row.analysis)["index"] == 20
        assert json.loads(row.analysis)["ratio"] < 0.9
    finally:
        storage.close()
