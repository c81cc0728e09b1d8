"""SPARC: difference and equivalence testing with relevance conclusions (Tullos, Graham, Jordan, Patel,
IEEE OJ-CS 2021; ../shared/seeds/001_b0b9677f55f20b9d.txt).

Per benchmark, on the speed ratio S = X/Y (Eq. 5; X the initial machine or build, Y the candidate, so
S > 1 means Y is faster): a two-sided difference test of H0+ (S = 1) and two one-sided tests (TOST) of
H01- (S >= 1 + delta) and H02- (S <= 1 - delta). Table I turns the three decisions into relevant
difference, trivial difference, equivalence or indeterminate.

Paired runs (taken in rounds, x_i with y_i): Wilcoxon signed-rank on r_i - c with r_i = x_i / y_i, as in the
paper. Unpaired runs (the usual case across machines): the Mann-Whitney family the paper names as the
alternative, i.e. the rank-sum test of X against c·Y (a scale shift: X/Y = c), with the Hodges-Lehmann ratio
median(x_i / y_j) and its rank-inversion interval as the effect size.

Two families decide the verdicts (``FAMILIES``, analysis/verdicts.py):

- ``"simultaneous"`` (perfctl's default, ``simultaneous_suite``): every judged (benchmark, metric) gets the
  Hodges-Lehmann ratio interval at level 1 - alpha/m, m the number of judged pairs of the comparison. By
  Bonferroni's inequality the m intervals cover their true ratios together with probability >= 1 - alpha;
  this is the construction the paper names for its own evaluation ("use the Bonferroni Correction method (2)
  to control the FWER but still allow (1 - alpha/m) confidence intervals", section IV, after Eq. 2). The
  verdict is read off that interval only (``read_off``): a difference is shown when it excludes 1,
  equivalence when it lies inside [1 - delta, 1 + delta], and Table I names the pair. On the event that all
  intervals cover, no verdict, equivalence or "beyond" can be false, so the family-wise error of every claim
  together is <= alpha, and the printed interval and the verdict cannot disagree.
- ``"sparc"`` (the paper's, ``sparc_suite``): all tests of one comparison form the family (difference and
  TOST p-value per benchmark, plus one overall test per metric: 2m + g hypotheses, Eq. 1), corrected by
  Holm (default, Eq. 4), Bonferroni (Eq. 2) or Benjamini-Hochberg. The overall test is held to the
  Bonferroni share alpha/(family size): it is decided after the benchmarks' verdicts, so it cannot take a
  Holm rank among them. The printed interval is the unadjusted one at ``confidence``: Holm has no matching
  intervals (the paper: "added complexity to determine confidence intervals based on a changing alpha_New",
  section III-A), so the verdict need not agree with it (``reads_off`` False).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfctl.analysis.multiple import DEFAULT_METHOD, adjust
from perfctl.analysis.rank_tests import (
    _ascending,
    _hodges_lehmann_shift_sorted,
    _sorted_median,
    hodges_lehmann_center,
    hodges_lehmann_shift,
    median,
    wilcoxon_signed_rank,
)
from perfctl.analysis.ratio_edges import difference_test, equivalence_tests, exact_samples, settle_ends
from perfctl.analysis.verdicts import Verdict, beyond, read_off, relevance


@dataclass(frozen=True)
class SparcTests:
    """Raw (uncorrected) p-values of one benchmark's three tests, and the ratio estimate.

    ``ratio`` is the Hodges-Lehmann ratio (unpaired: median of x_i/y_j; paired: exp of the Walsh median
    of log r_i) with its interval at ``confidence``; ``median_ratio`` is med(X)/med(Y) (unpaired) or the
    paper's M_X/Y = median of r_i (paired). ``equivalence_pvalue`` = max(p_upper, p_lower), the TOST
    p-value: equivalence is shown only when both one-sided tests reject.
    """

    difference_pvalue: float
    upper_pvalue: float
    lower_pvalue: float
    ratio: float
    ratio_low: float | None
    ratio_high: float | None
    median_ratio: float
    delta: float
    paired: bool
    method: str
    n: int
    m: int
    confidence: float

    @property
    def equivalence_pvalue(self) -> float:
        return max(self.upper_pvalue, self.lower_pvalue)


def sparc_tests(x, y, delta: float = 0.05, *, paired: bool = False, confidence: float = 0.95) -> SparcTests:
    """The three tests of one benchmark on positive samples x (initial) and y (candidate); integers past 2^53
    are read exactly where the verdict's edges need them (ratio_edges.exact_samples)."""
    exact = exact_samples(x, y)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if not 0 < delta < 1:
        raise ValueError(f"delta: the equivalence margin must be strictly between 0 and 1, got {delta}")
    if x.size == 0 or y.size == 0 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x, y: need positive values on both sides (the ratio is undefined otherwise)")
    if x.ndim != 1 or y.ndim != 1 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x, y: need 1-D samples of finite values")
    if paired and x.size != y.size:
        raise ValueError(f"paired: need as many runs on each side (have {x.size}, {y.size})")
    return _sparc_tests(x, y, None if paired else np.sort(x), None if paired else np.sort(y), delta, paired,
                        confidence, exact)


