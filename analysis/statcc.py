"""StatCC: miss ratios and CPIs of applications sharing a cache, from their own reuse-distance samples.

Eklöv, Black-Schaffer & Hagersten, Paper II of the thesis (../shared/seeds/002_fe05116302d7345c.txt),
Section II.4, generalized to N applications as in ../shared/notes/cache-models.md:

1. Rescale each application's reuse distances into the interleaved stream (Eq. II.2): during a reuse epoch
   of r_i of its own accesses, application j issues r_i·rate_j/rate_i accesses, rate = mix/cpi, so
   r̂_i = r_i · Σ_j rate_j / rate_i.
2. Merge the rescaled samples, each application weighted by its share of the interleaved accesses
   (rate_i / Σ rate_j), run StatStack on the merge (analysis/statstack.py: ES(r) = E[min(R, r)] over the
   merged distribution), keep which entries came from which application, and take each application's miss
   ratio at the shared size C from its own entries as StatStack does for one (analysis/statstack.py,
   ``miss_ratios``): its cold share (``cold_ratio``: exact, F/N, where its trace was seen whole) plus the
   rest times the share of its reuses whose ES reaches C, ES capped at the lines the traces hold together
   (``stack_limit``: Σ F_j − 1, the applications' lines being disjoint). Before, the cold share was the
   application's dangling count, which swings with the windows (26 to 247 for ~105 expected on ``sort
   20000``), and ES was not capped: alone, StatCC was not the StatStack curve of the same sample.
3. Solve the fixed point cpi_i = CPI_i(miss_ratio_i(cpi_1..cpi_N)) (Eq. II.3) by simple iteration, as the
   thesis did, damped when it oscillates; convergence is checked and reported, never assumed.

The CPI model is pluggable (``cpi_model(app, shared_miss_ratio) -> cpi``). The default is the thesis's
evaluation model (II.5.1): CPI = base + mix·(1·L1_hr + 10·L2_hr + 130·L2_mr), with L1_hr from the
application's own private-L1 StatStack estimate and L2_hr = 1 − L1_hr − L2_mr.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfctl.analysis.reuse import DANGLING, ReuseSample
from perfctl.analysis.statstack import CannotEstimate, expected_stack_distances, miss_ratios, stack_limit, statstack


@dataclass(frozen=True)
class Application:
    name: str
    sample: ReuseSample
    mix: float  # memory accesses per instruction

    def __post_init__(self):
        if not (self.mix > 0 and np.isfinite(self.mix)):
            raise CannotEstimate(f"{self.name}: the instruction mix must be a positive number, got {self.mix}")
        if self.sample.size == 0:
            raise CannotEstimate(f"{self.name}: the reuse-distance sample is empty")


@dataclass(frozen=True)
class ThesisCpiModel:
    """CPI = base + mix·(l1·L1_hr + l2·L2_hr + memory·L2_mr) (Paper II, Section II.5.1)."""

    l1_lines: int = 512  # 32 kB of 64-byte lines
    base: float = 1.0
    l1: float = 1.0
    l2: float = 10.0
    memory: float = 130.0

    def prepare(self, apps: Sequence[Application]) -> list[float]:
        """Each application's private-L1 miss ratio, from its own StatStack curve."""
        return [float(statstack(app.sample, [self.l1_lines]).miss_ratios[0]) for app in apps]

    def cpi(self, mix: float, l1_miss: float, shared_miss: float) -> float:
        shared_miss = min(shared_miss, l1_miss)  # inclusion: an L1 hit is never a shared-cache miss
        return self.base + mix * (self.l1 * (1 - l1_miss) + self.l2 * (l1_miss - shared_miss)
                                      + self.memory * shared_miss)


def shared_miss_ratios(apps: Sequence[Application], cpis: Sequence[float], cache_lines: int) -> np.ndarray:
    """miss_ratio_i(cpi_1..cpi_N) of Step 2: each application's miss ratio in a shared LRU cache."""
    rates = np.array([app.mix / cpi for app, cpi in zip(apps, cpis)])
    if not (rates > 0).all():
        raise CannotEstimate("CPIs must be positive")
    shares = rates / rates.sum()
    finite, weights, owners = [], [], []
    for index, app in enumerate(apps):
        distances = app.sample.distances
        weight = shares[index] / app.sample.size
        reused = distances[distances != DANGLING].astype(np.float64)
        finite.append(reused * (rates.sum() / rates[index]))
        weights.append(np.full(len(reused), weight))
        owners.append(np.full(len(reused), index))
    finite, weights, owners = np.concatenate(finite), np.concatenate(weights), np.concatenate(owners)
    order = np.argsort(finite, kind="stable")
    finite, weights, owners = finite[order], weights[order], owners[order]
    # the merged sample's total weight is 1; no stack distance reaches the lines all traces hold together
    stack = np.minimum(expected_stack_distances(finite, 1.0, finite, weights), stack_limit([a.sample for a in apps]))
    misses = stack >= cache_lines
    return np.array([float(miss_ratios(app.sample, np.count_nonzero(misses & (owners == index))))
                     for index, app in enumerate(apps)])


