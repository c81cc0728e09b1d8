#!/usr/bin/env python3
"""The performance history's speed on the server (issue 32 targets), with SQLite and with PostgreSQL:

1. One ended job's update < 50 ms on a series of 1,000 jobs: 1,000 jobs of 20 runs each are stored through
   Storage.ingest and recorded done (queued as the server queues them), the first ``--jobs - 20`` are given
   their points and their series' changes computed once (what the incremental updates would have left), and
   then each of the last 20 is analysed as a replica's keeper does (server/history.py analyse_next: its points,
   its series' changes brought up to date, one transaction). Prints the median and the largest of the 20.
2. `perfctl changes` answered in < 1 s by a real `perfctl server` holding 10,000 series x 1,000 jobs of history:
   200 M runs cannot be ingested here, so the history tables are filled directly (``--series`` series of
   ``--jobs`` points each, a change every ~200 points, spread over a year, the last month's new, older ones
   acknowledged or fixed; no runs). Timed through perfctl/client.py list_changes (what `perfctl changes` calls),
   as `perfctl changes` is asked: the fleet's newest page, one machine's, one benchmark's, the fleet's new
   changes of the last 30 days; each must answer in < 1 s.

    python bench/history_server.py [--series 10000] [--jobs 1000] [--no-postgres]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from fleet import Fleet, bench_databases, free_port, server_database_args, wait_for  # noqa: E402
from ingest_rate import template  # noqa: E402

from perfctl import client  # noqa: E402
from perfctl.server import history_store as store  # noqa: E402
from perfctl.server import history_update  # noqa: E402
from perfctl.server.history import HistoryKeeper  # noqa: E402
from perfctl.server.schema import history_changes, history_queue, history_series  # noqa: E402
from perfctl.server.storage import Storage  # noqa: E402
from perfctl.v1 import fleet_pb2 as pb  # noqa: E402

UPDATE_TARGET_S, LIST_TARGET_S = 0.050, 1.0
TIMED_JOBS, RUNS = 20, 20
DAY_NS = 86400 * 10**9


def ended_jobs(storage: Storage, base: pb.Sample, jobs: int) -> list[str]:
    """``jobs`` jobs of RUNS runs of one benchmark on box, a step of +10% halfway, each recorded done."""
    storage.register(pb.MachineInfo(name="box", machine_id="m" * 32, inventory_json="{}"), time.time_ns())
    rng, ids = random.Random(1), []
    for number in range(jobs):
        job_id = storage.create_job("box", pb.Job(commands=[pb.Command(name="work", argv=["/bin/true"])],
                                                  repetitions=RUNS))
        level = 1e6 * (1.1 if number >= jobs // 2 else 1.0)
        batch = []
        for k in range(RUNS):
            sample = pb.Sample()
            sample.CopyFrom(base)
            sample.uuid, sample.job_id, sample.run_index = str(uuid.uuid4()), job_id, k
            sample.benchmark.name, sample.benchmark.executable_sha256 = "work", f"{number:064x}"
            sample.wall_ns = int(level * rng.lognormvariate(0, 0.02))
            for reading in sample.readings:
                if reading.status == "ok" and reading.value:
                    reading.value = int(reading.value * level / 1e6 * rng.lognormvariate(0, 0.02))
            sample.labels.update({"branch": "main", "commit": f"c{number}"})
            batch.append(sample)
        storage.ingest("box", batch)
        storage.update_job(job_id, "box", "done", samples_count=RUNS)
        ids.append(job_id)
    return ids


def update_speed(storage: Storage, jobs: int) -> tuple[list[float], list[float]]:
    """Seconds of each of the last TIMED_JOBS analyses, after the history before them was filled, and of
    changepoints.update within each."""
    ids = ended_jobs(storage, template(), jobs)
    keeper = HistoryKeeper(storage)
    with storage.engine.begin() as conn:  # the history before: points, then the series' changes once
        for job_id in ids[:-TIMED_JOBS]:
            points = store.job_points(conn, job_id, "box", keeper.line_labels, keeper.shape_specs)
            touched = store.add_points(conn, job_id, store.job_end_ns(conn, job_id, 0), points,
                                       storage._insert_ignore)
            conn.execute(history_queue.delete().where(history_queue.c.job_id == job_id))
        for series_pk in set(touched):
            history_update.reanalyse(conn, series_pk, time.time_ns())
    took, detecting = [], []
    update = history_update.changepoints.update

    def timed_update(*args, **kwargs):  # what of each analysis is analysis/changepoints.py's own
        started = time.perf_counter()
        try:
            return update(*args, **kwargs)
        finally:
            detecting.append(time.perf_counter() - started)

    history_update.changepoints.update = timed_update
    try:
        for _ in range(TIMED_JOBS):
            started = time.perf_counter()
            assert keeper.analyse_next() is not None
            took.append(time.perf_counter() - started)
    finally:
        history_update.changepoints.update = update
    return took, detecting


def fill_history(storage: Storage, series: int, jobs: int) -> int:
    """The history tables of ``series`` series x ``jobs`` points written directly (no runs; the points made by
    the database itself, their values alike: only their number and size matter to a listing); the changes
    made, a change every ~200 points of a series."""
    rng = random.Random(2)
    now = time.time_ns()
    year = 365 * DAY_NS
    step = year // jobs
    with storage.engine.begin() as conn:
        conn.execute(history_series.insert(), [
            dict(id=s + 1, digest=f"{s:064x}", machine=f"box-{s // 10:04d}", benchmark=f"bench-{s % 10}",
                 argv="[]", metric="instructions:u", line='{"branch": "main"}', unit="count") for s in range(series)])
    jobs_of = (f"WITH RECURSIVE j(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM j WHERE n + 1 < {jobs}) " if
               storage.is_sqlite else "")
    numbers = "j" if storage.is_sqlite else f"generate_series(0, {jobs - 1}) AS j(n)"
    blob = f"zeroblob({8 * RUNS})" if storage.is_sqlite else f"decode(repeat('00', {8 * RUNS}), 'hex')"
    chunk = max(1, 1_000_000 // jobs)
    if not storage.is_sqlite:  # PostgreSQL builds the points' indexes once, after, not row by row
        with storage.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE history_points DROP CONSTRAINT uq_history_points")
            conn.exec_driver_sql("DROP INDEX ix_history_points_order")
    for first in range(0, series, chunk):
        with storage.engine.begin() as conn:
            conn.exec_driver_sql(
                f'{jobs_of}INSERT INTO history_points (series, job_id, build, "commit", labels, time_ns, runs, '
                f"median, q1, q3, min, max, run_values) SELECT s.id, 'j' || s.id || '-' || j.n, 1, 'c' || j.n, '{{}}', "
                f"{now - year} + j.n * {step}, {RUNS}, 1e9, 0.99e9, 1.01e9, 0.98e9, 1.02e9, {blob} "
                f"FROM history_series s CROSS JOIN {numbers} WHERE s.id > {first} AND s.id <= {first + chunk}")
        print(f"  points of {min(series, first + chunk):,} series", end="\r", flush=True)
    print()
    if not storage.is_sqlite:
        with storage.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE history_points ADD CONSTRAINT uq_history_points UNIQUE (series, job_id)")
            conn.exec_driver_sql("CREATE INDEX ix_history_points_order ON history_points (series, time_ns, job_id)")
            conn.exec_driver_sql("ANALYZE")
    change_rows = []
    for s in range(series):
        level = 1e9
        for j in range(1, jobs):
            if rng.random() >= 1 / 200:
                continue
            before, level = level, level * rng.choice((0.97, 1.05, 1.1))
            time_ns = now - year + j * step
            side = {"points": 100, "runs": 100 * RUNS}
            analysis = {"before_side": {**side, "job": f"j{s + 1}-{j - 1}", "commit": f"c{j - 1}",
                                        "time_ns": time_ns - step, "median": before},
                        "after_side": {**side, "job": f"j{s + 1}-{j}", "commit": f"c{j}", "time_ns": time_ns,
                                       "median": level},
                        "ratio": before / level, "low": before / level * 0.995, "high": before / level * 1.005,
                        "confidence": 0.95, "margin": 0.01, "verdict": "relevant difference",
                        "finding": "after slower beyond ±1%", "p_value": 0.001, "index": j}
            state = "new" if time_ns > now - 30 * DAY_NS else rng.choice(("acknowledged", "fixed"))
            change_rows.append(dict(id=f"{s:06x}{j:06x}", series=s + 1, machine=f"box-{s // 10:04d}",
                                    benchmark=f"bench-{s % 10}", after_job=f"j{s + 1}-{j}", time_ns=time_ns,
                                    state=state, triage="new" if state == "fixed" else state,
                                    regression=level > before, note="", link="", fixed_by=None,
                                    analysis=json.dumps(analysis), detected_ns=time_ns, updated_ns=time_ns))
    with storage.engine.begin() as conn:
        for first in range(0, len(change_rows), 10_000):
            conn.execute(history_changes.insert(), change_rows[first:first + 10_000])
    return len(change_rows)


def list_speed(url: str, directory: Path) -> dict[str, tuple[float, int]]:
    """Seconds and changes of each `perfctl changes` query through a real server on ``url``."""
    fleet = Fleet(directory)
    address = f"127.0.0.1:{free_port()}"
    fleet.start_server(address, server_database_args(url))
    connection = client.Connection("changes", server=address, token_file=fleet.client_token)
    try:
        wait_for(lambda: _answers(connection), 120, "the server to answer")
        month_ago = time.time_ns() - 30 * DAY_NS
        queries = {"newest page (fleet)": lambda: _first_page(connection),
                   "--machine box-0500": lambda: list(client.list_changes(connection, machine="box-0500")),
                   "--machine box-0500 --benchmark bench-3": lambda: list(client.list_changes(
                       connection, machine="box-0500", benchmark="bench-3")),
                   "--state new --since 30d (fleet)": lambda: list(client.list_changes(
                       connection, since_ns=month_ago, states=["new"]))}
        timed = {}
        for name, query in queries.items():
            query()  # once to warm the server's and the database's caches, as a server in use has them
            started = time.perf_counter()
            found = query()
            timed[name] = (time.perf_counter() - started, len(found))
        return timed
    finally:
        fleet.stop_all()


def _answers(connection) -> bool:
    try:
        _first_page(connection)
        return True
    except Exception:  # noqa: BLE001 - the server starting: any failure means not yet
        return False


def _first_page(connection) -> list:
    return client.unary(connection, "ListChanges", pb.ListChangesRequest()).changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="perfctl-history-") as top, bench_databases(args.no_postgres) as kinds:
        for kind, new_url in kinds:
            storage = Storage(new_url(top))
            try:
                took, detecting = update_speed(storage, args.jobs)
            finally:
                storage.close()
            median, worst = statistics.median(took), max(took)
            ok = median < UPDATE_TARGET_S
            failed |= not ok
            print(f"{kind}: one ended job's update on a series of {args.jobs:,} jobs: median {median * 1e3:.1f} ms, "
                  f"largest {worst * 1e3:.1f} ms of {TIMED_JOBS}, of which changepoints.update median "
                  f"{statistics.median(detecting) * 1e3:.1f} ms (target < {UPDATE_TARGET_S * 1e3:.0f} ms): "
                  f"{'PASS' if ok else 'FAIL'}")
            url = new_url(top)
            storage = Storage(url)
            try:
                started = time.perf_counter()
                changes = fill_history(storage, args.series, args.jobs)
                print(f"{kind}: history of {args.series:,} series x {args.jobs:,} jobs ({changes:,} changes) "
                      f"written directly in {time.perf_counter() - started:.0f} s")
            finally:
                storage.close()
            for name, (seconds, count) in list_speed(url, Path(tempfile.mkdtemp(dir=top))).items():
                ok = seconds < LIST_TARGET_S
                failed |= not ok
                print(f"{kind}: perfctl changes {name}: {count:,} changes in {seconds * 1e3:.0f} ms "
                      f"(target < {LIST_TARGET_S:g} s): {'PASS' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
