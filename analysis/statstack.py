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


def window_miss_ratios(distances: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """StatStack's miss ratios of one window's sample at each size (lines)."""
    finite = np.sort(distances[distances != DANGLING]).astype(np.float64)
    total = float(len(distances))
    cold = (total - len(finite)) / total
    stack = expected_stack_distances(finite, total, finite)  # non-decreasing in R
    capacity = len(stack) - np.searchsorted(stack, sizes, side="left")  # ES >= C
    return cold + capacity / total


def statstack(sample: ReuseSample, sizes, per_window: bool = True) -> MissRatioCurve:
    """StatStack's LRU miss-ratio curve at ``sizes`` (lines): estimated per window and averaged, or from
    the pooled sample (``per_window=False``)."""
    sizes = _check(sample, sizes)
    if sample.size == sample.dangling:
        # no reuse at all: every sampled line is touched once; all accesses are cold misses
        ratios = np.ones(len(sizes))
        return MissRatioCurve(sizes, ratios, 1.0, sample.accesses)
    if not per_window:
        ratios = window_miss_ratios(sample.distances, sizes)
    else:
        order = np.argsort(sample.windows, kind="stable")
        windows, starts, counts = np.unique(sample.windows[order], return_index=True, return_counts=True)
        ratios = np.zeros(len(sizes))
        for start, count in zip(starts, counts):
            ratios += count * window_miss_ratios(sample.distances[order[start:start + count]], sizes)
        ratios /= sample.size
    return MissRatioCurve(sizes, ratios, sample.dangling / sample.size, sample.accesses)


def statcache(sample: ReuseSample, sizes) -> MissRatioCurve:
    """StatCache's random-replacement miss-ratio curve at ``sizes`` (lines), solving Eq. 3.1 for each."""
    from scipy.optimize import brentq

    sizes = _check(sample, sizes)
    distances = sample.distances
    finite = distances[distances != DANGLING].astype(np.float64)
    dangling = sample.dangling
    n = float(sample.size)
    ratios = []
    for lines in sizes:
        keep = np.log1p(-1.0 / lines) if lines > 1 else -np.inf  # ln(1 − 1/L)

        def excess(m: float, keep=keep, lines=lines) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                survive = np.exp(finite * m * keep) if lines > 1 else np.zeros_like(finite)
            return float(np.sum(1.0 - survive)) + dangling - n * m

        if excess(1.0) >= 0:
            ratios.append(1.0)
        elif excess(1e-12) <= 0:
            ratios.append(dangling / n)  # no positive root: only the cold misses remain
        else:
            ratios.append(brentq(excess, 1e-12, 1.0, xtol=1e-10))
    return MissRatioCurve(sizes, np.array(ratios), dangling / n, sample.accesses)
