"""The ends of a Hodges-Lehmann ratio interval, placed exactly against 1 and the band's edges.

The interval of A/B is computed in log space (rank_tests.py: order statistics of log x_i - log y_j, or of
the Walsh averages of log(x_i / y_i)) and brought back with exp, so an end is the exact ratio give or take
a few units in the last place. That is harmless except where the exact ratio sits on, or within those
few ulps of, 1 or an edge of the band [1 - delta, 1 + delta]: exact counts hit such ratios (95 instructions
against 100: every A_i/B_j is 19/20, the band's lower edge, yet exp(log 95 - log 100) fell below 0.95 and
the verdict read "relevant difference, beyond" off a band documented as closed).

``settle_ends`` decides those cases exactly. The k-th smallest ratio q_(k) lies below a threshold t when
at least k ratios do, above it when fewer than k are at most t, on it otherwise; the ratios are counted
exactly in rational arithmetic (``fractions.Fraction``: a float is a dyadic rational, the margin is read
from its decimal text) over the pairs whose floating-point ratio is within a relative 1e-12 of t, the
others by their floats. The end is then moved by as few ulps as it takes to lie on the exact side of t,
or, when q_(k) equals an edge, onto the band side of it, so that ``verdicts.read_off`` of the float ends
(itself exact) gives the verdict of the exact interval. Only ends within ``NEAR`` of a threshold are
examined: elsewhere the floats already lie on the right side, and nothing is counted.

The order statistics are the distribution-free intervals' (Hollander & Wolfe, Nonparametric Statistical
Methods, ch. 4.3 for the rank-sum inversion over the n m differences, ch. 3.3 for the signed-rank inversion
over the n(n+1)/2 Walsh averages; rank_tests.py cites the same): the k-th smallest and the k-th largest,
k the critical rank rank_tests.py computes, so the exact question is a count against k.

``equivalence_tests`` decides SPARC's two one-sided equivalence tests (TOST) the same way. The band is
closed, so their null hypotheses are S < 1 - delta and S > 1 + delta, strictly outside it; each p-value is
the supremum over its null, reached as the tested ratio c approaches the edge from outside, where a ratio
exactly on the edge lies on the band's side of c. The tests of x against c y (rank-sum) and of r_i - c
(signed-rank) are therefore taken at the exact edge, comparing each ratio with it in rationals, and a
ratio on the edge counts for the band: as a pair x_i > c y_j (x_i < c y_j) of the rank-sum, as the
smallest difference r_i - c, on the band's side, of the signed-rank test. Scaling y by the float
(1 - delta) made 95 against 100 a tie (p = 1) or not by rounding, and a tie read "equivalence not shown"
beside an interval [0.950, 0.950] inside the closed band.

Counts past 2^53 have no float of their own (2^53 + 1 is the float 2^53; 2^64 - 1 and 2^64 - 2 are one
float), so the float arrays cannot say on which side of 1 their ratio lies: the readers keep integers as
ints (perfctl/formats), and ``exact_samples`` hands them here beside the floats wherever one is past 2^53.
The counters then take each value's rational from the int, and their float only as its approximation (a
float within 1e-16 relative): constant counts 2^64 - 1 against 2^64 - 2 are a ratio of 1 + 5.4e-20, above
1, not the 1 of their floats. Elsewhere (every time, every count up to 2^53) the floats are exact.

``perfctl ab``'s confidence sequence (analysis/ab.py) has the same problem and the same answer: its ends are
exp of order statistics of the rounds' log ratios log(a_i / b_i), so ``RoundRatios`` keeps, round by round,
how many exact ratios a_i / b_i lie below and on each threshold, and ``place_end`` moves an order statistic
(``rank_side``) or the median (ab's estimate) onto its exact side. That part is plain Python: ab imports it at
every start, so numpy (and rank_tests.py, which needs it) are imported only where compare's grids are built.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from perfctl.analysis.verdicts import band

if TYPE_CHECKING:
    import numpy as np

    from perfctl.analysis.rank_tests import RankTestResult

# An end this close (relative) to a threshold is decided by counting: log-space rounding moves an end by
# about 1e-15 relative for values up to 10^300, so 1e-9 leaves a wide safety factor and is far below any
# margin (Parameters keeps margins at or above 1e-6).
NEAR = 1e-9
# A pair whose floating-point product lies within this relative distance of the bound is compared exactly.
SLACK = 1e-12


@dataclass(frozen=True)
class Threshold:
    """1 or an edge of the band, and the floats an end near it is moved to: ``below``/``above`` the largest
    float under it and the smallest over it; ``at_most``/``at_least`` the same allowing equality (the
    threshold itself when it is a float: 1, or an edge of a margin such as 0.25); ``on`` where an end
    exactly on it goes: 1.0, or the first float at or inside the closed band's edge."""

    value: Fraction
    below: float
    at_most: float
    at_least: float
    above: float
    on: float


