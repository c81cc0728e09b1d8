"""StatStack (LRU) and StatCache (random replacement): miss-ratio curves from a reuse-distance sample.

StatStack — Eklöv & Hagersten, Paper I of the thesis (../shared/seeds/002_fe05116302d7345c.txt), with the
off-by-one of its printed equations fixed (../shared/notes/cache-models.md). The expected stack distance of
an access with reuse distance r is

    ES(r) = Σ_{i=0..r−1} F̂_i = E[min(R, r)]        (Eq. 7 with the sum shifted; F̂_i = share of the
                                                     sample with R > i, dangling samples R = ∞)

and the miss ratio of a fully associative LRU cache of C lines (I.3.5)

    MR(C) = dangling share (cold, I.3.4) + share of the sample with ES(R) ≥ C.

As printed, Eq. 1 sums 1(R→ > j) for j = 1..r, which undercounts by F̂_0 − F̂_r: a cyclic scan over 100
lines would get a miss ratio of 0.02 at C = 99 instead of 1. E[min(R, r)] is exact for cyclic scans.
Estimation is per sampling window (the windows of the hierarchical sampler, I.4), and the windows' miss
ratios are averaged, weighted by their samples (I.5.4): program phases do not blur each other's F̂.

Where the sample was drawn from a whole trace, the trace proves two bounds that a sample cannot see, and
the model keeps them (``ReuseSample.footprint``, the trace's distinct lines F over its N accesses):

- the cold-miss ratio is F/N exactly (the first touch of each line), not the sample's dangling share:
  dangling samples come in bursts, and 30 samplings of ``sort 20000`` held 26 to 247 of the ~105 expected
  (analysis/reuse.py). MR(C) = F/N + (1 − F/N) · share of the sample's reuses with ES(R) ≥ C: the
  capacity term is estimated from the reuses alone, so a sample short of dangling samples no longer
  inflates it either;
- no stack distance reaches F (an access sees at most the other F − 1 lines), so ES is capped at F − 1
  and a cache of F lines or more has only the cold misses. StatStack's ES(R) = Σ F̂_i assumes the reuse
  behaviour is the same over the whole reuse interval; for reuses that span the program (a library line
  touched at start and at exit) it sums the dangling share over millions of references and overshoots
  the footprint (0.0019 at 256 KiB on ``sort 20000``, whose footprint is 241 KiB).

StatCache — Berg & Hagersten, thesis Ch. 3.4, Eq. 3.1: for a random-replacement cache of L lines, the
miss ratio M solves Σ_i (1 − (1 − 1/L)^{D(i)·M}) = N·M, dangling samples counting as misses.
"""

from __future__ import annotations

import numpy as np

from perfctl.analysis.lru import MissRatioCurve
from perfctl.analysis.reuse import DANGLING, ReuseSample


class CannotEstimate(ValueError):
    """The sample cannot support an estimate (empty, or sizes out of range); the message says why."""


def expected_stack_distances(finite: np.ndarray, total: float, at: np.ndarray,
                             weights: np.ndarray | None = None) -> np.ndarray:
    """ES(u) = E[min(R, u)] for each u in ``at``; ``finite`` are the sample's finite reuse distances
    (sorted) with ``weights`` (default 1 each) and ``total`` the sample's whole weight, dangling included."""
    at = np.asarray(at, dtype=np.float64)
    if weights is None:
        weights = np.ones(len(finite))
    below = np.searchsorted(finite, at, side="left")  # entries with R < u
    weight_below = np.concatenate(([0.0], np.cumsum(weights)))[below]
    sum_below = np.concatenate(([0.0], np.cumsum(weights * finite)))[below]
    return (sum_below + at * (total - weight_below)) / total


def _check(sample: ReuseSample, sizes) -> np.ndarray:
    sizes = np.asarray(sizes, dtype=np.int64)
    if sample.size == 0:
        raise CannotEstimate("the reuse-distance sample is empty: cannot estimate a miss ratio")
    if len(sizes) == 0 or (sizes < 1).any():
        raise CannotEstimate("cache sizes must be at least one line")
    return sizes


def window_capacity_misses(distances: np.ndarray, sizes: np.ndarray, max_stack: float = np.inf) -> np.ndarray:
    """How many of one window's reuse samples StatStack counts as misses at each size (lines): those with
    ES(R) ≥ C, ES from the window's own F̂ (dangling samples included as R = ∞) and capped at ``max_stack``."""
    finite = np.sort(distances[distances != DANGLING]).astype(np.float64)
    stack = np.minimum(expected_stack_distances(finite, float(len(distances)), finite), max_stack)  # non-decreasing
    return len(stack) - np.searchsorted(stack, sizes, side="left")  # ES >= C


