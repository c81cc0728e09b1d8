"""Reuse-distance samples (RDS) and the hierarchical sampler of the thesis (Paper I, Section I.4).

The sampler alternates a sampling phase of ``window`` references with a hibernation of random length (mean
``hibernation``: one window at a random offset in each period of window + hibernation references, so that
windows fall at random yet each program phase gets its share of them); in each sampling phase it picks
``per_window`` references at random and measures each one's forward reuse distance: the number of
references until its line is accessed again. A sampled line that is never accessed again is a *dangling*
sample (distance DANGLING); its count, relative to the sample, estimates the cold-miss ratio (I.3.4). Each sample
carries the id of its window, so StatStack can estimate window by window (I.5.4) and be robust to phases.
Measurements outlive their window, as the thesis's watchpoints do.

Dangling samples come in bursts (the lines a program leaves at the end of a phase or at exit die together)
and the windows are short, so their count in a sample is far more variable than its binomial size suggests:
``sort 20000`` has 3,851 lines in 3,672,762 accesses, ~105 dangling expected in 100,000 samples, and 30
seeds gave 26 to 247 (mean 108: the sampler is unbiased, the sample is clustered). A trace knows its cold
misses exactly: the sampler records the trace's footprint (its distinct lines, ``sampler["footprint"]``), and
StatStack and StatCache take the cold-miss ratio from it rather than from the dangling count.

The sampler runs over a full trace here (the collection route that works everywhere: valgrind lackey,
agent/lackey.py), as Paper I itself did for its evaluation: the samples are what a watchpoint sampler on
the running program would record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfctl.analysis.lru import next_access

DANGLING = -1
# Thesis parameter sets (I.4): s = 10^6, h = 14·10^6, n = 1500 (rate 10^-4).
HIBERNATION_PER_WINDOW = 14


@dataclass(frozen=True)
class ReuseSample:
    """A reuse-distance sample: one forward reuse distance (or DANGLING) and window id per sampled access."""

    distances: np.ndarray
    windows: np.ndarray
    accesses: int  # references in the sampled stream
    instructions: int | None = None  # instructions executed by the program, for its mix (StatCC)
    sampler: dict = field(default_factory=dict)

    def __post_init__(self):
        if len(self.distances) != len(self.windows):
            raise ValueError("an RDS needs one window id per distance")
        if len(self.distances) and int(np.min(self.distances)) < DANGLING:
            raise ValueError("reuse distances cannot be negative (dangling samples are -1)")
        footprint = self.sampler.get("footprint") if isinstance(self.sampler, dict) else None
        # each dangling sample is a distinct line's last access, and a stream has at most one line per access
        if footprint is not None and (type(footprint) is not int or not self.dangling <= footprint <= self.accesses
                                      or footprint < 1):
            raise ValueError(f"the sampler's footprint {footprint!r} is not a count of lines between the sample's "
                             f"{self.dangling:,} dangling samples and its {self.accesses:,} accesses")

    @property
    def footprint(self) -> int | None:
        """Distinct lines of the sampled stream where the sampler saw the whole trace (None where not known)."""
        return self.sampler.get("footprint") if isinstance(self.sampler, dict) else None

    @property
    def size(self) -> int:
        return len(self.distances)

    @property
    def dangling(self) -> int:
        return int(np.count_nonzero(self.distances == DANGLING))

    @property
    def mix(self) -> float | None:
        """Memory accesses per instruction (StatCC's mix, Paper II Eq. 1)."""
        return self.accesses / self.instructions if self.instructions else None


@dataclass(frozen=True)
class SamplerSettings:
    window: int
    hibernation: int
    per_window: int

    @property
    def rate(self) -> float:
        return self.per_window / (self.window + self.hibernation)


SAMPLES_PER_WINDOW = 200  # fewer makes each window's F̂ too coarse; the thesis used 1500
MAX_WINDOWS = 50


def settings_for_rate(rate: float, accesses: int) -> SamplerSettings:
    """Sampler parameters giving ``rate`` samples per access on a trace of ``accesses`` references: in the
    thesis's proportions (a hibernation of 14 windows), with as many windows (up to 50) as keep about 200
    samples in each."""
    if not 0 < rate <= 1:
        raise ValueError(f"the sampling rate must be in (0, 1], got {rate}")
    if accesses < 1:
        raise ValueError("the trace is empty: nothing to sample")
    count = int(max(1, min(MAX_WINDOWS, rate * accesses // SAMPLES_PER_WINDOW)))
    period = max(1, accesses // count)
    window = max(1, period // (1 + HIBERNATION_PER_WINDOW))
    per_window = max(1, int(round(rate * period)))
    if per_window > window:  # dense sampling: a longer window, a shorter hibernation
        window = min(period, per_window * 2)
    return SamplerSettings(window, period - window, min(per_window, window))


def hierarchical_sample(lines: np.ndarray, settings: SamplerSettings, seed: int = 0,
                        instructions: int | None = None) -> ReuseSample:
    """The RDS the hierarchical sampler would record on this trace (Paper I, Section I.4)."""
    lines = np.asarray(lines)
    n = len(lines)
    if n == 0:
        raise ValueError("the trace is empty: nothing to sample")
    if settings.per_window > settings.window or settings.window < 1 or settings.hibernation < 0:
        raise ValueError(f"bad sampler settings {settings}")
    rng = np.random.default_rng(seed)
    nxt = next_access(lines)
    period = settings.window + settings.hibernation
    # One window per period at a random offset in it: the hibernation between two windows is random (0 to
    # 2h, mean h), but windows cannot bunch up, so each program phase gets its share of windows (+-1).
    starts = []
    for period_start in range(0, n, period):
        start = period_start + int(rng.integers(0, settings.hibernation + 1))
        if start < n:
            starts.append(start)
    if not starts:
        starts = [0]
    picked, windows = [], []
    for window_id, start in enumerate(starts):
        length = min(settings.window, n - start)
        count = min(settings.per_window, length)
        picked.append(start + rng.choice(length, size=count, replace=False))
        windows.append(np.full(count, window_id, dtype=np.int64))
    sampled = np.concatenate(picked)
    following = nxt[sampled]
    distances = np.where(following >= 0, following - sampled - 1, DANGLING)
    footprint = int(np.count_nonzero(nxt < 0))  # one last access per distinct line
    return ReuseSample(distances.astype(np.int64), np.concatenate(windows), n, instructions,
                       {"window": settings.window, "hibernation": settings.hibernation,
                        "per_window": settings.per_window, "rate": settings.rate, "seed": seed,
                        "footprint": footprint})