@functools.lru_cache(maxsize=64)
def thresholds(margin: float) -> tuple[Threshold, Threshold, Threshold]:
    """The lower edge, 1 and the upper edge of [1 - margin, 1 + margin] (``verdicts.band``: exact rationals).

    >>> lower, one, upper = thresholds(0.05)
    >>> lower.on, one.on, upper.on, upper.above
    (0.9500000000000001, 1.0, 1.0499999999999998, 1.05)
    """
    lower_edge, upper_edge = band(margin)

    def threshold(value: Fraction, on: str) -> Threshold:
        at_most, at_least = _below(value, inclusive=True), _above(value, inclusive=True)
        return Threshold(value, _below(value), at_most, at_least, _above(value),
                         {"one": 1.0, "lower": at_least, "upper": at_most}[on])

    return threshold(lower_edge, "lower"), threshold(Fraction(1), "one"), threshold(upper_edge, "upper")


def near(end: float, threshold: Threshold, within: float = NEAR) -> bool:
    """Whether ``end`` lies within a relative ``within`` of the threshold: where floats may misplace it."""
    return abs(end / float(threshold.value) - 1) <= within


def place_end(end: float, side: Callable[[Fraction], int | None], margin: float) -> float:
    """``end``, a float within a few ulps of an exact value whose side of each threshold ``side(t)`` tells
    (-1 below t, 0 on it, 1 above; None not known: the end stays), moved to that side of each threshold it
    is near. On a threshold it goes to ``Threshold.on``: the band is closed. Ends far from every threshold
    are returned as they are, and ``side`` is not asked."""
    for t in thresholds(margin):
        if not near(end, t):
            continue
        where = side(t.value)
        if where is None:
            continue
        if where < 0:
            if end >= t.at_least:
                end = t.below
        elif where > 0:
            if end <= t.at_most:
                end = t.above
        else:
            end = t.on
    return end


def rank_side(count: Callable[[Fraction, bool], int], rank: int) -> Callable[[Fraction], int]:
    """The side of a threshold t on which the rank-th smallest of some values lies, from ``count(t,
    strict)``, how many of them are below t (at most t unless strict): below when at least ``rank`` are,
    above when fewer than ``rank`` are at most t, else on it."""

    def side(t: Fraction) -> int:
        if count(t, True) >= rank:
            return -1
        if count(t, False) < rank:
            return 1
        return 0

    return side


class RoundRatios:
    """How many of a sequence's exact ratios a_i / b_i lie below and on each threshold of a band, kept as
    rounds are added (analysis/ab.py: one ratio a round). ``count(t, strict)`` answers ``rank_side`` for
    those thresholds in O(1); a ratio is compared exactly only when its float quotient is within SLACK of a
    threshold (the quotient is correctly rounded: elsewhere its side is the exact ratio's)."""

    def __init__(self, margin: float):
        self.margin = margin
        self._below = {t.value: 0 for t in thresholds(margin)}
        self._on = dict(self._below)

    def add(self, a: float, b: float) -> None:
        """One round's ratio a / b (a, b positive, b finite; a may be infinite: a ratio beyond every float)."""
        for t in thresholds(self.margin):
            where = ratio_side(a, b, t)
            if where < 0:
                self._below[t.value] += 1
            elif where == 0:
                self._on[t.value] += 1

    def count(self, t: Fraction, strict: bool) -> int:
        return self._below[t] + (0 if strict else self._on[t])


