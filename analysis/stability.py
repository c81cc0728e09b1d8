"""Is one benchmark's series of runs stable? Outliers, two groups of runs, a drift over the run order, a wide
spread: each found is one plain sentence with its number and the advice pyperf and hyperfine give.

The question is one side's: `perfctl stat` asks it of every event it summarizes, `perfctl compare` of each
side of every benchmark. Whether two sides differ in a way a change of speed cannot explain is
analysis/disturbance.py's question, not this one's.

Every check reads the runs as ratios (log values): a run twice as slow as the median is as far from it at
1 ms as at 1 s. A stable series says nothing: each check needs a statistic past its threshold AND a size a
reader would act on (MATERIAL: runs or groups of runs at least 5% apart), so the common case of runs a few
percent apart never draws a warning. tests/test_i31_stability.py measures the false alarms by simulation
(1000 normal and log-normal series of 10, 20 and 100 runs at 2% and 5% CV: measured 0% at 2% CV, up to 3.1%
for 10 runs at 5% CV; the test's bounds are 2-5%) and the detection on simulated and real disturbed runs.

1. Outliers: the modified Z-score M = 0.6745 (x - median) / MAD (Iglewicz & Hoaglin, "How to Detect and
   Handle Outliers", ASQC Basic References in Quality Control 16, 1993, section 3.3; hyperfine's
   outlier_detection.rs cites the same score). Their cut, |M| > 3.5, marks values to look at: over a whole
   series it flags 10% of normal series of 20 runs (13% of 200), so a warning takes |M| > OUTLIER_Z = 5
   (1.4% of 20, 0.2% of 200; hyperfine warns from 10), a value at least MATERIAL from the median, and
   outliers that together move the mean by OUTLIER_EFFECT (1%) or more: the mean is what they spoil. A MAD
   of 0 (most runs identical) makes every other value's M infinite: then the sizes alone decide.
2. Two groups: the bimodality coefficient BC = (g1^2 + 1) / (g2 + 3 (n-1)^2 / ((n-2)(n-3))) above 5/9, the
   value of a uniform distribution (SAS/STAT's definition; Pfister, Schwarz, Janczyk, Dale & Freeman,
   "Good things peak in pairs", Frontiers in Psychology 4:700, 2013), screens; a two-component normal
   mixture of the log values (EM: Dempster, Laird & Rubin, JRSS B 39(1), 1977) must then beat one normal by
   BIC_DIFFERENCE (Schwarz, Ann. Statist. 6(2), 1978; 10 is "very strong" evidence in Kass & Raftery, JASA
   90(430), 1995), with the groups separated: Ashman's D = sqrt(2) |mu1 - mu2| / sqrt(s1^2 + s2^2) > 2
   (Ashman, Bird & Zepf, Astron. J. 108(6), 1994), each group at least MIN_GROUP runs and a tenth of them,
   their medians MATERIAL apart. BC alone also flags a skewed or outlying series; the mixture alone splits a
   normal sample's tails.
3. Drift: the Mann-Kendall trend test of the values against their run order (Mann, Econometrica 13(3), 1945;
   Kendall, "Rank Correlation Methods", 4th ed. 1975: S = sum over i < j of sign(x_j - x_i), Var(S) with
   the ties' correction, Z with the continuity correction) at DRIFT_ALPHA, and the medians of the first and
   the second half of the runs MATERIAL apart. Above TREND_BLOCKS runs, S is taken over the medians of
   TREND_BLOCKS consecutive blocks (a trend in the runs is one in their blocks; O(n) rather than O(n log n)
   with a large constant).
4. Spread: pyperf's `check`: a standard deviation of at least 10% of the mean, or a minimum or maximum 50%
   or more away from the mean (pyperf/_cli.py format_checks, "WARNING: the benchmark result may be
   unstable"). Said only where none of the three above explains the spread.

Small counts are not judged: a count whose median is below SMALL_COUNT (context switches, interrupts, page
faults) spreads by its own discreteness (Poisson noise alone is 1/sqrt(count) of it: 100% at 1, 1% at
10,000), which says nothing of the machine. A series with a value of 0 or below is not judged either (no
ratio). Plain Python, no numpy: `perfctl stat` never imports it (analysis/summary.py says why).
"""

