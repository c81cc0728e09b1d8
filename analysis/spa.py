"""SPA: statistical model checking of performance properties (Mazurek et al., MICRO 2023,
../shared/seeds/000_458b5c1aa5ac6831.txt).

A property phi holds or not on each run; SMC asserts P[phi] >= F (Eq. 1) with a Clopper-Pearson confidence
(Eq. 4-5). Algorithm 1 draws runs until the confidence reaches C; Algorithm 2 uses a fixed sample and may
answer None. The confidence interval of a metric's value at proportion F is where the threshold property
flips from negative to positive. SPA finds it by searching thresholds (``threshold_search_interval``, kept
to show agreement); for threshold properties the flips happen at order statistics, so ``value_interval``
computes the same bounds exactly from the sorted sample and binomial tails, in microseconds.

Interval coverage. SPA's construction holds each bound at confidence C, so a two-sided interval built from
two such bounds errs with probability up to 2(1 - C) (for N = 22, F = 0.5, C = 0.9: 0.134 for a continuous
metric). perfctl's intervals must err at most 1 - C, so ``value_interval`` runs each bound at (1 + C)/2 by
default; ``per_bound=True`` reproduces the paper's construction. bench/coverage.py checks both.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from perfctl.analysis import special
from perfctl.analysis.distributions import binom_cdf, binom_sf


class Assertion(enum.Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"


def _check_unit(name: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name}: must be strictly between 0 and 1, got {value}")


def clopper_pearson_confidence(successes: int, trials: int, proportion: float) -> tuple[Assertion, float]:
    """The assertion of Eq. 3 and its Clopper-Pearson confidence C_CP of Eq. 4-5.

    Positive (M/N >= F): C_CP = 1 - I_F(M, N - M + 1) = P[Bin(N, F) < M]; negative: C_CP =
    I_F(M + 1, N - M) = P[Bin(N, F) > M]. Both are 1 minus the p-value of the one-sided binomial test.

    >>> clopper_pearson_confidence(22, 22, 0.9)[1] > 0.9   # Eq. 6: 22 runs all true reach C = 0.9
    True
    """
    _check_unit("proportion", proportion)
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"successes, trials: need 0 <= M <= N and N >= 1, got M={successes}, N={trials}")
    if successes / trials >= proportion:
        if successes == trials:
            return Assertion.POSITIVE, 1 - proportion**trials
        return Assertion.POSITIVE, float(1 - special.betainc(successes, trials - successes + 1, proportion))
    if successes == 0:
        return Assertion.NEGATIVE, 1 - (1 - proportion) ** trials
    return Assertion.NEGATIVE, float(special.betainc(successes + 1, trials - successes, proportion))


@dataclass(frozen=True)
class SmcResult:
    """``assertion`` is None when Algorithm 2's fixed sample did not reach the confidence."""

    assertion: Assertion | None
    confidence: float
    successes: int
    trials: int
    proportion: float
    required_confidence: float


def smc_sequential(outcomes: Iterable[bool], proportion: float, confidence: float,
                   max_trials: int | None = None) -> SmcResult:
    """Algorithm 1: consume property outcomes until C_CP >= C; the assertion then holds at confidence C.

    ``outcomes`` is any iterable of booleans (e.g. a generator that runs the benchmark once per item).
    If it ends, or ``max_trials`` is reached, before the confidence does, the result carries None.
    """
    _check_unit("confidence", confidence)
    successes = trials = 0
    achieved = 0.0
    assertion = None
    for outcome in outcomes:
        trials += 1
        successes += bool(outcome)
        assertion, achieved = clopper_pearson_confidence(successes, trials, proportion)
        if achieved >= confidence:
            return SmcResult(assertion, achieved, successes, trials, proportion, confidence)
        if max_trials is not None and trials >= max_trials:
            break
    return SmcResult(None, achieved, successes, trials, proportion, confidence)


def smc_fixed(outcomes, proportion: float, confidence: float) -> SmcResult:
    """Algorithm 2: the same assertion on a fixed sample; None unless C_CP > C."""
    _check_unit("confidence", confidence)
    values = np.asarray(outcomes, dtype=bool)
    if values.size == 0:
        raise ValueError("outcomes: need at least one")
    successes, trials = int(values.sum()), int(values.size)
    assertion, achieved = clopper_pearson_confidence(successes, trials, proportion)
    return SmcResult(assertion if achieved > confidence else None, achieved, successes, trials, proportion,
                     confidence)


