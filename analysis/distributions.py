"""Null distributions and small tests of the compare path, computed without scipy.stats.

Importing scipy.stats takes about a second; ``perfctl compare`` needs four things from it, each a few dozen
lines over numpy and scipy.special (which compare imports anyway). Each is the algorithm scipy implements,
step for step, so the values are scipy's (tests/test_distributions.py holds them to it):

- ``shapiro_wilk``: the Shapiro-Wilk W test by Royston's Algorithm AS R94 (scipy.stats.shapiro);
- ``ks_two_sample``: the two-sided two-sample Kolmogorov-Smirnov test, exact after Hodges (scipy.stats.ks_2samp,
  method "auto");
- ``binom_cdf``/``binom_sf``: binomial tails (scipy.stats.binom.cdf/sf);
- ``brown_forsythe``: Levene's test on deviations from the median (scipy.stats.levene, center="median").

Pure: arrays in, frozen results out; no I/O.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special


def _finite_sample(name: str, values, minimum: int) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or data.size < minimum:
        raise ValueError(f"{name}: need a 1-D sample of at least {minimum} values")
    if not np.isfinite(data).all():
        raise ValueError(f"{name}: all values must be finite")
    return data


# --- Shapiro-Wilk ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShapiroWilkResult:
    """``statistic`` is W in (0, 1]; ``pvalue`` the upper-tail significance of 1 - W (small: not normal)."""

    statistic: float
    pvalue: float


# Royston (1995), AS R94: polynomial approximations of the coefficients a_n, a_(n-1) (C1, C2), of the mean and
# log standard deviation of the normalised W for 4 <= n <= 11 (C3, C4, with gamma G) and n >= 12 (C5, C6).
# Stored as AS R94 stores them: constant first, then the rest from the highest power down (see _poly).
_C1 = (0.0, 0.221157, -0.147981, -0.207119e1, 0.4434685e1, -0.2706056e1)
_C2 = (0.0, 0.42981e-1, -0.293762, -0.1752461e1, 0.5682633e1, -0.3582633e1)
_C3 = (0.5440, -0.39978, 0.25054e-1, -0.6714e-3)
_C4 = (0.13822e1, -0.77857, 0.62767e-1, -0.20322e-2)
_C5 = (-0.15861e1, -0.31082, -0.83751e-1, 0.38915e-2)
_C6 = (-0.4803, -0.82676e-1, 0.30302e-2)
_G = (-0.2273e1, 0.459)
_SMALL = 1e-19  # AS R94's floor: a range below it is "zero range", a p-value it cannot resolve is this


def _poly(c: tuple[float, ...], x: float) -> float:
    """AS R94's POLY: c[0] + c[1] x + ... + c[-1] x^(len - 1), by Horner from the highest power, evaluated
    in the algorithm's order (so the value is the Fortran's, and scipy's, to the bit)."""
    if len(c) == 1:
        return c[0]
    p = x * c[-1]
    if len(c) == 2:
        return c[0] + p
    for coefficient in c[-2:0:-1]:
        p = (p + coefficient) * x
    return c[0] + p


def _ppnd(p: np.ndarray) -> np.ndarray:
    """Normal quantiles of p in (0, 1/2) by Beasley & Springer's Algorithm AS 111 (Applied Statistics 26(1),
    1977), the approximation AS R94 uses for m_i (a rational function near the median, else in
    sqrt(-log p)); the tail's logarithms are libm's, as the compiled algorithm calls them."""
    q = p - 0.5
    r = q * q
    central = q * (((-25.44106049637 * r + 41.39119773534) * r + -18.61500062529) * r + 2.50662823884)
    central = central / ((((3.13082909833 * r + -21.06224101826) * r + 23.08336743743) * r + -8.47351093090) * r + 1.0)
    tail = np.abs(q) > 0.42
    if tail.any():
        s = np.sqrt(np.array([-math.log(v) for v in p[tail]]))
        value = ((2.32121276858 * s + 4.85014127135) * s + -2.29796479134) * s + -2.78718931138
        value = value / ((1.63706781897 * s + 3.54388924762) * s + 1.0)
        central[tail] = -value  # q < 0: the lower tail
    return central