def _sparc_tests(x: np.ndarray, y: np.ndarray, x_sorted: np.ndarray | None, y_sorted: np.ndarray | None,
                 delta: float, paired: bool, confidence: float, exact=None) -> SparcTests:
    """``sparc_tests`` of validated positive samples; unpaired, also given in ascending order (every test
    below merges sorted runs: c*y keeps y's order for c > 0, and log keeps it). ``exact``: the samples as
    read where a float cannot hold some value (ratio_edges.exact_samples), for the band's exact edges."""
    if paired:
        ratios = x / y
        center = hodges_lehmann_center(np.log(ratios), confidence)
        median_ratio = median(ratios)
        method = "Wilcoxon signed-rank on x_i/y_i"
    else:
        x, y = x_sorted, y_sorted
        center = _hodges_lehmann_shift_sorted(_ascending(np.log(x)), _ascending(np.log(y)), confidence)
        median_ratio = _sorted_median(x) / _sorted_median(y)
        method = "Mann-Whitney on x against c*y"
    # the difference test, each ratio's side of 1 exact (ratio_edges.difference_test): the verdict of the
    # exact ratios, as the interval's ends are
    difference = difference_test(x, y, paired, exact)
    # the equivalence tests at the exact edges of the closed band (ratio_edges.py): a ratio on an edge is
    # inside, as the interval's reading has it
    upper, lower = equivalence_tests(x, y, delta, paired, exact)
    low, high = settle_ends(x, y, None if center.low is None else math.exp(center.low),
                            None if center.high is None else math.exp(center.high), confidence, delta, paired, exact)
    # the estimate (the median of the grid) lies inside its interval; an end settled a few ulps off its float
    # (2^64 - 1 against 2^64 - 2: log-space says 1, the exact side is above) takes the estimate with it
    estimate = min(max(math.exp(center.estimate), low if low is not None else -math.inf),
                   high if high is not None else math.inf)
    method = f"{method} ({difference.method})"
    return SparcTests(difference.pvalue, upper.pvalue, lower.pvalue, estimate, low, high,
                      median_ratio, delta, paired, method, int(x.size), int(y.size), confidence)


@dataclass(frozen=True)
class SparcDecision:
    """One benchmark's verdict and the interval it is read from.

    ``low``/``high`` at ``level``: under the simultaneous family the Bonferroni interval (1 - alpha/m) the
    verdict reads off (``reads_off`` True); under the sparc family the unadjusted interval at the
    comparison's confidence, which the Holm-corrected verdict need not agree with (``reads_off`` False).
    ``difference_adjusted``/``equivalence_adjusted``: the family's adjusted p-values (simultaneous: the
    Bonferroni ones, m p and 2 m p_TOST, which reject at alpha as the interval does up to ties and the
    normal approximation; the interval decides). ``beyond``: see ``beyond``; under sparc it is set only
    beside a relevant difference, so it never contradicts the verdict.
    """

    tests: SparcTests
    difference_adjusted: float
    equivalence_adjusted: float
    relevance: Verdict
    low: float | None
    high: float | None
    level: float
    reads_off: bool
    beyond: str | None


@dataclass(frozen=True)
class OverallTest:
    """The overall Wilcoxon signed-rank test over benchmarks' median ratios (two-sided, around 1), with
    trivial-difference and equivalent benchmarks set aside (SPARC section III-C, Table VIII)."""

    pvalue: float | None
    alpha: float
    rejected: bool
    benchmarks_used: int
    set_aside: int
    direction: str | None
    reason: str | None = None


