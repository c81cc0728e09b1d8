"""analysis/sequential.py: the confidence sequences of `perfctl ab` (Howard & Ramdas 2022).

Agreement with confseq: its boundaries are C++ only (src/confseq/uniform_boundaries.h), so the reference is
a line-by-line transcription in tests/reference/confseq_bounds.py (MIT, attributed there). Validity: over many
independent seeded streams, checked after every round, the fraction whose CS ever misses the true median is
<= alpha (an exact binomial check), while the naive fixed-n interval checked after every round misses far
more often.
"""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import zeta

from perfctl.analysis import sequential

_spec = importlib.util.spec_from_file_location(
    "confseq_bounds", Path(__file__).parent / "reference" / "confseq_bounds.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

TIMES = [1, 2, 5, 10, 37, 100, 101, 999, 1000, 12345, 10**6]
ALPHAS = [0.001, 0.01, 0.05, 0.1, 0.3]
QUANTILES = [0.01, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99]


def test_zeta_matches_scipy():
    for s in [1.01, 1.1, 1.4, 2.0, 3.5, 10.0]:
        assert sequential.riemann_zeta(s) == pytest.approx(zeta(s), rel=1e-14)


@pytest.mark.parametrize("A", [0.75, 0.85, 1.2])
@pytest.mark.parametrize("t_min", [1, 10, 100])
def test_lil_bound_agrees_with_confseq(A, t_min):
    for alpha in ALPHAS:
        ours = sequential.empirical_process_lil_bound(np.array(TIMES), alpha, t_min, A)
        theirs = [reference.empirical_process_lil_bound(t, alpha, t_min, A) for t in TIMES]
        finite = np.isfinite(theirs)
        assert np.array_equal(np.isfinite(ours), finite)
        np.testing.assert_allclose(ours[finite], np.array(theirs)[finite], rtol=1e-12, atol=0)
        assert all(np.isinf(ours[~finite])) and (np.array(TIMES)[~finite] < t_min).all()


@pytest.mark.parametrize("t_opt", [1, 10, 100, 1000])
def test_double_stitching_bound_agrees_with_confseq(t_opt):
    for alpha in ALPHAS:
        for p in QUANTILES:
            ours = sequential.double_stitching_bound(p, np.array(TIMES), alpha, t_opt)
            theirs = [reference.double_stitching_bound(p, t, alpha, t_opt) for t in TIMES]
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)


def test_double_stitching_bound_non_default_parameters():
    for delta, s, eta in [(0.25, 1.1, 1.5), (1.0, 2.0, 3.0)]:
        for p in [0.1, 0.5, 0.8]:
            ours = sequential.double_stitching_bound(p, np.array(TIMES), 0.05, 50, delta, s, eta)
            theirs = [reference.double_stitching_bound(p, t, 0.05, 50, delta, s, eta) for t in TIMES]
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)


def test_scalar_in_scalar_out():
    assert isinstance(sequential.empirical_process_lil_bound(1000, 0.05, 100), float)
    assert isinstance(sequential.double_stitching_bound(0.5, 1000, 0.05, 100), float)
    assert sequential.double_stitching_bound(0.5, [[10, 20]], 0.05, 100).shape == (1, 2)


@pytest.mark.parametrize("method", ["double_stitching", "lil"])
def test_quantile_cs_matches_confseq_construction(method):
    rng = np.random.default_rng(16)
    for t in [5, 50, 100, 400, 3000]:
        values = rng.lognormal(size=t)
        ordered = sorted(values)
        for p in [0.1, 0.5, 0.9]:
            for alpha in [0.05, 0.2]:
                if method == "lil":
                    radius = reference.empirical_process_lil_bound(t, alpha, 100)
                    low_r = high_r = radius
                else:
                    high_r = reference.double_stitching_bound(p, t, alpha, 100) / t
                    low_r = reference.double_stitching_bound(1 - p, t, alpha, 100) / t
                low, high = reference.quantile_confidence_bound(ordered, p, low_r, high_r)
                cs = sequential.quantile_cs(values, p, alpha, method=method, t_opt=100)
                assert cs.t == t
                assert (cs.low if cs.low is not None else -math.inf) == low
                assert (cs.high if cs.high is not None else math.inf) == high
                assert tuple(cs) == (cs.low, cs.high)


def test_quantile_cs_values():
    cs = sequential.quantile_cs(list(range(1000)))
    assert (cs.low, cs.high, cs.lower_rank, cs.upper_rank) == (431.0, 568.0, 432, 569)
    early = sequential.quantile_cs([3.0, 1.0, 2.0])
    assert (early.low, early.high) == (None, None)
    assert sequential.quantile_cs(list(range(50)), method="lil").low is None  # before t_min = 100


