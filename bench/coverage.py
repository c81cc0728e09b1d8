#!/usr/bin/env python3
"""Coverage and type-I error of perfctl's intervals and tests, by simulation (full version of
tests/test_validity.py). For every population (normal, log-normal, bimodal, heavy-tailed, discrete with
ties, the real ferret runtimes) it draws --trials repeated samples of --runs runs and prints, per interval,
the empirical error probability (truth outside the interval) and the mean width relative to the truth,
with BCa bootstrap and z-score intervals beside perfctl's for contrast (the SPA paper's Figures 6 and 8);
per test, the rejection rate where its null holds. A line is marked BREACH when a perfctl error exceeds
1 - C (or alpha) by more than 3 Monte Carlo standard errors.

Then the families of compare's verdicts (issue 14; analysis/validity.family_checks): for m = 1, 5, 20
benchmarks of 20 runs per side, on a log-normal population with a CV of 2% and on the ferret runs, the
family-wise error (comparisons with any false claim) and the power of sparc (the paper's Holm family over
2m + 1), split (Holm over the differences and over the TOSTs, each at alpha/2) and simultaneous (Bonferroni
intervals at 1 - alpha/m, verdicts read off them), once on a mix of true ratios and once on the least
favourable ones; and the agreement of every verdict with the interval printed beside it.

    python bench/coverage.py [--trials 1000] [--runs 22] [--confidence 0.9] [--no-bootstrap]
                             [--family-trials 1000] [--families-only | --no-families]
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
    parser.add_argument("--family-trials", type=int, default=1000,
                        help="simulated comparisons per family table row")
    parser.add_argument("--families-only", action="store_true", help="only the families of verdicts")
    parser.add_argument("--no-families", action="store_true", help="skip the families of verdicts")
    args = parser.parse_args()
    ferret = np.loadtxt(ROOT / "examples/data/ferret-l2_512kB-simticks.csv", delimiter=",")
    start = time.perf_counter()
    breaches = 0 if args.families_only else coverage(args, ferret)
    if not args.no_families:
        breaches += families(args, ferret)
    print(f"{breaches} breaches; {time.perf_counter() - start:.1f} s")


def families(args, ferret: np.ndarray) -> int:
    """The family-wise error and power table, and the agreement of verdicts with their printed interval."""
    rng = np.random.default_rng(2014)
    alpha, margin, runs = args.alpha, 0.05, 20
    breaches = 0
    agreement = {"sparc": [0.0, 0], "simultaneous": [0.0, 0]}
    print()
    print(f"Families of verdicts: {args.family_trials} comparisons per row, {runs} unpaired runs per side, "
          f"alpha {alpha}, margin {margin}")
    print("FWER = comparisons with any false claim (difference at ratio 1 or the wrong way, equivalence outside "
          "the band, beyond where not); verdicts = the same without beyond; power = rate shown")
    for name, ratios in (("mix", validity.FAMILY_RATIOS), ("least favourable", validity.BOUNDARY_RATIOS)):
        print(f"true ratios A/B ({name}), benchmark i of comparison t at ratios[(i + t) % {len(ratios)}]: "
              + " ".join(f"{r:g}" for r in ratios))
        labels = ("diff .97", "diff .90", "equiv 1.00", "equiv 1.02", "beyond .90")
        print(f"{'population':17} {'m':>2} {'family':13} {'FWER':>6} {'verdicts':>8} "
              + " ".join(f"{label:>10}" for label in labels) + f" {'agreement':>9}")
        for pop in validity.family_populations(ferret):
            for m in (1, 5, 20):
                for check in validity.family_checks(pop, m, args.family_trials, rng, alpha, margin, runs, ratios):
                    breach = check.fwer > alpha + validity.tolerance(alpha, check.trials)
                    if check.agreement is not None:
                        agreement[check.family][0] += check.agreement * check.comparisons
                        agreement[check.family][1] += check.comparisons
                    breach_agreement = check.family == "simultaneous" and check.agreement != 1.0
                    breaches += breach + breach_agreement
                    power = " ".join("-".rjust(10) if np.isnan(rate) else f"{rate:10.3f}" for _, rate in check.power)
                    agree = "-" if check.agreement is None else f"{check.agreement:.2%}"
                    print(f"{pop.name:17} {m:2d} {check.family:13} {check.fwer:6.3f} {check.fwer_verdicts:8.3f} "
                          f"{power} {agree:>9}"
                          f"{'  BREACH' if breach else ''}{'  DISAGREES' if breach_agreement else ''}")
    for family, (agreeing, total) in agreement.items():
        print(f"agreement of the verdict with the interval printed beside it, {family}: {agreeing / total:.2%} of "
              f"{total} comparisons")
    return breaches


def coverage(args, ferret: np.ndarray) -> int:
    """Coverage of the intervals and type-I error of the tests (the SPA paper's Figures 6 and 8)."""
    rng = np.random.default_rng(2026)
    level = 1 - args.confidence
    breaches = 0
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
    return breaches


if __name__ == "__main__":
    main()