def ratio_side(a: float, b: float, t: Threshold) -> int:
    """-1, 0 or 1: the exact a / b below, on or above the threshold."""
    quotient = a / b
    if not near(quotient, t, SLACK):
        return -1 if quotient < float(t.value) else 1
    exact = Fraction(a) / Fraction(b)
    return (exact > t.value) - (exact < t.value)


# the largest integer every one below which a float holds exactly
EXACT_IN_FLOAT = 1 << 53

Exact = tuple[Sequence, Sequence] | None


def exact_samples(x: Sequence, y: Sequence, floats: tuple[np.ndarray, np.ndarray] | None = None) -> Exact:
    """(x, y) as given, for the counters to read exactly, when either holds an integer a float cannot hold
    (past 2^53: the readers keep counts as ints); None otherwise, the float arrays then being exact.
    ``floats``: x and y as float arrays where the caller has them; a side whose floats all lie below 2^53
    holds no such integer and is not looked at value by value (10^6 runs: one vectorised pass)."""
    import numpy as np  # here: ab imports this module without numpy (the module docstring)

    # numpy's integer arrays (uint64 counters) as the Python ints they hold: their floats round as a list's do
    x, y = (v.tolist() if isinstance(v, np.ndarray) and v.dtype.kind in "iu" else v for v in (x, y))
    x_float, y_float = floats if floats is not None else (np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    if any(len(values) and np.abs(as_float).max() >= EXACT_IN_FLOAT
           and any(type(v) is int and abs(v) > EXACT_IN_FLOAT for v in values)
           for values, as_float in ((x, x_float), (y, y_float))):
        return tuple(x), tuple(y)
    return None


def settle_ends(x: np.ndarray, y: np.ndarray, low: float | None, high: float | None, level: float,
                margin: float, paired: bool, exact: Exact = None) -> tuple[float | None, float | None]:
    """The interval [low, high] of A/B at ``level`` (computed by rank_tests.py from x and y, validated and
    positive; ``paired``: Walsh averages of log(x_i / y_i)), each end on the exact side of 1 and of each
    edge of [1 - margin, 1 + margin] (see the module's docstring); ``exact``: the values themselves where
    the floats are not (``exact_samples``). None ends stay None."""
    if not any(end is not None and near(end, t) for end in (low, high) for t in thresholds(margin)):
        return low, high
    counter = _counter(x, y, paired, exact)
    size, k = counter.size, counter.rank(level)
    return (None if low is None else place_end(low, rank_side(counter.count, k), margin),
            None if high is None else place_end(high, rank_side(counter.count, size - k + 1), margin))


def _counter(x: np.ndarray, y: np.ndarray, paired: bool, exact: Exact) -> _Counter:
    if exact is not None:
        return _ExactWalshCounter(*exact) if paired else _PairCounter.of_exact(*exact)
    return _WalshCounter(x, y) if paired else _PairCounter(x, y)


def equivalence_tests(x: np.ndarray, y: np.ndarray, margin: float, paired: bool,
                      exact: Exact = None) -> tuple[RankTestResult, RankTestResult]:
    """(upper, lower): TOST's one-sided tests of H01-: S > 1 + margin ("less") and H02-: S < 1 - margin
    ("greater") on positive samples, the band's edges exact (``band``) and a ratio on an edge counted for
    the band (the module's docstring). Unpaired: rank-sum of x against c y, x and y in ascending order;
    paired: signed-rank of x_i / y_i - c."""
    import numpy as np  # here: ab imports this module without numpy (the module docstring)

    from perfctl.analysis.rank_tests import RankSum, _rank, wilcoxon_signed_rank

    lower_edge, upper_edge = band(margin)
    if paired:
        return (wilcoxon_signed_rank(_edge_differences(x, y, upper_edge, -1, exact), "less"),
                wilcoxon_signed_rank(_edge_differences(x, y, lower_edge, 1, exact), "greater"))
    counter = _counter(x, y, False, exact)
    # U = #{x_i > c y_j}: the pairs the limit from outside puts above c y (lower edge: ratios at or above
    # it; upper edge: ratios above it). No x_i then ties with a c y_j; the ties left are each sample's own.
    ties = np.concatenate((_rank(x)[1], _rank(y)[1]))
    n, m = len(x), len(y)
    upper = RankSum(float(counter.size - counter.count(upper_edge, strict=False)), ties, n, m)
    lower = RankSum(float(counter.size - counter.count(lower_edge, strict=True)), ties, n, m)
    return upper.test("less"), lower.test("greater")


def difference_test(x: np.ndarray, y: np.ndarray, paired: bool, exact: Exact = None) -> RankTestResult:
    """SPARC's two-sided test of H0+: S = 1, each ratio's side of 1 decided exactly, as the interval's ends
    are (``settle_ends``): otherwise a constant 10^15 + 1 against 10^15 (two floats 1e-15 apart, within the
    rank tests' relative tie tolerance of 1e-12) or 2^64 - 1 against 2^64 - 2 (one float) read as ties,
    "no difference", beside an interval that excludes 1. Unpaired: the rank-sum test, U = #{x_i > y_j} +
    #{x_i = y_j} / 2 counted in rationals (``_PairCounter`` at 1), the ties those of equal values; paired:
    the signed-rank test of r_i - 1, a ratio of exactly 1 a zero difference (dropped, Wilcoxon's rule).
    ``exact``: the values themselves where the floats are not (``exact_samples``)."""
    import numpy as np

    from perfctl.analysis.rank_tests import RankSum, wilcoxon_signed_rank

    one = Fraction(1)
    if paired:
        return wilcoxon_signed_rank(_edge_differences(x, y, one, 0, exact), "two-sided")
    counter = _counter(x, y, False, exact)
    below, at_most = counter.count(one, strict=True), counter.count(one, strict=False)
    statistic = counter.size - at_most + (at_most - below) / 2
    if exact is not None:
        ties = np.array(list(Counter((*exact[0], *exact[1])).values()), dtype=np.intp)
    else:
        ties = np.unique(np.concatenate((x, y)), return_counts=True)[1]
    return RankSum(float(statistic), ties, len(x), len(y)).test("two-sided")


# The magnitude given to a difference r_i - c of exactly 0 (a ratio on the edge): below every other |r_i - c|
# (rationals with 53-bit terms near 1 differ by far more), so it takes the smallest rank, as c's limit does.
ON_EDGE = math.ulp(0.0)


def _edge_differences(x: np.ndarray, y: np.ndarray, edge: Fraction, band_side: int,
                      values: Exact = None) -> np.ndarray:
    """r_i - edge, r_i = x_i / y_i, each with its exact sign: correctly rounded from rationals where the
    float difference is within NEAR of the edge (it may be 0 or of the wrong sign there), and a ratio on
    the edge an infinitesimal toward the band (``band_side``: +1 above the edge, -1 below; 0: a zero
    difference, for the test of 1 itself, ``difference_test``). ``values``:
    the exact x and y where the floats are not (``exact_samples``)."""
    import numpy as np

    exact_x, exact_y = values if values is not None else (x.tolist(), y.tolist())
    ratios = x / y
    differences = ratios - float(edge)
    for i in np.flatnonzero(np.abs(differences) <= NEAR * float(edge)):
        exact = Fraction(exact_x[i]) / Fraction(exact_y[i]) - edge
        differences[i] = float(exact) if exact else band_side * ON_EDGE
    return differences


def _below(t: Fraction, inclusive: bool = False) -> float:
    """The largest float below t (at most t when ``inclusive``)."""
    f = float(t)
    while Fraction(f) > t or (not inclusive and Fraction(f) == t):
        f = math.nextafter(f, -math.inf)
    return f


def _above(t: Fraction, inclusive: bool = False) -> float:
    """The smallest float above t (at least t when ``inclusive``)."""
    f = float(t)
    while Fraction(f) < t or (not inclusive and Fraction(f) == t):
        f = math.nextafter(f, math.inf)
    return f


class _Counter:
    """Counts the ratios of one interval's grid below a rational threshold, exactly. ``size``: how many
    ratios the grid holds; ``rank(level)``: the k of its interval at ``level``."""

    size: int

    def count(self, t: Fraction, strict: bool) -> int:
        raise NotImplementedError

    def rank(self, level: float) -> int:
        raise NotImplementedError


def _products_below(a: np.ndarray, a_counts: np.ndarray, a_exact: Callable[[int], Fraction], b: np.ndarray,
                    b_counts: np.ndarray, b_exact: Callable[[int], Fraction], bound: Fraction, strict: bool) -> int:
    """sum of a_counts[i] * b_counts[j] over the pairs with a_i * b_j < bound (<= unless ``strict``), all
    values positive. ``a``, ``b``: floats within a relative 1e-15 of the exact values a_exact(i), b_exact(j);
    ``b`` in ascending order of its exact values (its floats then never decrease). Per row, the columns whose
    float product is below the bound by more than SLACK count, those above it by more do not, and the
    window between is bisected exactly (the products rise along a row): O(log w) rationals for a row whose
    window holds w columns, O(n log n) in all even when every ratio is 1."""
    import numpy as np  # here, not at the top: ab imports this module without numpy (the module docstring)

    head = np.concatenate(([0], np.cumsum(b_counts)))  # head[j]: the weight of columns before j
    guess = float(bound) / a
    start = np.searchsorted(b, guess * (1 - SLACK), side="left")
    stop = np.searchsorted(b, guess * (1 + SLACK), side="right")
    total = int(np.sum(a_counts * head[start]))
    for i in np.flatnonzero(stop > start):
        exact_a = a_exact(int(i))
        first, last = int(start[i]), int(stop[i])
        while first < last:
            middle = (first + last) // 2
            product = exact_a * b_exact(middle)
            if product < bound or (not strict and product == bound):
                first = middle + 1
            else:
                last = middle
        total += int(a_counts[i]) * int(head[first] - head[start[i]])
    return total


class _PairCounter(_Counter):
    """The n m ratios x_i / y_j (the unpaired interval's grid), counted over the distinct values of each
    side: x_i / y_j < t is x_i * (1 / y_j) < t, and 1/y ascends exactly as y descends."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        import numpy as np

        self.n, self.m = len(x), len(y)
        self.size = self.n * self.m
        self.x, self.x_counts = np.unique(x, return_counts=True)
        y_values, y_counts = np.unique(y, return_counts=True)
        self.y, self.y_counts = y_values[::-1], y_counts[::-1]
        self.inverse = 1 / self.y
        self.exact_x = functools.cache(lambda i: Fraction(float(self.x[i])))
        self.exact_inverse = functools.cache(lambda j: 1 / Fraction(float(self.y[j])))

    @classmethod
    def of_exact(cls, x: Sequence, y: Sequence) -> _PairCounter:
        """The same grid over values some of which no float holds (``exact_samples``): distinct values
        counted as the numbers they are, their floats (correctly rounded, so never out of order) the
        approximations ``_products_below`` bisects between."""
        import numpy as np

        counter = cls.__new__(cls)
        counter.n, counter.m = len(x), len(y)
        counter.size = counter.n * counter.m
        x_counts, y_counts = Counter(x), Counter(y)
        x_values, y_values = sorted(x_counts), sorted(y_counts, reverse=True)
        counter.x = np.array([float(v) for v in x_values])
        counter.x_counts = np.array([x_counts[v] for v in x_values], dtype=np.int64)
        counter.y = np.array([float(v) for v in y_values])
        counter.y_counts = np.array([y_counts[v] for v in y_values], dtype=np.int64)
        counter.inverse = 1 / counter.y
        counter.exact_x = functools.cache(lambda i: Fraction(x_values[i]))
        counter.exact_inverse = functools.cache(lambda j: 1 / Fraction(y_values[j]))
        return counter

    def count(self, t: Fraction, strict: bool) -> int:
        return _products_below(self.x, self.x_counts, self.exact_x, self.inverse, self.y_counts, self.exact_inverse,
                               t, strict)

    def rank(self, level: float) -> int:
        from perfctl.analysis.rank_tests import _shift_critical_rank

        return _shift_critical_rank(self.n, self.m, (1 - level) / 2)


class _WalshCounter(_Counter):
    """The n(n+1)/2 Walsh averages of log r_i, r_i = x_i / y_i (the paired interval's grid), as ratios:
    exp((log r_i + log r_j) / 2) < t is r_i r_j < t^2. The ordered pairs (i, j) count each i != j twice
    and each i = j once, so the averages below t number (ordered + diagonal) / 2.

    The distinct ratios (``_lowest_terms``: one integer triple per rational, so equal ratios of different
    runs merge without rationals) in exact ascending order: sorted by their floats (correctly rounded, so
    never out of order but for ties), each run of equal floats then ordered as rationals."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        import numpy as np

        self.n = len(x)
        self.size = self.n * (self.n + 1) // 2
        terms, counts = np.unique(np.stack(_lowest_terms(x, y), axis=1), axis=0, return_counts=True)
        approx = np.ldexp(terms[:, 0] / terms[:, 1], terms[:, 2])  # p/q rounded once, times a power of two
        order = np.argsort(approx, kind="stable")
        terms, counts, approx = terms[order], counts[order], approx[order]
        run_starts = np.concatenate(([0], np.flatnonzero(np.diff(approx)) + 1, [len(approx)]))
        for run in np.flatnonzero(np.diff(run_starts) > 1):  # distinct ratios on one float: rare
            first, last = int(run_starts[run]), int(run_starts[run + 1])
            ranked = sorted(range(first, last), key=lambda i: _rational(terms[i]))
            terms[first:last], counts[first:last] = terms[ranked], counts[ranked]
        self.terms, self.counts, self.ratios = terms, counts, approx
        self._ratio = functools.cache(lambda i: _rational(self.terms[i]))

    def count(self, t: Fraction, strict: bool) -> int:
        import numpy as np

        ordered = _products_below(self.ratios, self.counts, self._ratio, self.ratios, self.counts, self._ratio,
                                  t * t, strict)
        diagonal = _products_below(self.ratios, self.counts, self._ratio, np.ones(1), np.ones(1, dtype=np.int64),
                                   lambda j: Fraction(1), t, strict)
        return (ordered + diagonal) // 2

    def rank(self, level: float) -> int:
        from perfctl.analysis.rank_tests import _center_critical_rank

        return _center_critical_rank(self.n, (1 - level) / 2)


class _ExactWalshCounter(_WalshCounter):
    """``_WalshCounter`` over pairs some of whose values no float holds (``exact_samples``): the distinct
    ratios x_i / y_i as rationals, in their exact order, their correctly rounded floats beside them."""

    def __init__(self, x: Sequence, y: Sequence):
        import numpy as np

        self.n = len(x)
        self.size = self.n * (self.n + 1) // 2
        counts = Counter(Fraction(a) / Fraction(b) for a, b in zip(x, y))
        ratios = sorted(counts)
        self.ratios = np.array([float(r) for r in ratios])
        self.counts = np.array([counts[r] for r in ratios], dtype=np.int64)
        self._ratio = ratios.__getitem__


def _lowest_terms(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x_i / y_i of positive floats exactly, as p * 2^e / q with p, q odd and coprime: one triple per
    rational. A float is m * 2^e with m an integer of 53 bits (np.frexp), so the ratio of two is the ratio
    of their integers times a power of two; the gcd and the factors of two are taken out."""
    import numpy as np

    mantissa_x, exponent_x = np.frexp(x)
    mantissa_y, exponent_y = np.frexp(y)
    p = np.ldexp(mantissa_x, 53).astype(np.int64)
    q = np.ldexp(mantissa_y, 53).astype(np.int64)
    e = exponent_x.astype(np.int64) - exponent_y.astype(np.int64)
    common = np.gcd(p, q)
    p, q = p // common, q // common
    twos_p = np.frexp((p & -p).astype(float))[1] - 1  # the lowest set bit, a power of two, is exact in a float
    twos_q = np.frexp((q & -q).astype(float))[1] - 1
    return p >> twos_p, q >> twos_q, e + twos_p - twos_q


def _rational(term: np.ndarray) -> Fraction:
    p, q, e = (int(v) for v in term)
    return Fraction(p << e, q) if e >= 0 else Fraction(p, q << -e)