@dataclass(frozen=True)
class MinimalSamples:
    positive: int
    negative: int

    @property
    def required(self) -> int:
        """Eq. 8: max(N+, N-)."""
        return max(self.positive, self.negative)


def minimal_samples(proportion: float, confidence: float) -> MinimalSamples:
    """Eq. 6-8: fewest runs that can reach confidence C, for a positive (C <= 1 - F^N+) and a negative
    (C <= 1 - (1 - F)^N-) assertion.

    >>> minimal_samples(0.9, 0.9).required
    22
    """
    _check_unit("proportion", proportion)
    _check_unit("confidence", confidence)

    def fewest(base: float) -> int:
        # A proportion within 1e-16 of 0 or 1 rounds the base to 1.0: no finite N exists (and log(1) = 0).
        if not base < 1.0 or not confidence < 1.0:
            raise ValueError(f"proportion {proportion!r} and confidence {confidence!r}: too close to 0 or 1 "
                             "for any finite number of runs")
        # smallest N with base**N <= 1 - C; the epsilon keeps exact powers (0.1 = 0.9**N?) on the right side
        return max(1, math.ceil(math.log(1 - confidence) / math.log(base) - 1e-12))

    return MinimalSamples(positive=fewest(proportion), negative=fewest(1 - proportion))


@dataclass(frozen=True)
class ValueInterval:
    """Confidence interval of the value v_F with P[X <= v_F] = F (or P[X >= v_F] = F for ``at_least``).

    ``low``/``high`` are None when the sample is too small for that bound; ``runs_needed`` then says how
    many runs would give it. ``bound_confidence`` is the confidence each bound was computed at.
    """

    low: float | None
    high: float | None
    proportion: float
    confidence: float
    bound_confidence: float
    direction: str
    n: int
    runs_needed: int


def _first_true(predicate, start: int, stop: int, guess: int) -> int:
    """The smallest k in [start, stop) where ``predicate`` (vectorised over k, False then True as k grows)
    holds, or ``stop`` when it never does: evaluated on a window about ``guess``, widened until the change
    lies inside it, so a bound at 10^6 runs costs a few dozen binomial tails rather than 10^6."""
    half = 16
    while True:
        low, high = max(start, min(guess, stop) - half), min(stop, max(guess, start) + half)
        holds = predicate(np.arange(low, high))
        if holds.size and holds[0] and low > start:
            half *= 4  # the change is below the window
        elif (not holds.size or not holds[-1]) and high < stop:
            half *= 4  # the change is above the window
        else:
            return low + int(np.argmax(holds)) if holds.size and holds.any() else high


@functools.lru_cache(maxsize=1024)
def _bound_ranks(n: int, proportion: float, bound_confidence: float) -> tuple[int | None, int | None]:
    """1-based order-statistic ranks (k_low, k_high) of the bounds of the F-quantile, property "X <= t".

    Positive at t (t is above the quantile) iff M(t) = #{x <= t} satisfies P[Bin(n, F) >= M] <= 1 - C':
    the smallest such t is x_(k_high). Negative iff P[Bin(n, F) <= M] <= 1 - C': every t below x_(m+1) with
    m the largest such M, so the bound is x_(k_low) with k_low = m + 1. Both tails are monotone in M, so
    each rank is where its condition changes, searched about the normal approximation's guess.
    """
    alpha = 1 - bound_confidence
    below = min(n + 1, math.ceil(proportion * n))  # M < F n exactly for M in [0, below)
    sd = math.sqrt(n * proportion * (1 - proportion))
    z = float(special.ndtri(1 - alpha))
    # M = 0 .. below-1: the condition holds up to m, then fails; k_low = m + 1 = the first M where it fails
    first_fail = _first_true(lambda ks: ~(binom_cdf(ks, n, proportion) <= alpha), 0, below,
                             int(proportion * n - z * sd))
    low = first_fail if first_fail > 0 else None
    # M = below .. n: the condition fails, then holds from k_high on
    high = _first_true(lambda ks: binom_sf(ks - 1, n, proportion) <= alpha, below, n + 1,
                       int(proportion * n + z * sd) + 1)
    return low, (high if below <= high <= n and high >= 1 else None)