@functools.lru_cache(maxsize=64)
def _shapiro_coefficients(n: int) -> np.ndarray:
    """The n antisymmetric weights of the sorted sample in W (AS R94: -a_i on the lower half, a_i mirrored on
    the upper, 0 in the middle for odd n), read-only and cached per n."""
    half = n // 2
    if n == 3:
        a = np.array([math.sqrt(2) / 2])
    else:
        a = _ppnd((np.arange(1, half + 1) - 0.375) / (n + 0.25))
        sum_squares = 2.0 * float(np.cumsum(a * a)[-1])  # sequential, as the algorithm sums
        root = math.sqrt(sum_squares)
        rsn = 1 / math.sqrt(n)
        a1 = _poly(_C1, rsn) - (float(a[0]) / root)
        if n > 5:
            first = 2
            a2 = -float(a[1]) / root + _poly(_C2, rsn)
            fac = math.sqrt((sum_squares - (2 * float(a[0]) ** 2) - 2 * float(a[1]) ** 2)
                            / (1 - (2 * a1 ** 2) - 2 * a2 ** 2))
            a[1] = a2
        else:
            first = 1
            fac = math.sqrt((sum_squares - 2 * float(a[0]) ** 2) / (1 - 2 * a1 ** 2))
        a[0] = a1
        a[first:] *= -1.0 / fac
    weights = np.zeros(n)
    weights[:half] = -a
    weights[n - half:] = a[::-1]
    weights.flags.writeable = False
    return weights


def _alnorm_upper(z: float) -> float:
    """P[Z > z] by Hill's Algorithm AS 66 (Applied Statistics 22(3), 1973), with its 2001 extension of the
    upper range to 38: AS R94's normal tail, kept so the p-value is the algorithm's (and scipy's)."""
    upper = True
    if not z > 0:  # also NaN, as the algorithm tests it
        upper = False
        z = -z
    if not (z <= 7.0 or (upper and z <= 38.0)):
        return 0.0 if upper else 1.0
    y = 0.5 * z * z
    if z <= 1.28:
        tail = 0.5 - z * (0.398942280444 - 0.399903438504 * y / (
            y + 5.75885480458 - 29.8213557808 / (y + 2.62433121679 + 48.6959930692 / (y + 5.92885724438))))
    else:
        tail = 0.398942280385 * math.exp(-y) / (z - 3.8052e-8 + 1.00000615302 / (
            z + 3.98064794e-4 + 1.98615381364 / (z - 0.151679116635 + 5.29330324926 / (
                z + 4.8385912808 - 15.1508972451 / (z + 0.742380924027 + 30.789933034 / (z + 3.99019417011))))))
    return tail if upper else 1 - tail


def _libm_log(x: float) -> float:
    """log as C computes it: -inf at 0 and NaN below, where math.log raises."""
    if x > 0:
        return math.log(x)
    return -math.inf if x == 0 else math.nan


def _swilk(y: np.ndarray) -> ShapiroWilkResult:
    """AS R94 on ascending values ``y`` (complete sample, no censoring)."""
    n = y.size
    weights = _shapiro_coefficients(n)
    spread = float(y[-1] - y[0])
    if spread < _SMALL:
        return ShapiroWilkResult(1.0, 1.0)  # zero range: AS R94's fault 6, reported as W = 1, p = 1
    scaled = y / spread
    # the sums run sequentially (cumulative sums), as the algorithm's loops add, so W is the algorithm's
    mean_weight = float(np.cumsum(weights)[-1]) / n
    mean_value = float(np.cumsum(scaled)[-1]) / n
    centred_weights = weights - mean_weight
    centred_values = scaled - mean_value
    ssa = float(np.cumsum(centred_weights * centred_weights)[-1])
    ssx = float(np.cumsum(centred_values * centred_values)[-1])
    sax = float(np.cumsum(centred_weights * centred_values)[-1])
    root = math.sqrt(ssa * ssx)
    w1 = (root - sax) * (root + sax) / (ssa * ssx)
    w = 1 - w1
    if n == 3:  # exact (Shapiro & Wilk 1965); W >= 3/4 in theory, clamped where rounding puts it below
        if w < 0.75:
            return ShapiroWilkResult(0.75, 0.0)
        return ShapiroWilkResult(w, 1.0 - 6 / math.pi * math.acos(math.sqrt(w)))
    # Royston's normalising transformations of log(1 - W) (AS R94, after Royston 1992)
    log_w1 = _libm_log(w1)
    log_n = math.log(n)
    if n <= 11:
        gamma = _poly(_G, n)
        if log_w1 >= gamma:
            return ShapiroWilkResult(w, _SMALL)
        log_w1 = -_libm_log(gamma - log_w1)
        mean, sd = _poly(_C3, n), math.exp(_poly(_C4, n))
    else:
        mean, sd = _poly(_C5, log_n), math.exp(_poly(_C6, log_n))
    return ShapiroWilkResult(w, _alnorm_upper((log_w1 - mean) / sd))


