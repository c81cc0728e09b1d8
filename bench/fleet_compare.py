#!/usr/bin/env python3
"""`perfctl compare box-a box-b` against a server holding months of history: 10^6 stored runs per machine
(100 benchmarks x 10 jobs x 1000 runs), on SQLite and on PostgreSQL. Times the whole command as a user runs
it, the default selection (each benchmark's most recent job: 10^5 runs per side) and --all-history (10^6
per side), beside the database's own ``SELECT count(*)`` of the same rows measured in the same run, and
reports the server's peak resident memory (VmHWM) before and after.

Targets (issue 15): default < 3 s, --all-history < 10 s, the server's memory bounded.

The history is stored through Storage.ingest_many (the server's own insert path, without gRPC: ingest has
its own benchmark, bench/ingest_rate.py) from one real sample of /bin/true whose values are varied.

    python bench/fleet_compare.py [--runs 1000] [--jobs 10] [--benchmarks 100] [--no-postgres] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from fleet import Fleet, Postgres, free_port, perfctl_command, postgres_reason, wait_for  # noqa: E402
from ingest_rate import template  # noqa: E402

from perfctl.server.decode import row_fields  # noqa: E402
from perfctl.server.storage import Storage, database_url  # noqa: E402
from perfctl.v1 import fleet_pb2 as pb  # noqa: E402

INVENTORY = '{"kernel": {"release": "6.1.0-bench", "version": "#1"}}'


def populate(url: str, base: pb.Sample, benchmarks: int, jobs: int, runs: int) -> tuple[float, list[str]]:
    """Store the history of box-a and box-b; (samples stored per second, each machine's latest job). On
    PostgreSQL the rows Storage.ingest_many would write for each job are written with COPY (and the series
    table from them): its executemany stores ~6,000 rows/s here, 6 minutes for this history."""
    storage = Storage(url)
    copying = not storage.is_sqlite
    fields = row_fields(base)
    _, identity, _, _, _, _, _, _, shape, vals = fields
    payload = base.SerializeToString()
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    stored, latest = 0, []
    try:
        for machine, factor in (("box-a", 1.0), ("box-b", 0.97)):
            storage.register(pb.MachineInfo(name=machine, machine_id=f"bench-{machine}", inventory_json=INVENTORY),
                             time.time_ns())
            clock = time.time_ns() - 10**15  # months ago
            for job in range(jobs):
                job_id = str(uuid.uuid4())
                job_labels = f'{{"commit":"c{job}"}}'
                requests = []
                for bench in range(benchmarks):
                    name = (f"bench{bench:03d}", *identity[1:])
                    values = np.frombuffer(vals, dtype="<f8").copy()
                    matrix = np.tile(values, (runs, 1))
                    noise = rng.lognormal(0, 0.02, (runs, 1)) * factor * (1 + bench % 7 / 10)
                    ok = ~np.isnan(values)
                    matrix[:, ok] = np.round(matrix[:, ok] * noise)
                    rows = []
                    for run in range(runs):
                        clock += 1_000_000
                        rows.append((str(uuid.uuid4()), name, job_id, run, False, "ok", clock, job_labels, shape,
                                     matrix[run].tobytes()))
                    requests.append((machine, rows, [payload] * runs))
                if copying:  # the first run of each benchmark through ingest_many: ids, series; then COPY
                    stored += sum(n for n, _ in storage.ingest_many([(m, r[:1], p[:1]) for m, r, p in requests]))
                    stored += copy_rows(storage, [(m, r[1:], p[1:]) for m, r, p in requests])
                else:
                    stored += sum(n for n, _ in storage.ingest_many(requests))
            latest.append(job_id)
    finally:
        storage.close()
    return stored / (time.perf_counter() - start), latest


def copy_rows(storage: Storage, requests: list) -> int:
    """The rows ingest_many would insert for ``requests``, written with PostgreSQL's COPY; the series they
    extend widened as ingest_many widens it."""
    from perfctl.server.schema import SampleRecord, contexts, shapes
    from perfctl.server.storage import SAMPLE_COLUMNS

    columns = ", ".join(SAMPLE_COLUMNS)
    count = 0
    with storage.engine.begin() as conn:
        cursor = conn.connection.driver_connection.cursor()
        rows = []
        for machine, fields, payloads in requests:
            machine_pk = storage.machine_pk(machine)
            for (uuid_, identity, job_id, run_index, warmup, outcome, start, labels, shape, vals), payload in \
                    zip(fields, payloads):
                rows.append(SampleRecord(
                    uuid_, machine_pk, storage._benchmark_pk(conn, identity, {}), job_id, run_index, warmup, outcome,
                    start, 0, payload,
                    storage._dictionary_pk(conn, contexts, {"labels": labels, "kernel": "6.1.0-bench"}, {}),
                    storage._dictionary_pk(conn, shapes, {"spec": shape}, {}), vals))
        with cursor.copy(f"COPY samples ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        count = len(rows)
        storage._extend_series(conn, rows, time.time_ns())  # received now, as ingest_many marks them
    return count


def vacuum(url: str) -> None:
    """VACUUM ANALYZE, as autovacuum does on a database that has been taking runs for months: it marks the
    pages all-visible, which lets compare read ix_samples_series alone (an index-only scan) rather than
    every run's table row and payload. Just after a bulk load no vacuum has run yet."""
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) samples")
        conn.execute("VACUUM (ANALYZE) series")
    print(f"postgresql: VACUUM ANALYZE in {time.perf_counter() - start:.1f} s (what autovacuum does in a fleet)")


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - start, result