@functools.lru_cache(maxsize=256)
def _runs_needed(proportion: float, bound_confidence: float) -> int:
    return minimal_samples(proportion, bound_confidence).required


def value_interval(sample, proportion: float = 0.5, confidence: float = 0.95, *, direction: str = "at_most",
                   per_bound: bool = False) -> ValueInterval:
    """Exact SPA interval of the value at proportion F, from order statistics (no threshold search).

    ``direction="at_most"``: the value v with P[X <= v] = F (with F = 0.9, "90% of runs take at most v");
    ``"at_least"`` is SPA's "metric >= V" property (P[X >= v] = F). Each bound is an SPA threshold flip at
    confidence (1 + C)/2, so the interval covers v_F with probability >= C; ``per_bound=True`` uses C for
    each bound as the paper does.
    """
    _check_unit("proportion", proportion)
    _check_unit("confidence", confidence)
    if direction not in ("at_most", "at_least"):
        raise ValueError(f"direction: 'at_most' or 'at_least', got {direction!r}")
    x = np.sort(np.asarray(sample, dtype=float))
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("sample: need a non-empty sample of finite values")
    return _value_interval_sorted(x, proportion, confidence, direction, per_bound)


def _value_interval_sorted(x: np.ndarray, proportion: float, confidence: float, direction: str = "at_most",
                           per_bound: bool = False) -> ValueInterval:
    """``value_interval`` of a non-empty ascending array of finite values (arguments validated)."""
    bound_confidence = confidence if per_bound else (1 + confidence) / 2
    n = x.size
    # P[X >= v] = F makes v the (1 - F)-quantile: the same order statistics at the mirrored proportion.
    quantile = proportion if direction == "at_most" else 1 - proportion
    low_rank, high_rank = _bound_ranks(n, quantile, bound_confidence)
    low = None if low_rank is None else float(x[low_rank - 1])
    high = None if high_rank is None else float(x[high_rank - 1])
    return ValueInterval(low, high, proportion, confidence, bound_confidence, direction, n,
                         _runs_needed(proportion, bound_confidence))


def threshold_search_interval(sample, proportion: float, confidence: float, granularity: float,
                              *, per_bound: bool = False) -> tuple[float | None, float | None]:
    """SPA's own search (section 4.2) for the "at_most" property, on a grid of step ``granularity``.

    From the sample median, step up until Algorithm 2 asserts positive (P[X <= t] >= F) and down until it
    asserts negative; returns (largest negative grid point, smallest positive grid point). A linear scan,
    slow by design: it exists to show that ``value_interval`` gives the same bounds (to one grid step).
    """
    x = np.sort(np.asarray(sample, dtype=float))
    bound_confidence = confidence if per_bound else (1 + confidence) / 2
    start = float(np.quantile(x, proportion))  # SPA's initial estimate V0 of the value

    def assertion(threshold: float) -> Assertion | None:
        return smc_fixed(x <= threshold, proportion, bound_confidence).assertion

    def boundary(wanted: Assertion, outward: float) -> float | None:
        """The grid point closest to the undecided region where ``wanted`` still holds; ``outward`` is
        the direction (+/- granularity) in which ``wanted`` keeps holding."""
        threshold = start
        if assertion(threshold) is wanted:
            while assertion(threshold - outward) is wanted:
                threshold -= outward
            return threshold
        while x[0] - granularity <= threshold <= x[-1] + granularity:
            threshold += outward
            if assertion(threshold) is wanted:
                return threshold
        return None

    return boundary(Assertion.NEGATIVE, -granularity), boundary(Assertion.POSITIVE, granularity)


def pair_runs(x, y, *, seed: int | None = 0, by_index: bool = False) -> tuple[np.ndarray, str]:
    """Pairs for the speedup hyperproperty: one run of each system per pair (SPA section 5).

    By index when the runs were taken in rounds (x_i and y_i measured together); otherwise a seeded random
    pairing of min(n, m) runs. Returns the ratios x/y and a sentence saying how they were paired.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    count = min(len(x), len(y))
    if count == 0:
        raise ValueError("x, y: need at least one run each")
    if by_index:
        return x[:count] / y[:count], f"paired by run index ({count} pairs)"
    rng = np.random.default_rng(seed)
    return (rng.permutation(x)[:count] / rng.permutation(y)[:count],
            f"paired at random with seed {seed} ({count} pairs)")
