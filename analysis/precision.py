"""`perfctl stat --until-precise`: run until the median of a metric is known to a relative precision, as an
anytime-valid confidence sequence says it (docs/stat.md, "How many runs").

The sequence is perfctl ab's, for one command instead of a ratio (analysis/ab.py): Howard & Ramdas,
"Sequential estimation of quantiles with applications to A/B-testing and best-arm identification",
Bernoulli 28(3), 2022, Theorem 1 (a fixed quantile, p = 1/2) with the two-sided beta-binomial mixture
boundary (analysis/ab.py median_cs_ranks), tuned as ab's at T_OPT runs. It covers the true median
at every number of runs at once with probability >= confidence, so stopping at the first run where it is
narrow enough (a data-dependent time) keeps that confidence (Howard & Ramdas, section 1: a CS is valid at
stopping times). The runs are taken as i.i.d. draws, as ab takes its rounds.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from perfctl.analysis.ab import median_cs_ranks
from perfctl.analysis.mixture import check_alpha
from perfctl.analysis.summary import linear_quantile
from perfctl.analysis.verdicts import DEFAULT_CONFIDENCE


@dataclass(frozen=True)
class Precision:
    """Where the median's confidence sequence stands after ``runs`` runs: the median, the sequence's ends
    (None while unbounded), its half-width relative to the median, and whether that is within ``target``."""

    runs: int
    median: float
    low: float | None
    high: float | None
    target: float
    confidence: float

    @property
    def relative(self) -> float:
        """The larger distance from the median to an end of the sequence, over the median (inf while an end
        is unbounded or the median is 0), but 0 when the sequence is the median alone: a count that repeats
        exactly, 0 included (an exact 0 is as settled as an exact 5)."""
        if self.low is not None and self.low == self.high == self.median:
            return 0.0
        if self.low is None or self.high is None or self.median <= 0:
            return math.inf
        return max(self.median - self.low, self.high - self.median) / self.median

    @property
    def reached(self) -> bool:
        return self.relative <= self.target


class MedianPrecision:
    """The runs' values of one metric, added one at a time, and the median's confidence sequence after each
    (``state``). ``target``: the relative half-width asked for (0.01 for ±1%)."""

    def __init__(self, target: float, confidence: float = DEFAULT_CONFIDENCE):
        if not 0 < target < 1:
            raise ValueError(f"target must be between 0 and 1 (exclusive), got {target!r}")
        self.target, self.confidence = float(target), float(confidence)
        self._alpha = check_alpha(1 - confidence)
        self._ordered: list[float] = []

    def add(self, value: float) -> Precision:
        bisect.insort(self._ordered, float(value))
        return self.state()

    def state(self) -> Precision:
        ordered, t = self._ordered, len(self._ordered)
        if not t:
            return Precision(0, math.nan, None, None, self.target, self.confidence)
        lower, upper = median_cs_ranks(t, self._alpha)  # ab's method and tuning (analysis/ab.py)
        return Precision(t, linear_quantile(ordered, 0.5), ordered[lower - 1] if lower >= 1 else None,
                         ordered[upper - 1] if upper <= t else None, self.target, self.confidence)
