"""Change points in a performance history: where a series of jobs changed level, by how much, with what
confidence (issue 32; docs/history.md "Method").

A *series* is one machine x benchmark x metric x line of development, ordered by job; each *point* is one job
and holds all its runs. Change points are found on the points' medians with E-divisive means and a
significance test (Matteson & James, JASA 109(505) 2014; Daly et al., ICPE 2020; Fleming & Kolaczkowski,
ICPE 2023), then each candidate is confirmed on its jobs: the medians of the runs of the points since the
previous change (A, before) against those up to the next (B, after), one value a job (the job is the unit:
``_confirm``), with SPARC's tests (analysis/sparc.py): the Hodges-Lehmann ratio A/B, its interval and the
verdict against the margin, so a change speaks the language of `compare` and `ab` (below 1: slower after).

The method (docs/history.md "Method" says it with its defaults and limits; each function cites its source):

0. **Despike** (``_despiked``): the log medians, each isolated disturbed job set to its neighbours' level
   (a Hampel filter with a median on each side, for slower jobs only): for the search only; the confirmation
   leaves their jobs out.
1. **Split** (``_Series.split``; the split step of Hunter, Fleming & Kolaczkowski, ICPE 2023): windows of
   ``WINDOW`` points overlapping by half; in each window the split tau that maximises Matteson & James's
   scaled sample divergence Q-hat (``_q_hat``: M&J's E-divisive, alpha = 1, the window's end as kappa) is a
   candidate when Student's t-test of the window's two sides gives p < ``CANDIDATE_P``, and its sides are
   searched in turn (E-divisive's hierarchical search, inside the window). Hunter replaced
   E-divisive's permutation test (M&J's; Daly et al., ICPE 2020, the MongoDB paper) by this
   t-test: deterministic, and far cheaper. Each level of the search, over all windows, is one array.
2. **Merge** (``_merge``; Hunter's merge step): the weakest candidate is removed and its neighbours' t-tests
   recomputed over the segments between the remaining candidates, until every one has p < ``MAX_P``; then
   each is placed (``_placed``) where one shift in mean best explains the points between its neighbours.
3. **Confirm** (``_confirm``): each candidate's jobs' medians, at most ``CONFIRM_POINTS`` points each side
   nearest the change (the segment since the previous confirmed change, up to the next candidate), go to
   ``sparc_tests``; the change is reported when its interval lies beyond the margin (``verdicts.beyond``), or
   shows any difference when ``every_difference``.

``detect`` settles changes from the left: once ``SETTLE_POINTS`` points follow the first change found, it is
kept as it is (its index never moves again) and the analysis starts again at it; ``update`` resumes from the
last settled change of its ``previous`` answer: the incremental E-divisive of Ingo (ICPE 2025), as Otava's
incremental mode does it (only the windows after the last stable change point are computed again).

This module is pure (arrays in, frozen dataclasses out). INTERFACE FIXED FOR ISSUE 32's parallel work: the
dataclass fields and the two functions' signatures below are what server/ and perfctl/ call; the
implementation owner may add fields and keyword arguments, never remove or rename these.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from perfctl.analysis.sparc import sparc_tests
from perfctl.analysis.verdicts import Verdict, beyond, finding, read_off, relevance

# a series' changes are read against this margin unless the user names another: a CI history cares about
# steps of a few percent (compare's ±5% is a build-to-build margin)
HISTORY_MARGIN = 0.01

# Hunter's defaults (otava/analysis.py compute_change_points: window_len 50, max_pvalue 0.001, first pass at
# 10 x max_pvalue): a window long enough for a t-test to see a 3% step among a few percent of noise, short
# enough that a drift is nearly constant inside it
WINDOW = 50
# the points each side of a seed's moving t-test (``_Series._seeds``): a bump of 4 jobs or more is seen (with
# 6 a side, each side of a 4-job bump's edges holds both levels: p 0.01 for a 25% bump)
SEED_POINTS = 4
CANDIDATE_P = 0.01
MAX_P = 0.001
# fewest points on each side of a change: one disturbed job (a spike) is never a segment of its own, so it
# cannot make two changes; also the detection delay (a change is seen once this many points follow it)
MIN_POINTS = 3
# the fewest points a series needs for a change at the default confidence: 4 jobs a side give a 95% interval
# on the jobs' medians (Mann-Whitney's least p with 4 and 4 is 2/70; ``_confirm``)
FEWEST_POINTS = 8
# the points nearest the change on each side whose runs confirm it: 20 jobs x 20 runs give a ratio interval
# of about ±0.2% at 2% CV, far inside the 1% margin, while a slow drift moves the level little within them
CONFIRM_POINTS = 20
# the Hampel filter of the search (``_despiked``): the median of 3 points either side (one or two disturbed jobs
# in a row are set to their neighbours' level; three make a segment of their own, as a level that held for
# three jobs), and spikes 4 noise scales from both (about 1 point in 16,000 of a normal series is touched for
# nothing: and then only set to its neighbours' level)
SPIKE_REACH = 3  # odd: each side's median is its middle point
SPIKE_SCALES = 4.0
SCALE_FLOOR = 1e-3  # in log: a job is a spike only 0.4% (4 floors) or more off both sides
# the noise scale of a point is that of the 25 successive differences either side (less than SETTLE_POINTS -
# CONFIRM_POINTS: a settled change's A and B lose the same disturbed jobs whatever follows)
SCALE_REACH = 25
# a change with this many points after it is settled: its index, ratio and interval no longer change (one
# window: no window that still moves can reach back across it)
SETTLE_POINTS = WINDOW


@dataclass(frozen=True)
class Change:
    """One confirmed (or, with ``every_difference``, shown) change of a series' level."""

    index: int  # the first point after the change: 0 < index < number of points
    # [start, stop) of the points whose runs are A (since the previous change) and B (up to the next), each
    # at most CONFIRM_POINTS points nearest the change
    before: tuple[int, int]
    after: tuple[int, int]
    # the change point's significance on the medians (E-divisive's test as Hunter makes it: Student's t-test
    # of the log medians of the points ``before`` against those ``after``)
    p_value: float
    ratio: float  # Hodges-Lehmann ratio A/B of the runs (compare's A/B: below 1, slower after)
    low: float | None  # its interval at ``confidence`` (None: too few runs for the level)
    high: float | None
    confidence: float
    margin: float
    verdict: Verdict  # SPARC's conclusion read off [low, high] against ``margin``
    finding: str  # verdicts.finding(verdict, ratio, beyond(low, high, margin), margin, side="after")
    median_before: float  # the median of A's runs, of B's runs
    median_after: float
    runs_before: int
    runs_after: int
    # settled: SETTLE_POINTS points follow it; its index and figures stay as they are when points are appended
    # (``update`` keeps it). Store it with the change: ``update`` resumes after the last settled one.
    settled: bool = False
    # points of A and B whose runs were left out: disturbed jobs, each far from both its neighbourhoods (the
    # Hampel filter's spikes, ``_despiked``)
    set_aside: int = 0

    @property
    def shown_beyond(self) -> str | None:
        """"slower" or "faster" after the change when its interval lies beyond the margin, else None."""
        return beyond(self.low, self.high, self.margin)