def cold_ratio(sample: ReuseSample) -> float:
    """The cold-miss ratio: exact (footprint / accesses) where the sampler saw the whole trace, else the
    sample's dangling share (I.3.4). The one owner of the cold share: StatStack, StatCache and StatCC
    (analysis/statcc.py, per application) take it from here."""
    if sample.footprint is not None:
        return sample.footprint / sample.accesses
    return sample.dangling / sample.size


def stack_limit(samples) -> float:
    """The largest stack distance the traces of ``samples`` allow: an access sees at most the other lines,
    F − 1 for one trace of F distinct lines, and Σ F_i − 1 for traces sharing a cache with disjoint lines
    (StatCC, as in Paper II); infinite where a footprint is not known."""
    footprints = [sample.footprint for sample in samples]
    return np.inf if any(f is None for f in footprints) else float(sum(footprints) - 1)


def miss_ratios(sample: ReuseSample, capacity) -> np.ndarray:
    """MR = cold + (1 − cold) · capacity / reuses: the cold share (:func:`cold_ratio`) and the share of the
    sample's reuses that StatStack counts as capacity misses (``capacity``, how many at each size; StatCC
    counts one application's in the shared cache). 1 where the sample holds no reuse, which says nothing
    of capacity misses."""
    capacity = np.asarray(capacity, dtype=np.float64)
    reuses = sample.size - sample.dangling
    if reuses == 0:
        return np.ones(capacity.shape)
    cold = cold_ratio(sample)
    return cold + (1.0 - cold) * capacity / reuses


def statstack(sample: ReuseSample, sizes, per_window: bool = True) -> MissRatioCurve:
    """StatStack's LRU miss-ratio curve at ``sizes`` (lines): estimated per window and averaged, or from
    the pooled sample (``per_window=False``).

    MR(C) = cold + (1 − cold) · (reuses with ES(R) ≥ C) / reuses, with ES(R) = E[min(R, r)] (Paper I,
    Eq. 1 and 7 with the off-by-one fixed, see the module's docstring), cold from :func:`cold_ratio` and,
    where the footprint F is known, ES capped at F − 1: the curve never goes below the cold misses the trace
    proves, and is exactly the cold ratio from F lines on.

    >>> import numpy as np
    >>> from perfctl.analysis.reuse import ReuseSample
    >>> scan = np.tile(np.arange(100), 50)   # a cyclic scan over 100 lines: forward reuse distance 99
    >>> sample = ReuseSample(np.r_[np.full(4900, 99), np.full(100, -1)], np.zeros(5000, np.int64), 5000)
    >>> statstack(sample, [99, 100]).miss_ratios.round(3).tolist()
    [1.0, 0.02]
    """
    sizes = _check(sample, sizes)
    cold = cold_ratio(sample)
    if sample.size == sample.dangling:
        # no reuse in the sample: every sampled line is touched once; it says nothing of capacity misses
        return MissRatioCurve(sizes, miss_ratios(sample, np.zeros(len(sizes))), cold, sample.accesses)
    max_stack = stack_limit([sample])
    if not per_window:
        capacity = window_capacity_misses(sample.distances, sizes, max_stack).astype(np.float64)
    else:
        order = np.argsort(sample.windows, kind="stable")
        _, starts, counts = np.unique(sample.windows[order], return_index=True, return_counts=True)
        capacity = np.zeros(len(sizes))
        for start, count in zip(starts, counts):
            capacity += window_capacity_misses(sample.distances[order[start:start + count]], sizes, max_stack)
    return MissRatioCurve(sizes, miss_ratios(sample, capacity), cold, sample.accesses)


def statcache(sample: ReuseSample, sizes) -> MissRatioCurve:
    """StatCache's random-replacement miss-ratio curve at ``sizes`` (lines), solving Eq. 3.1 for each."""
    from scipy.optimize import brentq

    sizes = _check(sample, sizes)
    distances = sample.distances
    finite = distances[distances != DANGLING].astype(np.float64)
    n = float(sample.size)
    cold = cold_ratio(sample)
    # the reuses stand for the (1 − cold) share of accesses and the cold misses for the rest (exact where the
    # footprint is known, as in statstack), so Eq. 3.1 is solved with these weights
    reuse_weight = (1.0 - cold) * n / len(finite) if len(finite) else 0.0
    dangling = cold * n
    ratios = []
    for lines in sizes:
        keep = np.log1p(-1.0 / lines) if lines > 1 else -np.inf  # ln(1 − 1/L)

        def excess(m: float, keep=keep, lines=lines) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                survive = np.exp(finite * m * keep) if lines > 1 else np.zeros_like(finite)
            return reuse_weight * float(np.sum(1.0 - survive)) + dangling - n * m

        if excess(1.0) >= 0:
            ratios.append(1.0)
        elif excess(1e-12) <= 0:
            ratios.append(cold)  # no positive root: only the cold misses remain
        else:
            ratios.append(max(cold, brentq(excess, 1e-12, 1.0, xtol=1e-10)))
    return MissRatioCurve(sizes, np.array(ratios), cold, sample.accesses)
