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

import bisect
import functools
import math
from dataclasses import dataclass

import numpy as np

from perfctl.analysis import special

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
    # a tail holding every outcome sums the pmf's rounded terms to 1.0000000000000002: a probability is
    # clipped here, where it is made, so that no p-value above 1 reaches a correction (Holm refuses it)
    upper = min(1.0, float(pmf[k:].sum()))
    lower = min(1.0, float(pmf[:k + 1].sum()))
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


def median(values: np.ndarray) -> float:
    """np.median of a non-empty 1-D float array, the same value (for an even count the two middle values'
    mean, computed as np.mean does: (a + b) / 2), without np.median's general-axis and NaN machinery:
    the analysis takes about ten medians per benchmark, and with 50 runs that machinery was most of it."""
    half = values.size // 2
    if values.size % 2:
        return float(np.partition(values, half)[half])
    part = np.partition(values, (half - 1, half))
    return float((part[half - 1] + part[half]) / 2)


def _sorted_median(ascending: np.ndarray) -> float:
    """``median`` of an ascending array: its middle value, or the mean of the two middle ones as np.mean
    computes it ((a + b) / 2): the values a partition would put there."""
    half = ascending.size // 2
    if ascending.size % 2:
        return float(ascending[half])
    return float((ascending[half - 1] + ascending[half]) / 2)


def _ascending(values: np.ndarray) -> np.ndarray:
    """``values`` in ascending order: as given when they already are (an O(n) check), else sorted."""
    if values.size < 2 or (values[1:] >= values[:-1]).all():
        return values
    return np.sort(values)


def _rank_sum(x_sorted: np.ndarray, y_sorted: np.ndarray) -> tuple[float, np.ndarray]:
    """(sum of the average ranks of x in the pooled sample, sizes of the tie groups in pooled order), from
    two ascending samples by their merge: each value's pooled position is its index plus the count of the
    other sample's values before it (x first among equal values, as a stable sort of the two runs puts
    them). Same ties as ``_rank``; the sum is exact (half-integers below 2^53), so equal to ``_rank``'s."""
    n, total = len(x_sorted), len(x_sorted) + len(y_sorted)
    x_at = np.searchsorted(y_sorted, x_sorted, side="left")
    x_at += np.arange(n)
    y_at = np.searchsorted(x_sorted, y_sorted, side="right")
    y_at += np.arange(total - n)
    sorted_values = np.empty(total)
    sorted_values[x_at] = x_sorted
    sorted_values[y_at] = y_sorted
    magnitude = np.abs(sorted_values)
    gaps = sorted_values[1:] - sorted_values[:-1]
    boundaries = np.flatnonzero(gaps > TIE_TOLERANCE * np.maximum(magnitude[1:], magnitude[:-1])) + 1
    if boundaries.size == total - 1:  # no ties: the ranks are the 1-based positions
        return float(x_at.sum() + n), np.ones(total, dtype=np.intp)
    edges = np.concatenate(([0], boundaries, [total]))
    starts, ends = edges[:-1], edges[1:]
    from_x = np.zeros(total, dtype=np.intp)
    from_x[x_at] = 1
    x_before = np.zeros(total + 1, dtype=np.intp)  # values of x among the first k pooled
    np.cumsum(from_x, out=x_before[1:])
    x_in_group = x_before[ends] - x_before[starts]
    return float((x_in_group * ((starts + ends + 1) / 2.0)).sum()), ends - starts


@dataclass(frozen=True)
class RankSum:
    """Two independent samples ranked together once: U of the first sample and the sizes of the tie
    groups. ``test(alternative)`` is the Wilcoxon-Mann-Whitney test of any alternative from them."""

    statistic: float
    ties: np.ndarray
    n: int
    m: int

    def test(self, alternative: str = "two-sided") -> RankTestResult:
        _check_alternative(alternative)
        n, m, u, ties = self.n, self.m, self.statistic, self.ties
        if n <= EXACT_MAX_RANK_SUM and m <= EXACT_MAX_RANK_SUM and (ties == 1).all():
            return RankTestResult(u, _exact_pvalue(_rank_sum_pmf(n, m), u, alternative), alternative, EXACT, n, m)
        total = n + m
        variance = n * m / 12 * ((total + 1) - float((ties**3 - ties).sum()) / (total * (total - 1)))
        pvalue, z = _normal_pvalue(u, n * m / 2, math.sqrt(max(variance, 0.0)), alternative)
        return RankTestResult(u, pvalue, alternative, NORMAL, n, m, zstatistic=z)