RunsOf = Callable[[int, int], Sequence[float]]  # runs_of(start, stop): every run of points [start, stop)


def detect(medians: Sequence[float], runs_of: RunsOf, *, margin: float = HISTORY_MARGIN,
           confidence: float = 0.95, every_difference: bool = False) -> tuple[Change, ...]:
    """Every change of the series whose points have these ``medians`` (in order), confirmed on
    ``runs_of``'s runs; in order of ``index``.

    A series of fewer than 2 x MIN_POINTS points has no change; so has one whose medians are all equal
    (a deterministic counter). Raises ValueError (one line) on medians or runs that are not finite and
    positive, or a margin or confidence outside (0, 1).

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> runs = rng.lognormal(0, 0.02, (60, 20)) * np.where(np.arange(60) < 40, 1.0, 1.1)[:, None]
    >>> [(c.index, round(c.ratio, 2), c.finding) for c in detect(np.median(runs, 1), lambda a, b: runs[a:b].ravel())]
    [(40, 0.91, 'after slower beyond ±1%')]
    """
    logs = _validated(medians, margin, confidence)
    return _fold(logs, runs_of, 0, [], margin, confidence, every_difference)


def update(medians: Sequence[float], runs_of: RunsOf, previous: Sequence[Change], *,
           margin: float = HISTORY_MARGIN, confidence: float = 0.95,
           every_difference: bool = False) -> tuple[Change, ...]:
    """``detect``'s answer for a series that has grown by points at its end since ``previous`` was
    computed, reusing ``previous`` (the history before the last settled change is not computed again).

    The settled changes of ``previous`` are kept as they are; the analysis resumes at the last of them, so
    one ended job costs one window pass over the points since it. The answer is ``detect``'s exactly when
    ``detect`` on the longer series settles the same changes; it can differ where a point appended far past
    a settled change would have moved the first changes ``detect`` finds (Hunter's merge step weighs a
    candidate against its neighbours', however far: see docs/history.md "Method"; tests/test_changepoints.py
    compares the two on growing series). ``previous`` must come from ``detect`` or ``update`` with the same
    margin, confidence and every_difference, on this series' first points.
    """
    logs = _validated(medians, margin, confidence)
    settled = [change for change in previous if change.settled]
    if any(change.index >= logs.size for change in previous):
        raise ValueError(f"previous: a change lies past the series' {logs.size} points (not this series?)")
    if any(b.index <= a.index for a, b in zip(settled, settled[1:])):
        raise ValueError("previous: the settled changes are not in order of index")
    anchor = settled[-1].index if settled else 0
    return _fold(logs, runs_of, anchor, settled, margin, confidence, every_difference)