def benchmarks_to_reach(alpha: float) -> int:
    """Fewest benchmarks whose two-sided signed-rank test can reject at ``alpha``: with k values all on one
    side the exact p-value is 2/2^k, its smallest, so k >= log2(2/alpha) (6 at alpha 0.05).

    >>> benchmarks_to_reach(0.05), benchmarks_to_reach(0.10), benchmarks_to_reach(0.05 / 3)
    (6, 5, 7)
    """
    return max(1, math.ceil(math.log2(2 / alpha) - 1e-12))


def overall_test(median_ratios: Sequence[float], relevances: Sequence[Verdict], alpha: float) -> OverallTest:
    """SPARC's optional overall test (section III-C, Table VIII): median ratios of the benchmarks not judged
    trivial or equivalent, signed-rank test of R_i - 1 (two-sided).

    Below ``benchmarks_to_reach(alpha)`` kept benchmarks the test cannot reject whatever the data, so it is
    not applied and ``reason`` says why (pvalue None): the paper's Table VIII (Rocket/Ariane, 0.491 and
    0.285 left: p = 0.50; Rocket/Shakti, 0.432 alone: p = 1.00) are such cases at alpha 0.10.
    """
    kept = [r for r, v in zip(median_ratios, relevances) if v not in (Verdict.TRIVIAL, Verdict.EQUIVALENCE)]
    set_aside = len(median_ratios) - len(kept)
    if not kept:
        return OverallTest(None, alpha, False, 0, set_aside, None,
                           reason="every benchmark is equivalent or trivially different: no overall difference")
    needed = benchmarks_to_reach(alpha)
    if len(kept) < needed:
        return OverallTest(None, alpha, False, len(kept), set_aside, None,
                           reason=f"needs at least {needed} benchmarks to reach alpha {alpha:.4g}: not applied "
                                  f"({len(kept)} not set aside as equivalent or trivial)")
    result = wilcoxon_signed_rank(np.asarray(kept) - 1, "two-sided")
    direction = None
    if result.pvalue <= alpha:
        direction = "faster" if float(np.median(kept)) > 1 else "slower"
    return OverallTest(result.pvalue, alpha, result.pvalue <= alpha, len(kept), set_aside, direction)


@dataclass(frozen=True)
class SparcSuite:
    """Every benchmark's decision and one overall test per group (metric). ``family_size``: the hypotheses
    corrected together (sparc: 2m + g) or the intervals made simultaneous (simultaneous: m);
    ``interval_level``: the common level of the simultaneous intervals (None under sparc)."""

    decisions: tuple[SparcDecision, ...]
    overall: dict[str, OverallTest]
    alpha: float
    correction: str
    family_size: int
    family: str = "sparc"
    interval_level: float | None = None


def _overall_tests(decisions, groups, alpha: float) -> dict[str, OverallTest]:
    overall = {}
    for name in dict.fromkeys(groups):
        members = [d for d, g in zip(decisions, groups) if g == name]
        overall[name] = overall_test([d.tests.median_ratio for d in members], [d.relevance for d in members], alpha)
    return overall


def sparc_suite(tests: Sequence[SparcTests], groups: Sequence[str], alpha: float = 0.05,
                correction: str = DEFAULT_METHOD) -> SparcSuite:
    """The paper's family: decide every benchmark's relevance with the family-wise correction, then one
    overall test per group (per metric). The family: a difference and an equivalence hypothesis per
    benchmark, one overall hypothesis per group (SPARC Eq. 1-4; 2(8+8+1) = 34 tests in section IV). Each
    decision carries the unadjusted interval at the tests' confidence (``reads_off`` False)."""
    if len(tests) != len(groups):
        raise ValueError("tests, groups: one group label per benchmark test")
    group_names = list(dict.fromkeys(groups))
    family = 2 * len(tests) + len(group_names)
    raw = [t.difference_pvalue for t in tests] + [t.equivalence_pvalue for t in tests]
    adjusted = adjust(raw, correction, family_size=family) if raw else np.array([])
    decisions = []
    for index, test in enumerate(tests):
        difference, equivalence = float(adjusted[index]), float(adjusted[len(tests) + index])
        verdict = relevance(difference <= alpha, equivalence <= alpha)
        # "beyond" is not the paper's; here it is read off the printed (unadjusted) interval and only beside a
        # relevant difference, so that it never says "slower than the margin" next to "indeterminate"
        shown_beyond = beyond(test.ratio_low, test.ratio_high, test.delta) if verdict is Verdict.RELEVANT else None
        decisions.append(SparcDecision(test, difference, equivalence, verdict, test.ratio_low, test.ratio_high,
                                       test.confidence, False, shown_beyond))
    # no benchmark judged: an empty family, no overall test (and no share of alpha to divide)
    return SparcSuite(tuple(decisions), _overall_tests(decisions, groups, alpha / family) if family else {}, alpha,
                      correction, family, "sparc", None)


