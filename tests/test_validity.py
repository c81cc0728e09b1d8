"""Fast version of bench/coverage.py: every interval perfctl prints keeps its error at or below 1 - C, and
every test its type-I error at or below alpha, within Monte Carlo tolerance (3 standard errors)."""

from pathlib import Path

import numpy as np
import pytest

from perfctl.analysis import validity

FERRET = np.loadtxt(Path(__file__).resolve().parents[1] / "examples/data/ferret-l2_512kB-simticks.csv", delimiter=",")
POPULATIONS = {p.name: p for p in validity.populations(FERRET)}
CONFIDENCE, ALPHA, RUNS = 0.9, 0.05, 22


@pytest.mark.parametrize("name", sorted(POPULATIONS))
@pytest.mark.parametrize("proportion", [0.5, 0.9])
def test_spa_value_interval_keeps_its_confidence(name, proportion):
    rng = np.random.default_rng(11)
    check = validity.spa_interval_check(POPULATIONS[name], proportion, CONFIDENCE, RUNS, 2000, rng)
    assert check.error <= 1 - CONFIDENCE + validity.tolerance(1 - CONFIDENCE, check.trials), check


def test_the_papers_per_bound_construction_does_not_and_is_not_used_by_default():
    # Why perfctl runs each bound at (1 + C)/2: with C per bound, the interval errs up to 2(1 - C).
    rng = np.random.default_rng(12)
    check = validity.spa_interval_check(POPULATIONS["normal"], 0.5, CONFIDENCE, RUNS, 2000, rng, per_bound=True)
    assert check.error > 1 - CONFIDENCE + validity.tolerance(1 - CONFIDENCE, check.trials)


@pytest.mark.parametrize("name", sorted(POPULATIONS))
def test_ratio_interval_keeps_its_confidence(name):
    rng = np.random.default_rng(13)
    check = validity.ratio_interval_check(POPULATIONS[name], CONFIDENCE, RUNS, 400, rng)
    assert check.error <= 1 - CONFIDENCE + validity.tolerance(1 - CONFIDENCE, check.trials), check


@pytest.mark.parametrize("name", sorted(POPULATIONS))
def test_tests_keep_their_type_one_error(name):
    rng = np.random.default_rng(14)
    for check in validity.type_one_checks(POPULATIONS[name], ALPHA, 0.05, RUNS, 300, rng):
        assert check.rejection_rate <= ALPHA + validity.tolerance(ALPHA, check.trials), check