@pytest.mark.parametrize("call, message", [
    (lambda: sequential.empirical_process_lil_bound(10, 0.0, 1), "alpha must be in"),
    (lambda: sequential.empirical_process_lil_bound(10, 0.05, 0.5), "t_min must be >= 1"),
    (lambda: sequential.empirical_process_lil_bound(10, 0.05, 1, A=0.7), "A must be > 1/sqrt"),
    (lambda: sequential.empirical_process_lil_bound([1, 0], 0.05, 1), "t must be finite"),
    (lambda: sequential.double_stitching_bound(1.0, 10, 0.05, 1), "quantile_p must be in"),
    (lambda: sequential.double_stitching_bound(0.5, 10, 1.5, 1), "alpha must be in"),
    (lambda: sequential.double_stitching_bound(0.5, 10, 0.05, 0), "t_opt must be >= 1"),
    (lambda: sequential.double_stitching_bound(0.5, 10, 0.05, 1, delta=0), "delta must be > 0"),
    (lambda: sequential.double_stitching_bound(0.5, 10, 0.05, 1, s=1), "s must be > 1"),
    (lambda: sequential.double_stitching_bound(0.5, 10, 0.05, 1, eta=1), "eta must be > 1"),
    (lambda: sequential.quantile_cs([], 0.5), "values must hold"),
    (lambda: sequential.quantile_cs([1.0, math.nan], 0.5), "values must be finite"),
    (lambda: sequential.quantile_cs([1.0, 2.0], 0.0), "p must be in"),
    (lambda: sequential.quantile_cs([1.0, 2.0], 0.5, method="hoeffding"), "method must be one of"),
])
def test_invalid_parameters_raise_one_line_value_error(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


# --- validity by simulation ---------------------------------------------------------------------------------

STREAMS = 1000
ROUNDS = 2000


def _streams(name, rng):
    shape = (STREAMS, ROUNDS)
    if name == "normal":
        return rng.normal(size=shape), 0.0
    if name == "lognormal":
        return rng.lognormal(sigma=0.5, size=shape), 1.0
    if name == "student_t2":
        return rng.standard_t(2, size=shape), 0.0
    if name == "tied":  # rounding to integers: P(X <= 0) > 1/2 > P(X < 0), median 0
        return np.round(rng.normal(scale=1.5, size=shape)), 0.0
    raise AssertionError(name)


def _ever_missed(data, median, lower_rank, upper_rank):
    """Per stream: did [X_(lower), X_(upper)] exclude the median at some round? X_(k) > m iff fewer than k
    values are <= m; X_(u) < m iff at least u values are < m (ranks out of 1..t mean unbounded)."""
    at_most = np.cumsum(data <= median, axis=1)
    below = np.cumsum(data < median, axis=1)
    return ((at_most < lower_rank) | (below >= upper_rank)).any(axis=1)


def _binomial_upper_quantile(n, p, level=1e-3):
    """Smallest k with P(Binomial(n, p) >= k) <= level: a count above it is a real excess over p."""
    log_pmf = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
               + k * math.log(p) + (n - k) * math.log1p(-p) for k in range(n + 1)]
    tail = 0.0
    for k in range(n, -1, -1):
        tail += math.exp(log_pmf[k])
        if tail > level:
            return k + 1
    return 0


def _naive_ranks(t, alpha):
    """The fixed-n interval for the median (normal approximation to the binomial order-statistic
    interval), valid at one pre-chosen t only."""
    z = {0.05: 1.959963984540054, 0.3: 1.0364333894937898}[alpha]
    half_width = z * np.sqrt(t) / 2
    lower = np.maximum(1, np.floor(t / 2 - half_width)).astype(np.int64)
    upper = np.minimum(t, np.ceil(t / 2 + half_width + 1)).astype(np.int64)
    return np.where(t >= 10, lower, 0), np.where(t >= 10, upper, t + 1)


@pytest.mark.parametrize("alpha", [0.05, 0.3])
def test_cs_never_misses_more_than_alpha_naive_does(alpha):
    rng = np.random.default_rng(20220316)
    t = np.arange(1, ROUNDS + 1)
    limit = _binomial_upper_quantile(STREAMS, alpha)
    rates = {}
    for name in ["normal", "lognormal", "student_t2", "tied"]:
        data, median = _streams(name, rng)
        for method in sequential.METHODS:
            lower, upper = sequential.quantile_cs_ranks(t, 0.5, alpha, method, t_opt=10)
            misses = int(_ever_missed(data, median, lower, upper).sum())
            rates[name, method] = misses / STREAMS
            assert misses < limit, (name, method, misses, limit)
        naive_misses = int(_ever_missed(data, median, *_naive_ranks(t, alpha)).sum())
        rates[name, "naive"] = naive_misses / STREAMS
        if name == "tied":  # heavy ties make the fixed-n interval conservative: no inflation claimed
            continue
        # Peeking inflates the fixed-n interval's error well past alpha (and past any binomial noise).
        assert naive_misses >= max(limit, 2 * alpha * STREAMS), (name, naive_misses)
    print(alpha, rates)