@dataclass(frozen=True)
class CoRun:
    names: list[str]
    miss_ratios: list[float]
    cpis: list[float]
    alone_miss_ratios: list[float]
    alone_cpis: list[float]
    converged: bool
    iterations: int
    residual: float  # max relative change of a CPI in the last iteration
    damping: float


def solve(apps: Sequence[Application], cache_lines: int, cpi_model=None, *, tolerance: float = 1e-6,
          max_iterations: int = 200) -> CoRun:
    """Step 3: the fixed point of cpi_i = CPI_i(miss_ratio_i(cpi)), with each application alone beside it.

    Plain iteration first; if it has not converged by half the budget (an oscillation), it restarts damped
    (cpi ← (cpi + CPI(mr(cpi))) / 2). ``converged`` is False when neither settles: the caller must say so.
    """
    if len(apps) < 1:
        raise CannotEstimate("StatCC needs at least one application")
    if cache_lines < 1:
        raise CannotEstimate(f"the shared cache must hold at least one line, got {cache_lines}")
    model = cpi_model or ThesisCpiModel()
    if isinstance(model, ThesisCpiModel):
        l1 = model.prepare(apps)
        def step(i: int, mr: float) -> float:
            return model.cpi(apps[i].mix, l1[i], mr)
    else:
        def step(i: int, mr: float) -> float:
            return float(model(apps[i], mr))
    alone = [float(shared_miss_ratios([app], [1.0], cache_lines)[0]) for app in apps]
    alone_cpis = [step(i, mr) for i, mr in enumerate(alone)]
    for damping in (0.0, 0.5):
        cpis = list(alone_cpis)
        residual = float("inf")
        for iteration in range(1, max_iterations // 2 + 1):
            ratios = shared_miss_ratios(apps, cpis, cache_lines)
            proposed = [step(i, float(mr)) for i, mr in enumerate(ratios)]
            if not all(np.isfinite(c) and c > 0 for c in proposed):
                raise CannotEstimate(f"the CPI model returned {proposed}: CPIs must be positive numbers")
            updated = [damping * old + (1 - damping) * new for old, new in zip(cpis, proposed)]
            residual = max(abs(u - c) / c for u, c in zip(updated, cpis))
            cpis = updated
            if residual <= tolerance:
                ratios = shared_miss_ratios(apps, cpis, cache_lines)
                return CoRun([a.name for a in apps], [float(r) for r in ratios], cpis, alone, alone_cpis, True,
                             iteration, residual, damping)
    ratios = shared_miss_ratios(apps, cpis, cache_lines)
    return CoRun([a.name for a in apps], [float(r) for r in ratios], cpis, alone, alone_cpis, False, max_iterations,
                 residual, damping)


def interleave(traces: Sequence[np.ndarray], rates: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The shared cache's view of co-running traces issued at ``rates`` (accesses per cycle): one stream,
    lines made disjoint between applications (no data sharing, as in Paper II), and each access's owner."""
    times, lines, owners = [], [], []
    for index, (trace, rate) in enumerate(zip(traces, rates)):
        trace = np.asarray(trace, dtype=np.int64)
        times.append((np.arange(len(trace)) + 1) / rate)
        lines.append(trace * len(traces) + index)
        owners.append(np.full(len(trace), index))
    order = np.argsort(np.concatenate(times), kind="stable")
    stream, owner = np.concatenate(lines)[order], np.concatenate(owners)[order]
    end = min(t[-1] for t in times)  # past this, some application has stopped: no longer a co-run
    return stream[np.concatenate(times)[order] <= end], owner[np.concatenate(times)[order] <= end]


def simulate_corun(traces: Sequence[np.ndarray], mixes: Sequence[float], cache_lines: int,
                   model: ThesisCpiModel = ThesisCpiModel(), iterations: int = 20) -> tuple[list[float], list[float]]:
    """The reference StatCC is checked against: the co-run's exact LRU miss ratios (analysis/lru.py) with
    the applications interleaved at the rates their CPIs give, iterated to self-consistency under the same
    CPI model. Returns (miss ratios, CPIs)."""
    from perfctl.analysis.lru import exact_mrc, lru_misses, stack_distances

    l1 = [float(exact_mrc(trace, [model.l1_lines]).miss_ratios[0]) for trace in traces]
    cpis = [1.0] * len(traces)
    ratios = [0.0] * len(traces)
    for _ in range(iterations):
        stream, owner = interleave(traces, [mix / cpi for mix, cpi in zip(mixes, cpis)])
        missed = lru_misses(stack_distances(stream), cache_lines)
        ratios = [float(missed[owner == i].mean()) for i in range(len(traces))]
        updated = [model.cpi(mixes[i], l1[i], ratios[i]) for i in range(len(traces))]
        if max(abs(u - c) / c for u, c in zip(updated, cpis)) < 1e-4:
            cpis = updated
            break
        cpis = updated
    return ratios, cpis
