"""Descriptive summary of one metric over repeated runs (the table ``perfctl stat`` prints)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Description:
    """n, median, mean, standard error of the mean, coefficient of variation, min and max.

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
        min=lo, max=hi,
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