def count_rows(url: str, kind: str, latest_jobs: list[str] | None) -> tuple[float, int]:
    """The database's own count of the rows a selection compares (both machines; ``latest_jobs``: only
    those jobs' runs), timed in the database's own client; (seconds, rows)."""
    where = "" if latest_jobs is None else " AND job_id IN ({})".format(", ".join(f"'{j}'" for j in latest_jobs))
    query = f"SELECT count(*) FROM samples WHERE machine IN (1, 2){where}"
    if kind == "sqlite":
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
    else:
        import psycopg

        connection = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    try:
        start = time.perf_counter()
        (rows,) = connection.execute(query).fetchone()
        return time.perf_counter() - start, rows
    finally:
        connection.close()


def measure(kind: str, url: str, db_args: list[str], tmp: Path, expected: tuple[int, int], latest: list[str]) -> None:
    fleet = Fleet(tmp)
    address = f"127.0.0.1:{free_port()}"
    server = fleet.start_server(address, db_args)
    try:
        wait_for(lambda: fleet.client("machines", server=address).returncode == 0, 120, "the server")
        before = vm_kib(server.pid, "VmRSS")
        client = ["--server", address, "--token-file", fleet.client_token]
        for label, extra, target, runs, jobs in (("default (latest job)", [], 3.0, expected[0], latest),
                                                 ("--all-history", ["--all-history"], 10.0, expected[1], None)):
            seconds, result = timed(perfctl_command("compare", "box-a", "box-b", "--format", "json", *client, *extra))
            if result.returncode not in (0, 3, 4):
                sys.exit(f"bench: compare failed: {result.stderr.strip()}")
            document = json.loads(result.stdout)
            n = sum(row["n_a"] for row in document["benchmarks"])
            if n != runs:
                sys.exit(f"bench: {label} compared {n} runs of box-a, expected {runs}")
            database, rows = count_rows(url, kind, jobs)
            if rows != 2 * runs:
                sys.exit(f"bench: the database counts {rows} rows, compare took {2 * runs}")
            print(f"{kind:>10} {label:>21}: perfctl compare {seconds:6.2f} s for {n:,} runs per side; the "
                  f"database's count(*) of them {database:6.2f} s (ratio {seconds / database:5.1f}x); target < "
                  f"{target:g} s {'PASS' if seconds < target else 'FAIL'}")
        peak = vm_kib(server.pid, "VmHWM")
        print(f"{kind:>10} server memory: {before / 1024:.0f} MiB at start, peak {peak / 1024:.0f} MiB after both "
              f"compares (bounded by --max-compare-runs: about 100 bytes per run read)")
    finally:
        fleet.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per benchmark and job")
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--benchmarks", type=int, default=100)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    base = template()
    per_machine = args.runs * args.jobs * args.benchmarks
    print(f"{per_machine:,} stored runs per machine ({args.benchmarks} benchmarks x {args.jobs} jobs x {args.runs} "
          f"runs), {len(base.readings)} readings and {base.ByteSize()} bytes of payload each")
    kinds = ([] if args.no_sqlite else ["sqlite"]) + \
        ([] if args.no_postgres or postgres_reason() else ["postgresql"])
    postgres = Postgres() if "postgresql" in kinds else None
    try:
        for kind in kinds:
            with tempfile.TemporaryDirectory() as tmp:
                if kind == "sqlite":
                    data = os.path.join(tmp, "data")
                    db_args, url = ["--data-dir", data], database_url(data, None)
                else:
                    url = postgres.new_database()
                    db_args = ["--db", url]
                rate, latest = populate(url, base, args.benchmarks, args.jobs, args.runs)
                print(f"{kind:>10}: history stored at {rate:,.0f} samples/s (Storage.ingest_many)")
                if kind == "postgresql":
                    vacuum(url)
                measure(kind, url, db_args, Path(tmp), (args.runs * args.benchmarks, per_machine), latest)
        if "postgresql" not in kinds and not args.no_postgres:
            print(f"postgresql: not measured ({postgres_reason()})")
    finally:
        if postgres:
            postgres.stop()


if __name__ == "__main__":
    main()
