"""The sequential comparison behind ``perfctl ab``: rounds of A and B until the verdict is settled.

Each round measures A and B once, in a random order, and contributes one log ratio d_i = log(a_i / b_i)
(a, b: the metric's values, e.g. task-clock; a ratio above 1 means B is faster, as compare's S = X/Y, SPARC
Eq. 5). The comparison keeps an anytime-valid confidence sequence (CS) for the median of the d_i
(analysis/sequential.py: Howard & Ramdas 2022, Theorem 1 with the beta-binomial mixture boundary by
default) and reads its verdict off that CS exactly
as compare reads its verdict off an interval (analysis/sparc.py ``read_off``, Table I of Tullos et al.):

- relevant difference: the CS excludes 1; *settled* when it lies entirely beyond the margin band
  [1 - margin, 1 + margin] (``beyond``: B shown faster or slower by more than the margin);
- trivial difference: the CS excludes 1 and lies inside the band (settled);
- equivalence: the CS lies inside the band and holds 1 (settled);
- indeterminate: neither.

A relevant difference whose CS still crosses an edge of the band is not settled: more rounds will show it
beyond the margin or inside it. Because the CS covers the true median at every round at once with
probability >= 1 - alpha, stopping at the first settled round (or when the budget ends) keeps that
guarantee. No verdict is settled before ``min_rounds`` rounds (ab's --min-runs): a CS that settles earlier
is reported as it is, not settled, wherever the settlement is read (ab's table, JSON and exit code, the
agent's --until-settled jobs, the server's replay of them). What is reported is the CS of all the rounds so
far, and the estimate beside it is the median of the same rounds (always between the CS's order statistics:
their ranks straddle the middle), so the ratio printed lies inside the interval printed and the verdict
reads off that interval.

The ends and the estimate are exp of order statistics of the log ratios, so each is the exact ratio a_i / b_i
of some round give or take a few ulps; on the band's edges or 1 that would decide the verdict by rounding
(970 page faults against 1000 with a margin of 0.03: exp(log 0.97) is below 97/100, "beyond"). Each round's
exact ratio is therefore counted against 1 and the edges (analysis/ratio_edges.py ``RoundRatios``), and an
end or the estimate near one of them is placed on the side its exact ratio lies (``place_end``; an end on an
edge is inside the closed band), as compare places its intervals' ends. With k commands compared
against the first, each CS is held at alpha / k (Bonferroni): all k cover together with probability >= 1 -
alpha, so every verdict of the run is right together with that probability.

The guarantee assumes the rounds' log ratios are independent and identically distributed. Interleaving A and
B in random order within each round is what makes a slow drift of the machine cancel in the ratio; a change
of the programs themselves, or of the machine under one of them, does not cancel. So before a verdict is
settled the rounds are tested for alikeness after every round (analysis/alike.py), at the same alpha / k:

- the Simple Jumper conformal test martingale on the log ratios reaches 2/alpha (Vovk et al. 2021,
  Algorithm 1; Ville's inequality bounds the chance of that on alike rounds by alpha / 2, however long they
  run): it sees drifts;
- the CS of the rounds after round 10, 20, 40, ... no longer meets the running intersection of the CS up to
  that round (analysis/alike.py ``StretchTest``, alpha / 2 over all its stretches): it sees a step, which
  the martingale sees late (a step in A or in B is a step of their ratio; a change of the machine under both
  cancels in it, as a drift does, and the verdict about the ratio stays valid);
- or the running intersection of the CS over the rounds becomes empty (``contradicted``): no median is in
  every round's CS, which on alike rounds happens only when some CS missed (probability <= alpha).

Any makes the comparison *not alike* from that round on: no interval is claimed (``low``, ``high``
None), nothing is settled, and ``change`` says when it was seen, where the rounds changed (Pettitt's change
point) and the ratio before and after. Alike rounds are called not alike with probability at most 2 alpha
/ k (alpha / k for the CS, alpha / 2k for each of the other two tests); the chance that a settled verdict is
wrong stays at most alpha / k.

An exact metric (a count that is a deterministic function of the program and its inputs: the dbi backend's
valgrind counts, model.DETERMINISTIC_BACKENDS) needs no confidence sequence. Under that model one run of each
side gives the ratio exactly; the rounds after the first check the model, each side's count repeating its
first exactly. From EXACT_ROUNDS (2) rounds on, while every round repeats the first, the comparison's
interval is the point [a/b, a/b] (``method`` "exact"), read off as any interval and settled at
max(min_rounds, EXACT_ROUNDS) rounds: the fewest the check allows, where the median's CS needs 6 at 95% (the
sign test's 2 * 2^-n <= alpha, the least any distribution-free interval of a median can do). This is the
rule of exact-count CI tools (iai-callgrind compares one run of each side and has no interval at all); its
verdict is right whenever the model holds, so it spends none of alpha. A round that does not repeat the
first (a multi-threaded benchmark, an environment that changed) ends the exact rule for good: the CS of all
the rounds decides from then on, as for any metric.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache

from perfctl.analysis.alike import TIE_SEED, AlikeTest, StretchTest, change_point
from perfctl.analysis.mixture import mixture_rank_pair
from perfctl.analysis.ratio_edges import RoundRatios, place_end, rank_side
from perfctl.analysis.summary import linear_quantile
from perfctl.analysis.verdicts import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MARGIN,
    EXACT_ROUNDS,
    Verdict,
    beyond,
    read_off,
    relevance,
)

# The median's CS: Theorem 1 of Howard & Ramdas (a fixed quantile) with the two-sided beta-binomial mixture
# boundary (analysis/sequential.py), tuned to be tightest at T_OPT rounds. Against Theorem 3's double
# stitching (t_opt 20) at alpha 0.05 it has two ends from 6 rounds instead of 18, and is narrower up to 10^6
# rounds at least (rank spread 0.35 of t against 0.43 at 100 rounds, 0.089 against 0.104 at 2,000); double
# stitching's log-log rate wins only beyond.
METHOD = "beta_binomial"
T_OPT = 10
# The confidence a comparison may be held to: below 1/2 a "verdict" is a coin toss, and beyond 1 - 1e-9 the
# mixture boundary's bisection runs out of precision (alpha = 1 - confidence in floating point).
MIN_CONFIDENCE, MAX_CONFIDENCE = 0.5, 1 - 1e-9
# How far rounds_to_settle looks ahead, as a multiple of the rounds done.
LOOK_AHEAD = 1000
EXACT = "exact"
# A round given by its log ratio alone is taken at the ratio exp(d); beyond this exp overflows, and a ratio
# of exp(709) lies beyond every threshold as the true one does.
LARGEST_LOG = 709.0


def confidence_problem(confidence) -> str | None:
    """None if ``confidence`` can be asked of a sequential comparison (ab --confidence, a job's), else why
    not in one line. The one owner of that rule: the CLI, the server and the agent ask here."""
    if not (isinstance(confidence, (int, float)) and MIN_CONFIDENCE <= confidence <= MAX_CONFIDENCE):
        return f"confidence must be between {MIN_CONFIDENCE} and {MAX_CONFIDENCE:.9f}, got {confidence!r}"
    return None


@dataclass(frozen=True)
class Change:
    """Where a comparison's rounds stopped being alike: the round at which that was seen (``seen_at``) and by
    which test (``test``: "exchangeability", the conformal test martingale reached 2/alpha; "stretches", the
    rounds after a round no longer meet those up to it; "disjoint", the rounds' confidence sequences no
    longer overlap); Pettitt's change point over the rounds so far
    (``last_before``: the last round of the first stretch; None when no split separates anything) and the
    ratio A/B over the rounds up to it (``before``) and after it (``after``)."""

    seen_at: int
    test: str
    last_before: int | None
    before: float | None
    after: float | None


@dataclass(frozen=True)
class Settlement:
    """One comparison's state after ``rounds`` rounds: the ratio A/B (exp of the median log ratio of the
    rounds), its confidence sequence [low, high] over the same rounds (None: that end not yet bounded, or the
    rounds not alike), the verdict read off it, whether the verdict is settled (see the module docstring:
    the CS settles, after at least ``min_rounds`` rounds), and ``beyond`` ("faster"/"slower" when the CS lies
    beyond the margin, else None). ``alpha`` is this comparison's share of the family's risk. ``change`` is
    None while the rounds are alike."""

    rounds: int
    ratio: float | None
    low: float | None
    high: float | None
    verdict: Verdict
    beyond: str | None
    settled: bool
    contradicted: bool
    margin: float
    alpha: float
    method: str
    change: Change | None = None
    min_rounds: int = 1

    @property
    def confidence(self) -> float:
        return 1 - self.alpha

    @property
    def too_early(self) -> bool:
        """The CS settles, but fewer than ``min_rounds`` rounds were run: not settled (what the report says)."""
        return self.rounds < self.min_rounds and self.alike and settles(self.low, self.high, self.margin)

    @property
    def alike(self) -> bool:
        return self.change is None


def settles(low: float | None, high: float | None, margin: float) -> bool:
    """Whether a verdict read off [low, high] is final: the interval lies beyond the margin band or inside
    it.

    >>> settles(1.2, 1.5, 0.05), settles(0.97, 1.01, 0.05), settles(1.01, 1.08, 0.05), settles(None, 2, 0.05)
    (True, True, False, False)
    """
    if low is None or high is None:
        return False
    # read exactly, as the verdict beside it is (analysis/verdicts.py): an end on the band's edge is inside
    return read_off(low, high, margin)[1] or beyond(low, high, margin) is not None


@lru_cache(maxsize=1 << 16)
def median_cs_ranks(t: int, alpha: float, method: str = METHOD, t_opt: int = T_OPT) -> tuple[int, int]:
    """The ranks (1-based, 0 and t + 1 for an unbounded end) of the median's confidence sequence after t
    runs at risk alpha: Howard & Ramdas (2022), Theorem 1 with p = 1/2, the boundary ``method`` of
    analysis/sequential.py tuned at ``t_opt`` runs. ab's comparisons and stat --until-precise read it."""
    if method == METHOD:  # without analysis/sequential.py, which imports numpy (~80 ms of every ab's start)
        return mixture_rank_pair(0.5, t, alpha, float(t_opt))
    from perfctl.analysis.sequential import quantile_cs_ranks

    return quantile_cs_ranks(t, 0.5, alpha, method, t_opt)


