"""Anytime-valid confidence sequences for a quantile of a stream (the statistics core of ``perfctl ab``).

Howard & Ramdas, "Sequential estimation of quantiles with applications to A/B-testing and best-arm
identification", Bernoulli 28(3), 2022. A confidence sequence (CS) covers the true p-quantile at every time
t simultaneously with probability >= 1 - alpha, so the rounds can be looked at after each one and stopped at
any data-dependent time without inflating the error.

Two boundaries on the deviation of the empirical CDF F_t from the true CDF F, as Steven Howard's
``confseq`` package (MIT licence; ``src/confseq/uniform_boundaries.h``) defines them:

- ``empirical_process_lil_bound``: Theorem 2 (the finite-LIL bound on sup_x |F_t(x) - F(x)|, uniform over
  x and over t >= t_min), giving the CS of Corollary 2, uniform over all quantiles at once. It bounds the
  deviation of the proportion F_t - F.
- ``double_stitching_bound``: Theorem 3 (double stitching), tighter for one fixed quantile p. It bounds
  the deviation of the count t (F_t - F) at the quantile p (the caller divides by t).

``quantile_cs`` turns either into bounds on the p-quantile at the current time t = len(values): order
statistics at the ranks the bound gives (Corollary 2; confseq's ``demo/quantiles.py``).

The beta-binomial mixture and the ranks it gives are analysis/mixture.py's, in plain Python: ``perfctl ab``
asks them after every round without importing numpy. The code is pure (no I/O) and needs only numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from perfctl.analysis.mixture import (
    BetaBinomialMixture,
    _boost_brent_find_minima,
    check_alpha,
    mixture_rank_pair,
)

METHODS = ("double_stitching", "lil", "beta_binomial")

# Bernoulli numbers B_2k / (2k)! for k = 1..8, for the Euler-Maclaurin tail of zeta(s).
_BERNOULLI_OVER_FACTORIAL = (
    1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160,
    -691 / 1307674368000, 1 / 74724249600, -3617 / 10670622842880000,
)


def _check_quantile(p: float, name: str = "quantile_p") -> float:
    if not (isinstance(p, (int, float)) and 0 < p < 1):
        raise ValueError(f"{name} must be in (0, 1), got {p!r}")
    return float(p)


def _check_times(t) -> np.ndarray:
    times = np.asarray(t, dtype=float)
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ValueError("t must be finite and > 0")
    return times


def _as_result(values: np.ndarray, t):
    return float(values) if np.ndim(t) == 0 else values


def riemann_zeta(s: float) -> float:
    """Riemann zeta(s) for real s > 1 by Euler-Maclaurin summation (N = 10 terms, 8 Bernoulli corrections:
    relative error below 1e-15 for s in (1, 50])."""
    if not s > 1:
        raise ValueError(f"s must be > 1, got {s!r}")
    n = 10
    total = math.fsum(k ** -s for k in range(1, n))
    total += n ** (1 - s) / (s - 1) + 0.5 * n ** -s
    rising = s  # s (s + 1) ... (s + 2k - 2)
    for k, coefficient in enumerate(_BERNOULLI_OVER_FACTORIAL, start=1):
        total += coefficient * rising * n ** (-s - 2 * k + 1)
        rising *= (s + 2 * k - 1) * (s + 2 * k)
    return total


def _bisect_root(function, low: float, high: float) -> float:
    """Root of a function that changes sign on [low, high], to machine precision."""
    f_low = function(low)
    while True:
        middle = 0.5 * (low + high)
        if middle in (low, high):
            return middle
        f_middle = function(middle)
        if (f_middle > 0) == (f_low > 0):
            low, f_low = middle, f_middle
        else:
            high = middle


def _golden_minimum(function, low: float, high: float) -> float:
    """Minimum value of a unimodal function on (low, high) by golden-section search."""
    ratio = (math.sqrt(5) - 1) / 2
    x1 = high - ratio * (high - low)
    x2 = low + ratio * (high - low)
    f1, f2 = function(x1), function(x2)
    while high - low > 1e-12 * max(1.0, abs(low)):
        if f1 <= f2:
            high, x2, f2 = x2, x1, f1
            x1 = high - ratio * (high - low)
            f1 = function(x1)
        else:
            low, x1, f1 = x1, x2, f2
            x2 = low + ratio * (high - low)
            f2 = function(x2)
    return min(f1, f2)


def _lil_error_probability(C: float, A: float) -> float:
    """The crossing probability Theorem 2 guarantees for constants (A, C), minimised over the epoch
    spacing eta (confseq's ``EmpiricalProcessLILBound::find_optimal_C``, ``optimum_error``)."""

    def error_bound(eta: float) -> float:
        gamma_sq = 2 / eta * (A - math.sqrt(2 * (eta - 1) / C)) ** 2
        if gamma_sq <= 1:
            return math.inf
        return 4 * math.exp(-gamma_sq * C) * (1 + 1 / ((gamma_sq - 1) * math.log(eta)))

    # eta above this root makes gamma^2 <= 1 (no bound).
    eta_upper = _bisect_root(
        lambda eta: math.sqrt(eta / 2) + math.sqrt(2 * (eta - 1) / C) - A, 1.0, 2 * A * A)
    return _golden_minimum(error_bound, 1.0, eta_upper)


@lru_cache(maxsize=256)
def _lil_constant(alpha: float, A: float) -> float:
    """The C of Theorem 2 whose crossing probability is exactly alpha (bracketed from 5 by doubling, as
    confseq's ``bracket_and_solve_root``, then solved to machine precision)."""

    def excess(C: float) -> float:
        return _lil_error_probability(C, A) - alpha

    low, high = 5.0, 5.0
    while excess(high) > 0:
        high *= 2
    while excess(low) <= 0:
        low /= 2
    return _bisect_root(excess, low, high)


def empirical_process_lil_bound(t, alpha: float, t_min: float, A: float = 0.85):
    """Empirical-process finite-LIL bound on sup_x |F_t(x) - F(x)| (Howard & Ramdas 2022, Theorem 2).

    ``A * sqrt((log(1 + log(t / t_min)) + C) / t)`` for t >= t_min and infinity before, with C chosen so
    that the bound is crossed at some t >= t_min with probability <= alpha. Holding uniformly over x and
    time, it gives a confidence sequence for every quantile at once (Corollary 2). Parameter names and
    defaults are confseq's ``empirical_process_lil_bound``; vectorised over ``t``.

    >>> round(float(empirical_process_lil_bound(1000, 0.05, 100)), 3)
    0.082
    """
    alpha = check_alpha(alpha)
    if not (isinstance(t_min, (int, float)) and t_min >= 1):
        raise ValueError(f"t_min must be >= 1, got {t_min!r}")
    if not (isinstance(A, (int, float)) and A > 1 / math.sqrt(2)):
        raise ValueError(f"A must be > 1/sqrt(2) = 0.7071, got {A!r}")
    times = _check_times(t)
    C = _lil_constant(alpha, float(A))
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = A * np.sqrt((np.log1p(np.log(times / t_min)) + C) / times)
    bound = np.where(times < t_min, np.inf, bound)
    return _as_result(bound, t)


def double_stitching_bound(quantile_p: float, t, alpha: float, t_opt: float, delta: float = 0.5,
                           s: float = 1.4, eta: float = 2):
    """Double-stitching bound on t (F_t - F) at the quantile p (Howard & Ramdas 2022, Theorem 3).

    Stitches the sub-Bernoulli boundary over geometric epochs of time (spacing ``eta``, crossing
    probability spread over epochs by ``s``) and over a grid of quantiles (fineness ``delta`` on the logit
    scale), and is tightest near t = ``t_opt``. It bounds the count, so dividing by t gives the radius of
    the proportion; the upper deviation at p uses ``quantile_p = p`` and the lower one ``1 - p``.
    Parameter names and defaults are confseq's ``double_stitching_bound``; vectorised over ``t``.

    >>> round(float(double_stitching_bound(0.5, 1000, 0.05, 100)), 3)
    68.628
    """
    p = _check_quantile(quantile_p)
    alpha = check_alpha(alpha)
    if not (isinstance(t_opt, (int, float)) and t_opt >= 1):
        raise ValueError(f"t_opt must be >= 1, got {t_opt!r}")
    if not (isinstance(delta, (int, float)) and delta > 0):
        raise ValueError(f"delta must be > 0, got {delta!r}")
    if not (isinstance(s, (int, float)) and s > 1):
        raise ValueError(f"s must be > 1, got {s!r}")
    if not (isinstance(eta, (int, float)) and eta > 1):
        raise ValueError(f"eta must be > 1, got {eta!r}")
    times = _check_times(t)
    k1 = (eta ** 0.25 + eta ** -0.25) / math.sqrt(2)
    k2 = (math.sqrt(eta) + 1) / 2
    t_max_m = np.maximum(times, t_opt)
    logit_p = math.log(p / (1 - p))
    if p >= 0.5:
        r = np.full_like(t_max_m, p)
    else:
        r = np.minimum(0.5, 1 / (1 + np.exp(-(logit_p + 2 * delta * np.sqrt(t_opt * eta / t_max_m)))))
    sigma_sq = r * (1 - r)
    j = np.sqrt(t_max_m / t_opt) * abs(logit_p) / (2 * delta) + 1
    zeta_s = riemann_zeta(float(s))
    ell = (s * np.log(np.log(eta * t_max_m / t_opt)) + s * np.log(j)
           + math.log(2 * zeta_s * (2 * zeta_s + 1) / (alpha * math.log(eta) ** s)))
    term2 = k2 * (1 - 2 * p) / 3 * ell
    bound = (delta * np.sqrt(eta * t_max_m * sigma_sq / t_opt)
             + np.sqrt(k1 * k1 * sigma_sq * t_max_m * ell + term2 * term2) + term2)
    return _as_result(bound, t)


def quantile_cs_ranks(t, p: float = 0.5, alpha: float = 0.05, method: str = "double_stitching",
                      t_opt: float = 100):
    """Ranks (1-based) of the order statistics bounding the p-quantile at time t (Corollary 2).

    With radii r_low below and r_high above p (the proportion bounds), the lower rank is
    floor(t (p - r_low) + 1) and the upper rank ceil(t (p + r_high)), as confseq's ``demo/quantiles.py``.
    A lower rank < 1 or an upper rank > t means that end is not yet bounded. Vectorised over ``t``.
    """
    p = _check_quantile(p, "p")
    if method == "beta_binomial" and isinstance(t, int) and t > 0:  # one t: what ab asks after every round,
        return mixture_rank_pair(p, t, check_alpha(alpha), float(t_opt))  # without numpy's per-call cost
    times = _check_times(t)
    if method == "double_stitching":
        r_high = double_stitching_bound(p, times, alpha, t_opt) / times
        r_low = double_stitching_bound(1 - p, times, alpha, t_opt) / times
    elif method == "lil":
        r_high = r_low = empirical_process_lil_bound(times, alpha, t_opt)
    elif method == "beta_binomial":  # ranks straight from the mixture (no radius to turn into ranks)
        lower, upper = _mixture_ranks(p, times, alpha, t_opt)
        return (int(lower), int(upper)) if np.ndim(t) == 0 else (lower, upper)
    else:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    with np.errstate(invalid="ignore"):
        lower = np.floor(times * (p - r_low) + 1)
        upper = np.ceil(times * (p + r_high))
    # An infinite radius leaves that end unbounded: rank 0 below, t + 1 above.
    lower = np.where(np.isfinite(lower), np.maximum(lower, 0), 0).astype(np.int64)
    upper = np.where(np.isfinite(upper), np.minimum(upper, times + 1), times + 1).astype(np.int64)
    if np.ndim(t) == 0:
        return int(lower), int(upper)
    return lower, upper


def _mixture_ranks(p: float, times: np.ndarray, alpha: float, t_opt: float) -> tuple[np.ndarray, np.ndarray]:
    """``mixture_rank_pair`` (analysis/mixture.py: Theorem 1 with the beta-binomial mixture) at every t."""
    alpha = check_alpha(alpha)
    if np.any(times != np.floor(times)):
        raise ValueError("t must count whole observations for method beta_binomial")
    lower = np.empty(times.shape, np.int64)
    upper = np.empty(times.shape, np.int64)
    for index, t in np.ndenumerate(times):
        lower[index], upper[index] = mixture_rank_pair(p, int(t), alpha, float(t_opt))
    return lower, upper


@dataclass(frozen=True)
class QuantileCS:
    """A confidence sequence's bounds on the p-quantile at time t; ``low``/``high`` are None while that end
    is not bounded. Iterates as (low, high)."""

    low: float | None
    high: float | None
    t: int
    p: float
    alpha: float
    method: str
    lower_rank: int
    upper_rank: int

    def __iter__(self):
        return iter((self.low, self.high))


def quantile_cs(values, p: float = 0.5, alpha: float = 0.05, method: str = "double_stitching",
                t_opt: float = 100) -> QuantileCS:
    """Anytime-valid confidence sequence for the p-quantile of an i.i.d. stream, at t = len(values).

    Howard & Ramdas 2022: ``method="double_stitching"`` uses Theorem 3 for the one quantile p;
    ``method="lil"`` uses Theorem 2 / Corollary 2 (uniform over quantiles, infinite before t = t_opt,
    which plays confseq's ``t_min``). With probability >= 1 - alpha the bounds cover the true p-quantile
    at every t at once, however often they are looked at. Assumes only i.i.d. observations (any
    distribution, ties allowed). ``values`` need not be sorted.

    >>> cs = quantile_cs(list(range(1000)), p=0.5, alpha=0.05)
    >>> (cs.low, cs.high)
    (431.0, 568.0)
    """
    ordered = np.sort(np.asarray(values, dtype=float).ravel())
    if ordered.size == 0:
        raise ValueError("values must hold at least one observation")
    if not np.all(np.isfinite(ordered)):
        raise ValueError("values must be finite")
    t = int(ordered.size)
    lower_rank, upper_rank = quantile_cs_ranks(t, p, alpha, method, t_opt)
    low = float(ordered[lower_rank - 1]) if lower_rank >= 1 else None
    high = float(ordered[upper_rank - 1]) if upper_rank <= t else None
    return QuantileCS(low, high, t, float(p), float(alpha), method, lower_rank, upper_rank)


# --- the beta-binomial mixture and the two-sample quantile test (perfctl ab's A/B p-value) -----------------
#
def _check_arm(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must hold at least one observation")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return np.sort(array)


def _check_t_opt(t_opt) -> int:
    # confseq's QuantileABTest takes an int t_opt (pybind11 refuses a float there).
    if isinstance(t_opt, bool) or not isinstance(t_opt, (int, np.integer)) or t_opt < 1:
        raise ValueError(f"t_opt must be an integer >= 1, got {t_opt!r}")
    return int(t_opt)


@lru_cache(maxsize=64)
def _quantile_ab_mixture(quantile_p: float, t_opt: int, alpha_opt: float) -> BetaBinomialMixture:
    # Each arm's count of values below the quantile, less p t, is a sub-Bernoulli(p, 1 - p) sum with
    # variance process p (1 - p) t: the two-sided mixture tuned for t = t_opt.
    return BetaBinomialMixture(t_opt * quantile_p * (1 - quantile_p), alpha_opt, quantile_p, 1 - quantile_p,
                               False)


def _arm_log_superMG(mixture: BetaBinomialMixture, quantile_p: float, size: int, prop_below: float) -> float:
    # QuantileABTest::arm_log_superMG: the arm's mixture if a proportion prop_below of it lay below the
    # common quantile.
    return mixture.log_superMG((prop_below - quantile_p) * size, quantile_p * (1 - quantile_p) * size)


@lru_cache(maxsize=1024)
def _arm_minimum(quantile_p: float, t_opt: int, alpha_opt: float, size: int) -> tuple[float, float]:
    """(argmin, min) over prop_below in [0, 1] of an arm's log mixture (boost's Brent, 20 bits, as
    confseq's ``get_G_fn``); depends on the arm's size only, so cached."""
    mixture = _quantile_ab_mixture(quantile_p, t_opt, alpha_opt)
    return _boost_brent_find_minima(
        lambda prop: _arm_log_superMG(mixture, quantile_p, size, prop), 0.0, 1.0, 20)


@dataclass(frozen=True)
class _ArmProfile:
    """confseq's ``GFunction`` for one arm: G(x), the arm's log mixture were x the common p-quantile, its
    least value over the order statistics [minimum_start_x, minimum_end_x] around the minimiser."""

    ordered: np.ndarray
    mixture: BetaBinomialMixture
    quantile_p: float
    minimizer: float
    minimum: float
    minimum_start_x: float
    minimum_end_x: float

    @classmethod
    def of(cls, ordered: np.ndarray, quantile_p: float, t_opt: int, alpha_opt: float) -> _ArmProfile:
        size = ordered.size
        minimizer, minimum = _arm_minimum(quantile_p, t_opt, alpha_opt, size)
        lower_rank, upper_rank = math.ceil(minimizer * size), math.floor(minimizer * size) + 1
        if not 1 <= lower_rank <= upper_rank <= size:
            raise ArithmeticError(f"minimiser {minimizer!r} of an arm of {size} is not inside (0, 1)")
        return cls(ordered, _quantile_ab_mixture(quantile_p, t_opt, alpha_opt), quantile_p, minimizer, minimum,
                   float(ordered[lower_rank - 1]), float(ordered[upper_rank - 1]))

    def G(self, x: np.ndarray) -> np.ndarray:
        """G at each x: below the minimum's order statistics the proportion of values <= x, above them the
        proportion < x (the side on which G is least), between them the minimiser."""
        size = self.ordered.size
        counts = np.where(x < self.minimum_start_x, np.searchsorted(self.ordered, x, side="right"),
                          np.searchsorted(self.ordered, x, side="left"))
        flat = (x >= self.minimum_start_x) & (x <= self.minimum_end_x)
        at_count: dict[int, float] = {}
        values = []
        for count, is_flat in zip(counts.tolist(), flat.tolist()):
            if is_flat:
                values.append(self.minimum)
                continue
            if count not in at_count:
                at_count[count] = _arm_log_superMG(self.mixture, self.quantile_p, size, count / size)
            values.append(at_count[count])
        return np.array(values)


def _log_superMG_lower_bound(a_ordered: np.ndarray, b_ordered: np.ndarray, quantile_p: float, t_opt: int,
                             alpha_opt: float) -> float:
    """min over x of G_A(x) + G_B(x) (confseq's ``log_superMG_lower_bound``). Both are non-increasing up to
    their minimum's order statistics and non-decreasing after, so the minimum lies between the two arms'
    flat stretches, at one of the second arm's order statistics or an end (``find_log_superMG_lower_bound``,
    here over all those order statistics at once)."""
    arm_a = _ArmProfile.of(a_ordered, quantile_p, t_opt, alpha_opt)
    arm_b = _ArmProfile.of(b_ordered, quantile_p, t_opt, alpha_opt)
    first, second = (arm_a, arm_b) if arm_a.minimum_end_x <= arm_b.minimum_end_x else (arm_b, arm_a)

    start_index = int(np.searchsorted(second.ordered, first.minimum_end_x, side="right"))
    end_index = int(np.searchsorted(second.ordered, second.minimum_start_x, side="right"))
    between = second.ordered[max(1, start_index) - 1:end_index]
    distinct = between[np.concatenate(([True], between[1:] != between[:-1]))] if between.size else between
    # The two ends first, then the second arm's distinct order statistics between them.
    x = np.concatenate(([first.minimum_end_x, second.minimum_start_x], distinct))
    return float((first.G(x) + second.G(x)).min())


def quantile_ab_p_value(a_values, b_values, quantile_p: float, t_opt: int, alpha_opt: float = 0.05) -> float:
    """Anytime-valid two-sided p-value for H0: arms A and B have the same p-quantile.

    Howard & Ramdas 2022, Theorem 5 (the sequential two-sample quantile test; confseq's
    ``QuantileABTest::p_value``, which its README cites as Theorem 5, two-sided equality case). Were x the
    common p-quantile, each arm's count of values below x, less p t, would be a sum of sub-Bernoulli
    increments; the two-sided beta-binomial mixture (``BetaBinomialMixture``, tuned for an arm of
    ``t_opt`` observations at level ``alpha_opt``) of each arm is then a supermartingale, and so is their
    product. Minimising the product over x gives a process that is, under H0, at most a supermartingale's
    value, so p = min(1, 1 / min_x M_A(x) M_B(x)) satisfies P(p_t <= alpha at some t) <= alpha: the p-value
    may be read after every observation and the test stopped whenever it is below alpha.

    Assumes each arm is i.i.d. (any distribution, ties allowed) and the arms independent of each other; the
    arms may have different sizes. ``alpha_opt`` tunes power and does not change validity.

    >>> round(quantile_ab_p_value(np.arange(1, 1001), np.arange(86, 1086), 0.5, 100), 6)
    0.083805
    >>> quantile_ab_p_value(np.arange(1, 1001), np.arange(1, 1001), 0.5, 100)
    1.0
    """
    a_ordered = _check_arm(a_values, "a_values")
    b_ordered = _check_arm(b_values, "b_values")
    quantile_p = _check_quantile(quantile_p)
    t_opt = _check_t_opt(t_opt)
    alpha_opt = _check_alpha_named(alpha_opt, "alpha_opt")
    lower_bound = _log_superMG_lower_bound(a_ordered, b_ordered, quantile_p, t_opt, alpha_opt)
    # min(1, exp(-L)), without exp overflowing where L is very negative.
    return math.exp(min(0.0, -lower_bound))


def _check_alpha_named(alpha: float, name: str) -> float:
    if isinstance(alpha, bool) or not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"{name} must be in (0, 1), got {alpha!r}")
    return float(alpha)


@dataclass(frozen=True)
class QuantileRatioCS:
    """The ratios c = q_p(A) / q_p(B) that the quantile A/B test does not reject at level alpha: ``low`` and
    ``high`` bound them (None while that end is unbounded). Iterates as (low, high)."""

    low: float | None
    high: float | None
    quantile_p: float
    alpha: float
    t_opt: int
    alpha_opt: float

    def __iter__(self):
        return iter((self.low, self.high))


def quantile_ab_ratio_cs(a_values, b_values, quantile_p: float, t_opt: int, alpha: float = 0.05,
                         alpha_opt: float | None = None) -> QuantileRatioCS:
    """Anytime-valid confidence sequence for the ratio q_p(A) / q_p(B) of two positive arms' p-quantiles, by
    inverting ``quantile_ab_p_value``: c is kept while the test of H0: q_p(A) = c q_p(B) (arm A against arm B
    scaled by c, whose p-quantile is c q_p(B)) has p >= alpha. Each test is anytime-valid, so the true ratio
    is inside at every t with probability >= 1 - alpha.

    The p-value is unimodal in c: with G_A, G_B non-increasing up to their flat stretches [l_A, u_A],
    [l_B, u_B] and non-decreasing after, min_x G_A(x) + G_B(x / c) is non-decreasing in c for
    c >= l_A / u_B and non-increasing for c <= u_A / l_B, and constant (p = 1) between. So the kept ratios
    form an interval around that plateau, and each end is found by bisection on log c between a kept c and
    a rejected one, to a relative 2^-40. The p-value only changes where some a_i / b_j crosses, so the end
    returned is the rejected end of the last bracket: the interval holds every kept c (conservative by at
    most that 2^-40). An end is None when even arms wholly apart (c beyond max A / min B or below
    min A / max B) are not rejected. ``alpha_opt`` defaults to ``alpha``.

    >>> cs = quantile_ab_ratio_cs(np.arange(1, 1001), np.arange(86, 1086), 0.5, 100)
    >>> (round(cs.low, 4), round(cs.high, 4))
    (0.7239, 1.0055)
    """
    a_ordered = _check_arm(a_values, "a_values")
    b_ordered = _check_arm(b_values, "b_values")
    if a_ordered[0] <= 0 or b_ordered[0] <= 0:
        raise ValueError("a_values and b_values must be > 0 for a ratio of quantiles")
    quantile_p = _check_quantile(quantile_p)
    t_opt = _check_t_opt(t_opt)
    alpha = check_alpha(alpha)
    alpha_opt = alpha if alpha_opt is None else _check_alpha_named(alpha_opt, "alpha_opt")

    def kept(log_ratio: float) -> bool:
        lower_bound = _log_superMG_lower_bound(a_ordered, math.exp(log_ratio) * b_ordered, quantile_p, t_opt,
                                               alpha_opt)
        return math.exp(min(0.0, -lower_bound)) >= alpha

    arm_a = _ArmProfile.of(a_ordered, quantile_p, t_opt, alpha_opt)
    arm_b = _ArmProfile.of(b_ordered, quantile_p, t_opt, alpha_opt)
    # The plateau's middle: the flat stretches of A and c B overlap, so p = 1 there.
    inside = 0.5 * (math.log(arm_a.minimum_start_x / arm_b.minimum_end_x)
                    + math.log(arm_a.minimum_end_x / arm_b.minimum_start_x))
    if not kept(inside):
        raise ArithmeticError("the quantile A/B test rejects the ratio where both arms' minima overlap")

    def end(outside: float) -> float | None:
        if kept(outside):
            return None
        keep, reject = inside, outside
        while abs(reject - keep) > 2.0**-40 * max(1.0, abs(keep)):
            middle = (keep + reject) / 2
            if kept(middle):
                keep = middle
            else:
                reject = middle
        return math.exp(reject)

    # Beyond these ratios every value of one arm lies below every value of the other: p no longer changes.
    low = end(math.log(a_ordered[0] / b_ordered[-1]) - 1)
    high = end(math.log(a_ordered[-1] / b_ordered[0]) + 1)
    return QuantileRatioCS(low, high, quantile_p, alpha, t_opt, alpha_opt)
