#!/usr/bin/env python3
"""Time of `perfctl compare` on 1000 benchmarks x 50 runs per side (target: under 2 s, all tests included).

Writes two perfctl JSON Lines files of synthetic runs (a mix of unchanged, faster and slower benchmarks),
then times the whole command as a user runs it (start-up, reading, every test, rendering; the median of
--repeat runs) and where that time goes: start-up and imports (a fresh interpreter importing what compare
imports), reading and validating the two files, the analysis (both as the command runs them, on two
processes), and the rest (rendering, the CLI: the whole command less the other three). Prints the
per-benchmark cost of the analysis.

    python bench/compare_speed.py [--benchmarks 1000] [--runs 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

from perfctl.analysis.compare import Parameters, compare
from perfctl.cli.compare import split_tests
from perfctl.formats import read_dataset
from perfctl.pairing import pair
from perfctl.parallel import Forked


def write(path: str, rng: np.random.Generator, benchmarks: int, runs: int, factors: np.ndarray) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"type": "machine", "machine_id": "bench"}) + "\n")
        for b in range(benchmarks):
            base = 1e6 * (1 + b % 17)
            for run, value in enumerate(base * factors[b] * rng.lognormal(0, 0.02, runs)):
                identity = str(uuid.UUID(int=(b << 32 | run) << 8 | ord(path[-7])))  # a run's own uuid
                sample = {"type": "sample", "schema_version": 1, "uuid": identity, "machine_id": "bench",
                          "benchmark": {"name": f"bench{b:04d}", "argv": ["x"], "executable": "/x",
                                        "executable_sha256": "0" * 64, "input_digest": "0" * 64},
                          "run_index": run, "warmup": False, "start_time_ns": 0, "wall_ns": int(value),
                          "outcome": "ok", "exit_status": 0, "signal": None,
                          "environment": {"aslr_off": True, "env_bytes": 4096, "pinned_cpu": None, "user": "root",
                                          "cwd": "/"},
                          "readings": [{"event": "task-clock", "backend": "perf_event", "scope": "all",
                                        "status": "ok", "unit": "ns", "value": int(value)}],
                          "backends": ["perf_event"], "extra": {}}
                f.write(json.dumps(sample) + "\n")


# What `perfctl compare A B --format json` imports before it reads a line.
IMPORTS = ("import perfctl.cli, perfctl.cli.compare, perfctl.formats, perfctl.pairing, perfctl.analysis.compare, "
           "perfctl.report.compare")


def timed(command: list[str], ok=(0,)) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode not in ok:
        sys.exit(f"bench: {' '.join(command[:4])} failed: {result.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="whole-command timings; the median is judged")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    factors_b = rng.choice([1.0, 0.9, 1.1, 1.01], size=args.benchmarks)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
        write(a, rng, args.benchmarks, args.runs, np.ones(args.benchmarks))
        write(b, rng, args.benchmarks, args.runs, factors_b)
        command = [sys.executable, "-m", "perfctl", "compare", a, b, "--format", "json"]
        wholes = [timed(command, ok=(0, 3)) for _ in range(args.repeat)]
        startups = [timed([sys.executable, "-c", IMPORTS]) for _ in range(args.repeat)]
        # the phases as the command runs them: B read in a forked child while A is read, and half of the
        # benchmarks tested in a child (perfctl/parallel.py, perfctl/cli/compare.py)
        start = time.perf_counter()
        with Forked(read_dataset, b) as reading_b:
            dataset_a, dataset_b = read_dataset(a), reading_b.result()
        reading = time.perf_counter() - start
        paired = pair(dataset_a, dataset_b)
        start = time.perf_counter()
        comparison = compare(paired.a, paired.b, Parameters(), paired.notes, workers=split_tests)
        analysis = time.perf_counter() - start
    whole, startup = statistics.median(wholes), statistics.median(startups)
    verdicts = {}
    for row in comparison.benchmarks:
        verdicts[row.verdict] = verdicts.get(row.verdict, 0) + 1
    print(f"{args.benchmarks} benchmarks x {args.runs} runs per side; verdicts: {verdicts}")
    print(f"perfctl compare (whole command, JSON output): {whole:.2f} s, median of "
          f"{', '.join(f'{t:.2f}' for t in wholes)}  (target < 2 s)  {'PASS' if whole < 2 else 'FAIL'}")
    print(f"  start-up and imports: {startup:.2f} s (a fresh interpreter importing what compare imports)")
    print(f"  reading and validating both files: {reading:.2f} s")
    print(f"  analysis: {analysis:.2f} s, {analysis / args.benchmarks * 1e3:.2f} ms per benchmark")
    print(f"  rendering and the rest (whole less the above): {whole - startup - reading - analysis:.2f} s")


if __name__ == "__main__":
    main()
