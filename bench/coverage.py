#!/usr/bin/env python3
"""Coverage and type-I error of perfctl's intervals and tests, by simulation (full version of
tests/test_validity.py). For every population (normal, log-normal, bimodal, heavy-tailed, discrete with
ties, the real ferret runtimes) it draws --trials repeated samples of --runs runs and prints, per interval,
the empirical error probability (truth outside the interval) and the mean width relative to the truth,
with BCa bootstrap and z-score intervals beside perfctl's for contrast (the SPA paper's Figures 6 and 8);
per test, the rejection rate where its null holds. A line is marked BREACH when a perfctl error exceeds
1 - C (or alpha) by more than 3 Monte Carlo standard errors.

    python bench/coverage.py [--trials 1000] [--runs 22] [--confidence 0.9] [--no-bootstrap]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from perfctl.analysis import validity

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=22)
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--no-bootstrap", action="store_true", help="skip BCa (the slow contrast)")
    args = parser.parse_args()
    ferret = np.loadtxt(ROOT / "examples/data/ferret-l2_512kB-simticks.csv", delimiter=",")
    rng = np.random.default_rng(2026)
    level = 1 - args.confidence
    breaches = 0
    start = time.perf_counter()
    print(f"{args.trials} trials of {args.runs} runs, C = {args.confidence}, alpha = {args.alpha}")
    print(f"{'population':14} {'interval':44} {'error':>7} {'width':>8}")
    for pop in validity.populations(ferret):
        checks = []
        for proportion in (0.5, 0.9):
            checks.append((validity.spa_interval_check(pop, proportion, args.confidence, args.runs, args.trials,
                                                       rng), True))
            checks.append((validity.spa_interval_check(pop, proportion, args.confidence, args.runs, args.trials, rng,
                                                       per_bound=True), False))
            checks.append((validity.zscore_interval_check(pop, proportion, args.confidence, args.runs,
                                                          args.trials, rng),
                           False))
            if not args.no_bootstrap:
                checks.append((validity.bca_interval_check(pop, proportion, args.confidence, args.runs,
                                                           args.trials, rng), False))
        checks.append((validity.ratio_interval_check(pop, args.confidence, args.runs, args.trials, rng), True))
        for check, ours in checks:
            breach = ours and check.error > level + validity.tolerance(level, check.trials)
            breaches += breach
            tag = "perfctl" if ours else "contrast"
            print(f"{check.population:14} {check.method:44} {check.error:7.3f} {check.mean_relative_width:8.4f}  "
                  f"{tag}{'  BREACH' if breach else ''}")
        for check in validity.type_one_checks(pop, args.alpha, 0.05, args.runs, args.trials, rng):
            breach = check.rejection_rate > args.alpha + validity.tolerance(args.alpha, check.trials)
            breaches += breach
            print(f"{check.population:14} {'type I: ' + check.test:44} {check.rejection_rate:7.3f} {'':8}  "
                  f"perfctl{'  BREACH' if breach else ''}")
    print(f"{breaches} breaches; {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
