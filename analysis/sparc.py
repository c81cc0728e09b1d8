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

Family-wise error: all tests of one comparison form the family (difference and equivalence per benchmark,
plus one overall test per metric), corrected by Holm (default), Bonferroni (Eq. 2) or Benjamini-Hochberg.
The overall test is always held to the Bonferroni share alpha/(family size): it is decided after the
benchmarks' verdicts, so it cannot take a Holm rank among them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfctl.analysis.multiple import adjust
from perfctl.analysis.rank_tests import hodges_lehmann_center, hodges_lehmann_shift, mann_whitney, wilcoxon_signed_rank


class Relevance(enum.Enum):
    RELEVANT = "relevant difference"
    TRIVIAL = "trivial difference"
    EQUIVALENCE = "equivalence"
    INDETERMINATE = "indeterminate"


def relevance(difference_rejected: bool, equivalence_rejected: bool) -> Relevance:
    """Table I: (reject H0+?, reject both H01- and H02-?) -> conclusion."""
    if difference_rejected:
        return Relevance.TRIVIAL if equivalence_rejected else Relevance.RELEVANT
    return Relevance.EQUIVALENCE if equivalence_rejected else Relevance.INDETERMINATE


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
    """The three tests of one benchmark on positive samples x (initial) and y (candidate)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if not 0 < delta < 1:
        raise ValueError(f"delta: the equivalence margin must be strictly between 0 and 1, got {delta}")
    if x.size == 0 or y.size == 0 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x, y: need positive values on both sides (the ratio is undefined otherwise)")
    if paired:
        if x.size != y.size:
            raise ValueError(f"paired: need as many runs on each side (have {x.size}, {y.size})")
        ratios = x / y
        difference = wilcoxon_signed_rank(ratios - 1, "two-sided")
        upper = wilcoxon_signed_rank(ratios - (1 + delta), "less")
        lower = wilcoxon_signed_rank(ratios - (1 - delta), "greater")
        center = hodges_lehmann_center(np.log(ratios), confidence)
        median_ratio = float(np.median(ratios))
        method = f"Wilcoxon signed-rank on x_i/y_i ({difference.method})"
    else:
        difference = mann_whitney(x, y, "two-sided")
        upper = mann_whitney(x, (1 + delta) * y, "less")
        lower = mann_whitney(x, (1 - delta) * y, "greater")
        center = hodges_lehmann_shift(np.log(x), np.log(y), confidence)
        median_ratio = float(np.median(x) / np.median(y))
        method = f"Mann-Whitney on x against c*y ({difference.method})"
    return SparcTests(
        difference.pvalue, upper.pvalue, lower.pvalue, math.exp(center.estimate),
        None if center.low is None else math.exp(center.low), None if center.high is None else math.exp(center.high),
        median_ratio, delta, paired, method, int(x.size), int(y.size), confidence)


@dataclass(frozen=True)
class SparcDecision:
    tests: SparcTests
    difference_adjusted: float
    equivalence_adjusted: float
    relevance: Relevance


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


def overall_test(median_ratios: Sequence[float], relevances: Sequence[Relevance], alpha: float) -> OverallTest:
    """SPARC's optional overall test: median ratios of the benchmarks not judged trivial or equivalent,
    signed-rank test of R_i - 1 (two-sided). SPARC Table VIII: Rocket/Ariane with ratios 0.491 and 0.285
    left gives p = 0.50; Rocket/Shakti with 0.432 alone gives p = 1.00."""
    kept = [r for r, v in zip(median_ratios, relevances) if v not in (Relevance.TRIVIAL, Relevance.EQUIVALENCE)]
    set_aside = len(median_ratios) - len(kept)
    if not kept:
        return OverallTest(None, alpha, False, 0, set_aside, None,
                           reason="every benchmark is equivalent or trivially different: no overall difference")
    result = wilcoxon_signed_rank(np.asarray(kept) - 1, "two-sided")
    direction = None
    if result.pvalue <= alpha:
        direction = "faster" if float(np.median(kept)) > 1 else "slower"
    return OverallTest(result.pvalue, alpha, result.pvalue <= alpha, len(kept), set_aside, direction)


@dataclass(frozen=True)
class SparcSuite:
    decisions: tuple[SparcDecision, ...]
    overall: dict[str, OverallTest]
    alpha: float
    correction: str
    family_size: int


def sparc_suite(tests: Sequence[SparcTests], groups: Sequence[str], alpha: float = 0.05,
                correction: str = "holm") -> SparcSuite:
    """Decide every benchmark's relevance with the family-wise correction, then one overall test per group
    (per metric). The family: a difference and an equivalence hypothesis per benchmark, one overall
    hypothesis per group."""
    if len(tests) != len(groups):
        raise ValueError("tests, groups: one group label per benchmark test")
    group_names = list(dict.fromkeys(groups))
    family = 2 * len(tests) + len(group_names)
    raw = [t.difference_pvalue for t in tests] + [t.equivalence_pvalue for t in tests]
    adjusted = adjust(raw, correction, family_size=family) if raw else np.array([])
    decisions = []
    for index, test in enumerate(tests):
        difference, equivalence = float(adjusted[index]), float(adjusted[len(tests) + index])
        decisions.append(SparcDecision(test, difference, equivalence,
                                       relevance(difference <= alpha, equivalence <= alpha)))
    overall = {}
    for name in group_names:
        members = [d for d, g in zip(decisions, groups) if g == name]
        overall[name] = overall_test([d.tests.median_ratio for d in members], [d.relevance for d in members],
                                     alpha / family)
    return SparcSuite(tuple(decisions), overall, alpha, correction, family)
