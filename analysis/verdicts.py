"""How a verdict is read off a ratio interval: SPARC's four conclusions (Tullos, Graham, Jordan, Patel, IEEE
OJ-CS 2021, Table I; ../shared/seeds/001_b0b9677f55f20b9d.txt) and whether a change is shown beyond the
equivalence margin. ``compare`` reads them off its intervals (analysis/sparc.py), ``ab`` and the fleet's
``--until-settled`` off a confidence sequence (analysis/ab.py): one vocabulary for all three.

Plain Python, no numpy: ``perfctl ab`` imports it at every start. The band's edges are exact rationals
(``band``): an interval's end is compared with them without rounding.
"""

from __future__ import annotations

import enum
import functools
import math
from fractions import Fraction

# Which slowdown of B fails a comparison (compare's, ab's and submit's --fail-on; exit 3): a relevant
# difference with B slower, or one whose interval lies beyond the margin (``beyond``).
FAIL_ON = ("relevant", "beyond")
DEFAULT_FAIL_ON = FAIL_ON[0]
# The two families a comparison's verdicts come from (analysis/sparc.py says what each is): off intervals
# adjusted together, or off the paper's tests.
FAMILIES = ("simultaneous", "sparc")
SIMULTANEOUS = FAMILIES[0]  # the default
# A sequential comparison's defaults (`perfctl ab`, `perfctl submit --until-settled`, analysis/ab.py):
# ratios within 5% are equivalent, and every verdict of a run is right together with 95% confidence.
DEFAULT_MARGIN = 0.05
DEFAULT_CONFIDENCE = 0.95
# Rounds of an exact metric (a deterministic backend's count) after which ab takes its ratio as known: the
# first gives it, the second checks that each side's count repeats; also ab's default --min-runs for such a
# metric (analysis/ab.py's docstring, the exact rule).
EXACT_ROUNDS = 2


class Verdict(enum.StrEnum):
    """Every verdict of a comparison, in the words every output prints: the one vocabulary of compare, ab and
    the fleet's ``--until-settled``. A StrEnum: a member equals, formats and serializes as its words (the
    JSON, CSV and table of a comparison print them; the wire form older clients read is perfctl/results.py's).
    """

    # SPARC's four conclusions (Table I, ``relevance``): a benchmark's verdict, and ab's
    RELEVANT = "relevant difference"
    TRIVIAL = "trivial difference"
    EQUIVALENCE = "equivalence"
    INDETERMINATE = "indeterminate"
    # a benchmark judged by none of them: its runs look disturbed (analysis/disturbance.py), or it cannot
    # be judged (too few runs, values <= 0; also a Speedup-Test protocol that stops before its test)
    DISTURBED = "disturbed"
    CANNOT_CONCLUDE = "cannot conclude"
    # a Speedup-Test protocol asked one way (analysis/speedup_test.py), and both ways (analysis/compare.py)
    SPEEDUP = "speedup"
    NOT_SIGNIFICANT = "not significant"
    FASTER = "B faster"
    SLOWER = "B slower"


# SPARC's conclusions (``relevance``'s answers)
RELEVANCES = (Verdict.RELEVANT, Verdict.TRIVIAL, Verdict.EQUIVALENCE, Verdict.INDETERMINATE)


def relevance(difference_rejected: bool, equivalence_rejected: bool) -> Verdict:
    """Table I: (reject H0+?, reject both H01- and H02-?) -> conclusion.

    Relevant difference means "a difference is shown and equivalence is not": the change may still lie
    inside the margin (the paper's gloss "outside the equivalence margin" holds only for the point
    estimate's neighbourhood, not as a demonstrated fact; see ``beyond`` for that).
    """
    if difference_rejected:
        return Verdict.TRIVIAL if equivalence_rejected else Verdict.RELEVANT
    return Verdict.EQUIVALENCE if equivalence_rejected else Verdict.INDETERMINATE


@functools.lru_cache(maxsize=64)
def band(delta: float) -> tuple[Fraction, Fraction]:
    """The equivalence band [1 - delta, 1 + delta] as exact rationals, delta read from its shortest decimal
    text (0.05 -> 1/20, not the binary float 0.05000000000000000277): a ratio of counts such as 95/100 lies
    on the edge, and the band is closed.

    >>> band(0.05)
    (Fraction(19, 20), Fraction(21, 20))
    """
    margin = Fraction(repr(float(delta)))
    return 1 - margin, 1 + margin


def float_band(delta: float) -> tuple[float, float]:
    """The band's edges as the floats a float compares with exactly as with ``band``'s rationals: the
    smallest float at or above 1 - delta, the largest at or below 1 + delta. For vectorised code (numpy
    arrays of interval ends) that must read off the same verdicts as ``read_off`` and ``beyond``: x inside
    the band exactly when lower <= x <= upper, beyond it exactly when x < lower or x > upper.

    >>> float_band(0.05)  # 1.05 as a float is 1.0500000000000000444 > 21/20: one step below it
    (0.9500000000000001, 1.0499999999999998)
    """
    lower_edge, upper_edge = band(delta)
    lower, upper = float(lower_edge), float(upper_edge)
    if Fraction(lower) < lower_edge:
        lower = math.nextafter(lower, math.inf)
    if Fraction(upper) > upper_edge:
        upper = math.nextafter(upper, -math.inf)
    return lower, upper