from __future__ import annotations

import math
import operator
import statistics
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass

OUTLIERS, BIMODAL, DRIFT, SPREAD = "outliers", "bimodal", "drift", "spread"

MATERIAL = 0.05  # runs, or groups of runs, this far apart (as a ratio) are worth a sentence
OUTLIER_EFFECT = 0.01  # outliers that move the mean by less are not worth a line
OUTLIER_Z = 5.0  # see the module docstring: Iglewicz & Hoaglin's 3.5 flags 10% of normal series of 20
_MAD_TO_Z = 0.6745  # the standard normal's third quartile: 0.6745 MAD / sigma is 1 for normal data
BIMODALITY_COEFFICIENT = 5 / 9
BIC_DIFFERENCE = 10.0
ASHMAN_D = 2.0
MIN_GROUP = 3  # a smaller "group" is outliers, which check 1 names
DRIFT_ALPHA = 0.01
TREND_BLOCKS = 2000
CV_UNSTABLE = 0.10  # pyperf's
EXTREME_FROM_MEAN = 0.50  # pyperf's
SMALL_COUNT = 10_000
MIN_RUNS = {OUTLIERS: 6, SPREAD: 5, BIMODAL: 10, DRIFT: 10}
# the standard deviation of a component is never taken below this (in log units: 0.05% of the value):
# identical runs would otherwise give an infinite likelihood
_SIGMA_FLOOR = 5e-4
EM_POINTS = 256  # above this many runs, the mixture is fitted to their histogram
_LN_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# the target of the "more runs" advice: the mean's 95% interval within +-1% (perfctl's choice; pyperf's
# check advises more runs without a number)
_TARGET_HALF_WIDTH = 0.01
_Z95 = 1.959963984540054
MAX_RUNS_ADVISED = 1000  # beyond, more runs are no remedy: the spread's cause is

# the remedies, in pyperf's and hyperfine's words made perfctl's: each finding names those that fit it
INFO = "check the machine with `perfctl info` (governor, turbo, isolated CPUs)"
QUIET_MACHINE = "rerun on a quiet machine"
PIN = "keep every run on one CPU (--pin CPU)"


@dataclass(frozen=True)
class Finding:
    """One thing found: ``kind`` (OUTLIERS, BIMODAL, DRIFT, SPREAD), the plain sentence saying it with its
    number (``what``), the remedies that fit it (``advice``: short phrases, so that a report of several
    findings says each remedy once), and that number (``value``: the outliers' count, the ratio of the
    groups' medians, the trend's p-value, the CV)."""

    kind: str
    what: str
    advice: tuple[str, ...]
    value: float

    def __str__(self) -> str:
        return f"{self.what} — {'; '.join(self.advice)}"


@dataclass(frozen=True)
class Stability:
    """What ``check`` found in one series: ``findings`` (empty when the series looks stable, or was not
    judged: ``judged`` says why not), and the statistics behind them, None where not computed."""

    n: int
    findings: tuple[Finding, ...]
    judged: str | None = None  # None: judged; else why not ("small count", "too few runs", ...)
    outliers: int = 0
    bimodality_coefficient: float | None = None
    trend_p: float | None = None
    cv: float | None = None

    @property
    def stable(self) -> bool:
        return not self.findings