def _validated(medians: Sequence[float], margin: float, confidence: float) -> np.ndarray:
    """The medians' natural logs (a step is a ratio: 3% is the same step at any level)."""
    values = np.asarray(medians, dtype=float)
    if values.ndim != 1:
        raise ValueError(f"medians: need a 1-D sequence, got shape {values.shape}")
    if not np.isfinite(values).all() or (values <= 0).any():
        raise ValueError("medians: need finite values above 0 (a ratio of levels is undefined otherwise)")
    if not 0 < margin < 1:
        raise ValueError(f"margin: must be strictly between 0 and 1, got {margin}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be strictly between 0 and 1, got {confidence}")
    return np.log(values)


def _fold(logs: np.ndarray, runs_of: RunsOf, anchor: int, settled: list[Change], margin: float,
          confidence: float, every_difference: bool) -> tuple[Change, ...]:
    """The settled changes, then those found from ``anchor`` on, the first of which is settled in turn
    (and the analysis restarted at it) while SETTLE_POINTS points follow it. The windows and confirmations
    computed before a restart are reused after it (``_Series``): a restart costs the windows that straddle
    the new anchor."""
    changes = list(settled)
    series = _Series(logs, runs_of, margin, confidence, every_difference)
    while True:
        found = series.changes_in(anchor)
        if not found or found[0].index + SETTLE_POINTS > logs.size:
            return tuple(changes + found)
        first = found[0]
        changes.append(Change(**{**first.__dict__, "settled": True}))
        anchor = first.index