def rank_sum(x, y) -> RankSum:
    """Rank x and y together (average ranks, ties within a relative 1e-12) for the rank-sum test: O((n + m)
    log(n + m)), and O(n + m) for samples already in ascending order (their merge is linear).

    >>> rank_sum([1.0, 3.0], [2.0]).statistic
    1.0
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("x, y: need at least one value each")
    return _rank_sum_sorted(_ascending(x), _ascending(y))


def _rank_sum_sorted(x_sorted: np.ndarray, y_sorted: np.ndarray) -> RankSum:
    """``rank_sum`` of two non-empty ascending float arrays (validated by the caller)."""
    n = len(x_sorted)
    x_rank_sum, ties = _rank_sum(x_sorted, y_sorted)
    return RankSum(x_rank_sum - n * (n + 1) / 2, ties, n, len(y_sorted))


def mann_whitney(x, y, alternative: str = "two-sided") -> RankTestResult:
    """Wilcoxon-Mann-Whitney rank-sum test of two independent samples.

    H0: F_X = F_Y; "greater": X tends to be larger (F_X < F_Y). The statistic is U = #{x_i > y_j} + 1/2
    #{x_i = y_j}, so U/(nm) estimates P[X > Y] (Speedup-Test, 004_90ddb49e43171cfa.txt, section 3.2).
    Exact when both samples have at most 20 values and there are no ties; else the normal approximation
    with continuity correction and tie-corrected variance. Several alternatives on the same samples: rank
    them once with ``rank_sum`` and call its ``test``.
    """
    _check_alternative(alternative)
    return rank_sum(x, y).test(alternative)


@dataclass(frozen=True)
class ShiftEstimate:
    """A Hodges-Lehmann estimate with its distribution-free confidence interval (None where the sample is
    too small for a bound at this confidence)."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float


def _critical_rank(pmf: np.ndarray | None, mean: float, sd: float, tail: float) -> int:
    """Largest k with P(S <= k - 1) <= tail for the null statistic S (exact pmf, or normal with cc)."""
    if pmf is not None:
        cdf = np.cumsum(pmf)
        return int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    z = float(special.ndtri(1 - tail))
    return int(math.floor(mean - 0.5 - z * sd)) + 1


# Selection of order statistics among the n*m pairwise differences or the n(n+1)/2 Walsh averages without
# building them: a bracket of candidates is cut by pivots drawn from it until few enough remain to build.
# candidates drawn from a bracket per round to place its pivots (Floyd & Rivest): about a quarter of the
# square root of the grid, within these bounds (a small grid wants cheap rounds, a large one few rounds;
# 1000 x 1000 runs: 2.9 ms with 2^12, 12.6 ms building the million; 10^6 x 10^6: 1.3 s with 2^17)
SELECTION_SAMPLE = 1 << 12
SELECTION_SAMPLE_MAX = 1 << 17
SELECTION_SPREAD = 3.0  # pivots this many standard deviations of the target's sample position either side
SELECTION_BUILD = 1 << 15  # a bracket with at most this many candidates is built and partitioned


@dataclass(frozen=True)
class _Cut:
    """A threshold t of the value grid: per row, how many of the row's columns (all of them, from 0) hold
    a value <= t, and how many values of the grid (from each row's first column) are <= t."""

    value: float
    boundary: np.ndarray
    count: int


