"""analysis/sequential.py: the confidence sequences and the quantile A/B test of `perfctl ab` (Howard & Ramdas
2022).

Agreement with confseq: its boundaries are C++ only (src/confseq/uniform_boundaries.h), so the reference is
a line-by-line transcription in tests/reference/confseq_bounds.py (MIT, attributed there). Validity: over many
independent seeded streams, checked after every round, the fraction whose CS ever misses the true median is
<= alpha (an exact binomial check), while the naive fixed-n interval checked after every round misses far
more often. The quantile A/B test (Theorem 5) and its beta-binomial mixture agree with a transcription of
confseq's QuantileABTest to 1e-12 (in practice exactly), reject a true null in at most alpha of streams
checked after every observation, and reject shifted arms; tests/test_confseq_agreement.py checks all of it
against the compiled confseq itself.
"""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import zeta

from perfctl.analysis import mixture, sequential

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


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_beta_binomial_quantile_cs_is_confseqs_fixed_quantile_bounds_with_the_cap(alpha):
    """method="beta_binomial" is confseq's demo fixed_quantile_confidence_bounds (Theorem 1 with the
    two-sided beta-binomial mixture, tuned at t_opt), except where the boundary is the largest deviation the
    counts can reach: there the mixture never crosses, and that end stays unbounded."""
    unbounded_seen = 0
    for t in [*range(1, 41), 100, 1000]:
        for p in (0.1, 0.5, 0.9):
            v, v_opt = p * (1 - p) * t, p * (1 - p) * 10
            upper = reference.beta_binomial_mixture_bound(v, alpha, v_opt, p, 1 - p, alpha, is_one_sided=False)
            lower = reference.beta_binomial_mixture_bound(v, alpha, v_opt, 1 - p, p, alpha, is_one_sided=False)
            # the largest deviation each side's counts can reach (the mixture's s_upper_bound: v / g)
            wanted_low = math.floor(t * (p - lower / t) + 1) if lower < v / (1 - p) else 0
            wanted_high = math.ceil(t * (p + upper / t)) if upper < v / p else t + 1
            wanted = (max(wanted_low, 0), min(wanted_high, t + 1))
            unbounded_seen += lower >= v / (1 - p)
            assert sequential.quantile_cs_ranks(t, p, alpha, "beta_binomial", 10) == wanted, (t, p)
    assert unbounded_seen  # the cap was met: small t leave the median's lower end open
    # the median at alpha 0.05: no two ends before 6 observations, then the smallest and the largest
    assert [sequential.quantile_cs_ranks(t, 0.5, 0.05, "beta_binomial", 10) for t in (5, 6)] == [(0, 6), (1, 6)]


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
    (lambda: sequential.quantile_ab_p_value([], [1.0], 0.5, 10), "a_values must hold at least one"),
    (lambda: sequential.quantile_ab_p_value([1.0], [], 0.5, 10), "b_values must hold at least one"),
    (lambda: sequential.quantile_ab_p_value([1.0, math.nan], [1.0], 0.5, 10), "a_values must be finite"),
    (lambda: sequential.quantile_ab_p_value([1.0], [math.inf], 0.5, 10), "b_values must be finite"),
    (lambda: sequential.quantile_ab_p_value([[1.0]], [1.0], 0.5, 10), "a_values must be one-dimensional"),
    (lambda: sequential.quantile_ab_p_value([1.0], [1.0], 0.0, 10), "quantile_p must be in"),
    (lambda: sequential.quantile_ab_p_value([1.0], [1.0], 1.5, 10), "quantile_p must be in"),
    (lambda: sequential.quantile_ab_p_value([1.0], [1.0], 0.5, 0), "t_opt must be an integer >= 1"),
    (lambda: sequential.quantile_ab_p_value([1.0], [1.0], 0.5, 10.5), "t_opt must be an integer >= 1"),
    (lambda: sequential.quantile_ab_p_value([1.0], [1.0], 0.5, True), "t_opt must be an integer >= 1"),
    (lambda: sequential.quantile_ab_p_value([1.0], [1.0], 0.5, 10, 1.0), "alpha_opt must be in"),
    (lambda: sequential.quantile_ab_ratio_cs([1.0, -1.0], [1.0], 0.5, 10), "must be > 0 for a ratio"),
    (lambda: sequential.quantile_ab_ratio_cs([1.0], [1.0], 0.5, 10, alpha=0.0), "alpha must be in"),
    (lambda: mixture.BetaBinomialMixture(0.0, 0.05, 0.5, 0.5), "v_opt must be finite and > 0"),
    (lambda: mixture.BetaBinomialMixture(10.0, 0.05, 0.0, 0.5), "g must be finite and > 0"),
    (lambda: mixture.beta_binomial_mixture_bound(10.0, 1.0, 10.0, 0.5, 0.5), "alpha must be in"),
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


# --- the quantile A/B test ---------------------------------------------------------------------------------