class _Series:
    """One series' log medians and runs, with the windows' candidates and the confirmations computed so far
    (the same window or the same A and B give the same answer whatever the anchor)."""

    def __init__(self, logs: np.ndarray, runs_of: RunsOf, margin: float, confidence: float,
                 every_difference: bool) -> None:
        self.raw, self.runs_of, self.margin, self.confidence = logs, runs_of, margin, confidence
        self.every_difference = every_difference
        self.logs, self.spikes = _despiked(logs)
        self.medians = np.exp(logs)  # the jobs' own medians, as given: what a change is confirmed on
        self.sums = _prefix_sums(self.logs)
        self.windows: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self.confirmed: dict[tuple[int, int, int], Change | None] = {}

    def changes_in(self, start: int) -> list[Change]:
        """The confirmed changes of points [start, end), ``start`` being the previous change (or 0)."""
        stop = self.logs.size
        if stop - start < 2 * MIN_POINTS:
            return []
        candidates = _apart(self.sums, _merge(self.sums, self.split(start, stop), start, stop), start, stop)
        changes: list[Change] = []
        previous = start
        nexts = [index for index, _ in candidates[1:]] + [stop]
        for (index, _), following in zip(candidates, nexts):
            before = max(previous, index - CONFIRM_POINTS)
            after = min(following, index + CONFIRM_POINTS)
            key = (before, index, after)
            if key not in self.confirmed:
                p_value = _segments_p(self.raw[before:index], self.raw[index:after])
                self.confirmed[key] = _confirm(self.runs_of, self.medians, before, index, after, p_value,
                                               self.margin, self.confidence, self.every_difference, self.spikes)
            change = self.confirmed[key]
            if change is None or not (change.shown_beyond or self.every_difference and change.verdict in
                                      (Verdict.RELEVANT, Verdict.TRIVIAL)):
                continue
            changes.append(change)
            previous = index
        return changes

    def split(self, start: int, stop: int) -> list[tuple[int, float]]:
        """Hunter's split step over points [start, stop): windows of WINDOW points, at ``start`` and then
        every WINDOW // 2 points of the series (the same windows whatever the anchor, so that they are
        computed once). In each window, E-divisive's hierarchical search (M&J's divisive estimation, as Otava
        runs it in each window): the Q-hat maximiser is a candidate when its t-test p < CANDIDATE_P, and
        then each of its sides is searched in the same way (a regression fixed ten jobs later is two
        changes). Each level of the search, over every window at once, is one array (``_significant``).
        Returns (index, p) pairs, sorted, one per index."""
        step = WINDOW // 2
        starts = np.concatenate(([start], np.arange((start // step + 1) * step, stop - 2 * MIN_POINTS + 1, step)))
        found = self._search(list(zip(starts.tolist(), np.minimum(starts + WINDOW, stop).tolist())))
        # then windows anchored at each candidate and at each seed (``_seeds``), up to WINDOW points either
        # side, until no candidate is new: a regression undone a few jobs later is a bump that no split of a
        # long window separates (each side holds both levels; neither t-test is significant), while the
        # window that starts at one of its edges holds the other alone
        seen: set[int] = set()
        anchors = self._strong(found) | self._seeds(start, stop)
        while fresh := sorted(anchors - seen):
            seen.update(fresh)
            anchored = [window for index in fresh for window in ((max(start, index - WINDOW), index),
                                                                 (index, min(stop, index + WINDOW)))]
            for index, value in self._search(anchored).items():
                found[index] = min(value, found.get(index, 1.0))
            anchors = self._strong(found)
        return sorted(found.items())

    @staticmethod
    def _strong(found: dict[int, float]) -> set[int]:
        """The candidates a window is anchored at: those that would pass the merge on their window's sides
        (p < MAX_P); the weaker ones mostly go in the merge, and anchoring at each costs two windows."""
        return {index for index, value in found.items() if value < MAX_P}

    def _seeds(self, start: int, stop: int) -> set[int]:
        """Where the SEED_POINTS points before a point and the SEED_POINTS from it differ at p < MAX_P
        (Student's t-test, every point at once), at the least p within SEED_POINTS: a short moving window, as
        a moving-window t-test finds a step (Perfherder's), used only to anchor E-divisive's windows (the
        multi-scale intervals of wild binary segmentation, Fryzlewicz, Ann. Statist. 42(6) 2014)."""
        at = np.arange(start + SEED_POINTS, stop - SEED_POINTS + 1)
        if at.size == 0:
            return set()
        p = _t_test(self.sums, at - SEED_POINTS, at, at + SEED_POINTS)
        padded = np.pad(p, SEED_POINTS, constant_values=np.inf)
        least = np.lib.stride_tricks.sliding_window_view(padded, 2 * SEED_POINTS + 1).min(axis=1)
        return set(at[(p < MAX_P) & (p <= least)].tolist())

    def _search(self, bounds: list[tuple[int, int]]) -> dict[int, float]:
        """E-divisive's hierarchical search in each window [a, b) of ``bounds`` (once per window: cached in
        ``self.windows``): index -> the least p-value any of them gave it."""
        segments = [(a, b, (a, b)) for a, b in bounds if b - a >= 2 * MIN_POINTS and (a, b) not in self.windows]
        for _, _, window in segments:
            self.windows[window] = []
        while segments:
            deeper = []
            for (a, b, window), (index, value) in zip(segments, self._significant(segments)):
                if value < CANDIDATE_P:
                    self.windows[window].append((index, value))
                    deeper += [(a, index, window), (index, b, window)]
            segments = [(a, b, window) for a, b, window in deeper if b - a >= 2 * MIN_POINTS]
        found: dict[int, float] = {}
        for a, b in bounds:
            for index, value in self.windows.get((a, b), []):
                found[index] = min(value, found.get(index, 1.0))
        return found

    def _significant(self, segments: list[tuple[int, int, tuple[int, int]]]) -> list[tuple[int, float]]:
        """Each segment's [a, b) Q-hat maximiser and its t-test's p-value, all segments in one array padded
        to the longest."""
        bounds = np.array([(a, b) for a, b, _ in segments])
        lengths = bounds[:, 1] - bounds[:, 0]
        width = int(lengths.max())
        positions = np.minimum(bounds[:, :1] + np.arange(width), self.logs.size - 1)  # padding: any point
        best = bounds[:, 0] + np.argmax(_q_hat(self.logs[positions], lengths), axis=1)
        p = _t_test(self.sums, bounds[:, 0], best, bounds[:, 1])
        return list(zip(best.tolist(), p.tolist()))


def _despiked(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The log medians with each spike set to the level of the points beside it: a Hampel filter with a median on each
    side, for slower jobs only (Hampel, JASA 69(346) 1974; Pearson, Neuvo, Astola & Gabbouj, "Generalized Hampel
    filters", EURASIP J. Adv. Signal Process. 2016, with the window's median taken on each side apart), against the
    disturbed job whose 30% slowdown inflates a t-test's variance enough to hide a 3% step. A point is a spike when
    it lies more than SPIKE_SCALES noise scales above both the median of the SPIKE_REACH points before it and that
    of the SPIKE_REACH after it (it is then set to the median of its two neighbours and the nearer of the two); the
    scale is the neighbourhood's own, 1.4826 median |x_i+1 - x_i| / sqrt(2) over the SCALE_REACH successive
    differences either side (the MAD of successive differences, which steps and drifts barely move; local, so that
    whether a point is a spike is settled once SCALE_REACH + 1 points follow it). A step's points each agree with
    their own side, so a step is never touched, even beside a disturbed job. Returns the filtered series, for the
    search, and which points are spikes: their runs are left out of the confirmation (``_confirm``)."""
    reach = SPIKE_REACH
    if logs.size < 2 * reach + 1:
        return logs, np.zeros(logs.size, dtype=bool)
    steps = np.abs(np.diff(logs))
    steps = np.pad(steps, (SCALE_REACH, SCALE_REACH + 1), mode="reflect" if steps.size > SCALE_REACH + 1 else "edge")
    around = np.lib.stride_tricks.sliding_window_view(steps, 2 * SCALE_REACH + 1)[:logs.size]
    scale = 1.4826 * np.partition(around, SCALE_REACH, axis=1)[:, SCALE_REACH] / np.sqrt(2)
    # a counter that repeats its count from job to job (most steps 0) has no scale of its own: every point
    # off by one count would be a spike
    scale = np.maximum(scale, SCALE_FLOOR)
    padded = np.pad(logs, reach, mode="edge")
    # the middle of each side's sorted points (SPIKE_REACH is odd): np.median's own overhead, per window, is
    # the cost of this filter otherwise
    sides = np.sort(np.lib.stride_tricks.sliding_window_view(padded, reach), axis=1)[:, reach // 2]
    before, after = sides[:logs.size], sides[reach + 1:]
    nearer = np.where(np.abs(logs - before) <= np.abs(logs - after), before, after)
    # slower only: what disturbs a job (another task, a lower frequency, a cold cache) adds to its cost; a job
    # cheaper than both sides is a level of its own or noise (the first job after a step down, 2% under
    # the rest of its side, was taken for a disturbed one and its side left with too few jobs)
    spikes = logs - nearer > SPIKE_SCALES * scale
    # set to the median of its two neighbours and the nearer side's level: a spike just after a step takes
    # the level after it (both neighbours are there), one on a flat stretch the stretch's
    level = np.sort(np.stack((padded[reach - 1:-reach - 1], padded[reach + 1:padded.size - reach + 1], nearer)),
                    axis=0)[1]
    return np.where(spikes, level, logs), spikes


def _prefix_sums(logs: np.ndarray, centre: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Running sums of the values and of their squares (about their mean, against cancellation), so that any
    segment's mean and variance cost O(1)."""
    centred = logs - logs.mean() if logs.size and centre else logs
    return (np.concatenate(([0.0], np.cumsum(centred))), np.concatenate(([0.0], np.cumsum(centred * centred))))


@functools.cache
def _stdtr():
    """scipy's Student t distribution function, imported once and only when a series is analysed (the CLI
    imports this module for HISTORY_MARGIN alone)."""
    from scipy.special import stdtr

    return stdtr


def _t_test(sums, left_start, split, right_stop):
    """Student's two-sample t-test (pooled variance, two-sided) of points [left_start, split) against
    [split, right_stop), vectorised over arrays of the three bounds: Hunter's significance test (otava
    TTestSignificanceTester, scipy's ttest_ind_from_stats with equal variances). Two segments without spread
    have p 0 when their means differ (a deterministic counter's step), 1 when they are equal."""
    first, second = sums
    n1 = (split - left_start).astype(float)
    n2 = (right_stop - split).astype(float)
    s1 = first[split] - first[left_start]
    s2 = first[right_stop] - first[split]
    q1 = second[split] - second[left_start]
    q2 = second[right_stop] - second[split]
    mean1, mean2 = s1 / n1, s2 / n2
    squares = np.maximum(q1 - s1 * mean1, 0) + np.maximum(q2 - s2 * mean2, 0)
    df = n1 + n2 - 2
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = squares / df
        t = np.abs(mean1 - mean2) / np.sqrt(pooled * (1 / n1 + 1 / n2))
        p = 2 * _stdtr()(df, -t)
    # without spread on either side (t is 0/0 or x/0, or the spread is the rounding of the sums of squares):
    # the means decide, up to that rounding
    flat = squares <= 1e-10 * (q1 + q2)
    same = np.abs(mean1 - mean2) <= 1e-12 * (1 + np.abs(mean1) + np.abs(mean2))
    return np.where(flat, np.where(same, 1.0, 0.0), p)


def _segments_p(left: np.ndarray, right: np.ndarray) -> float:
    """``_t_test`` of two segments given as they are (not through running sums): a settled change's p-value
    is the same number whatever the series' length when it is computed."""
    values = np.concatenate((left, right)) - left[0]
    return float(_t_test(_prefix_sums(values, centre=False), np.array([0]), np.array([left.size]),
                         np.array([values.size]))[0])


@functools.cache
def _upper(width: int) -> np.ndarray:
    """The strict upper triangle of a width x width matrix as 0/1 (np.triu builds it in tens of microseconds,
    more than the rest of a small window's Q-hat)."""
    return np.triu(np.ones((width, width), dtype=np.float32), 1)


def _q_hat(windows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Matteson & James's scaled sample divergence Q-hat(X_tau, Y_tau(kappa); alpha) for every split tau of
    each row's first ``lengths`` values (one segment, kappa its end; the rest of the row is padding),
    alpha = 1 (M&J 2014: the sample divergence and its scaled form, maximised over tau with kappa fixed):

        E-hat(X, Y) = 2/(n m) sum_ij |X_i - Y_j| - C(n,2)^-1 sum_{i<k} |X_i - X_k| - C(m,2)^-1 sum_{j<k} |Y_j - Y_k|
        Q-hat(X, Y) = n m / (n + m) E-hat(X, Y)

    with X the segment's first tau points (n = tau) and Y the rest (m). All splits of all rows at once, O(w^2)
    per row: the within-left sums are a running sum over columns of the upper triangle of the distance
    matrix, the within-right sums one over its rows from the end, and the cross sum the rest of the total;
    padding has distance 0 to everything. Splits that leave either side fewer than MIN_POINTS points, or
    that lie in the padding, are -inf."""
    count, width = windows.shape
    valid = np.arange(width) < lengths[:, None]
    # the distances in single precision about each segment's mean (a log median's steps are 1e-3 and more; the
    # sums are taken in double): a quarter of the memory traffic, which is this step's cost
    mean = np.where(valid, windows, 0).sum(axis=1, keepdims=True) / lengths[:, None]
    centred = np.where(valid, windows - mean, 0).astype(np.float32)
    distances = centred[:, :, None] - centred[:, None, :]
    np.abs(distances, out=distances)
    distances *= _upper(width)
    distances *= valid[:, None, :]  # a padded column: its row's entries are padding against a real point
    distances *= valid[:, :, None]
    zero = np.zeros((count, 1))
    within_left = np.concatenate((zero, np.cumsum(distances.sum(axis=1, dtype=float), axis=1)), axis=1)  # [tau]
    within_right = np.concatenate((np.cumsum(distances.sum(axis=2, dtype=float)[:, ::-1], axis=1)[:, ::-1], zero),
                                  axis=1)
    cross = within_left[:, -1:] - within_left - within_right
    n = np.arange(width + 1, dtype=float)[None, :]
    m = lengths[:, None] - n
    ok = (n >= MIN_POINTS) & (m >= MIN_POINTS)
    with np.errstate(divide="ignore", invalid="ignore"):
        divergence = (2 * cross / (n * m) - within_left / (n * (n - 1) / 2) - within_right / (m * (m - 1) / 2))
        return np.where(ok, n * m / (n + m) * divergence, -np.inf)


def _merge(sums, candidates: list[tuple[int, float]], start: int, stop: int) -> list[tuple[int, float]]:
    """Hunter's merge step: while a candidate's t-test over the segments between its neighbours (or a side
    shorter than MIN_POINTS) fails MAX_P, the weakest is removed and the others' tests recomputed."""
    indices = [index for index, _ in candidates]
    while indices:
        at = np.array(indices)
        bounds = np.concatenate(([start], at, [stop]))
        p = _t_test(sums, bounds[:-2], at, bounds[2:])
        short = (at - bounds[:-2] < MIN_POINTS) | (bounds[2:] - at < MIN_POINTS)
        p = np.where(short, 2.0, p)  # a segment too short for a change is removed first
        weakest = int(np.argmax(p))
        if p[weakest] < MAX_P:
            return list(zip(indices, p.tolist()))
        del indices[weakest]
    return []


def _placed(sums, candidates: list[tuple[int, float]], start: int, stop: int) -> list[tuple[int, float]]:
    """Each merged candidate moved, within MIN_POINTS points, to where a single shift in mean best explains
    the points between its neighbours (at most WINDOW either side, against a drift): the tau maximising the
    between-segment sum of squares n1 n2 / (n1 + n2) (mean1 - mean2)^2, the likelihood ratio of one change in
    the mean of normal points, whose maximiser is the change point's maximum likelihood estimate (Hinkley,
    Biometrika 57(1) 1970). A window's Q-hat maximiser lies at
    least MIN_POINTS from its window's edge, so a step just inside a window's start is first seen a point or
    two late; this puts it back."""
    first, _ = sums
    placed = []
    indices = [index for index, _ in candidates]
    for position, (index, p_value) in enumerate(candidates):
        left = max(indices[position - 1] if position else start, index - WINDOW)
        right = min(indices[position + 1] if position + 1 < len(indices) else stop, index + WINDOW)
        tau = np.arange(max(left + MIN_POINTS, index - MIN_POINTS), min(right - MIN_POINTS, index + MIN_POINTS) + 1)
        if tau.size == 0:
            placed.append((index, p_value))
            continue
        n1, n2 = tau - left, right - tau
        gap = (first[tau] - first[left]) / n1 - (first[right] - first[tau]) / n2
        placed.append((int(tau[np.argmax(n1 * n2 / (n1 + n2) * gap * gap)]), p_value))
    return placed


def _apart(sums, candidates: list[tuple[int, float]], start: int, stop: int) -> list[tuple[int, float]]:
    """The candidates placed (``_placed``), at least MIN_POINTS apart: where two land closer (both near one
    step, 146 and 153 around a step at 151 beside a disturbed job; or both on one point), the weaker (the
    higher p) goes and the rest are placed again."""
    candidates = list(candidates)
    while True:
        placed = _placed(sums, candidates, start, stop)
        close = next((i for i in range(1, len(placed)) if placed[i][0] - placed[i - 1][0] < MIN_POINTS), None)
        if close is None:
            return placed
        del candidates[close if candidates[close][1] > candidates[close - 1][1] else close - 1]


def _runs(runs_of: RunsOf, start: int, stop: int) -> np.ndarray:
    values = np.asarray(runs_of(start, stop), dtype=float).ravel()
    if values.size == 0 or not np.isfinite(values).all() or (values <= 0).any():
        raise ValueError(f"runs_of({start}, {stop}): need finite runs above 0, at least one")
    return values


def _estimate_inside(a: np.ndarray, b: np.ndarray, margin: float) -> bool:
    """Whether the Hodges-Lehmann ratio median(a_i / b_j) surely lies inside [1 - margin, 1 + margin]: fewer
    than half the m n ratios (less one, for an even count's two middle ones) lie below the band and fewer
    above it, so both middle ratios are inside; counted by merging sorted runs, O((m + n) log m), against the
    m n log(m n) of the estimate itself. The band is taken narrower by a part in 10^9, so that sparc_tests'
    estimate (computed in logs) cannot fall outside it by rounding. Since the interval holds its estimate,
    an estimate inside means an interval that is not beyond the margin: the change would not be reported."""
    lower, upper = (1 - margin) * (1 + 1e-9), (1 + margin) * (1 - 1e-9)
    a = np.sort(a)
    half = a.size * b.size / 2 - 1
    below = np.searchsorted(a, lower * b, side="left").sum()  # pairs with a_i < lower b_j
    above = a.size * b.size - np.searchsorted(a, upper * b, side="right").sum()  # pairs with a_i > upper b_j
    return bool(below < half and above < half)


def _confirm(runs_of: RunsOf, medians: np.ndarray, before: int, index: int, after: int, p_value: float,
             margin: float, confidence: float, every_difference: bool, spikes: np.ndarray) -> Change | None:
    """The change at ``index``: A = the points [before, index), B = [index, after), less the disturbed jobs
    (``spikes``: their runs describe the neighbour that disturbed them, not the level; leaving them out is
    leaving out runs by a criterion on the job, as compare's --exclude-interfered does, and the change
    counts them in ``set_aside``); SPARC's Hodges-Lehmann ratio A/B of the jobs' medians and its interval
    (analysis/sparc.py), the verdict read off the interval (verdicts.read_off, relevance: SPARC Table I).

    The job, not the run, is the unit: a machine's level moves from job to job (docs/history.md's example:
    medians over +-3% while a job's runs spread under 1%), so the runs of 20 jobs are not 400 independent
    draws of one level, and an interval over them held the true step in 93% of the bench's changes where it
    claimed 95%. Each job's median (of all its runs) is one draw; the runs give the medians and counts
    printed beside it. At least 4 jobs a side give a 95% interval (Mann-Whitney: 2 / C(8, 4) < 0.05).

    The caller keeps it when beyond the margin (or any difference shown, with ``every_difference``). None,
    without SPARC's tests, when the estimate itself lies inside the band (``_estimate_inside``): its
    interval then cannot lie beyond the margin."""
    kept = ~spikes[before:after]
    if min(kept[:index - before].sum(), kept[index - before:].sum()) < FEWEST_POINTS // 2:
        # a side left too few jobs for an interval: the disturbed ones stay (the Hodges-Lehmann ratio of the
        # medians is moved little by one), else a short series with one busy job could show no change at all
        spikes = np.zeros_like(spikes)
        kept = ~spikes[before:after]
    points = medians[before:after][kept]
    a, b = points[:int(kept[:index - before].sum())], points[int(kept[:index - before].sum()):]
    if a.size == 0 or b.size == 0:
        return None
    if not every_difference and _estimate_inside(a, b, margin):
        return None
    runs_a, runs_b = _kept_runs(runs_of, before, index, spikes), _kept_runs(runs_of, index, after, spikes)
    tests = sparc_tests(a, b, margin, confidence=confidence)
    verdict = relevance(*read_off(tests.ratio_low, tests.ratio_high, margin))
    shown = beyond(tests.ratio_low, tests.ratio_high, margin)
    return Change(index, (before, index), (index, after), p_value, tests.ratio, tests.ratio_low, tests.ratio_high,
                  confidence, margin, verdict, finding(verdict, tests.ratio, shown, margin, side="after"),
                  float(np.median(runs_a)), float(np.median(runs_b)), int(runs_a.size), int(runs_b.size),
                  set_aside=int(spikes[before:after].sum()))


def _kept_runs(runs_of: RunsOf, start: int, stop: int, spikes: np.ndarray) -> np.ndarray:
    """The runs of points [start, stop) but the spikes', asked of ``runs_of`` one stretch between spikes at a
    time; all of them when every point is a spike."""
    cuts = [start] + [int(i) for i in np.flatnonzero(spikes[start:stop]) + start] + [stop]
    stretches = [(a + (a in cuts[1:-1]), b) for a, b in zip(cuts, cuts[1:])]
    parts = [_runs(runs_of, a, b) for a, b in stretches if b > a]
    return np.concatenate(parts) if parts else _runs(runs_of, start, stop)
