"""Exact LRU references over an address trace: stack distances, miss-ratio curves, set-associative caches.

A trace is an integer array of cache-line ids (address >> 6), one per data access. For each access t
whose line was accessed before, at p = prev(t):

    reuse distance  R(t) = t − p − 1                       (references strictly between)
    stack distance  S(t) = #distinct lines in (p, t)       (what LRU cares about)

The thesis (../shared/seeds/002_fe05116302d7345c.txt, Paper I, Def. I.3.1) defines both. S is computed
exactly from R: a position j in (p, t) repeats a line of the window iff prev(j) > p, and prev(j) > p
implies j > p, so

    S(t) = R(t) − A(t),   A(t) = #{j < t : prev(j) > prev(t)}

A(t) counts, in the sequence of prev values, the earlier entries greater than entry t: an inversion count
per element. prev values of reuses are distinct (each position is the prev of at most one access), so a
bottom-up merge sort counts them exactly, one level at a time with whole-array numpy operations (log2 n
levels, each a stable sort that merges sorted runs and one searchsorted): about 20 s for 10⁷ accesses here
(bench/cache_accuracy.py), with no per-access Python.

Fully associative LRU of C lines: an access hits iff it is a reuse with S < C; first accesses (cold) always
miss. A set-associative LRU cache of W ways is the same per set: the stack distance within the subsequence
of its set, a hit iff it is < W.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COLD = -1  # stack or reuse distance of a first access


def previous_access(lines: np.ndarray) -> np.ndarray:
    """prev[t]: index of the previous access to the same line, or -1."""
    lines = np.asarray(lines)
    n = len(lines)
    order = np.argsort(lines, kind="stable")
    sorted_lines = lines[order]
    prev = np.full(n, -1, dtype=np.int64)
    same = np.empty(n, dtype=bool)
    if n:
        same[0] = False
        np.equal(sorted_lines[1:], sorted_lines[:-1], out=same[1:])
        prev[order[same]] = order[np.flatnonzero(same) - 1]
    return prev


def next_access(lines: np.ndarray) -> np.ndarray:
    """next[t]: index of the next access to the same line, or -1."""
    prev = previous_access(lines)
    nxt = np.full(len(prev), -1, dtype=np.int64)
    reuse = prev >= 0
    nxt[prev[reuse]] = np.flatnonzero(reuse)
    return nxt


def reuse_distances(lines: np.ndarray) -> np.ndarray:
    """R(t) for each access (COLD for first accesses)."""
    prev = previous_access(lines)
    distance = np.arange(len(prev), dtype=np.int64) - prev - 1
    distance[prev < 0] = COLD
    return distance


def _earlier_greater(values: np.ndarray) -> np.ndarray:
    """For each i: #{j < i : values[j] > values[i]}, values distinct non-negative integers."""
    n = len(values)
    counts = np.zeros(n, dtype=np.int64)
    if n < 2:
        return counts
    span = np.int64(int(values.max()) + 1)
    order = np.arange(n, dtype=np.int64)  # original index of each slot
    current = values.astype(np.int64)      # values, sorted within blocks of `width`
    position = np.arange(n, dtype=np.int64)
    width = 1
    while width < n:
        parent = position // (2 * width)
        right = (position // width) % 2 == 1
        keys = parent * span + current
        left_keys = keys[~right]  # sorted: blocks are sorted and parents ascend
        left_parent = parent[~right]
        right_keys = keys[right]
        right_parent = parent[right]
        below_or_equal = (np.searchsorted(left_keys, right_keys, side="right")
                          - np.searchsorted(left_keys, right_parent * span, side="left"))
        left_size = (np.searchsorted(left_parent, right_parent, side="right")
                     - np.searchsorted(left_parent, right_parent, side="left"))
        counts[order[right]] += left_size - below_or_equal
        merged = np.argsort(keys, kind="stable")  # timsort merges the two sorted runs of each parent
        current, order = current[merged], order[merged]
        width *= 2
    return counts


def stack_distances(lines: np.ndarray) -> np.ndarray:
    """Exact LRU stack distance of each access (COLD for first accesses)."""
    prev = previous_access(lines)
    reuse = np.flatnonzero(prev >= 0)
    distances = np.full(len(prev), COLD, dtype=np.int64)
    if len(reuse):
        inversions = _earlier_greater(prev[reuse])
        distances[reuse] = reuse - prev[reuse] - 1 - inversions
    return distances


def set_stack_distances(lines: np.ndarray, sets: int) -> np.ndarray:
    """Stack distance of each access within its set (line mod sets) of a set-associative cache."""
    lines = np.asarray(lines, dtype=np.int64)
    if sets < 1:
        raise ValueError(f"a cache has at least one set, got {sets}")
    order = np.argsort(lines % sets, kind="stable")  # each set's accesses together, in trace order
    distances = np.empty(len(lines), dtype=np.int64)
    distances[order] = stack_distances(lines[order])  # a window never spans two sets: lines differ
    return distances


@dataclass(frozen=True)
class MissRatioCurve:
    """Miss ratio (misses per access, cold included) at each cache size in lines."""

    sizes: np.ndarray
    miss_ratios: np.ndarray
    cold_ratio: float
    accesses: int


def exact_mrc(lines: np.ndarray, sizes, distances: np.ndarray | None = None) -> MissRatioCurve:
    """Fully associative LRU miss ratios of the trace at ``sizes`` (lines), from exact stack distances."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(lines) == 0:
        raise ValueError("the trace is empty: no accesses to model")
    if (sizes < 1).any():
        raise ValueError("cache sizes must be at least one line")
    distances = stack_distances(lines) if distances is None else distances
    cold = int(np.count_nonzero(distances == COLD))
    reused = np.sort(distances[distances != COLD])
    capacity = len(reused) - np.searchsorted(reused, sizes, side="left")  # S >= C misses
    return MissRatioCurve(sizes, (cold + capacity) / len(distances), cold / len(distances), len(distances))


def lru_misses(distances: np.ndarray, ways: int) -> np.ndarray:
    """Per access: True where an LRU cache (or set) of ``ways`` lines misses."""
    return (distances == COLD) | (distances >= ways)
