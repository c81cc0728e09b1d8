"""Rank tests and their estimators: Wilcoxon signed-rank, Wilcoxon-Mann-Whitney, Hodges-Lehmann.

The one owner of these tests in perfctl: Speedup-Test (median protocol) and SPARC both call them. p-values
are exact (from the null distribution of the statistic, computed by recursion) for small samples without
ties, and otherwise from the normal approximation with continuity correction and tie-corrected variance,
which is what SPARC's tables use (Tullos et al., 001_b0b9677f55f20b9d.txt, Eq. 10-11: 30 pairs all on one
side give z = 4.772, two-sided p = 1.825e-6).

Ratios are tested on a log scale: "X/Y = c" is the location shift log c between log X and log Y, so a test
of X against c·Y is a test of the ratio c (scale-shift model).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

ALTERNATIVES = ("two-sided", "greater", "less")
# Exact null distributions up to these sizes (signed-rank: n; rank-sum: both n and m); beyond, the normal
# approximation is within ~1e-3 of the exact p-value and costs nothing.
EXACT_MAX_SIGNED = 25
EXACT_MAX_RANK_SUM = 20
# Interval bounds come from the exact null distribution up to this size (cached, a few ms to build):
# the normal approximation's critical ranks are slightly anti-conservative at n = m = 22.
EXACT_MAX_INTERVAL = 50
EXACT = "exact"
NORMAL = "normal approximation with continuity correction"


@dataclass(frozen=True)
class RankTestResult:
    """``statistic`` is W+ (signed-rank) or U of the first sample (rank-sum); ``zstatistic`` is the
    continuity-corrected z of the normal approximation (None when the p-value is exact)."""

    statistic: float
    pvalue: float
    alternative: str
    method: str
    n: int
    m: int | None = None
    zstatistic: float | None = None


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative: must be one of {ALTERNATIVES}, got {alternative!r}")


TIE_TOLERANCE = 1e-12


def _rank(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the sizes of tie groups.

    Values within a relative 1e-12 of each other are ties: a ratio test compares x with c*y, and
    c*(v/c) is not always v in floating point, which would break real ties at random.
    """
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    gaps = np.diff(sorted_values)
    magnitude = np.maximum(np.abs(sorted_values[1:]), np.abs(sorted_values[:-1]))
    boundaries = np.flatnonzero(gaps > TIE_TOLERANCE * magnitude) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(values)]))
    average = (starts + ends + 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(average, ends - starts)
    return ranks, ends - starts


def _normal_pvalue(statistic: float, mean: float, sd: float, alternative: str) -> tuple[float, float | None]:
    if sd == 0:
        return 1.0, None  # every observation tied: no evidence either way
    if alternative == "greater":
        z = (statistic - mean - 0.5) / sd
        return float(special.ndtr(-z)), z
    if alternative == "less":
        z = (statistic - mean + 0.5) / sd
        return float(special.ndtr(z)), z
    z = (abs(statistic - mean) - 0.5) / sd
    return float(min(1.0, 2 * special.ndtr(-z))), math.copysign(max(z, 0.0), statistic - mean)


@functools.lru_cache(maxsize=64)
def _signed_rank_pmf(n: int) -> np.ndarray:
    """P(W+ = w), w = 0..n(n+1)/2, under H0 (each rank's sign a fair coin)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts / 2.0**n


@functools.lru_cache(maxsize=256)
def _rank_sum_pmf(n: int, m: int) -> np.ndarray:
    """P(U = u), u = 0..nm, for U = #{(i, j): x_i > y_j} under H0, by the Mann-Whitney recursion
    p(u; n, m) = n/(n+m) p(u-m; n-1, m) + m/(n+m) p(u; n, m-1)."""
    table = {}
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 or j == 0:
                pmf = np.zeros(i * j + 1)
                pmf[0] = 1.0
            else:
                pmf = np.zeros(i * j + 1)
                left = table[i - 1, j]
                pmf[j:j + len(left)] += i / (i + j) * left
                right = table[i, j - 1]
                pmf[:len(right)] += j / (i + j) * right
            table[i, j] = pmf
    return table[n, m]


def _exact_pvalue(pmf: np.ndarray, statistic: float, alternative: str) -> float:
    k = int(round(statistic))
    upper = float(pmf[k:].sum())
    lower = float(pmf[:k + 1].sum())
    if alternative == "greater":
        return upper
    if alternative == "less":
        return lower
    return min(1.0, 2 * min(upper, lower))


def wilcoxon_signed_rank(differences, alternative: str = "two-sided") -> RankTestResult:
    """Wilcoxon signed-rank test that the differences are symmetric about 0.

    H0: the distribution of ``differences`` is symmetric about 0; "greater": it is shifted above 0.
    Zero differences are dropped (Wilcoxon's convention) and ``n`` counts the rest. Exact p-value for
    n <= 25 without ties among |d|; else the normal approximation with continuity correction and the tie
    correction sum(t^3 - t)/48 of the variance (SPARC, 001_b0b9677f55f20b9d.txt, Eq. 10-11).

    >>> round(wilcoxon_signed_rank(np.arange(1, 31) / 100).pvalue, 9)   # 30 pairs, all positive (SPARC Table IV)
    1.825e-06
    """
    _check_alternative(alternative)
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    n = len(d)
    if n == 0:
        return RankTestResult(0.0, 1.0, alternative, EXACT, 0)
    ranks, ties = _rank(np.abs(d))
    w_plus = float(ranks[d > 0].sum())
    if n <= EXACT_MAX_SIGNED and np.all(ties == 1):
        return RankTestResult(w_plus, _exact_pvalue(_signed_rank_pmf(n), w_plus, alternative), alternative, EXACT, n)
    mean = n * (n + 1) / 4
    variance = n * (n + 1) * (2 * n + 1) / 24 - float(np.sum(ties**3 - ties)) / 48
    pvalue, z = _normal_pvalue(w_plus, mean, math.sqrt(max(variance, 0.0)), alternative)
    return RankTestResult(w_plus, pvalue, alternative, NORMAL, n, zstatistic=z)


def mann_whitney(x, y, alternative: str = "two-sided") -> RankTestResult:
    """Wilcoxon-Mann-Whitney rank-sum test of two independent samples.

    H0: F_X = F_Y; "greater": X tends to be larger (F_X < F_Y). The statistic is U = #{x_i > y_j} + 1/2
    #{x_i = y_j}, so U/(nm) estimates P[X > Y] (Speedup-Test, 004_90ddb49e43171cfa.txt, section 3.2).
    Exact when both samples have at most 20 values and there are no ties; else the normal approximation
    with continuity correction and tie-corrected variance.
    """
    _check_alternative(alternative)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("x, y: need at least one value each")
    ranks, ties = _rank(np.concatenate((x, y)))
    u = float(ranks[:n].sum() - n * (n + 1) / 2)
    if n <= EXACT_MAX_RANK_SUM and m <= EXACT_MAX_RANK_SUM and np.all(ties == 1):
        return RankTestResult(u, _exact_pvalue(_rank_sum_pmf(n, m), u, alternative), alternative, EXACT, n, m)
    total = n + m
    variance = n * m / 12 * ((total + 1) - float(np.sum(ties**3 - ties)) / (total * (total - 1)))
    pvalue, z = _normal_pvalue(u, n * m / 2, math.sqrt(max(variance, 0.0)), alternative)
    return RankTestResult(u, pvalue, alternative, NORMAL, n, m, zstatistic=z)


@dataclass(frozen=True)
class ShiftEstimate:
    """A Hodges-Lehmann estimate with its distribution-free confidence interval (None where the sample is
    too small for a bound at this confidence)."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float


def _order_statistic_bounds(values: np.ndarray, k: int) -> tuple[float | None, float | None]:
    """(k-th smallest, k-th largest) of ``values``, 1-based; (None, None) when k < 1."""
    if k < 1:
        return None, None
    size = len(values)
    part = np.partition(values, [k - 1, size - k])
    return float(part[k - 1]), float(part[size - k])


def _critical_rank(pmf: np.ndarray | None, mean: float, sd: float, tail: float) -> int:
    """Largest k with P(S <= k - 1) <= tail for the null statistic S (exact pmf, or normal with cc)."""
    if pmf is not None:
        cdf = np.cumsum(pmf)
        return int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    z = float(special.ndtri(1 - tail))
    return int(math.floor(mean - 0.5 - z * sd)) + 1


def hodges_lehmann_shift(x, y, confidence: float = 0.95) -> ShiftEstimate:
    """Hodges-Lehmann estimate of the shift between X and Y, median of x_i - y_j, with the confidence
    interval obtained by inverting the rank-sum test (Hollander & Wolfe, ch. 4.3): the k-th smallest and
    k-th largest of the nm differences, k the rank-sum null quantile. Valid under the location-shift model.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n, m = len(x), len(y)
    differences = (x[:, None] - y[None, :]).ravel()
    estimate = float(np.median(differences))
    tail = (1 - confidence) / 2
    pmf = _rank_sum_pmf(n, m) if n <= EXACT_MAX_INTERVAL and m <= EXACT_MAX_INTERVAL else None
    k = _critical_rank(pmf, n * m / 2, math.sqrt(n * m * (n + m + 1) / 12), tail)
    low, high = _order_statistic_bounds(differences, min(k, (n * m + 1) // 2))
    return ShiftEstimate(estimate, low, high, confidence)


def hodges_lehmann_center(d, confidence: float = 0.95) -> ShiftEstimate:
    """Hodges-Lehmann estimate of the center of a symmetric distribution (median of the Walsh averages
    (d_i + d_j)/2, i <= j) with the interval from inverting the signed-rank test."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    i, j = np.triu_indices(n)
    walsh = (d[i] + d[j]) / 2
    estimate = float(np.median(walsh))
    tail = (1 - confidence) / 2
    pmf = _signed_rank_pmf(n) if n <= EXACT_MAX_INTERVAL else None
    count = len(walsh)
    k = _critical_rank(pmf, count / 2, math.sqrt(n * (n + 1) * (2 * n + 1) / 24), tail)
    low, high = _order_statistic_bounds(walsh, min(k, (count + 1) // 2))
    return ShiftEstimate(estimate, low, high, confidence)
