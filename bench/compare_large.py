#!/usr/bin/env python3
"""Time and peak memory of the analysis of one benchmark with many runs per side (issue 15).

For each N (runs per side), a fresh subprocess draws lognormal runs for A and B (B 1% slower) and times
``perfctl.analysis.compare.compare`` with ``Parameters()`` on that one benchmark; its peak RSS is the
subprocess's ru_maxrss less that of a subprocess that only imports and draws the same data. Targets at 10^6
runs per side: under 3 s and under 1 GB.

Where it fits in memory (N <= 20,000: 4e8 differences, 3.2 GB), the same comparison with the quadratic
Hodges-Lehmann definition (every x_i - y_j built, as perfctl did before; the reference in
tests/test_rank_selection.py) is timed in the same run, and the ratio printed is the reference's time over
ours. As a peer, one scipy.stats.mannwhitneyu on the same data is timed: the ratio printed is our whole
comparison (SPARC's three rank tests and interval, both Speedup-Test protocols, SPA, the disturbance check)
over that one rank test.

    python bench/compare_large.py [--runs 3000 20000 1000000] [--reference-max 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 3.0
TARGET_BYTES = 1 << 30
TARGET_RUNS = 1_000_000

# One case, run as `python -c CASE runs mode`: mode "baseline" imports and draws only; "ours" and
# "reference" time compare(); "scipy" times one mannwhitneyu. Prints one JSON object.
CASE = """
import json, resource, sys, time
import numpy as np
from perfctl.analysis import sparc
from perfctl.analysis.compare import Parameters, compare
from scipy import stats

runs, mode = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(15)
a = {("large", "task-clock"): rng.lognormal(np.log(2e7), 0.05, runs)}
b = {("large", "task-clock"): rng.lognormal(np.log(2e7 * 1.01), 0.05, runs)}
if mode == "reference":
    sys.path.insert(0, sys.argv[3])
    from test_rank_selection import quadratic_center, quadratic_shift
    from perfctl.analysis.rank_tests import ShiftEstimate

    def shift(x, y, confidence=0.95):
        return ShiftEstimate(*quadratic_shift(x, y, confidence), confidence)

    def center(d, confidence=0.95):
        return ShiftEstimate(*quadratic_center(d, confidence), confidence)

    # every way sparc reaches the Hodges-Lehmann statistics, the sorted-input one compare uses included
    sparc.hodges_lehmann_shift, sparc.hodges_lehmann_center = shift, center
    sparc._hodges_lehmann_shift_sorted = shift
seconds = None
if mode in ("ours", "reference"):
    start = time.perf_counter()
    result = compare(a, b, Parameters())
    seconds = time.perf_counter() - start
    verdict = result.benchmarks[0].verdict
elif mode == "scipy":
    x, y = a["large", "task-clock"], b["large", "task-clock"]
    start = time.perf_counter()
    stats.mannwhitneyu(x, y)
    seconds = time.perf_counter() - start
    verdict = None
else:
    verdict = None
print(json.dumps({"seconds": seconds, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "verdict": verdict}))
"""


def run_case(runs: int, mode: str) -> dict:
    result = subprocess.run([sys.executable, "-c", CASE, str(runs), mode, str(ROOT / "tests")],
                            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    if result.returncode != 0:
        sys.exit(f"bench: {mode} at {runs} runs failed: {result.stderr.strip().splitlines()[-1]}")
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[3_000, 20_000, TARGET_RUNS],
                        help="runs per side, one case each (default: 3000 20000 1000000)")
    parser.add_argument("--reference-max", type=int, default=20_000,
                        help="largest N at which the quadratic reference is run (it needs 16 N^2 bytes)")
    args = parser.parse_args()
    print(f"{'runs/side':>10} {'compare':>9} {'peak RSS':>10} {'quadratic':>10} {'ref/ours':>9} "
          f"{'scipy MWU':>10} {'ours/MWU':>9}  verdict")
    failures = []
    for runs in args.runs:
        baseline = run_case(runs, "baseline")["maxrss_kib"]
        ours = run_case(runs, "ours")
        peak = (ours["maxrss_kib"] - baseline) * 1024
        peer = run_case(runs, "scipy")["seconds"]
        reference = run_case(runs, "reference") if runs <= args.reference_max else None
        ref_text = f"{reference['seconds']:9.2f}s" if reference else f"{'-':>10}"
        ratio_text = f"{reference['seconds'] / ours['seconds']:8.1f}x" if reference else f"{'-':>9}"
        print(f"{runs:>10} {ours['seconds']:8.2f}s {peak / 2**20:7.0f} MiB {ref_text} {ratio_text} "
              f"{peer:9.3f}s {ours['seconds'] / peer:8.1f}x  {ours['verdict']}", flush=True)
        if runs == TARGET_RUNS:
            time_ok, memory_ok = ours["seconds"] < TARGET_SECONDS, peak < TARGET_BYTES
            print(f"  10^6 runs per side: {ours['seconds']:.2f} s (target < {TARGET_SECONDS:g} s) "
                  f"{'PASS' if time_ok else 'FAIL'}; peak {peak / 2**20:.0f} MiB (target < 1 GiB) "
                  f"{'PASS' if memory_ok else 'FAIL'}")
            failures += [] if time_ok and memory_ok else [runs]
    print("ref/ours: the quadratic Hodges-Lehmann definition's compare() time over ours, same data, same run; "
          "ours/MWU: our whole compare() over one scipy.stats.mannwhitneyu on the same data")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
