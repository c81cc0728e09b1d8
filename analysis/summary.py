"""Descriptive summary of one metric over repeated runs (the table ``perfctl stat`` prints)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or data.size == 0:
        raise ValueError("values: need a non-empty 1-D sequence")
    if not np.all(np.isfinite(data)):
        raise ValueError("values: all must be finite")
    n = int(data.size)
    mean = float(data.mean())
    sd = float(data.std(ddof=1)) if n > 1 else math.nan
    return Description(
        n=n, median=float(np.median(data)), mean=mean,
        stderr=sd / math.sqrt(n) if n > 1 else math.nan,
        cv=sd / abs(mean) if n > 1 and mean != 0 else math.nan,
        min=float(data.min()), max=float(data.max()),
    )