class _PairGrid:
    """The values v(i, j) = fl(a_i + b_j), every j ("differences": a = sorted x, b = sorted -y, so that
    fl(a_i + b_j) is exactly fl(x - y)), or fl(fl(a_i + a_j) / 2), j >= i ("walsh": a = b = sorted d).
    Rounding is monotone, so v is nondecreasing along every row and column, and the values <= t in row i
    are its columns up to a boundary (for the Walsh averages, from column i on)."""

    def __init__(self, rows: np.ndarray, columns: np.ndarray, walsh: bool):
        self.rows, self.columns, self.walsh = rows, columns, walsh
        self.size = len(rows) * (len(rows) + 1) // 2 if walsh else len(rows) * len(columns)

    def values(self, i: np.ndarray | None, j: np.ndarray) -> np.ndarray:
        """v(i, j); ``i`` None means every row in order, ``j`` then one column per row (clipped to the row)."""
        sums = np.take(self.columns, j, mode="clip")
        sums += self.rows if i is None else self.rows[i]
        if self.walsh:
            sums /= 2
        return sums

    @functools.cached_property
    def first(self) -> np.ndarray:
        """Each row's first column: 0, or i for the Walsh averages (j >= i)."""
        return np.arange(len(self.rows)) if self.walsh else np.zeros(len(self.rows), dtype=np.intp)

    def lowest(self) -> _Cut:
        return _Cut(-math.inf, np.zeros(len(self.rows), dtype=np.intp), 0)

    def highest(self) -> _Cut:
        return _Cut(math.inf, np.full(len(self.rows), len(self.columns), dtype=np.intp), self.size)

    def start(self, cut: _Cut) -> np.ndarray:
        """Per row, the first column above ``cut`` among the row's own columns."""
        return np.maximum(cut.boundary, self.first) if self.walsh else cut.boundary

    def cut(self, threshold: float, below: _Cut, above: _Cut) -> _Cut:
        """The exact cut at ``threshold``, which lies between the known cuts ``below`` and ``above``.

        fl(a + b) <= t is not exactly b <= fl(t - a): searchsorted on fl(t - a) only guesses each row's
        boundary, which is then checked with the floating-point expression itself on both sides; rows whose
        guess is off are bisected between the known cuts. O((n + m) log m), no per-pair array."""
        last = len(self.columns)
        # keys ascending (rows are sorted ascending): searchsorted runs fastest on sorted keys
        keys = (2 * threshold - self.rows[::-1]) if self.walsh else (threshold - self.rows[::-1])
        guess = np.searchsorted(self.columns, keys, side="right")[::-1]
        left_ok = self.values(None, guess - 1) <= threshold
        left_ok |= guess == 0
        right_ok = self.values(None, guess) > threshold
        right_ok |= guess == last
        wrong = np.flatnonzero(~(left_ok & right_ok))
        if wrong.size:
            guess = guess.copy()
            too_low = ~right_ok[wrong]
            start = np.where(too_low, guess[wrong] + 1, below.boundary[wrong])
            stop = np.where(too_low, above.boundary[wrong], guess[wrong] - 1)
            while np.any(active := start < stop):
                middle = (start + stop) // 2
                exceeds = self.values(wrong, middle) > threshold
                stop = np.where(active & exceeds, middle, stop)
                start = np.where(active & ~exceeds, middle + 1, start)
            guess[wrong] = start
        counted = np.maximum(guess, self.first) - self.first if self.walsh else guess
        return _Cut(threshold, guess, int(np.sum(counted)))

    def every_value(self) -> np.ndarray:
        """All the grid's values, for a grid no larger than SELECTION_BUILD (one broadcast, no indices)."""
        if self.walsh:
            i, j = np.triu_indices(len(self.rows))
            return (self.rows[i] + self.columns[j]) / 2
        return (self.rows[:, None] + self.columns[None, :]).ravel()

    def candidates(self, below: _Cut, above: _Cut, sample: int | None = None, rng=None) -> np.ndarray:
        """The values in (below.value, above.value]: all of them, or ``sample`` drawn uniformly at random."""
        first = self.start(below)
        widths = self.start(above) - first
        ends = np.cumsum(widths)
        if sample is None:
            rows = np.repeat(np.arange(len(widths)), widths)
            columns = np.arange(int(ends[-1])) - np.repeat(ends - widths - first, widths)
        else:
            drawn = np.sort(rng.integers(0, int(ends[-1]), size=sample))
            rows = np.searchsorted(ends, drawn, side="right")
            columns = drawn - (ends - widths - first)[rows]
        return self.values(rows, columns)


