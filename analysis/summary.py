"""Descriptive summary of one metric over repeated runs (the table ``perfctl stat`` prints), and the geometric
mean of a suite's ratios with its interval (``compare``'s overall line)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Description:
    """n, median, mean, standard error of the mean, coefficient of variation, min, max and standard deviation.

    ``stderr`` is s/sqrt(n) with the sample standard deviation s (ddof=1); ``cv`` is s/mean. Both are
    NaN for n < 2, and ``cv`` is NaN when the mean is 0: no spread can be claimed from one value.
    """

    n: int
    median: float
    mean: float
    stderr: float
    cv: float
    min: float
    max: float
    sd: float = math.nan  # the sample standard deviation (hyperfine's σ)


def describe(values) -> Description:
    """Summarize a 1-D sequence of finite numbers.

    >>> describe([1, 2, 3, 4]).median
    2.5
    """
    # Plain Python rather than numpy: `perfctl stat` needs only this, and numpy's import alone cost 35 ms,
    # 2% of a 1000-run measurement of /bin/true (bench/stat_rate.py).
    try:
        data = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError("values: need a non-empty 1-D sequence of numbers") from None
    if not data:
        raise ValueError("values: need a non-empty 1-D sequence of numbers")
    if not all(math.isfinite(v) for v in data):
        raise ValueError("values: all must be finite")
    n = len(data)
    mean = math.fsum(data) / n
    # the two-pass formula with correctly rounded sums, where statistics.stdev's exact fractions took ~2 us a
    # value: ~20 ms of a 1000-run `perfctl stat` of ten events (bench/stat_rate.py)
    lo, hi = min(data), max(data)
    if n < 2:
        sd = math.nan
    elif lo == hi:  # exactly 0 (and the mean the value itself), where rounding would leave ~1e-17
        sd, mean = 0.0, lo
    else:
        sd = math.sqrt(math.fsum([(v - mean) ** 2 for v in data]) / (n - 1))
    return Description(
        n=n, median=statistics.median(data), mean=mean,
        stderr=sd / math.sqrt(n) if n > 1 else math.nan,
        cv=sd / abs(mean) if n > 1 and mean != 0 else math.nan,
        min=lo, max=hi, sd=sd,
    )


def linear_quantile(ascending, q: float) -> float:
    """np.percentile's default ("linear", Hyndman & Fan's definition 7) of ascending values (an array or a
    list), in numpy's operations (index (n - 1) q; the lerp from the nearer end), so the same value without
    its machinery (numpy.quantile's first call imports numpy.ma, ~15 ms)."""
    size = len(ascending)
    position = (size - 1) * q
    below = math.floor(position)
    if below >= size - 1:
        return float(ascending[-1])
    low, high = float(ascending[below]), float(ascending[below + 1])
    weight = position - below
    step = high - low
    return high - step * (1 - weight) if weight >= 0.5 else low + step * weight


@dataclass(frozen=True)
class GeometricMean:
    """The geometric mean of a suite's A/B ratios with its interval at ``confidence``, over ``benchmarks``."""

    ratio: float
    low: float
    high: float
    confidence: float
    benchmarks: int


def normal_quantile(p: float) -> float:
    """The standard normal quantile (statistics.NormalDist: plain Python, as this module is)."""
    return statistics.NormalDist().inv_cdf(p)


def geometric_mean(ratios, intervals, confidence: float) -> GeometricMean | None:
    """The geometric mean of per-benchmark ratios, the suite summary of ratios that does not depend on which
    side is the reference (Fleming & Wallace, "How not to lie with statistics: the correct way to summarize
    benchmark results", CACM 29(3), 1986), with an interval at ``confidence`` for the suite as it is (its
    benchmarks fixed, their runs random).

    ``ratios`` are the benchmarks' Hodges-Lehmann estimates and ``intervals`` (low, high, level) the rank
    intervals they were read with. The estimator is asymptotically normal on the log scale (Hodges & Lehmann,
    Ann. Math. Statist. 34(2), 1963), so each interval gives a standard error, the mean of the logs' half
    width over z at its level: se_i = (ln high_i - ln low_i) / (2 z_(1+level_i)/2). The benchmarks' runs are
    independent, so log G = mean(ln r_i) has standard error sqrt(sum se_i^2) / k and the interval is
    exp(log G -/+ z se) (the delta method on the mean of logs). Coverage is checked by simulation in
    tests/test_summary.py. None when a ratio or an interval is missing or not positive.

    >>> g = geometric_mean([2.0, 0.5], [(1.8, 2.2, 0.95), (0.45, 0.55, 0.95)], 0.95)
    >>> round(g.ratio, 6), round(g.low, 4), round(g.high, 4)
    (1.0, 0.9315, 1.0735)
    """
    ratios, intervals = list(ratios), list(intervals)
    if not ratios or len(ratios) != len(intervals):
        return None
    logs, variance = [], 0.0
    for ratio, (low, high, level) in zip(ratios, intervals):
        if not all(v is not None and math.isfinite(v) and v > 0 for v in (ratio, low, high)) or not 0 < level < 1:
            return None
        logs.append(math.log(ratio))
        variance += ((math.log(high) - math.log(low)) / (2 * normal_quantile((1 + level) / 2))) ** 2
    k = len(logs)
    center, half = math.fsum(logs) / k, normal_quantile((1 + confidence) / 2) * math.sqrt(variance) / k
    return GeometricMean(math.exp(center), math.exp(center - half), math.exp(center + half), confidence, k)