def _exact(value: float) -> Fraction | float:
    """A finite float as the rational it is; infinity stays a float (it compares with a Fraction as such)."""
    return Fraction(value) if math.isfinite(value) else value


def read_off(low: float | None, high: float | None, delta: float) -> tuple[bool, bool]:
    """(difference shown, equivalence shown) read off a ratio interval [low, high]: the interval excludes 1;
    it lies inside [1 - delta, 1 + delta] (closed). An unbounded end (None: too few runs for the level) shows
    neither. Compared exactly (``band``; a float is a dyadic rational), so that an end on an edge is inside
    however the margin's decimal rounds in binary.

    >>> read_off(0.912, 0.946, 0.05), read_off(0.96, 0.99, 0.05), read_off(0.98, 1.01, 0.05)
    ((True, False), (True, True), (False, True))
    """
    if low is None or high is None:
        return False, False
    lower_edge, upper_edge = band(delta)
    return (high < 1 or low > 1), (lower_edge <= _exact(low) and _exact(high) <= upper_edge)


def beyond(low: float | None, high: float | None, delta: float) -> str | None:
    """"slower" when the whole interval is below 1 - delta, "faster" when above 1 + delta, else None: the
    change is shown to exceed the equivalence margin (not only to exist, which is all "relevant" says).
    Exact, as ``read_off``: an end on an edge is not beyond it.

    >>> beyond(0.912, 0.946, 0.05), beyond(0.950, 0.974, 0.05), beyond(1.06, 1.2, 0.05)
    ('slower', None, 'faster')
    """
    if low is None or high is None:
        return None
    lower_edge, upper_edge = band(delta)
    if _exact(high) < lower_edge:
        return "slower"
    if _exact(low) > upper_edge:
        return "faster"
    return None


def margin_words(delta: float) -> str:
    """The equivalence margin as a reader says it: 0.05 -> '±5%'."""
    return f"±{delta * 100:g}%"


def finding(verdict: Verdict, ratio: float | None, shown_beyond: str | None, delta: float, side: str = "B") -> str:
    """A verdict with its direction, in the words every output prints beside the interval it reads off
    (table, JSON, CSV, Markdown, HTML, ``ab``): SPARC's conclusions (Table I) said as what they mean for
    ``side`` against A. ``ratio`` is A/``side`` (above 1: ``side`` faster); ``shown_beyond`` is ``beyond``'s
    answer. A relevant difference whose interval is beyond the margin says so; one that crosses an edge is a
    shown direction of unknown size.

    >>> finding(Verdict.RELEVANT, 0.8, "slower", 0.05), finding(Verdict.RELEVANT, 1.03, None, 0.05)
    ('B slower beyond ±5%', 'B faster')
    >>> finding(Verdict.TRIVIAL, 0.98, None, 0.05), finding(Verdict.EQUIVALENCE, 1.0, None, 0.05)
    ('B slower, within ±5%', 'equivalent within ±5%')
    >>> finding(Verdict.INDETERMINATE, 1.2, None, 0.05)
    'no difference shown'
    """
    way = "faster" if ratio is not None and ratio > 1 else "slower"
    if verdict is Verdict.RELEVANT:
        return f"{side} {way} beyond {margin_words(delta)}" if shown_beyond else f"{side} {way}"
    if verdict is Verdict.TRIVIAL:
        return f"{side} {way}, within {margin_words(delta)}"
    if verdict is Verdict.EQUIVALENCE:
        return f"equivalent within {margin_words(delta)}"
    if verdict is Verdict.INDETERMINATE:
        return "no difference shown"
    return str(verdict)


def runs_to_settle(ratio: float, low: float | None, high: float | None, runs: int, delta: float,
                   most: int = 100) -> int | None:
    """About how many runs a side could settle a comparison whose interval [low, high] around ``ratio`` shows
    neither a difference nor equivalence after ``runs`` a side. A rank interval's width shrinks as 1/sqrt(n)
    (the Hodges-Lehmann estimator is asymptotically normal: Hodges & Lehmann, Ann. Math. Statist. 34(2),
    1963, Theorem 2), so each end's distance d from the estimate (in logs) becomes d sqrt(n/n'). A difference
    is shown once the end facing 1 no longer reaches it: n' = n (d_facing / |ln ratio|)^2; equivalence once
    both ends are inside the band: n' = n max_end (d_end / distance of the estimate to that edge)^2. The
    smaller, and more than ``runs``. An estimate, if the runs to come spread as these did and the estimate
    stays; None when neither can come within ``most`` times the runs.

    >>> runs_to_settle(0.97, 0.90, 1.05, 20, 0.05), runs_to_settle(1.2, 0.99, 1.25, 20, 0.05)
    (136, 23)
    """
    if low is None or high is None or not (0 < low <= ratio <= high) or runs < 1:
        return None
    center, below, above = math.log(ratio), math.log(ratio) - math.log(low), math.log(high) - math.log(ratio)
    factors = []
    if center != 0:  # the end that faces 1 must pass it
        factors.append(((below if center > 0 else above) / abs(center)) ** 2)
    room_below, room_above = center - math.log1p(-delta), math.log1p(delta) - center
    if room_below > 0 and room_above > 0:  # both ends inside the band
        factors.append(max((below / room_below) ** 2, (above / room_above) ** 2))
    if not factors:
        return None
    needed = max(runs + 1, math.ceil(runs * min(factors)))
    return needed if needed <= most * runs else None