def _pivots(sample: np.ndarray, ranks: list[int], below: _Cut, above: _Cut) -> list[float]:
    """Thresholds that bracket each rank tightly with high probability (Floyd & Rivest's sampling): the
    sample values a few standard deviations either side of where the rank falls in the sorted sample.
    Every pivot lies strictly between ``below`` and ``above``, so each round shrinks the bracket."""
    size, total = len(sample), above.count - below.count
    windows = []
    for rank in ranks:
        share = (rank - below.count) / total
        spread = SELECTION_SPREAD * math.sqrt(size * share * (1 - share)) + 1
        windows.append((share * size - spread, share * size + spread))
    merged: list[list[float]] = []
    for start, stop in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    positions = [p for start, stop in merged for p in (math.floor(start), math.ceil(stop)) if 0 <= p < size]
    if not positions:  # a sample too small to place a window: cut where the first rank should fall
        positions = [min(size - 1, int(windows[0][0] + windows[0][1]) // 2)]
    # a pivot equal to the bracket's top would not cut; just below it, it sets the top's ties apart. The
    # caller has ruled out a bracket of two adjacent floats, so that is still above the bracket's bottom.
    below_top = float(np.nextafter(above.value, -math.inf))
    return [min(float(sample[p]), below_top) for p in positions]


def _select(grid: _PairGrid, ranks: list[int]) -> dict[int, float]:
    """The grid's k-th smallest value for every 1-based k in ``ranks``, exactly.

    A value-space search in the manner of Monahan's Algorithm 616 (ACM TOMS 10(3), 1984, for the Walsh
    averages) and of Johnson & Mizoguchi's selection in X + Y (SIAM J. Comput. 7(2), 1978): each rank is
    kept in a bracket (t_low, t_high] of known cuts; pivots drawn at random among the bracket's candidates
    (Floyd & Rivest, CACM 18(3), 1975, Algorithm 489: sample, then cut a few standard deviations either side
    of the rank) shrink it by a factor of order sqrt(s) per round for a sample of s candidates, each cut
    costing O((n + m) log m); a bracket of at most SELECTION_BUILD candidates is built and partitioned.
    Ranks in one bracket share its pivots and its build. With s >= sqrt(n + m) the rounds are bounded
    whatever n and m (log(nm) / log(sqrt(s)) <= 8 as n + m grows; three at 10^6 runs per side, two cuts
    per rank each), so the expected time is O((n + m) log(n + m)) and the memory O(n + m + SELECTION_BUILD)."""
    pending = sorted(set(ranks))
    if grid.size <= SELECTION_BUILD:  # few enough to build at once: the last step of the search, taken first
        with np.errstate(over="ignore"):
            every = grid.every_value()
        if not np.isfinite(every).all():
            raise ValueError(_OVERFLOW)
        every.partition([rank - 1 for rank in pending])
        return {rank: float(every[rank - 1]) for rank in pending}
    rng = np.random.default_rng(0)  # any pivots give the same values; a fixed seed gives the same time
    sample_size = max(SELECTION_SAMPLE, min(SELECTION_SAMPLE_MAX, math.isqrt(grid.size) // 4),
                      math.isqrt(len(grid.rows) + len(grid.columns)))
    cuts = [grid.lowest(), grid.highest()]
    found: dict[int, float] = {}
    while pending:
        counts = [cut.count for cut in cuts]
        brackets: dict[int, list[int]] = {}
        for rank in pending:
            brackets.setdefault(bisect.bisect_left(counts, rank), []).append(rank)
        pivots = []
        for index, members in brackets.items():
            below, above = cuts[index - 1], cuts[index]
            if np.nextafter(below.value, math.inf) == above.value:  # only above.value itself lies between
                found.update((rank, float(above.value)) for rank in members)
            elif above.count - below.count <= SELECTION_BUILD:
                positions = [rank - below.count - 1 for rank in members]
                built = np.partition(grid.candidates(below, above), positions)
                found.update((rank, float(built[p])) for rank, p in zip(members, positions))
            else:
                sample = np.sort(grid.candidates(below, above, sample_size, rng))
                pivots.extend(_pivots(sample, members, below, above))
        pending = [rank for rank in pending if rank not in found]
        for pivot in sorted(set(pivots)):
            index = bisect.bisect_left([cut.value for cut in cuts], pivot)
            cuts.insert(index, grid.cut(pivot, cuts[index - 1], cuts[index]))
        # keep only the cuts that still bound a pending rank (each holds one integer per row)
        counts = [cut.count for cut in cuts]
        keep = {0, len(cuts) - 1}
        for rank in pending:
            index = bisect.bisect_left(counts, rank)
            keep.update((index - 1, index))
        cuts = [cut for index, cut in enumerate(cuts) if index in keep]
    return found


def _finite_sample(name: str, values) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or data.size == 0 or not np.isfinite(data).all():
        raise ValueError(f"{name}: need a non-empty 1-D sample of finite values")
    return data


_OVERFLOW = "the pairwise differences (or Walsh sums) overflow float64: scale the values"


def _estimate(grid: _PairGrid, k: int, confidence: float) -> ShiftEstimate:
    """The median of the grid's values (as np.median: for an even count, the mean of the two middle ones)
    with the k-th smallest and k-th largest as the interval (None, None when k < 1). ValueError when the
    grid's extreme values overflow float64 (x - y of values near its maximum): the search needs them finite,
    and no timing or count comes near (compare tests log ratios). A grid small enough to build is checked
    whole by ``_select`` (its extremes are among its values)."""
    if grid.size > SELECTION_BUILD:
        with np.errstate(over="ignore"):
            extremes = grid.values(np.array([0, len(grid.rows) - 1]), np.array([0, len(grid.columns) - 1]))
        if not np.isfinite(extremes).all():
            raise ValueError(_OVERFLOW)
    size = grid.size
    middle = [(size + 1) // 2] if size % 2 else [size // 2, size // 2 + 1]
    bounds = [k, size - k + 1] if k >= 1 else []
    found = _select(grid, middle + bounds)
    # np.median's value: the middle one, or the two middle ones' mean as np.mean computes it
    estimate = found[middle[0]] if len(middle) == 1 else (found[middle[0]] + found[middle[1]]) / 2
    if not bounds:
        return ShiftEstimate(estimate, None, None, confidence)
    return ShiftEstimate(estimate, found[k], found[size - k + 1], confidence)


def hodges_lehmann_shift(x, y, confidence: float = 0.95) -> ShiftEstimate:
    """Hodges-Lehmann estimate of the shift between X and Y, median of x_i - y_j, with the confidence
    interval obtained by inverting the rank-sum test (Hollander & Wolfe, ch. 4.3): the k-th smallest and
    k-th largest of the nm differences, k the rank-sum null quantile. Valid under the location-shift model.

    The order statistics are selected without forming the nm differences (``_select``: Johnson &
    Mizoguchi, SIAM J. Comput. 7(2), 1978; Monahan, ACM TOMS 10(3), 1984): O((n + m) log(n + m)) expected time,
    O(n + m) memory, and the same floating-point values as np.median and np.partition of the
    differences.

    >>> hodges_lehmann_shift([3.0, 4.0, 5.0], [1.0, 2.0]).estimate
    2.5
    """
    x = _finite_sample("x", x)
    y = _finite_sample("y", y)
    return _hodges_lehmann_shift_sorted(_ascending(x), _ascending(y), confidence)


@functools.lru_cache(maxsize=256)
def _shift_critical_rank(n: int, m: int, tail: float) -> int:
    """k of the rank-sum inversion interval for samples of n and m at one-sided ``tail`` (capped at the
    median's rank); a function of the sizes and the level only, so computed once per comparison."""
    pmf = _rank_sum_pmf(n, m) if n <= EXACT_MAX_INTERVAL and m <= EXACT_MAX_INTERVAL else None
    return min(_critical_rank(pmf, n * m / 2, math.sqrt(n * m * (n + m + 1) / 12), tail), (n * m + 1) // 2)


def _hodges_lehmann_shift_sorted(x_sorted: np.ndarray, y_sorted: np.ndarray, confidence: float) -> ShiftEstimate:
    """``hodges_lehmann_shift`` of two non-empty ascending arrays of finite values."""
    k = _shift_critical_rank(len(x_sorted), len(y_sorted), (1 - confidence) / 2)
    # -sorted(y) reversed is sorted(-y): the same values, without a second sort
    return _estimate(_PairGrid(x_sorted, -y_sorted[::-1], walsh=False), k, confidence)


def hodges_lehmann_center(d, confidence: float = 0.95) -> ShiftEstimate:
    """Hodges-Lehmann estimate of the center of a symmetric distribution (median of the Walsh averages
    (d_i + d_j)/2, i <= j) with the interval from inverting the signed-rank test.

    The Walsh averages are selected without forming them (Monahan's Algorithm 616, ACM TOMS 10(3), 1984;
    see ``_select``): O(n log n) expected time, O(n) memory, the same values as the n(n+1)/2 averages give.

    >>> hodges_lehmann_center([1.0, 2.0, 6.0]).estimate
    2.75
    """
    d = _finite_sample("d", d)
    ordered = _ascending(d)
    return _estimate(_PairGrid(ordered, ordered, walsh=True), _center_critical_rank(len(d), (1 - confidence) / 2),
                     confidence)


def _center_critical_rank(n: int, tail: float) -> int:
    """k of the signed-rank inversion interval over n values at one-sided ``tail`` (capped at the median's
    rank among the n(n+1)/2 Walsh averages)."""
    pmf = _signed_rank_pmf(n) if n <= EXACT_MAX_INTERVAL else None
    count = n * (n + 1) // 2
    k = _critical_rank(pmf, count / 2, math.sqrt(n * (n + 1) * (2 * n + 1) / 24), tail)
    return min(k, (count + 1) // 2)
