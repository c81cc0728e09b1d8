"""Cache Pirating (thesis Paper III): from Target measurements beside a Pirate of P bytes to the Target's
metrics as a function of the cache left to it, C − P; and the simulated check of the method itself.

A measurement counts only while the Pirate keeps its whole working set resident: its fetch ratio (lines it
had to fetch per line it touched) must stay at or under a threshold, 1% in practice (III.3.1: "if the
Pirate's fetch ratio is above zero ... we discard the measurement"). Where no counter can tell the Pirate's
fetch ratio (no LLC events, as on these VMs), the points are kept but marked unverified, and the output
must say so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from perfctl.analysis.lru import lru_misses, set_stack_distances

FETCH_RATIO_LIMIT = 0.01


@dataclass
class PiratePoint:
    """Measurements of the Target with the Pirate holding ``pirate_bytes`` of a ``cache_bytes`` cache."""

    pirate_bytes: int
    cache_bytes: int
    values: list[float] = field(default_factory=list)  # the Target metric, one per run or interval
    pirate_fetch_ratios: list[float | None] = field(default_factory=list)  # aligned with values

    @property
    def target_bytes(self) -> int:
        return self.cache_bytes - self.pirate_bytes


@dataclass(frozen=True)
class CurvePoint:
    target_bytes: int
    pirate_bytes: int
    median: float | None
    kept: int
    discarded: int  # Pirate fetch ratio above the limit: its working set was not resident
    verified: bool  # every kept value had a Pirate fetch ratio to check


def curve(points: list[PiratePoint], limit: float = FETCH_RATIO_LIMIT) -> list[CurvePoint]:
    """The Target metric per cache size left to it, largest first, keeping only values taken while the
    Pirate's fetch ratio was within ``limit`` (or unknown, then marked unverified)."""
    out = []
    for point in sorted(points, key=lambda p: p.target_bytes, reverse=True):
        kept = [v for v, f in zip(point.values, point.pirate_fetch_ratios) if f is None or f <= limit]
        known = [f for v, f in zip(point.values, point.pirate_fetch_ratios) if f is not None and f <= limit]
        out.append(CurvePoint(point.target_bytes, point.pirate_bytes, statistics.median(kept) if kept else None,
                              len(kept), len(point.values) - len(kept), bool(kept) and len(known) == len(kept)))
    return out


def check_sizes(pirate_sizes: list[int], cache_bytes: int) -> None:
    """A Pirate must leave the Target some cache: P in (0, C). Raises ValueError saying which is not."""
    if cache_bytes <= 0:
        raise ValueError("the shared cache size is unknown or zero: give --llc BYTES")
    for size in pirate_sizes:
        if size < 0:
            raise ValueError(f"a Pirate size cannot be negative, got {size}")
        if size >= cache_bytes:
            raise ValueError(f"a Pirate of {size} bytes does not fit the {cache_bytes}-byte shared cache: it would "
                             "leave the Target nothing and could not keep its own working set resident")


@dataclass(frozen=True)
class SimulatedPirate:
    target_misses: int
    pirate_fetch_ratio: float  # after its warm-up pass
    standalone_misses: int  # the Target alone in a cache of the ways the Pirate leaves it
    flagged: bool  # the Pirate lost lines: the curve point must not be trusted


def simulate(target: np.ndarray, pirate_lines: int, sets: int, ways: int, pirate_per_target: int = 4,
             limit: float = FETCH_RATIO_LIMIT) -> SimulatedPirate:
    """Test case 6 of ../shared/notes/cache-models.md in a set-associative LRU cache: the Pirate walks
    ``pirate_lines`` lines cyclically (``pirate_per_target`` of its accesses per Target access, after one
    warm-up pass), the Target runs its trace; while the Pirate's fetch ratio is 0, the Target misses exactly
    as alone in a cache of ways − pirate_lines/sets ways."""
    target = np.asarray(target, dtype=np.int64)
    if pirate_lines % sets:
        raise ValueError("the Pirate's lines must fill whole ways (a multiple of the sets)")
    pirate_ways = pirate_lines // sets
    total = len(target) * pirate_per_target
    walk = np.arange(pirate_lines + total) % pirate_lines
    base = int(target.max()) + 1 if len(target) else 0
    pirate = base + walk  # above every Target line; consecutive, so spread evenly over the sets
    warm = pirate[:pirate_lines]
    steady = pirate[pirate_lines:].reshape(len(target), pirate_per_target)
    stream = np.concatenate([warm, np.column_stack([steady, target]).ravel()])
    is_target = np.concatenate([np.zeros(pirate_lines, bool),
                                np.tile(np.r_[np.zeros(pirate_per_target, bool), True], len(target))])
    missed = lru_misses(set_stack_distances(stream, sets), ways)
    pirate_steady = ~is_target
    pirate_steady[:pirate_lines] = False
    fetch_ratio = float(missed[pirate_steady].mean()) if pirate_steady.any() else 0.0
    target_misses = int(missed[is_target].sum())
    left = ways - pirate_ways
    alone = int(lru_misses(set_stack_distances(target, sets), left).sum()) if left > 0 else len(target)
    return SimulatedPirate(target_misses, fetch_ratio, alone, fetch_ratio > limit or left <= 0)