@pytest.mark.parametrize("is_one_sided", [True, False])
def test_beta_binomial_mixture_agrees_with_confseq(is_one_sided):
    for g, h in [(0.5, 0.5), (0.1, 0.9), (0.9, 0.1), (0.3, 1.2)]:
        for v_opt in [1.0, 25.0, 1000.0]:
            for alpha_opt in [0.01, 0.05, 0.2]:
                for v in [0.5, 10.0, 250.0, 1e4]:
                    for s in [-0.3 * v / h, 0.0, 0.2 * v / g, 0.9 * v / g]:
                        ours = mixture.beta_binomial_log_mixture(s, v, v_opt, g, h, alpha_opt, is_one_sided)
                        theirs = reference.beta_binomial_log_mixture(s, v, v_opt, g, h, alpha_opt, is_one_sided)
                        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)
                    for alpha in [0.001, 0.05, 0.3]:
                        ours = mixture.beta_binomial_mixture_bound(v, alpha, v_opt, g, h, alpha_opt,
                                                                      is_one_sided)
                        theirs = reference.beta_binomial_mixture_bound(v, alpha, v_opt, g, h, alpha_opt,
                                                                       is_one_sided)
                        assert ours == pytest.approx(theirs, rel=1e-12, abs=0)


def test_beta_binomial_mixture_parts():
    boundary = mixture.BetaBinomialMixture(100.0, 0.05, 0.3, 0.7, False)
    assert boundary.r == reference.BetaBinomialMixture.optimal_r(100.0, 0.05, 0.3, 0.7, False)
    assert boundary.s_upper_bound(21.0) == 70.0
    # Crossing the threshold at the bound: ln m(bound) = ln(1/alpha), to bisection accuracy.
    bound = boundary.bound(50.0, math.log(20))
    assert boundary.log_superMG(bound, 50.0) == pytest.approx(math.log(20), abs=1e-9)
    # A threshold never reached below s_upper_bound gives s_upper_bound itself.
    assert boundary.bound(0.5, math.log(1e6)) == boundary.s_upper_bound(0.5)
    assert mixture.log_incomplete_beta(2.0, 3.0, 1) == pytest.approx(math.log(1 / 12), rel=1e-15)
    # B(0.4; 2, 3) = I_0.4(2, 3) / 12, I_0.4(2, 3) = P[Bin(4, 0.4) >= 2] = 0.5248
    assert mixture.log_incomplete_beta(2.0, 3.0, 0.4) == pytest.approx(math.log(0.5248 / 12), rel=1e-14)


def _ab_arms(kind, rng, sizes):
    size_a, size_b = sizes
    if kind == "equal":
        return rng.normal(size=size_a), rng.normal(size=size_b)
    if kind == "shifted":
        return rng.normal(size=size_a), rng.normal(0.4, size=size_b)
    if kind == "tied":  # a handful of distinct values, as timer ticks give
        return rng.integers(0, 4, size=size_a).astype(float), rng.integers(0, 5, size=size_b).astype(float)
    if kind == "lognormal":
        return rng.lognormal(size=size_a), rng.lognormal(0.2, 1.5, size=size_b)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["equal", "shifted", "tied", "lognormal"])