def check(values) -> Stability:
    """Judge one benchmark's values of one metric, given in run order (the first run first).

    >>> import random
    >>> rng = random.Random(7)
    >>> steady = [16e6 * math.exp(rng.gauss(0, 0.02)) for _ in range(20)]
    >>> check(steady).stable
    True
    >>> disturbed = steady[:8] + [2.0 * v for v in steady[8:16]] + steady[16:]
    >>> [f.kind for f in check(disturbed).findings]
    ['bimodal']
    """
    try:
        data = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError("values: need a 1-D sequence of numbers") from None
    if not all(map(math.isfinite, data)):
        raise ValueError("values: all must be finite")
    n = len(data)
    if n < min(MIN_RUNS.values()):
        return Stability(n, (), judged="too few runs")
    ascending = sorted(data)
    if ascending[0] <= 0:
        return Stability(n, (), judged="a value of 0 or below: no ratio")
    median = statistics.median(ascending)
    if median < SMALL_COUNT and all(v.is_integer() for v in data):
        return Stability(n, (), judged="small count")
    # every finding is a ratio to the median: computed on the values over it, so that no sum of values near
    # the largest float overflows (times of 1e300 s in a hostile file) and none near the smallest underflows
    data = [v / median for v in data]
    if not all(math.isfinite(v) and v > 0 for v in data):
        return Stability(n, (), judged="values too far apart for a ratio")
    ascending, median = sorted(data), 1.0
    logs = list(map(math.log, data))
    log_median = 0.0

    findings = []
    bimodality, groups = _two_groups(logs, n)
    if groups is not None:
        findings.append(groups)
    trend_p, drift = _drift(data, logs, n)
    if drift is not None:
        findings.append(drift)
    count, outliers = _outliers(data, logs, log_median, n)
    if outliers is not None and groups is None:  # two groups: the smaller one's runs are not outliers
        findings.append(outliers)
    mean = math.fsum(data) / n
    # analysis/summary.py's two-pass standard deviation (statistics.stdev's exact fractions cost ~100 us here)
    cv = math.sqrt(math.fsum([(v - mean) ** 2 for v in data]) / (n - 1)) / mean
    if not findings and n >= MIN_RUNS[SPREAD]:
        spread = _spread(ascending, median, mean, cv)
        if spread is not None:
            findings.append(spread)
    return Stability(n, tuple(findings), outliers=count, bimodality_coefficient=bimodality, trend_p=trend_p,
                     cv=cv)


def _times(ratio: float) -> str:
    return f"{ratio:.2f}×"


def _outliers(data: list[float], logs: list[float], log_median: float, n: int) -> tuple[int, Finding | None]:
    """Iglewicz & Hoaglin's modified Z-score on the log values, with MATERIAL's floor; said when the
    outliers move the mean by OUTLIER_EFFECT or more (``count`` is returned either way)."""
    if n < MIN_RUNS[OUTLIERS]:
        return 0, None
    mad = statistics.median([abs(v - log_median) for v in logs])
    floor = math.log1p(MATERIAL)
    far = [i for i, v in enumerate(logs) if abs(v - log_median) >= floor
           and (mad == 0 or _MAD_TO_Z * abs(v - log_median) / mad > OUTLIER_Z)]
    if not far:
        return 0, None
    outlying = set(far)
    kept = [v for i, v in enumerate(data) if i not in outlying]
    effect = math.fsum(data) / n / (math.fsum(kept) / len(kept)) - 1 if kept else math.inf
    if abs(effect) < OUTLIER_EFFECT:  # what they spoil is the mean (pyperf's point): here, next to nothing
        return len(far), None
    ratios = [math.exp(logs[i] - log_median) for i in far]
    low, high = min(ratios), max(ratios)
    extent = (f"up to {_times(high)} the median" if low > 1 else f"down to {_times(low)} the median" if high < 1
              else f"{_times(low)} to {_times(high)} the median")
    what = (f"{len(far)} of {n} runs {'is an outlier' if len(far) == 1 else 'are outliers'}, {extent}, "
            f"moving the mean by {effect:+.1%} (modified Z-score above {OUTLIER_Z:g}, Iglewicz & Hoaglin)")
    # the first runs alone, and slower: hyperfine's "first run significantly slower" (caches not yet warm)
    if far == list(range(len(far))) and low > 1 and len(far) <= n // 4:
        what += f": the first {'run' if len(far) == 1 else f'{len(far)} runs'}"
        advice = (f"leave out the slow first {'run' if len(far) == 1 else 'runs'} (--warmup {len(far)})",)
    else:
        advice = (QUIET_MACHINE, INFO)
    return len(far), Finding(OUTLIERS, what, advice, float(len(far)))


