#!/usr/bin/env python3
"""Retention (issue 17): runs deleted per second by `perfctl prune` (Storage.prune, batches of PRUNE_BATCH per
transaction along the series index), on SQLite and on PostgreSQL, and what it does to ingest meanwhile: a
writer stores batches of 500 runs through Storage.ingest, the server's path, while the prune runs, and its
slowest batch is printed beside its slowest batch with no prune, measured in the same run.

The database holds --runs runs of one real sample of /bin/true (the default events) in --series series
(benchmark and job), half of them older than the cutoff (started and received before it).

    python bench/prune_rate.py [--runs 200000] [--series 20] [--no-postgres]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from fleet import bench_databases  # noqa: E402
from ingest_rate import template  # noqa: E402
from sqlalchemy import text  # noqa: E402

from perfctl.server.storage import Storage  # noqa: E402
from perfctl.v1 import fleet_pb2 as pb  # noqa: E402

DAY_NS = 86400 * 10**9


def fill(storage: Storage, base: pb.Sample, runs: int, series: int) -> None:
    """``runs`` runs over ``series`` jobs, the first half started and received 200 days ago, the rest a day ago."""
    storage.register(pb.MachineInfo(name="box", machine_id="bench"), 1)
    jobs = [str(uuid.uuid4()) for _ in range(series)]
    now = time.time_ns()
    batch = []
    for index in range(runs):
        sample = pb.Sample()
        sample.CopyFrom(base)
        sample.uuid, sample.job_id, sample.run_index = str(uuid.uuid4()), jobs[index % series], index
        sample.start_time_ns = now - (200 if index < runs // 2 else 1) * DAY_NS + index
        batch.append(sample)
        if len(batch) == 2000:
            storage.ingest("box", batch)
            batch = []
    if batch:
        storage.ingest("box", batch)
    # stands for runs stored as they ran, by an agent whose clock was right: the server received each at its
    # start (Storage.prune deletes a run only when both its start and its receipt are before the cutoff)
    with storage.engine.begin() as conn:
        conn.execute(text("UPDATE samples SET received_ns = start_time_ns"))


def ingest_latencies(storage: Storage, base: pb.Sample, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        batch = []
        for _ in range(500):
            sample = pb.Sample()
            sample.CopyFrom(base)
            sample.uuid, sample.start_time_ns = str(uuid.uuid4()), time.time_ns()
            batch.append(sample)
        start = time.perf_counter()
        storage.ingest("box", batch)
        out.append(time.perf_counter() - start)


def measure(url: str, base: pb.Sample, runs: int, series: int) -> tuple[float, float, float]:
    """(runs deleted per second, slowest ingest batch during the prune, slowest ingest batch without)."""
    storage = Storage(url)
    try:
        fill(storage, base, runs, series)
        quiet: list[float] = []
        stop = threading.Event()
        writer = threading.Thread(target=ingest_latencies, args=(Storage(url), base, stop, quiet))
        writer.start()
        time.sleep(3)
        stop.set()
        writer.join()
        during: list[float] = []
        stop = threading.Event()
        writer = threading.Thread(target=ingest_latencies, args=(Storage(url), base, stop, during))
        writer.start()
        start = time.perf_counter()
        removed = storage.prune(time.time_ns() - 90 * DAY_NS)
        elapsed = time.perf_counter() - start
        stop.set()
        writer.join()
        deleted = sum(removed.values())
        if deleted != runs // 2:
            sys.exit(f"bench: pruned {deleted} runs, expected {runs // 2}")
        return deleted / elapsed, max(during), max(quiet)
    finally:
        storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--series", type=int, default=20)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    base = template()
    print(f"{args.runs} runs in {args.series} series, half older than the cutoff; ingest: batches of 500")
    with bench_databases(args.no_postgres) as kinds:
        for kind, new_database in kinds:
            with tempfile.TemporaryDirectory() as tmp:
                rate, during, quiet = measure(new_database(tmp), base, args.runs, args.series)
                print(f"{kind:>10}: pruned {rate:8.0f} runs/s; slowest ingest batch {during * 1000:.0f} ms during "
                      f"the prune, {quiet * 1000:.0f} ms without")


if __name__ == "__main__":
    main()