def test_quantile_ab_p_value_agrees_with_confseq(kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    values = []
    for sizes in [(1, 1), (1, 7), (30, 30), (13, 200), (500, 60), (400, 400)]:
        a_values, b_values = _ab_arms(kind, rng, sizes)
        for quantile_p in [0.1, 0.5, 0.9]:
            for t_opt, alpha_opt in [(10, 0.05), (100, 0.01), (1000, 0.2), (10000, 0.05)]:
                ours = sequential.quantile_ab_p_value(a_values, b_values, quantile_p, t_opt, alpha_opt)
                theirs = reference.quantile_ab_p_value(list(a_values), list(b_values), quantile_p, t_opt,
                                                       alpha_opt)
                assert ours == pytest.approx(theirs, rel=1e-12, abs=0), (sizes, quantile_p, t_opt, alpha_opt)
                # Swapping the arms is the same two-sided test.
                swapped = sequential.quantile_ab_p_value(b_values, a_values, quantile_p, t_opt, alpha_opt)
                assert swapped == pytest.approx(ours, rel=1e-12)
                values.append(ours)
    assert max(values) == 1.0
    if kind in ("shifted", "lognormal"):
        assert min(values) < 1e-2  # the grid reaches real rejections, not only p = 1


def test_quantile_ab_p_value_accepts_lists_and_ints():
    assert sequential.quantile_ab_p_value(list(range(1, 1001)), range(86, 1086), 0.5, np.int64(100)) == \
        pytest.approx(0.0838054952112761, rel=1e-12)  # confseq 0.0.11's value (R docs' example)


def _min_p_value_over_stream(a_values, b_values, quantile_p, t_opt, stop_at=0.0):
    """The least p-value seen when it is read after every observation (A and B arriving in turn)."""
    least = 1.0
    for n in range(1, len(a_values) + 1):
        for size_b in (n - 1, n):
            if size_b:
                least = min(least, sequential.quantile_ab_p_value(a_values[:n], b_values[:size_b], quantile_p,
                                                                  t_opt))
                if least <= stop_at:
                    return least
    return least


@pytest.mark.parametrize("name", ["normal", "tied"])
def test_quantile_ab_rejects_true_null_at_most_alpha_checked_after_every_observation(name):
    streams, rounds = 150, 60
    rng = np.random.default_rng(20220316)
    if name == "normal":
        data = rng.normal(size=(streams, 2, rounds))
    else:  # heavy ties: integers from a normal of sd 1.5
        data = np.round(rng.normal(scale=1.5, size=(streams, 2, rounds)))
    least = np.array([_min_p_value_over_stream(a, b, 0.5, 10) for a, b in data])
    for alpha in [0.05, 0.2]:
        rejections = int((least <= alpha).sum())
        assert rejections < _binomial_upper_quantile(streams, alpha), (alpha, rejections)


def test_quantile_ab_rejects_shifted_arms():
    rng = np.random.default_rng(5)
    data = rng.normal(size=(50, 2, 60))
    data[:, 1] += 1.5
    least = np.array([_min_p_value_over_stream(a, b, 0.5, 10, stop_at=0.05) for a, b in data])
    assert (least <= 0.05).mean() >= 0.8


# --- the ratio confidence sequence -------------------------------------------------------------------------


def _p_values_over_ratios(a_values, b_values, quantile_p, t_opt):
    """The p-value for H0: q_p(A) = c q_p(B) at one c inside each piece between consecutive ratios a_i / b_j
    (where it is constant), at each ratio, and beyond both ends."""
    ratios = np.unique(np.divide.outer(a_values, b_values).ravel())
    grid = np.sort(np.concatenate([[ratios[0] / 2], np.sqrt(ratios[:-1] * ratios[1:]), ratios,
                                   [ratios[-1] * 2]]))
    return grid, np.array([sequential.quantile_ab_p_value(a_values, c * b_values, quantile_p, t_opt)
                           for c in grid])


def test_ratio_p_value_is_unimodal_and_cs_is_its_level_set():
    rng = np.random.default_rng(11)
    for trial in range(60):
        sizes = rng.integers(1, 30, size=2)
        if trial % 2:
            a_values = rng.integers(1, 5, size=sizes[0]).astype(float)
            b_values = rng.integers(1, 6, size=sizes[1]).astype(float)
        else:
            a_values, b_values = rng.lognormal(size=sizes[0]), rng.lognormal(0.3, size=sizes[1])
        quantile_p = [0.1, 0.5, 0.9][trial % 3]
        grid, p_values = _p_values_over_ratios(a_values, b_values, quantile_p, 10)
        peak = int(np.argmax(p_values))
        assert p_values[peak] == 1.0
        # Unimodal up to rounding (the same minimum summed in another order differs in the last bits).
        assert np.all(np.diff(p_values[:peak + 1]) >= -1e-12), trial
        assert np.all(np.diff(p_values[peak:]) <= 1e-12), trial
        for alpha in [0.05, 0.3, 0.6]:
            cs = sequential.quantile_ab_ratio_cs(a_values, b_values, quantile_p, 10, alpha, alpha_opt=0.05)
            low = 0.0 if cs.low is None else cs.low
            high = math.inf if cs.high is None else cs.high
            kept = grid[p_values >= alpha]
            assert low <= kept.min() and kept.max() <= high, (trial, alpha)
            # Nothing rejected inside, and the ends are tight to the bisection's 2^-40.
            rejected = grid[p_values < alpha]
            assert not np.any((rejected > low * (1 + 1e-11)) & (rejected < high * (1 - 1e-11))), (trial, alpha)
            assert (cs.low is None) == (p_values[0] >= alpha)
            assert (cs.high is None) == (p_values[-1] >= alpha)


def test_ratio_cs_covers_true_ratio():
    rng = np.random.default_rng(3)
    a_values = rng.lognormal(mean=math.log(2.0), sigma=0.3, size=400)
    b_values = rng.lognormal(mean=math.log(1.0), sigma=0.3, size=300)
    cs = sequential.quantile_ab_ratio_cs(a_values, b_values, 0.5, 100)
    assert cs.low < 2.0 < cs.high and cs.high / cs.low < 1.3
    assert tuple(cs) == (cs.low, cs.high) and cs.alpha_opt == cs.alpha == 0.05


@pytest.mark.parametrize("p", [0.5, 0.3, 0.9])
def test_one_t_gives_the_ranks_of_many(p):
    """quantile_cs_ranks at one whole t (ab's question after every round) skips numpy: the same ranks."""
    times = np.arange(1, 600)
    lower, upper = sequential.quantile_cs_ranks(times.astype(float), p, 0.05, "beta_binomial", 40)
    assert [sequential.quantile_cs_ranks(int(t), p, 0.05, "beta_binomial", 40) for t in times] == \
        list(zip(lower.tolist(), upper.tolist()))
