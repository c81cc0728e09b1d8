"""analysis/distributions.py against scipy.stats, whose algorithms it reimplements so that `perfctl compare` need
not import scipy.stats (about a second): same statistics and p-values, and compare() leaves scipy unimported
(scipy.special too: analysis/special.py, tests/test_special.py)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy import special, stats

from perfctl.analysis import distributions, spa
from perfctl.analysis.distributions import (
    KS_ASYMPTOTIC,
    KS_EXACT,
    KS_EXACT_MAX,
    KS_FALLBACK,
    binom_cdf,
    binom_sf,
    brown_forsythe,
    ks_two_sample,
    ks_two_sided,
    shapiro_wilk,
)

RTOL = 1e-12  # the same algorithms in the same order: on this machine the values are equal to the bit


def _sample(kind: str, n: int, rng) -> np.ndarray:
    if kind == "normal":
        return rng.normal(10, 2, n)
    if kind == "lognormal":
        return rng.lognormal(0, 1, n)
    if kind == "tied":
        return np.round(rng.normal(0, 1, n), 1)
    if kind == "uniform":
        return rng.uniform(0, 1, n)
    return 2.4e7 * rng.lognormal(0, 0.02, n)  # timings


def _scipy(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # shapiro above 5000 values, ks_2samp's fallback, levene's zero spread
        return function(*args, **kwargs)


@pytest.mark.parametrize("kind", ["normal", "lognormal", "tied", "uniform", "timings"])
def test_shapiro_wilk_matches_scipy(kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    for n in [*range(3, 61), 99, 100, 257, 1000, 2048, 4999, 5000, 5001, 7000]:
        x = _sample(kind, n, rng)
        ours, theirs = shapiro_wilk(x), _scipy(stats.shapiro, x)
        assert ours.statistic == pytest.approx(theirs.statistic, rel=RTOL, abs=0), (kind, n)
        assert ours.pvalue == pytest.approx(theirs.pvalue, rel=RTOL, abs=0), (kind, n)


def test_shapiro_wilk_edge_cases_match_scipy():
    for x in ([5.0, 5.0, 5.0, 5.0], [1.0, 2.0, 4.0], [1.0, 1.0, 2.0], [0.0, 1e-300, 2e-300, 5e-300],
              [1.0, 2.0, 3.0, 4.0, 5.0, 100.0]):
        ours, theirs = shapiro_wilk(x), _scipy(stats.shapiro, x)
        assert (ours.statistic, ours.pvalue) == pytest.approx((theirs.statistic, theirs.pvalue), rel=RTOL), x
    with pytest.raises(ValueError, match="at least 3"):
        shapiro_wilk([1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        shapiro_wilk([1.0, 2.0, np.nan])


SIZES = [(1, 1), (1, 4), (2, 2), (3, 7), (5, 5), (7, 7), (10, 12), (20, 20), (49, 50), (50, 50), (20, 60),
         (100, 30), (333, 334), (1000, 1000), (999, 1000), (600, 1500), (3000, 2000), (7, KS_EXACT_MAX),
         (KS_EXACT_MAX, KS_EXACT_MAX), (KS_EXACT_MAX - 1, KS_EXACT_MAX)]


@pytest.mark.parametrize("n, m", SIZES)
def test_ks_two_sample_matches_scipy(n, m):
    rng = np.random.default_rng(n * 100_003 + m)
    for shift in (0.0, 0.05, 0.3):
        for tied in (False, True):
            x, y = rng.normal(0, 1, n), rng.normal(shift, 1, m)
            if tied:
                x, y = np.round(x, 1), np.round(y, 1)
            ours, theirs = ks_two_sample(x, y), _scipy(stats.ks_2samp, x, y)
            assert ours.statistic == theirs.statistic
            assert ours.pvalue == pytest.approx(theirs.pvalue, rel=RTOL, abs=0), (n, m, shift, tied)
            assert ours.method in (KS_EXACT, KS_FALLBACK)


def test_ks_fallback_where_the_exact_sum_leaves_the_unit_interval():
    # n = m and D small: the alternating sum comes out an ulp above 1 and scipy switches to kstwo
    x = np.array([-5000.0, -2000, -2000, 0, 1000, 2000, 5000])
    y = np.array([-7000.0, -4000, -2000, 0, 1000, 3000, 8000])
    result = ks_two_sample(x, y)
    assert result.method == KS_FALLBACK
    assert result.pvalue == pytest.approx(_scipy(stats.ks_2samp, x, y).pvalue, rel=RTOL, abs=0)
    assert result.pvalue < 0.99999  # the one-sample D_N at N = 4, not the exact value (1) nor the limit
    fallbacks = 0
    for n in (5, 7, 13, 14, 30, 60, 61, 150, 151, 999, 1000, 4001, 9999):
        for h in (1, 2, 3, 4, 7, 12, 40):
            x, y = np.arange(float(n)), np.arange(float(n)) + h - 0.5  # D = h/n
            ours, theirs = ks_two_sample(x, y), _scipy(stats.ks_2samp, x, y)
            fallbacks += ours.method == KS_FALLBACK
            assert ours.pvalue == pytest.approx(theirs.pvalue, rel=RTOL, abs=0), (n, h)
    assert fallbacks > 10


def test_ks_beyond_the_exact_range_is_kolmogorovs_limit():
    n = m = KS_EXACT_MAX + 1
    result = ks_two_sided(n, m, 0.02)
    assert result.method == KS_ASYMPTOTIC
    assert result.pvalue == pytest.approx(special.kolmogorov(np.sqrt(n * m / (n + m)) * 0.02), rel=1e-15)


def test_binomial_tails_match_scipy():
    for n in [*range(1, 201), 1000, 100_000]:
        for p in (0.5, 0.1, 0.9, 0.025, 0.975, 0.3):
            k = np.arange(-2, n + 3)  # below 0 and from n on, as stats.binom defines them
            for ours, theirs in ((binom_cdf(k, n, p), stats.binom.cdf(k, n, p)),
                                 (binom_sf(k, n, p), stats.binom.sf(k, n, p))):
                np.testing.assert_array_equal(ours[(k < 0) | (k >= n)], theirs[(k < 0) | (k >= n)])
                relevant = theirs > 1e-6  # SPA compares tails with risks of at least 1e-12 ... 0.5
                np.testing.assert_allclose(ours[relevant], theirs[relevant], rtol=RTOL, atol=0)


def test_spa_bound_ranks_are_those_of_scipys_binomial():
    def ranks_by_scipy(n, proportion, bound_confidence):
        alpha = 1 - bound_confidence
        below = min(n + 1, int(np.ceil(proportion * n)))
        ks = np.arange(0, below)
        fails = ~(stats.binom.cdf(ks, n, proportion) <= alpha)
        low = int(np.argmax(fails)) if fails.any() else below
        ks = np.arange(below, n + 1)
        holds = stats.binom.sf(ks - 1, n, proportion) <= alpha
        high = int(ks[np.argmax(holds)]) if holds.any() else n + 1
        return (low if low > 0 else None), (high if below <= high <= n and high >= 1 else None)

    for n in range(1, 400):
        for proportion, confidence in ((0.5, 0.975), (0.9, 0.975), (0.1, 0.95), (0.5, 0.995)):
            assert spa._bound_ranks(n, proportion, confidence) == ranks_by_scipy(n, proportion, confidence)


def test_brown_forsythe_matches_levene_median():
    rng = np.random.default_rng(3)
    for n in range(2, 200, 7):
        for m in (2, n, n + 3, 2 * n):
            x, y = rng.lognormal(0, 0.05, n), rng.lognormal(0.1, 0.2, m)
            for a, b in ((x, y), (np.log(x), np.log(y)), (np.round(x, 2), np.round(y, 2))):
                ours, theirs = brown_forsythe(a, b), _scipy(stats.levene, a, b, center="median")
                assert ours.statistic == pytest.approx(theirs.statistic, rel=RTOL, abs=0)
                assert ours.pvalue == pytest.approx(theirs.pvalue, rel=RTOL, abs=0)
    flat = brown_forsythe([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert np.isnan(flat.statistic) and np.isnan(flat.pvalue)
    assert np.isnan(_scipy(stats.levene, [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], center="median").pvalue)


def test_band_recursion_by_antidiagonals_equals_scipys_columns():
    from scipy.stats._stats_pythran import _compute_outer_prob_inside_method

    for n, m in ((3, 7), (10, 12), (50, 49), (100, 300), (1000, 999), (7, 10000)):
        g = int(np.gcd(n, m))
        lcm = n // g * m
        for h in (1, 2, lcm // 50, lcm // 10, lcm // 3, lcm - 1):
            if h >= 1:
                assert distributions._prob_outside_band(n, m, g, h) == pytest.approx(
                    _compute_outer_prob_inside_method(max(n, m), min(n, m), g, h), rel=RTOL, abs=0), (n, m, h)


def test_compare_does_not_import_scipy():
    script = """
import sys
import numpy as np
from perfctl.analysis.compare import Parameters, compare
rng = np.random.default_rng(0)
a = {(f"b{i}", "wall"): list(1e6 * rng.lognormal(0, 0.02, n)) for i, n in enumerate((50, 50, 7, 12))}
b = {(f"b{i}", "wall"): list(1e6 * rng.lognormal(0.05, 0.02, n)) for i, n in enumerate((50, 49, 7, 30))}
a["b4", "wall"] = [5.0, 5.0, 5.0, 5.0, 5.0]
b["b4", "wall"] = [5.0, 5.5, 5.2, 6.0, 9.0]
result = compare(a, b, Parameters())
assert len(result.benchmarks) == 5 and result.benchmarks[0].mean_protocol is not None
assert result.benchmarks[0].median_protocol.result.ks_pvalue is not None
assert "clopper-pearson" in repr(result) and "wilson-cc" in repr(result)
assert len(compare(a, b, Parameters(alpha=0.01, proportion=0.9)).benchmarks) == 5
print(sorted(name for name in sys.modules if name.split(".")[0] == "scipy"))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", run.stderr