class SequentialComparison:
    """The rounds of one command B against the baseline A, decided after every round.

    ``alpha``: the family's risk; ``comparisons``: how many commands are compared with the baseline (each
    CS is held at alpha / comparisons). ``method``: a boundary of analysis/sequential.py. ``tie_seed``: the
    seed of the alikeness test's smoothing draws (analysis/alike.py TIE_SEED; a simulation of many streams
    gives each its own). ``min_rounds``: no verdict is settled before that many rounds.
    """

    def __init__(self, margin: float = DEFAULT_MARGIN, alpha: float = 0.05, comparisons: int = 1,
                 method: str = METHOD, t_opt: int = T_OPT, tie_seed: int = TIE_SEED, min_rounds: int = 1):
        if not 0 < margin < 1:
            raise ValueError(f"margin must be strictly between 0 and 1, got {margin!r}")
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
        if not (isinstance(comparisons, int) and comparisons >= 1):
            raise ValueError(f"comparisons must be a positive integer, got {comparisons!r}")
        # 0 is a fleet job that set none: as 1, since no rounds settle nothing
        if not (isinstance(min_rounds, int) and min_rounds >= 0):
            raise ValueError(f"min_rounds must be a non-negative integer, got {min_rounds!r}")
        if method != METHOD:
            from perfctl.analysis.sequential import METHODS

            if method not in METHODS:
                raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        self.margin, self.method, self.t_opt = float(margin), method, int(t_opt)
        self.alpha = alpha / comparisons
        self.min_rounds = min_rounds
        self._sorted: list[float] = []
        self._ratios = RoundRatios(self.margin)  # the rounds' exact ratios against 1 and the band's edges
        self._in_order: list[float] = []  # the same log ratios in round order: where the rounds changed
        # the running intersection of the CS (log scale); -inf/inf while an end is unbounded. Not reported:
        # only its becoming empty is (a test of alikeness, module docstring)
        self._low, self._high = -math.inf, math.inf
        self.contradicted = False
        # the two tests of alike rounds share alpha (module docstring)
        self._alike = AlikeTest(self.alpha / 2, seed=tie_seed)
        self._stretches = StretchTest(self.alpha / 2,
                                      lambda n, alpha: median_cs_ranks(n, alpha, self.method, self.t_opt))
        self.not_alike_at: int | None = None
        self._not_alike_by = ""
        self._change: Change | None = None  # computed once asked, for the rounds at that time
        # whether every round so far was of an exact metric and repeated the first round's (a, b) exactly
        self._repeats, self._first = True, (0.0, 0.0)

    @property
    def rounds(self) -> int:
        return len(self._sorted)

    def add(self, a: float, b: float, exact: bool = False) -> None:
        """One round's values of the metric for A and B (both finite and > 0: the ratio needs them);
        ``exact``: both are counts of a deterministic backend (the module docstring's exact rule)."""
        if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
            raise ValueError(f"a round needs finite values above 0 for A and B, got {a!r} and {b!r}")
        if not self._sorted:
            self._first = (a, b)
        self._repeats = self._repeats and exact and (a, b) == self._first
        quotient = a / b  # log of the quotient: a ratio held exactly (a == b) gives exactly 0
        # where the quotient under- or overflows, the difference of the logs
        self._add(math.log(quotient) if 0 < quotient < math.inf else math.log(a) - math.log(b), a, b)

    def add_log_ratio(self, d: float) -> None:
        """One round given by its log ratio alone (simulations): its exact ratio is taken to be exp(d)."""
        if not math.isfinite(d):  # a NaN would leave the sorted rounds out of order, and every CS after wrong
            raise ValueError(f"a round's log ratio must be finite, got {d!r}")
        self._repeats = False
        self._add(d, math.exp(min(d, LARGEST_LOG)), 1.0)

    def _add(self, d: float, a: float, b: float) -> None:
        self._ratios.add(a, b)
        bisect.insort(self._sorted, d)
        self._in_order.append(d)
        self._change = None
        alarm = self._alike.add(self._sorted, d)
        low, high = self._current()
        new_low, new_high = max(self._low, low), min(self._high, high)
        if new_low > new_high:
            # no value is in every CS so far: the rounds are not i.i.d. (or this is the alpha chance of a
            # miss); the intersection keeps the last rounds that held together, for later rounds to test
            self.contradicted = True
        else:
            self._low, self._high = new_low, new_high
        step = self._stretches.add(d, (self._low, self._high))
        if self.not_alike_at is None and (alarm or step or self.contradicted):
            self.not_alike_at = len(self._sorted)
            self._not_alike_by = "exchangeability" if alarm else "stretches" if step else "disjoint"

    def _current(self) -> tuple[float, float]:
        """The CS of all the rounds so far (log scale; -inf/inf: that end not bounded)."""
        t = len(self._sorted)
        lower, upper = median_cs_ranks(t, self.alpha, self.method, self.t_opt)
        low = self._sorted[lower - 1] if lower >= 1 else -math.inf
        high = self._sorted[upper - 1] if upper <= t else math.inf
        return low, high

    @property
    def exact(self) -> bool:
        """Whether the exact rule gives the interval (the module docstring): EXACT_ROUNDS rounds or more of an
        exact metric, every one repeating the first."""
        return self._repeats and len(self._sorted) >= EXACT_ROUNDS

    def _sequence(self) -> tuple[float | None, float | None]:
        """The CS of all the rounds so far as ratios (None: that end not bounded), each end on the side of 1
        and of the band's edges its exact ratio lies (the module docstring); the point a/b under the exact
        rule."""
        t = len(self._sorted)
        if self.exact:
            return self._point()
        lower, upper = median_cs_ranks(t, self.alpha, self.method, self.t_opt)
        count = self._ratios.count
        low = place_end(math.exp(self._sorted[lower - 1]), rank_side(count, lower), self.margin) \
            if lower >= 1 else None
        high = place_end(math.exp(self._sorted[upper - 1]), rank_side(count, upper), self.margin) \
            if upper <= t else None
        return low, high

    def _point(self) -> tuple[float, float]:
        """The exact rule's interval: the first round's ratio at both ends, on the side of 1 and of the
        band's edges its exact ratio lies."""
        point = place_end(math.exp(self._sorted[0]), rank_side(self._ratios.count, 1), self.margin)
        return point, point

    def _estimate(self) -> float | None:
        """exp of the median log ratio, placed as the CS's ends are: it lies between them as its rounds do."""
        t = len(self._sorted)
        if not t:
            return None
        count, middle = self._ratios.count, (t + 1) // 2
        side = rank_side(count, middle) if t % 2 else _between(rank_side(count, middle), rank_side(count, middle + 1))
        return place_end(math.exp(_sorted_median(self._sorted)), side, self.margin)

    @property
    def alike(self) -> bool:
        return self.not_alike_at is None

    @property
    def settled(self) -> bool:
        """settlement().settled, without building it (what ab asks after every round)."""
        if not self.alike or not self._sorted or len(self._sorted) < self.min_rounds:
            return False
        return settles(*self._sequence(), self.margin)

    def change(self) -> Change | None:
        """Where the rounds changed (None while they are alike): Pettitt's change point over the rounds so
        far and the median ratio on either side of it."""
        if self.not_alike_at is None:
            return None
        if self._change is None:
            split = change_point(self._in_order)
            before = after = None
            if split is not None:
                before = math.exp(_sorted_median(sorted(self._in_order[:split])))
                after = math.exp(_sorted_median(sorted(self._in_order[split:])))
            self._change = Change(self.not_alike_at, self._not_alike_by, split, before, after)
        return self._change

    def settlement(self) -> Settlement:
        t = len(self._sorted)
        low, high = self._sequence() if t and self.alike else (None, None)
        return Settlement(rounds=t, ratio=self._estimate(), low=low, high=high,
                          verdict=relevance(*read_off(low, high, self.margin)),
                          beyond=beyond(low, high, self.margin),
                          settled=t >= self.min_rounds and settles(low, high, self.margin),
                          contradicted=self.contradicted, margin=self.margin, alpha=self.alpha,
                          method=EXACT if self.exact else self.method,
                          change=self.change(), min_rounds=self.min_rounds)

    def rounds_to_settle(self) -> int | None:
        """An estimate of the rounds after which the verdict would settle, if the log ratios to come are
        distributed as those seen so far: the first t at which the CS's ranks, read off the rounds' empirical
        distribution, settle (and t is at least ``min_rounds``). None when even LOOK_AHEAD times the rounds
        done would not (the median sits on an edge of the band), when there are no rounds yet, or when the
        rounds are not alike."""
        t_now = len(self._sorted)
        if t_now == 0 or not self.alike:  # rounds not alike: more of them settle nothing
            return None
        if self.settled:
            return t_now
        if self._repeats:  # an exact metric settles once the check is done, if its point does
            return max(self.min_rounds, EXACT_ROUNDS) if settles(*self._point(), self.margin) else None
        observed, count = self._sorted, self._ratios.count

        def projected(proportion: float) -> float:
            """The empirical quantile as a ratio, placed as the CS's ends are: between the observed order
            statistics it interpolates (one of them when the interpolation lands on it)."""
            position = (t_now - 1) * proportion
            index = min(math.floor(position), t_now - 1)  # 0-based: the order statistic of rank index + 1
            side = rank_side(count, index + 1) if position == index or index == t_now - 1 else \
                _between(rank_side(count, index + 1), rank_side(count, index + 2))
            return place_end(math.exp(linear_quantile(observed, proportion)), side, self.margin)

        def settled_at(t: int) -> bool:
            lower, upper = median_cs_ranks(t, self.alpha, self.method, self.t_opt)
            if lower < 1 or upper > t or t < self.min_rounds:
                return False
            # the order statistics at those ranks, as proportions of the empirical distribution
            return settles(projected((lower - 1) / (t - 1) if t > 1 else 0),
                           projected((upper - 1) / (t - 1) if t > 1 else 1), self.margin)

        limit = t_now * LOOK_AHEAD
        high = t_now + 1
        while not settled_at(high):
            if high >= limit:
                return None
            high = min(2 * high, limit)
        low = max(t_now, high // 2)
        while high - low > 1:  # settled_at is monotone in t up to the bound's steps; bisect for the first
            middle = (low + high) // 2
            if settled_at(middle):
                high = middle
            else:
                low = middle
        return high


class SequentialSuite:
    """The comparisons of one run of k commands: command 0 is the baseline, each other command i has its
    SequentialComparison against it, every one at alpha / (k - 1). What `perfctl ab`, the agent's
    --until-settled jobs and the server's replay of such a job share. ``min_rounds``: --min-runs, the job's
    min_rounds (no verdict settled before)."""

    def __init__(self, commands: int, margin: float = DEFAULT_MARGIN, confidence: float = DEFAULT_CONFIDENCE,
                 min_rounds: int = 1,
                 **kwargs):
        if not (isinstance(commands, int) and commands >= 2):
            raise ValueError(f"a sequential comparison needs at least 2 commands, got {commands!r}")
        problem = confidence_problem(confidence)
        if problem:
            raise ValueError(problem)
        self.comparisons = {i: SequentialComparison(margin, 1 - confidence, commands - 1, min_rounds=min_rounds,
                                                    **kwargs)
                            for i in range(1, commands)}

    def add_round(self, values: dict[int, float], exact: bool = False) -> None:
        """One round's metric values by command index; the baseline's (0) must be there, a command absent
        from the round (settled and left out) adds nothing. ``exact``: the values are counts of a
        deterministic backend (the module docstring's exact rule)."""
        baseline = values[0]
        for i, value in values.items():
            if i:
                self.comparisons[i].add(baseline, value, exact)

    def unsettled(self) -> list[int]:
        return [i for i, comparison in self.comparisons.items() if not comparison.settled]

    def undecided(self) -> list[int]:
        """The comparisons that need more rounds: neither shown not alike (final: an alarm is not taken
        back) nor settled (which needs min_rounds rounds)."""
        return [i for i, comparison in self.comparisons.items() if comparison.alike and not comparison.settled]

    def settlements(self) -> dict[int, Settlement]:
        return {i: comparison.settlement() for i, comparison in self.comparisons.items()}


@dataclass(frozen=True)
class Replay:
    """One command's comparison with the baseline replayed from its stored rounds (a fleet job run
    --until-settled): the command's label (B, C, ...), the metric and the settlement."""

    label: str
    metric: str
    settlement: Settlement


def replay(a_values, b_values, *, label: str, metric: str, margin: float, confidence: float,
           commands: int, min_rounds: int = 1) -> Replay:
    """The settlement of runs taken in rounds, a_values[i] with b_values[i] in round order, under the rule
    of a job of ``commands`` commands and ``min_rounds``: the same rounds give the agent's own decision (the
    running intersection depends only on the rounds and their order)."""
    if len(a_values) != len(b_values) or not len(a_values):
        raise ValueError(f"replay: need as many rounds of A as of {label}, got {len(a_values)} and {len(b_values)}")
    suite = SequentialSuite(commands, margin, confidence, min_rounds)
    comparison = suite.comparisons[1]
    for a, b in zip(a_values, b_values):
        comparison.add(float(a), float(b))
    return Replay(label, metric, comparison.settlement())


def _between(lower_side, upper_side):
    """The side of a threshold t on which a value strictly between two order statistics (or equal to both,
    when they are equal) lies, from their sides: known unless they lie on either side of t."""

    def side(t):
        below, above = lower_side(t), upper_side(t)
        if below < 0 < above:
            return None
        return (below + above > 0) - (below + above < 0)

    return side


def _sorted_median(values: list[float]) -> float:
    n = len(values)
    middle = n // 2
    return values[middle] if n % 2 else (values[middle - 1] + values[middle]) / 2