def bimodality_coefficient(values: list[float]) -> float | None:
    """SAS's bimodality coefficient with the sample skewness g1 and excess kurtosis g2 (Pfister et al.
    2013, Eq. 1-3); None for fewer than 4 values or no spread."""
    n = len(values)
    if n < 4:
        return None
    mean = math.fsum(values) / n
    deviations = [v - mean for v in values]
    squares = [d * d for d in deviations]
    m2 = math.fsum(squares) / n
    if m2 <= 0:
        return None
    m3 = math.fsum(map(operator.mul, squares, deviations)) / n
    m4 = math.fsum(map(operator.mul, squares, squares)) / n
    g1 = math.sqrt(n * (n - 1)) / (n - 2) * m3 / m2 ** 1.5
    g2 = (n - 1) / ((n - 2) * (n - 3)) * ((n + 1) * (m4 / m2 ** 2) - 3 * (n - 1))
    return (g1 ** 2 + 1) / (g2 + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def _two_groups(logs: list[float], n: int) -> tuple[float | None, Finding | None]:
    """BC's screen, then the mixture's BIC, Ashman's D and the groups' sizes."""
    if n < MIN_RUNS[BIMODAL]:
        return None, None
    coefficient = bimodality_coefficient(logs)
    if coefficient is None or coefficient <= BIMODALITY_COEFFICIENT:
        return coefficient, None
    points, weights, floor = _binned(logs)
    one = _fit(points, weights, (1.0, *_moments(points, weights, floor), 0.0, 1.0), floor)[0]
    two = _mixture_fit(points, weights, floor)
    if two is None:
        return coefficient, None
    log_likelihood, (weight, mu1, s1, mu2, s2) = two
    # BIC = -2 ln L + k ln n: 2 parameters for one normal, 5 for two and their weight
    if (-2 * one + 2 * math.log(n)) - (-2 * log_likelihood + 5 * math.log(n)) < BIC_DIFFERENCE:
        return coefficient, None
    ashman = math.sqrt(2) * abs(mu2 - mu1) / math.sqrt(s1 ** 2 + s2 ** 2)
    if ashman <= ASHMAN_D:
        return coefficient, None
    # each run to the component more likely to hold it
    upper, lower = [], []
    for v in logs:
        high = math.log(1 - weight) + _log_density(v, mu2, s2) > math.log(weight) + _log_density(v, mu1, s1)
        (upper if high else lower).append(v)
    if min(len(upper), len(lower)) < max(MIN_GROUP, math.ceil(0.1 * n)):
        return coefficient, None
    ratio = math.exp(statistics.median(upper) - statistics.median(lower))
    if ratio < 1 + MATERIAL:
        return coefficient, None
    what = (f"the runs fall into two groups: {len(upper)} of {n} at {_times(ratio)} the median of the other "
            f"{len(lower)} (two-component mixture, Ashman's D {ashman:.1f})")
    return coefficient, Finding(BIMODAL, what, (INFO, PIN), ratio)


def _binned(logs: list[float]) -> tuple[list[float], list[float], float]:
    """The points the mixture is fitted to, their weights, and the floor of a component's sigma: the runs
    themselves, or above EM_POINTS runs their histogram in EM_POINTS equal bins (each bin's count at its
    centre; the floor then at least a bin's own standard deviation, width / sqrt(12), Sheppard's)."""
    if len(logs) <= EM_POINTS:
        return logs, [1.0] * len(logs), _SIGMA_FLOOR
    low, high = min(logs), max(logs)
    width = (high - low) / EM_POINTS
    counts = [0.0] * EM_POINTS
    for v in logs:
        counts[min(int((v - low) / width), EM_POINTS - 1)] += 1
    kept = [(low + (k + 0.5) * width, c) for k, c in enumerate(counts) if c]
    return [p for p, _ in kept], [c for _, c in kept], max(_SIGMA_FLOOR, width / math.sqrt(12))


def _log_density(x: float, mu: float, sigma: float) -> float:
    """ln of the normal density at x."""
    return -0.5 * ((x - mu) / sigma) ** 2 - math.log(sigma) - _LN_SQRT_2PI


def _moments(points: list[float], weights: list[float], floor: float) -> tuple[float, float]:
    """Weighted mean and standard deviation (at least ``floor``)."""
    total = math.fsum(weights)
    mean = math.fsum(map(operator.mul, points, weights)) / total
    variance = math.fsum(w * (p - mean) ** 2 for p, w in zip(points, weights)) / total
    return mean, max(math.sqrt(variance), floor)


def _mixture_fit(points: list[float], weights: list[float], floor: float):
    """Two normal components by EM, started from the split at the widest gap and from the split at the
    middle run, keeping the better: (log-likelihood, (weight of the lower, mu1, s1, mu2, s2)), or None
    when there is no split (a single point)."""
    order = sorted(range(len(points)), key=points.__getitem__)
    ascending, mass = [points[i] for i in order], [weights[i] for i in order]
    if len(ascending) < 2:
        return None
    widest = max(range(len(ascending) - 1), key=lambda i: ascending[i + 1] - ascending[i])
    half, middle = math.fsum(mass) / 2, 0
    while math.fsum(mass[:middle + 1]) < half:
        middle += 1
    best = None
    for cut in {widest + 1, max(1, min(middle + 1, len(ascending) - 1))}:
        lower = _moments(ascending[:cut], mass[:cut], floor)
        upper = _moments(ascending[cut:], mass[cut:], floor)
        start = (math.fsum(mass[:cut]) / math.fsum(mass), *lower, *upper)
        fitted = _fit(points, weights, start, floor)
        if best is None or fitted[0] > best[0]:
            best = fitted
    log_likelihood, (weight, mu1, s1, mu2, s2) = best
    if mu1 > mu2:  # the first component is the lower one
        return log_likelihood, (1 - weight, mu2, s2, mu1, s1)
    return best


def _fit(points: list[float], weights: list[float], start, floor: float, iterations: int = 300):
    """EM for a mixture of two normal components over weighted points (Dempster, Laird & Rubin 1977;
    McLachlan & Peel, "Finite Mixture Models", 2000, section 2.8), from ``start`` = (weight of the first,
    mu1, s1, mu2, s2): (log-likelihood, parameters) at convergence. A start with weight 1 is one normal:
    its log-likelihood, unchanged."""
    weight, mu1, s1, mu2, s2 = start
    if weight >= 1:
        return math.fsum(w * _log_density(p, mu1, s1) for p, w in zip(points, weights)), start
    total_weight = math.fsum(weights)
    previous = -math.inf
    log_likelihood = -math.inf
    for _ in range(iterations):
        responsibilities = []
        log_likelihood = 0.0
        lw1, lw2 = math.log(weight), math.log(1 - weight)
        for p, w in zip(points, weights):
            a = lw1 + _log_density(p, mu1, s1)
            b = lw2 + _log_density(p, mu2, s2)
            top = max(a, b)
            total = top + math.log(math.exp(a - top) + math.exp(b - top))
            log_likelihood += w * total
            responsibilities.append(math.exp(a - total))
        if log_likelihood - previous < 1e-10 * abs(log_likelihood):
            break
        previous = log_likelihood
        first = [r * w for r, w in zip(responsibilities, weights)]
        second = [(1 - r) * w for r, w in zip(responsibilities, weights)]
        r1, r2 = math.fsum(first), math.fsum(second)
        if r1 < 1e-9 or r2 < 1e-9:  # one component took every point: no mixture
            break
        mu1 = math.fsum(map(operator.mul, first, points)) / r1
        mu2 = math.fsum(map(operator.mul, second, points)) / r2
        s1 = max(math.sqrt(math.fsum(r * (p - mu1) ** 2 for r, p in zip(first, points)) / r1), floor)
        s2 = max(math.sqrt(math.fsum(r * (p - mu2) ** 2 for r, p in zip(second, points)) / r2), floor)
        weight = min(max(r1 / total_weight, 1e-9), 1 - 1e-9)
    return log_likelihood, (weight, mu1, s1, mu2, s2)


def mann_kendall(values: list[float]) -> tuple[float, float]:
    """The Mann-Kendall test of a trend in ``values`` over their order: (Kendall's S, two-sided p-value by
    the normal approximation with the ties' variance correction and a continuity correction of 1; Kendall
    1975, Eq. 4.3 and 4.4). S counts the later values above an earlier one minus those below it, each
    earlier value's counts read off the sorted values before it (O(n log n) comparisons)."""
    n = len(values)
    seen: list[float] = []
    s = 0
    for j, v in enumerate(values):
        below, not_above = bisect_left(seen, v), bisect_right(seen, v)
        s += below - (j - not_above)  # earlier values below v (concordant) minus those above it
        insort(seen, v)
    ties = 0
    run = 1
    for i in range(1, n + 1):
        if i < n and seen[i] == seen[i - 1]:
            run += 1
            continue
        ties += run * (run - 1) * (2 * run + 5)
        run = 1
    variance = (n * (n - 1) * (2 * n + 5) - ties) / 18
    if variance <= 0:
        return float(s), 1.0
    z = (s - math.copysign(1, s)) / math.sqrt(variance) if s else 0.0
    return float(s), math.erfc(abs(z) / math.sqrt(2))


def _drift(data: list[float], logs: list[float], n: int) -> tuple[float | None, Finding | None]:
    if n < MIN_RUNS[DRIFT]:
        return None, None
    half = n // 2
    first, last = statistics.median(data[:half]), statistics.median(data[n - half:])
    ratio = first / last
    if max(ratio, 1 / ratio) < 1 + MATERIAL:  # too small to say, whatever the test: not tested
        return None, None
    series = logs
    if n > TREND_BLOCKS:
        size = n / TREND_BLOCKS
        series = [statistics.median(logs[round(k * size):round((k + 1) * size)]) for k in range(TREND_BLOCKS)]
    _, p = mann_kendall(series)
    if p >= DRIFT_ALPHA:
        return p, None
    shown = f"p = {p:.2g}" if p >= 1e-4 else "p < 0.0001"
    what = (f"the runs drift: the first {half} runs' median is {_times(ratio)} the last {half}'s (Mann-Kendall "
            f"trend test, {shown})")
    if ratio > 1:
        # the first runs slower (caches, frequency ramp-up, a job ending): hyperfine's and pyperf's advice,
        # warmups; as many as the runs of the first half slower than every run of the second
        slowest_late = max(data[n - half:])
        slow = [i for i in range(half) if data[i] > slowest_late]
        warmup = (slow[-1] + 1) if slow else max(1, half // 2)
        advice = (f"leave out the slow first runs (--warmup {warmup})", INFO)
    else:  # slower as the measurement went on: heat, frequency, a job starting
        advice = (INFO, QUIET_MACHINE)
    return p, Finding(DRIFT, what, advice, p)


def _spread(ascending: list[float], median: float, mean: float, cv: float) -> Finding | None:
    low, high = ascending[0], ascending[-1]
    wide = cv >= CV_UNSTABLE
    extreme = high >= (1 + EXTREME_FROM_MEAN) * mean or low <= (1 - EXTREME_FROM_MEAN) * mean
    if not wide and not extreme:
        return None
    what = (f"the standard deviation is {cv:.1%} of the mean (pyperf warns from 10%); the median is "
            f"{_times(median / low)} the minimum, the maximum {_times(high / median)} the median")
    runs = math.ceil((_Z95 * cv / _TARGET_HALF_WIDTH) ** 2)
    more = (f"measure more runs (-r {runs} for the mean within ±1%)" if runs <= MAX_RUNS_ADVISED
            else f"lessen the spread first (the mean within ±1% would take {runs:,} runs)")
    return Finding(SPREAD, what, (more, INFO), cv)


def merged(remedies) -> list[str]:
    """Remedies said once each: the first of each kind (its words before " ("), so that two events' or two
    benchmarks' "measure more runs (-r N ...)" or "(--warmup N)" are one piece of advice, the first event's
    or benchmark's number (stat lists wall-time first)."""
    kept: dict[str, str] = {}
    for remedy in remedies:
        kept.setdefault(remedy.split(" (", 1)[0], remedy)
    return list(kept.values())
