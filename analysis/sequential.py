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

The code is pure (no I/O) and needs only numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

METHODS = ("double_stitching", "lil")

# Bernoulli numbers B_2k / (2k)! for k = 1..8, for the Euler-Maclaurin tail of zeta(s).
_BERNOULLI_OVER_FACTORIAL = (
    1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160,
    -691 / 1307674368000, 1 / 74724249600, -3617 / 10670622842880000,
)


def _check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return float(alpha)


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
    alpha = _check_alpha(alpha)
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
    alpha = _check_alpha(alpha)
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
    times = _check_times(t)
    if method == "double_stitching":
        r_high = double_stitching_bound(p, times, alpha, t_opt) / times
        r_low = double_stitching_bound(1 - p, times, alpha, t_opt) / times
    elif method == "lil":
        r_high = r_low = empirical_process_lil_bound(times, alpha, t_opt)
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
