"""The beta-binomial mixture boundary and the quantile ranks it gives: the part of analysis/sequential.py that
``perfctl ab`` asks after every round, in plain Python over math, so that ab never imports numpy (~80 ms of
every start; bench/stat_rate.py holds ab's per-run rate to within 10% of stat's).

Howard, Ramdas, McAuliffe & Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann.
Statist. 49(2), 2021, Propositions 6 and 7 (the mixture); Howard & Ramdas, "Sequential estimation of quantiles
with applications to A/B-testing and best-arm identification", Bernoulli 28(3), 2022, Theorem 1 (the ranks),
as Steven Howard's ``confseq`` package (MIT licence; ``src/confseq/uniform_boundaries.h``) computes them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache


def check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return float(alpha)


# Transcribed from confseq's uniform_boundaries.h (BetaBinomialMixture, find_mixture_bound, QuantileABTest).
# Where the C++ calls boost, the two helpers below are boost 1.74's algorithms step for step, not just any
# root finder or minimiser: the p-value reads order statistics at ranks set by the minimiser's exact
# position, so a different iteration path would pick other ranks.


def _boost_bisect(function, low: float, high: float, bits: int = 40) -> tuple[float, float]:
    """boost::math::tools::bisect with eps_tolerance(bits): the final bracket (low, high)."""
    f_low, f_high = function(low), function(high)
    if f_low == 0:
        return low, low
    if f_high == 0:
        return high, high
    if not low < high or f_low * f_high >= 0:
        raise ArithmeticError(f"no change of sign on [{low!r}, {high!r}]")
    eps = max(math.ldexp(1.0, 1 - bits), 4 * 2.0**-52)
    while not abs(low - high) <= eps * min(abs(low), abs(high)):
        middle = (low + high) / 2
        f_middle = function(middle)
        if middle in (low, high):
            break
        if f_middle == 0:
            return middle, middle
        if (f_middle > 0) != (f_low > 0):
            high = middle
        else:
            low, f_low = middle, f_middle
    return low, high


# boost writes the golden-section fraction as a float literal (0.3819660f), widened to double.
_BOOST_GOLDEN = struct.unpack("f", struct.pack("f", 0.3819660))[0]


def _boost_brent_find_minima(function, low: float, high: float, bits: int) -> tuple[float, float]:
    """boost::math::tools::brent_find_minima(function, low, high, bits): (argmin, minimum) by Brent's
    method (golden section and parabolic steps), to a relative 2^(1 - min(bits, 26))."""
    tolerance = math.ldexp(1.0, 1 - min(26, bits))
    x = w = v = high
    fx = fw = fv = function(x)
    delta = delta2 = 0.0
    while True:
        middle = (low + high) / 2
        fract1 = tolerance * abs(x) + tolerance / 4
        fract2 = 2 * fract1
        if abs(x - middle) <= fract2 - (high - low) / 2:
            return x, fx
        golden = True
        if abs(delta2) > fract1:
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2 * (q - r)
            if q > 0:
                p = -p
            q = abs(q)
            previous_delta2 = delta2
            delta2 = delta
            if not (abs(p) >= abs(q * previous_delta2 / 2) or p <= q * (low - x) or p >= q * (high - x)):
                golden = False
                delta = p / q
                u = x + delta
                if u - low < fract2 or high - u < fract2:
                    delta = -abs(fract1) if middle - x < 0 else abs(fract1)
        if golden:
            delta2 = low - x if x >= middle else high - x
            delta = _BOOST_GOLDEN * delta2
        if abs(delta) >= fract1:
            u = x + delta
        else:
            u = x + abs(fract1) if delta > 0 else x - abs(fract1)
        fu = function(u)
        if fu <= fx:
            if u >= x:
                low = x
            else:
                high = x
            v, w, x = w, x, u
            fv, fw, fx = fw, fx, fu
        else:
            if u < x:
                low = u
            else:
                high = u
            if fu <= fw or w == x:
                v, w = w, u
                fv, fw = fw, fu
            elif fu <= fv or v == x or v == w:
                v, fv = u, fu


def log_beta(a: float, b: float) -> float:
    """ln B(a, b) = ln Gamma(a) + ln Gamma(b) - ln Gamma(a + b) (confseq's ``log_beta``)."""
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def log_incomplete_beta(a: float, b: float, x: float) -> float:
    """ln of the (unregularized) incomplete beta B(x; a, b) = I_x(a, b) B(a, b) (confseq's
    ``log_incomplete_beta``; x = 1 gives ln B(a, b) exactly). Where I_x(a, b) underflows to 0 the result
    is -inf, as C's log(0) gives in confseq."""
    if x == 1:
        return log_beta(a, b)
    from perfctl.analysis.special import betainc

    regularized = betainc(a, b, x)
    return (math.log(regularized) if regularized > 0 else -math.inf) + log_beta(a, b)


def _normal_mixture_best_rho(v: float, alpha: float, is_one_sided: bool) -> float:
    """The normal mixture's rho that minimises the boundary at intrinsic time v for crossing probability
    alpha (Howard et al. 2021, section 3.5; confseq's ``TwoSidedNormalMixture::best_rho``, the one-sided
    one at 2 alpha)."""
    if is_one_sided:
        alpha = 2 * alpha
    return v / (2 * math.log(1 / alpha) + math.log(1 + 2 * math.log(1 / alpha)))


@dataclass(frozen=True)
class BetaBinomialMixture:
    """The beta-binomial mixture supermartingale for sub-Bernoulli(g, h) increments: Howard, Ramdas,
    McAuliffe & Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist.
    49(2), 2021, Proposition 6 (two-sided) and 7 (one-sided); confseq's ``BetaBinomialMixture``, whose
    method names it keeps.

    ``exp(log_superMG(S_t, V_t))`` is a nonnegative supermartingale when S_t has sub-Bernoulli increments
    with range (-g, h) and variance process V_t, so by Ville's inequality it exceeds 1/alpha with probability
    <= alpha ever. The mixing density's parameter r is tuned (``optimal_r``) so the boundary is tightest at
    V_t = v_opt for crossing probability alpha_opt.
    """

    v_opt: float
    alpha_opt: float
    g: float
    h: float
    is_one_sided: bool = True

    def __post_init__(self):
        if not (isinstance(self.v_opt, (int, float)) and self.v_opt > 0 and math.isfinite(self.v_opt)):
            raise ValueError(f"v_opt must be finite and > 0, got {self.v_opt!r}")
        if not (isinstance(self.alpha_opt, (int, float)) and 0 < self.alpha_opt < 1):
            raise ValueError(f"alpha_opt must be in (0, 1), got {self.alpha_opt!r}")
        for name in ("g", "h"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        g, h = self.g, self.h
        r = self.optimal_r(self.v_opt, self.alpha_opt, g, h, self.is_one_sided)
        object.__setattr__(self, "r", r)
        object.__setattr__(self, "normalizer", log_incomplete_beta(
            r / (g * (g + h)), r / (h * (g + h)), h / (g + h) if self.is_one_sided else 1))

    @staticmethod
    def optimal_r(v_opt: float, alpha_opt: float, g: float, h: float, is_one_sided: bool) -> float:
        """The normal mixture's best rho less the variance g h, kept >= 1e-3 g h (confseq's ``optimal_r``)."""
        rho = _normal_mixture_best_rho(v_opt, alpha_opt, is_one_sided)
        return max(rho - g * h, 1e-3 * g * h)

    def log_superMG(self, s: float, v: float) -> float:
        """ln m(s, v), the mixture at S_t = s, V_t = v (Proposition 6/7)."""
        g, h, r = self.g, self.h, self.r
        x = h / (g + h) if self.is_one_sided else 1
        return (v / (g * h) * math.log(g + h)
                - ((v + h * s) / (h * (g + h))) * math.log(g)
                - ((v - g * s) / (g * (g + h))) * math.log(h)
                + log_incomplete_beta((r + v - g * s) / (g * (g + h)), (r + v + h * s) / (h * (g + h)), x)
                - self.normalizer)

    def s_upper_bound(self, v: float) -> float:
        """The largest S_t possible at V_t = v (increments at most h, variance g h each: s <= v / g)."""
        return v / self.g

    def bound(self, v: float, log_threshold: float) -> float:
        """The boundary: the s where ln m(s, v) reaches log_threshold (= ln(1/alpha)), by bisection on
        [0, s_upper_bound(v)] to a relative 2^-39 (confseq's ``find_mixture_bound``); s_upper_bound(v)
        itself when even that s stays below the threshold."""

        def excess(s: float) -> float:
            return self.log_superMG(s, v) - log_threshold

        s_upper = self.s_upper_bound(v)
        if excess(s_upper) < 0:
            return s_upper
        low, high = _boost_bisect(excess, 0.0, s_upper)
        return (low + high) / 2


def beta_binomial_log_mixture(s: float, v: float, v_opt: float, g: float, h: float, alpha_opt: float = 0.05,
                              is_one_sided: bool = True) -> float:
    """ln m(s, v) of the beta-binomial mixture (confseq.boundaries' ``beta_binomial_log_mixture``).

    >>> round(beta_binomial_log_mixture(20.0, 100.0, 100.0, 0.5, 0.5, is_one_sided=False), 6)
    0.678018
    """
    return BetaBinomialMixture(v_opt, alpha_opt, g, h, is_one_sided).log_superMG(s, v)


def beta_binomial_mixture_bound(v: float, alpha: float, v_opt: float, g: float, h: float,
                                alpha_opt: float = 0.05, is_one_sided: bool = True) -> float:
    """The beta-binomial mixture boundary at intrinsic time v, crossing probability <= alpha
    (confseq.boundaries' ``beta_binomial_mixture_bound``).

    >>> round(beta_binomial_mixture_bound(100.0, 0.05, 100.0, 0.5, 0.5, is_one_sided=False), 6)
    30.287891
    """
    alpha = check_alpha(alpha)
    return BetaBinomialMixture(v_opt, alpha_opt, g, h, is_one_sided).bound(v, math.log(1 / alpha))


@lru_cache(maxsize=64)
def _quantile_mixture(p: float, alpha: float, t_opt: float) -> BetaBinomialMixture:
    return BetaBinomialMixture(p * (1 - p) * t_opt, alpha, p, 1 - p, is_one_sided=False)


_RANK_HINTS: dict[tuple, tuple[int, int]] = {}


def mixture_rank_pair(p: float, t: int, alpha: float, t_opt: float) -> tuple[int, int]:
    """(lower, upper): Theorem 1's ranks (Howard & Ramdas 2022) at one whole t >= 1 for a fixed p. The two-sided
    beta-binomial mixture boundary u_t on the deviations S_t = sum(1{X_i <= q_p} - p), sub-Bernoulli with range (-p,
    1 - p) and variance V_t = t p (1 - p) (confseq's ``demo/quantiles.py`` fixed_quantile_confidence_bounds), turned
    into the ranks ceil(t p + u_t) above and floor(t p - u'_t + 1) below (u' the boundary of the mirrored
    deviations).

    The ranks are found without solving for u_t: as the mixture grows with s, ceil(t p + u_t) is the smallest
    integer j whose deviation s = j - t p already reaches the threshold ln(1/alpha), a search of one or two
    evaluations from the last t's rank (solving for u_t to 2^-40 took ~40). Where the boundary is the
    largest S_t can be (every observation below the quantile: s_upper_bound), the mixture never crosses it,
    so no observation can bound that end: rank t + 1 above, 0 below. (The demo's formula would read the
    extreme order statistic there, which misses whenever every observation falls on one side: probability
    p^t, 1/4 at t = 2 for the median.)"""
    log_threshold = math.log(1 / alpha)
    upper = _first_crossing_rank(p, t, alpha, t_opt, log_threshold)
    # the lower rank is the upper rank of the quantile 1 - p counted from the other end
    mirrored = upper if p == 0.5 else _first_crossing_rank(1 - p, t, alpha, t_opt, log_threshold)
    return t + 1 - mirrored, upper


def _first_crossing_rank(q: float, t: int, alpha: float, t_opt: float, log_threshold: float) -> int:
    """The smallest j in [ceil(t q), t] whose deviation j - t q reaches the q-mixture's threshold, or t + 1
    when even the largest deviation does not."""
    mixture = _quantile_mixture(q, alpha, t_opt)
    v = q * (1 - q) * t
    s_upper = mixture.s_upper_bound(v)
    base = t * q

    def crosses(j: int) -> bool:
        return mixture.log_superMG(min(j - base, s_upper), v) >= log_threshold

    if not crosses(t):
        return t + 1
    low = max(math.ceil(base), 0)
    key = (q, alpha, t_opt)
    last_t, last_rank = _RANK_HINTS.get(key, (t, t))
    guess = min(t, max(low, last_rank + round((t - last_t) * q)))
    # gallop from the guess to a bracket (a, b] with crosses(b) and not crosses(a), then bisect
    if crosses(guess):
        b, step = guess, 1
        a = guess - step
        while a >= low and crosses(a):
            b, step = a, step * 2
            a = b - step
        a = max(a, low - 1)
    else:
        a, step = guess, 1
        b = guess + step
        while b < t and not crosses(b):
            a, step = b, step * 2
            b = a + step
        b = min(b, t)
    while b - a > 1:
        middle = (a + b) // 2
        if crosses(middle):
            b = middle
        else:
            a = middle
    _RANK_HINTS[key] = (t, b)
    return b