def ratio_interval(x, y, level: float, *, paired: bool = False,
                   margin: float | None = None) -> tuple[float | None, float | None]:
    """The Hodges-Lehmann interval of the ratio A/B at ``level`` on positive samples: unpaired, the
    rank-sum inversion on log x - log y (a scale shift X/Y = c); paired, the signed-rank inversion on
    log(x_i / y_i). None for an end the sample is too small to bound at this level. With ``margin``, each
    end lies on the exact side of 1 and of the band's edges (analysis/ratio_edges.py), as a verdict needs."""
    exact = exact_samples(x, y)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if paired:
        center = hodges_lehmann_center(np.log(x / y), level)
    else:
        center = hodges_lehmann_shift(np.log(x), np.log(y), level)
    low = None if center.low is None else math.exp(center.low)
    high = None if center.high is None else math.exp(center.high)
    return (low, high) if margin is None else settle_ends(x, y, low, high, level, margin, paired, exact)


def family_level(m: int, alpha: float) -> float | None:
    """The level of each of m Bonferroni-simultaneous intervals: 1 - alpha/m (None without a test)."""
    return 1 - alpha / m if m else None


def simultaneous_suite(tests: Sequence[SparcTests], samples: Sequence[tuple], groups: Sequence[str],
                       alpha: float = 0.05) -> SparcSuite:
    """perfctl's default family: Bonferroni-simultaneous ratio intervals, verdicts read off them.

    Each of the m judged (benchmark, metric) pairs gets ``ratio_interval`` at 1 - alpha/m (SPARC section IV:
    Bonferroni "still allow[s] (1 - alpha/m) confidence intervals"); ``read_off`` and Table I give the
    verdict, ``beyond`` the demonstrated excess over the margin. All m intervals cover together with
    probability >= 1 - alpha, and on that event no claim (a difference where the ratio is 1, equivalence
    where it is outside the band, "beyond" where it is not, a direction that is wrong) can be made: the
    family-wise error of every benchmark claim is <= alpha. Equivalence read off a two-sided 1 - alpha/m
    interval is TOST at alpha/(2m) per side: the cost of one interval answering both questions.

    The overall tests (one per group, SPARC section III-C) are a second, separate claim about the suite:
    each is run at alpha / g (g groups, Bonferroni among them; alpha with one metric). Its risk adds to the
    benchmarks' by the union bound: the chance that any benchmark claim or any overall claim is false is at
    most 2 alpha, each of the two at most alpha. It stays out of the benchmark family because it is read
    after the verdicts (it uses them to set benchmarks aside) and it gates nothing (the exit status is
    decided by the benchmarks); folding it in would widen every interval to 1 - alpha/(m+1) for a test that
    cannot even apply below 6 benchmarks.

    ``samples``: one (x, y) per test, the values the test was computed from. A test computed at the
    family's level (family_level: compare does so) already holds its interval.
    """
    if not len(tests) == len(samples) == len(groups):
        raise ValueError("tests, samples, groups: one sample pair and one group label per benchmark test")
    m = len(tests)
    level = family_level(m, alpha)
    decisions = []
    for test, (x, y) in zip(tests, samples):
        if test.confidence == level:  # the interval sparc_tests computed from the same values at this level
            low, high = test.ratio_low, test.ratio_high
        else:
            low, high = ratio_interval(x, y, level, paired=test.paired, margin=test.delta)
        difference_shown, equivalence_shown = read_off(low, high, test.delta)
        decisions.append(SparcDecision(
            test, min(1.0, m * test.difference_pvalue), min(1.0, 2 * m * test.equivalence_pvalue),
            relevance(difference_shown, equivalence_shown), low, high, level, True, beyond(low, high, test.delta)))
    group_count = max(1, len(dict.fromkeys(groups)))
    return SparcSuite(tuple(decisions), _overall_tests(decisions, groups, alpha / group_count), alpha,
                      "bonferroni", m, "simultaneous", level)