def shapiro_wilk(x) -> ShapiroWilkResult:
    """Shapiro-Wilk test of normality: H0, the sample comes from a normal distribution.

    W is the squared correlation of the ordered sample with approximate expected normal order statistics;
    the coefficients, and the p-value from Royston's normalising transformation of log(1 - W), are those
    of Royston, "Remark AS R94: A remark on Algorithm AS 181: The W-test for normality", Applied
    Statistics 44(4), 1995 (exact for n = 3). The algorithm scipy.stats.shapiro runs, with the same
    median-shift of the values first, so the same W and p-value; the p-value's approximation was fitted
    for n <= 5000 (scipy warns beyond; so does this docstring). Needs n >= 3 finite values; a sample of
    zero range gives W = 1, p = 1, as scipy's does (with a warning).

    >>> r = shapiro_wilk([2.1, 2.4, 1.9, 2.2, 2.0, 2.3, 2.5, 1.8])
    >>> round(r.statistic, 6), round(r.pvalue, 6)
    (0.974858, 0.933165)
    """
    data = _finite_sample("x", x, 3)
    y = np.sort(data)
    y -= data[data.size // 2]  # scipy's shift (gh-15777): a value near the median, taken unsorted
    return _swilk(y)


# --- two-sample Kolmogorov-Smirnov -------------------------------------------------------------------------

# scipy's ks_2samp computes its p-value exactly up to this many runs per side (method "auto"); beyond, its
# asymptotic branch evaluates the finite-n distribution (kstwo), which takes up to 2 s per call at 10^6 runs.
KS_EXACT_MAX = 10_000
KS_EXACT = "exact"
KS_ASYMPTOTIC = "asymptotic (Kolmogorov's limit)"


@dataclass(frozen=True)
class KSResult:
    """``statistic`` is D = max |F_x - F_y|; ``pvalue`` two-sided; ``method`` KS_EXACT or KS_ASYMPTOTIC."""

    statistic: float
    pvalue: float
    method: str


def ks_statistic(x_sorted: np.ndarray, y_sorted: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov D = max |F_x - F_y| over the pooled values, from ascending
    samples by one linear merge (as scipy computes it: ECDFs at each pooled value, counted <=)."""
    n, m = len(x_sorted), len(y_sorted)
    pooled = np.concatenate((x_sorted, y_sorted))
    order = np.argsort(pooled, kind="stable")
    values = pooled[order]
    x_count = np.cumsum(order < n)
    y_count = np.arange(1, n + m + 1) - x_count
    last_of_value = np.flatnonzero(np.append(values[1:] != values[:-1], True))
    differences = x_count[last_of_value] / n - y_count[last_of_value] / m
    return float(max(np.clip(-np.min(differences), 0, 1), np.max(differences)))


def _prob_outside_square(n: int, h: int) -> float:
    """P[D_{n,n} >= h/n] = 2 sum_k (-1)^(k+1) C(2n, n - kh) / C(2n, n) (Gnedenko & Korolyuk 1951), each ratio
    a product of h factors, nested Horner-like against the alternating sum's cancellation (scipy's
    _compute_prob_outside_square, in its order of operations)."""
    total = 0.0
    k = n // h
    while k >= 0:
        ratio = 1.0
        for j in range(h):
            ratio = (n - k * h - j) * ratio / (n + k * h + j + 1)
        total = ratio * (1.0 - total)
        k -= 1
    return 2 * total


def _prob_outside_band(m: int, n: int, g: int, h: int) -> float:
    """P[D_{m,n} >= h/lcm(m, n)] for m != n: the share of the C(m+n, n) lattice paths from (0, 0) to (m, n)
    that leave the band |x/m - y/n| < h/lcm (Hodges, "The significance probability of the Smirnov
    two-sample test", Arkiv for Matematik 3(43), 1958, the inside method), by Viehmann's recursion on that
    share itself, B(x, y) = (x B(x-1, y) + y B(x, y-1)) / (x + y) with B = 1 outside the band and 0 on the
    first column inside it ("Numerically more stable computation of the p-values for the two-sample
    Kolmogorov-Smirnov test", arXiv:2102.08037, 2021): scipy's _compute_outer_prob_inside_method.

    scipy runs the recursion column by column, each column a sequential loop (compiled); here it runs one
    anti-diagonal x + y = d at a time, whose cells depend only on the previous anti-diagonal, so each step
    is one numpy expression over the band's width, every cell computed by the same expression from the
    same neighbours (the same floating-point value)."""
    if m < n:
        m, n = n, m
    mg, ng = m // g, n // g
    columns = np.arange(1, m + 1)
    lowest = np.minimum(np.maximum(np.floor((ng * columns - h) / mg).astype(np.int64) + 1, 0), n)
    above = np.minimum(np.ceil((ng * columns + h) / mg).astype(np.int64), n + 1)
    if (above <= lowest).any():
        return 1.0  # a column with no cell inside the band: every path leaves it
    lowest = np.concatenate(([0], lowest))
    above = np.concatenate(([min(math.ceil(h / mg), n + 1)], above))
    index = np.arange(m + 1)
    diagonals = np.arange(m + n + 1)
    # cell (x, d - x) is inside iff lowest[x] + x <= d < above[x] + x; both bounds increase with x
    starts = np.searchsorted(above + index, diagonals, side="right")
    stops = np.searchsorted(lowest + index, diagonals, side="right")
    share = np.ones(m + 2)  # share[x + 1]: B(x, d - x) on the current diagonal; share[0] is column -1
    x_values = np.arange(m + 1, dtype=float)
    previous_start = 0
    for d in range(m + n + 1):
        start, stop = int(starts[d]), int(stops[d])
        x = x_values[start:stop]
        values = (share[start:stop] * x + share[start + 1:stop + 1] * (d - x)) / float(d or 1)
        if start == 0:
            values[0] = 0.0  # the first column's cells inside the band
        share[previous_start + 1:start + 1] = 1.0  # cells that left the band since the last diagonal
        share[start + 1:stop + 1] = values
        previous_start = start
    return float(share[m + 1])


def ks_two_sided(n: int, m: int, statistic: float) -> KSResult:
    """Two-sided p-value P[D_{n,m} >= statistic] under H0 (both samples from one continuous distribution),
    with the method: exact up to KS_EXACT_MAX values per side, as scipy.stats.ks_2samp (method "auto")
    computes it (D rounded to the lattice h/lcm(n, m) first, and reported so); beyond, Kolmogorov's
    limiting distribution of sqrt(nm/(n+m)) D (Kolmogorov 1933; Smirnov 1939), in microseconds, within 2%
    of scipy's finite-n p-value at 10^4 runs per side and closer with more.

    scipy falls back to its asymptotic branch when the exact computation overflows or leaves [0, 1]; the
    two-sided recursions above work on shares of paths, in [0, 1] by construction, and have never been
    seen to (sizes up to 10,000 per side): should one, the Kolmogorov limit is used and ``method`` says so.
    """
    if max(n, m) <= KS_EXACT_MAX:
        g = math.gcd(n, m)
        lcm = (n // g) * m
        h = int(round(statistic * lcm))
        if h == 0:
            return KSResult(h / lcm, 1.0, KS_EXACT)
        with np.errstate(invalid="raise", over="raise"):
            try:
                pvalue = _prob_outside_square(n, h) if n == m else _prob_outside_band(n, m, g, h)
            except (FloatingPointError, OverflowError):
                pvalue = math.nan
        if 0 <= pvalue <= 1:
            return KSResult(h / lcm, float(pvalue), KS_EXACT)
        statistic = h / lcm  # scipy keeps the rounded D when it falls back
    limit = float(special.kolmogorov(math.sqrt(n * m / (n + m)) * statistic))
    return KSResult(statistic, min(1.0, max(0.0, limit)), KS_ASYMPTOTIC)


def ks_two_sample(x, y) -> KSResult:
    """Two-sided two-sample Kolmogorov-Smirnov test: H0, x and y come from the same continuous distribution.

    D is the largest distance between the two empirical distribution functions; its p-value is exact up to
    KS_EXACT_MAX values per side (Hodges 1958; see ``ks_two_sided``), the same D and p-value as
    scipy.stats.ks_2samp(x, y) computes. Needs one finite value per side at least.

    >>> r = ks_two_sample([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])
    >>> r.statistic, round(r.pvalue, 6)
    (1.0, 0.028571)
    """
    x_sorted = np.sort(_finite_sample("x", x, 1))
    y_sorted = np.sort(_finite_sample("y", y, 1))
    return ks_two_sided(x_sorted.size, y_sorted.size, ks_statistic(x_sorted, y_sorted))


# --- binomial tails ----------------------------------------------------------------------------------------

def binom_cdf(k, n: int, p: float) -> np.ndarray:
    """P[Bin(n, p) <= k] for integer k (any: 0 below 0, 1 from n on), by the identity
    P[Bin(n, p) <= k] = I_(1-p)(n - k, k + 1) = 1 - I_p(k + 1, n - k) (Abramowitz & Stegun 26.5.24), with
    scipy.special's regularized incomplete beta: the identity scipy.stats.binom evaluates (Boost's
    ibetac), within 2e-13 of it where SPA compares tails with its risk (special.bdtr, Cephes, drifts to
    5e-10 at 10^5 runs)."""
    k = np.asarray(k)
    inside = np.clip(k, 0, n - 1)
    return np.where(k < 0, 0.0, np.where(k >= n, 1.0, special.betaincc(inside + 1, n - inside, p)))


def binom_sf(k, n: int, p: float) -> np.ndarray:
    """P[Bin(n, p) > k] for integer k (1 below 0, 0 from n on) = I_p(k + 1, n - k); see ``binom_cdf``."""
    k = np.asarray(k)
    inside = np.clip(k, 0, n - 1)
    return np.where(k < 0, 1.0, np.where(k >= n, 0.0, special.betainc(inside + 1, n - inside, p)))


# --- Brown-Forsythe ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeveneResult:
    """``statistic`` is Levene's W (an F statistic on 1 and n + m - 2 degrees of freedom); ``pvalue`` its
    upper tail (small: the dispersions differ). NaN both when every deviation from the median is equal."""

    statistic: float
    pvalue: float


def _brown_forsythe(x: np.ndarray, y: np.ndarray, median_x: float, median_y: float) -> LeveneResult:
    """Levene's W of two samples on absolute deviations from the given medians, evaluated as
    scipy.stats.levene evaluates it (same operations in the same order: the same floats)."""
    n, m = x.size, y.size
    total = n + m
    deviations_x, deviations_y = np.abs(x - median_x), np.abs(y - median_y)
    # one-element arrays, as scipy keeps its dimensions: numpy squares arrays and scalars differently
    mean_x, mean_y = deviations_x.mean(keepdims=True), deviations_y.mean(keepdims=True)
    grand = (0 + n * mean_x + m * mean_y) / total
    between = (total - 2) * (0 + n * (mean_x - grand) ** 2 + m * (mean_y - grand) ** 2)
    within = 1.0 * (0 + ((deviations_x - mean_x) ** 2).sum(keepdims=True)
                    + ((deviations_y - mean_y) ** 2).sum(keepdims=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = float((between / within)[0])
    return LeveneResult(statistic, float(special.fdtrc(1.0, float(total - 2), statistic)))


def brown_forsythe(x, y) -> LeveneResult:
    """Brown-Forsythe test of equal dispersion of two samples: Levene's test (Levene, "Robust tests for
    equality of variances", in Contributions to Probability and Statistics, 1960), a one-way ANOVA F on
    the absolute deviations from each sample's centre, with the median as centre (Brown & Forsythe,
    "Robust tests for the equality of variances", JASA 69(346), 1974, their W50). H0: both samples have
    the same dispersion. The values of scipy.stats.levene(x, y, center="median").

    >>> r = brown_forsythe([1.0, 2.0, 3.0, 4.0, 5.0], [2.9, 3.0, 3.0, 3.1, 3.2])
    >>> round(r.statistic, 6), round(r.pvalue, 6)
    (8.871287, 0.017642)
    """
    x = _finite_sample("x", x, 2)
    y = _finite_sample("y", y, 2)
    return _brown_forsythe(x, y, float(np.median(x)), float(np.median(y)))
