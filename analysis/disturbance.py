"""Is one side's data disturbed in a way a change of speed cannot explain?

A change of speed is a scale shift: B = c·A, so the log values of B are those of A moved by log c, and once
each side's log values are centred by their median the two samples have the same distribution. This is the
location model the Speedup-Test checks with a Kolmogorov-Smirnov test on median-centred values (Touati,
Worms, Briais, CCPE 2013, section 3.2; ../shared/seeds/004_90ddb49e43171cfa.txt).

A block of runs disturbed by the machine (another job, a frequency change, a noisy neighbour: the issue's
A side at 42-54 ms against ~24 ms) breaks it in one recognisable way: that side's runs spread much wider,
relative to their level, than the other side's. The rule flags a side when all of these hold:

1. the Brown-Forsythe test of equal dispersion (Levene's test on absolute deviations from each side's
   median) rejects at alpha on the log values AND on the values themselves, and the same side is the
   wider in both: neither noise that scales with the run (multiplicative) nor a fixed jitter added to every
   run (additive, under which a 2.5x slower side has 2.5x less relative spread) explains it (Brown,
   Forsythe, JASA 69(346) 1974; Conover, Johnson, Johnson, Technometrics 23(4) 1981 found it among the few
   of 56 tests that keep their level under skewed and heavy-tailed data), so a clean change of speed fires
   at most at rate alpha under either noise model;
2. the relative interquartile range (IQR of log values) of that side is at least SPREAD_FACTOR times the
   other's: a difference of dispersion a user should act on, not only one a test can detect;
3. that side's relative IQR is at least MATERIAL_SPREAD: runs within 1% of one another are not disturbed
   enough to move a verdict, whatever the other side does (deterministic counters have an IQR of 0);
4. the two medians are within the reach of a disturbance: their ratio is at most the disturbed side's own
   range (max/min of its runs, how far the disturbance is seen to move runs) or DISTURBANCE_REACH, whichever
   is larger (the issue's disturbed blocks ran at about twice the normal time: 42-54 ms against ~24 ms). A
   difference beyond it (a copy of 64 KiB against one of 64 bytes: 1400x) stands whatever disturbed a side;
   real runs of tiny operations are often bimodal, and flagging them would withhold verdicts that hold.

The IQR, not the MAD: a disturbed block shorter than half the runs leaves the MAD untouched, while a
block of more than a quarter of them moves a quartile.
"""

from __future__ import annotations

import math

import numpy as np

from perfctl.analysis.distributions import brown_forsythe
from perfctl.analysis.rank_tests import median
from perfctl.analysis.summary import linear_quantile

SPREAD_FACTOR = 3.0
MATERIAL_SPREAD = 0.01
DISTURBANCE_REACH = 3.0
MIN_RUNS = 5  # below this a quartile is one run away from the extremes: no judgement
# A side of identical values (a coarse timer, a deterministic counter) says nothing of the measurement's own
# jitter: against it only a spread of 5% or more is called disturbed.
CONSTANT_SPREAD = 0.05


def _log_sample(name: str, values) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    if data.ndim != 1:
        raise ValueError(f"{name}: need a 1-D sample")
    if not np.all(np.isfinite(data)) or np.any(data <= 0):
        raise ValueError(f"{name}: values must be finite and positive (a cost: time, count)")
    return np.log(data)


def _relative_iqr(logs: np.ndarray) -> float:
    """The interquartile range of log values (np.percentile's quartiles)."""
    ascending = np.sort(logs)
    return linear_quantile(ascending, 0.75) - linear_quantile(ascending, 0.25)


def disturbed(x, y, alpha: float = 0.05) -> str | None:
    """One line naming the side ("A" is x, "B" is y) whose runs look disturbed, or None.

    >>> rng = np.random.default_rng(1)
    >>> a = 24.0 * np.exp(rng.normal(0, 0.02, 20))
    >>> disturbed(a, 1.1 * a[::-1]) is None
    True
    >>> print(disturbed(np.r_[a[:13], 2 * a[13:]], 1.1 * a))  # doctest: +ELLIPSIS
    A's runs spread ...× as wide as B's (relative IQR): a change of speed does not do that; its runs look disturbed
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    log_x, log_y = _log_sample("x", x), _log_sample("y", y)
    if log_x.size < MIN_RUNS or log_y.size < MIN_RUNS:
        return None
    spread_x, spread_y = _relative_iqr(log_x), _relative_iqr(log_y)
    if max(spread_x, spread_y) < MATERIAL_SPREAD:
        return None
    wide, narrow, side, other = ((spread_x, spread_y, "A", "B") if spread_x >= spread_y
                                 else (spread_y, spread_x, "B", "A"))
    factor = math.inf if narrow == 0 else wide / narrow
    if factor < SPREAD_FACTOR:
        return None
    if narrow == 0 and wide < CONSTANT_SPREAD:
        return None
    raw_x, raw_y = np.exp(log_x), np.exp(log_y)
    pvalue = brown_forsythe(log_x, log_y).pvalue
    # the same test on the values themselves: a fixed jitter added to every run (the additive model)
    # makes the faster side's relative spread wider by the speed ratio, and must not read as disturbed
    pvalue_raw = brown_forsythe(raw_x, raw_y).pvalue
    if not pvalue <= alpha or not pvalue_raw <= alpha:
        return None
    raw_wide, raw_narrow = (raw_x, raw_y) if side == "A" else (raw_y, raw_x)
    if _relative_iqr(raw_wide) <= _relative_iqr(raw_narrow):  # IQR of the values: wider in time too
        return None
    disturbed_logs = log_x if side == "A" else log_y
    reach = max(float(np.ptp(disturbed_logs)), math.log(DISTURBANCE_REACH))
    if abs(median(log_x) - median(log_y)) > reach:
        return None
    shown = "infinitely" if math.isinf(factor) else f"{factor:.1f}×"
    return (f"{side}'s runs spread {shown} as wide as {other}'s (relative IQR): a change of speed does not "
            f"do that; its runs look disturbed")
