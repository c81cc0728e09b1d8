"""Validity of perfctl's intervals and tests by simulation (the SPA paper's Figures 6 and 8, extended).

Repeated samples are drawn from known populations; for each interval perfctl prints, the error probability
(the truth outside the interval) and the mean width are estimated, and for each test the rate of rejections
when its null hypothesis holds (type-I error). BCa bootstrap and z-score intervals are computed beside
perfctl's for contrast. Used by the fast check in tests/ and the full report of bench/coverage.py.

Populations: normal, log-normal, bimodal mixture, heavy-tailed (log-Student t with 3 d.o.f.), discrete with
many ties (100 + Poisson(2)), and the real ferret runtimes of ../shared/data (resampled: the population is
their empirical distribution). All are positive so that speed ratios are defined.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from perfctl.analysis import spa
from perfctl.analysis.multiple import holm
from perfctl.analysis.rank_tests import hodges_lehmann_shift, mann_whitney
from perfctl.analysis.sparc import simultaneous_suite, sparc_suite, sparc_tests
from perfctl.analysis.speedup_test import mean_test, median_test
from perfctl.analysis.verdicts import Verdict, beyond, read_off, relevance

Sampler = Callable[[np.random.Generator, tuple], np.ndarray]


@dataclass(frozen=True)
class Population:
    name: str
    draw: Sampler

    def quantile(self, proportion: float, rng: np.random.Generator, size: int = 2_000_000) -> float:
        """v with P[X <= v] >= F, smallest such (exact for discrete populations up to sampling of a huge draw)."""
        return float(np.quantile(self.draw(rng, (size,)), proportion, method="inverted_cdf"))


def populations(ferret: np.ndarray | None = None) -> list[Population]:
    pops = [
        Population("normal", lambda rng, shape: rng.normal(100.0, 5.0, shape)),
        Population("log-normal", lambda rng, shape: 100.0 * rng.lognormal(0.0, 0.3, shape)),
        Population("bimodal", lambda rng, shape: np.where(rng.random(shape) < 0.6, rng.normal(100.0, 2.0, shape),
                                                          rng.normal(112.0, 2.0, shape))),
        Population("heavy-tailed", lambda rng, shape: 100.0 * np.exp(0.05 * rng.standard_t(3, shape))),
        Population("discrete-ties", lambda rng, shape: 100.0 + rng.poisson(2.0, shape)),
    ]
    if ferret is not None:
        values = np.asarray(ferret, dtype=float)
        pops.append(Population("ferret", lambda rng, shape: rng.choice(values, shape)))
    return pops


@dataclass(frozen=True)
class IntervalCheck:
    population: str
    method: str
    error: float
    mean_relative_width: float
    failures: int
    trials: int


@dataclass(frozen=True)
class TestCheck:
    population: str
    test: str
    rejection_rate: float
    trials: int


def _width(low: np.ndarray, high: np.ndarray, truth: float) -> float:
    finite = np.isfinite(low) & np.isfinite(high)
    return float(np.mean((high[finite] - low[finite]) / abs(truth))) if finite.any() else math.nan


def spa_interval_check(pop: Population, proportion: float, confidence: float, n: int, trials: int,
                       rng: np.random.Generator, per_bound: bool = False) -> IntervalCheck:
    """Error of ``spa.value_interval`` (unbounded sides count as covering, as the interval then says so)."""
    truth = pop.quantile(proportion, rng)
    samples = np.sort(pop.draw(rng, (trials, n)), axis=1)
    template = spa.value_interval(samples[0], proportion, confidence, per_bound=per_bound)
    bound_conf = template.bound_confidence
    low_rank, high_rank = spa._bound_ranks(n, proportion, bound_conf)
    low = samples[:, low_rank - 1] if low_rank else np.full(trials, -np.inf)
    high = samples[:, high_rank - 1] if high_rank else np.full(trials, np.inf)
    missed = (truth < low) | (truth > high)
    label = f"SPA v{proportion:g}" + (" (per-bound C, as the paper)" if per_bound else "")
    return IntervalCheck(pop.name, label, float(missed.mean()), _width(low, high, truth), int(missed.sum()), trials)


def bca_interval_check(pop: Population, proportion: float, confidence: float, n: int, trials: int,
                       rng: np.random.Generator) -> IntervalCheck:
    """BCa bootstrap interval of the quantile; a trial where BCa cannot produce one counts as a failure."""
    truth = pop.quantile(proportion, rng)
    missed = 0
    lows, highs = [], []
    for _ in range(trials):
        sample = pop.draw(rng, (n,))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # degenerate resamples: counted as failures below
                result = stats.bootstrap((sample,), lambda s, axis: np.quantile(s, proportion, axis=axis),
                                         confidence_level=confidence, method="BCa", n_resamples=999, rng=rng)
            low, high = result.confidence_interval
        except Exception:  # noqa: BLE001 - scipy raises or warns on degenerate resamples; that is a failure here
            low = high = math.nan
        if not (np.isfinite(low) and np.isfinite(high)) or not low <= truth <= high:
            missed += 1
        lows.append(low)
        highs.append(high)
    return IntervalCheck(pop.name, f"BCa bootstrap v{proportion:g}", missed / trials,
                         _width(np.asarray(lows), np.asarray(highs), truth), missed, trials)


def zscore_interval_check(pop: Population, proportion: float, confidence: float, n: int, trials: int,
                          rng: np.random.Generator) -> IntervalCheck:
    """Normal-theory interval of the quantile: mean + z_F s, half-width z s sqrt(1/n + z_F^2/(2n))."""
    truth = pop.quantile(proportion, rng)
    samples = pop.draw(rng, (trials, n))
    mean, sd = samples.mean(axis=1), samples.std(axis=1, ddof=1)
    z_f = stats.norm.ppf(proportion)
    z = stats.norm.ppf((1 + confidence) / 2)
    centre = mean + z_f * sd
    half = z * sd * np.sqrt(1 / n + z_f**2 / (2 * n))
    low, high = centre - half, centre + half
    missed = (truth < low) | (truth > high)
    return IntervalCheck(pop.name, f"z-score v{proportion:g}", float(missed.mean()), _width(low, high, truth),
                         int(missed.sum()), trials)


def ratio_interval_check(pop: Population, confidence: float, n: int, trials: int, rng: np.random.Generator,
                         scale: float = 1.1) -> IntervalCheck:
    """Hodges-Lehmann ratio interval (compare's A/B [CI]) with B = A's population scaled by ``scale``:
    the true ratio is 1/scale."""
    truth = 1 / scale
    missed = 0
    lows, highs = [], []
    for _ in range(trials):
        x = np.log(pop.draw(rng, (n,)))
        y = np.log(scale * pop.draw(rng, (n,)))
        est = hodges_lehmann_shift(x, y, confidence)
        low = math.exp(est.low) if est.low is not None else 0.0
        high = math.exp(est.high) if est.high is not None else math.inf
        missed += not low * (1 - 1e-9) <= truth <= high * (1 + 1e-9)  # exp(log) round-off is not a miss
        lows.append(low)
        highs.append(high)
    return IntervalCheck(pop.name, "A/B ratio (Hodges-Lehmann)", missed / trials,
                         _width(np.asarray(lows), np.asarray(highs), truth), missed, trials)


def type_one_checks(pop: Population, alpha: float, delta: float, n: int, trials: int,
                    rng: np.random.Generator) -> list[TestCheck]:
    """Rejection rates where each null holds: difference tests with A and B from one population; each
    equivalence one-sided test at its boundary ratio (B scaled so that A/B = 1 + delta, or 1 - delta)."""
    counts = {"SPARC difference": 0, "SPARC equivalence, upper (A/B = 1+delta)": 0,
              "SPARC equivalence, lower (A/B = 1-delta)": 0, "Speedup-Test median protocol": 0,
              "Speedup-Test mean protocol": 0}
    for _ in range(trials):
        x, y = pop.draw(rng, (n,)), pop.draw(rng, (n,))
        counts["SPARC difference"] += mann_whitney(x, y, "two-sided").pvalue <= alpha
        y_upper = pop.draw(rng, (n,)) / (1 + delta)
        counts["SPARC equivalence, upper (A/B = 1+delta)"] += mann_whitney(x, (1 + delta) * y_upper,
                                                                            "less").pvalue <= alpha
        y_lower = pop.draw(rng, (n,)) / (1 - delta)
        counts["SPARC equivalence, lower (A/B = 1-delta)"] += mann_whitney(x, (1 - delta) * y_lower,
                                                                            "greater").pvalue <= alpha
        # both directions, each at alpha/2, as perfctl compare runs them
        median = median_test(x, y, alpha / 2)
        mean = mean_test(x, y, alpha / 2)
        median_hits = median.pvalue is not None and min(median.pvalue, median.pvalue_reverse) <= alpha / 2
        mean_hits = mean.pvalue is not None and min(mean.pvalue, mean.pvalue_reverse) <= alpha / 2
        counts["Speedup-Test median protocol"] += median_hits
        counts["Speedup-Test mean protocol"] += mean_hits
    return [TestCheck(pop.name, name, hits / trials, trials) for name, hits in counts.items()]


def tolerance(level: float, trials: int, sigmas: float = 3.0) -> float:
    """Monte Carlo tolerance: an error rate may exceed ``level`` by this much before it counts as a breach."""
    return sigmas * math.sqrt(level * (1 - level) / trials)


# --- Families of decisions (issue 14, point 3): family-wise error, power, agreement with the interval ---

# True ratios A/B given to the benchmarks of a simulated comparison, in turn: a null (1.00), a small slowdown
# inside the margin (0.97), one beyond it (0.90) and a small speedup inside it (1.02).
FAMILY_RATIOS = (1.00, 0.97, 0.90, 1.02)
# The least favourable ratios for the error: no effect (a difference claim is false), just outside the band
# (an equivalence claim is false) and on the margin (a "beyond" claim is false).
BOUNDARY_RATIOS = (1.00, 0.949, 0.95, 1.051, 1.05)
FAMILY_CHOICES = ("sparc", "split", "simultaneous")


@dataclass(frozen=True)
class FamilyCheck:
    """One family on one population with ``benchmarks`` per comparison, over ``trials`` comparisons.

    ``fwer``: the fraction of comparisons with at least one false claim (a difference where the true ratio
    is 1 or in the wrong direction, equivalence where the ratio is outside [1 - margin, 1 + margin], "beyond"
    where the ratio is not beyond the margin on that side); ``fwer_verdicts`` the same for the verdicts alone
    (difference and equivalence, SPARC's claims, without "beyond"). ``power``: (label, rate) pairs: difference
    (slower) shown at 0.97 and 0.90, equivalence shown at 1.00 and 1.02, beyond (slower) shown at 0.90.
    ``agreement``: the fraction of benchmark verdicts equal to Table I read off the interval printed beside
    them (None for split, which has no interval of its own).
    """

    population: str
    family: str
    benchmarks: int
    trials: int
    fwer: float
    fwer_verdicts: float
    power: tuple[tuple[str, float], ...]
    agreement: float | None
    comparisons: int


def _split_decisions(tests, alpha: float) -> list[tuple[Verdict, str | None]]:
    """Holm over the m difference p-values at alpha/2 and Holm over the m TOST p-values at alpha/2 (TOST is
    an intersection-union test: its two halves need no correction between them, Berger & Hsu 1996)."""
    difference = holm([t.difference_pvalue for t in tests])
    equivalence = holm([t.equivalence_pvalue for t in tests])
    out = []
    for test, d, e in zip(tests, difference, equivalence):
        verdict = relevance(d <= alpha / 2, e <= alpha / 2)
        shown = beyond(test.ratio_low, test.ratio_high, test.delta) if verdict is Verdict.RELEVANT else None
        out.append((verdict, shown))
    return out


def _false_claim(verdict: Verdict, estimate: float, shown_beyond: str | None, ratio: float, margin: float) -> bool:
    """Is any claim of this decision false for the true ratio?"""
    difference = verdict in (Verdict.RELEVANT, Verdict.TRIVIAL)
    equivalence = verdict in (Verdict.EQUIVALENCE, Verdict.TRIVIAL)
    if difference and (ratio == 1 or (estimate < 1) != (ratio < 1)):
        return True
    if equivalence and not 1 - margin <= ratio <= 1 + margin:
        return True
    if shown_beyond == "slower" and not ratio < 1 - margin:
        return True
    return shown_beyond == "faster" and not ratio > 1 + margin


def family_checks(pop: Population, benchmarks: int, trials: int, rng: np.random.Generator, alpha: float = 0.05,
                  margin: float = 0.05, n: int = 20, ratios: tuple[float, ...] = FAMILY_RATIOS) -> list[FamilyCheck]:
    """Simulate ``trials`` comparisons of ``benchmarks`` benchmarks of ``n`` unpaired runs per side, benchmark i
    of trial t with the true ratio ratios[(i + t) % len(ratios)] (B's runs are A's population divided by it), and
    decide each with the three families on the same data: sparc (analysis/sparc.sparc_suite, Holm over
    2m + 1), split (Holm over the m difference p-values and over the m TOST p-values, each at alpha/2) and
    simultaneous (analysis/sparc.simultaneous_suite). Pure: all randomness from ``rng``."""
    if benchmarks < 1 or trials < 1 or n < 2:
        raise ValueError(f"benchmarks, trials, n: need >= 1, >= 1, >= 2, got {benchmarks}, {trials}, {n}")
    labels = ("difference at 0.97", "difference at 0.90", "equivalence at 1.00", "equivalence at 1.02",
              "beyond at 0.90")
    failed = dict.fromkeys(FAMILY_CHOICES, 0)
    failed_verdicts = dict.fromkeys(FAMILY_CHOICES, 0)
    shown = {family: dict.fromkeys(labels, 0) for family in FAMILY_CHOICES}
    exposures = dict.fromkeys(labels, 0)
    agree = {"sparc": 0, "simultaneous": 0}
    groups = ["t"] * benchmarks
    cycle = ratios
    for trial in range(trials):
        ratios = [cycle[(i + trial) % len(cycle)] for i in range(benchmarks)]
        samples = [(pop.draw(rng, (n,)), pop.draw(rng, (n,)) / ratio) for ratio in ratios]
        tests = [sparc_tests(x, y, margin, confidence=1 - alpha) for x, y in samples]
        paper = sparc_suite(tests, groups, alpha, "holm").decisions
        simultaneous = simultaneous_suite(tests, samples, groups, alpha).decisions
        decided = {"sparc": [(d.relevance, d.beyond) for d in paper], "split": _split_decisions(tests, alpha),
                   "simultaneous": [(d.relevance, d.beyond) for d in simultaneous]}
        for family in ("sparc", "simultaneous"):
            for d in paper if family == "sparc" else simultaneous:
                agree[family] += d.relevance is relevance(*read_off(d.low, d.high, margin))
        for ratio in ratios:
            exposures["difference at 0.97"] += ratio == 0.97
            exposures["difference at 0.90"] += ratio == 0.90
            exposures["equivalence at 1.00"] += ratio == 1.00
            exposures["equivalence at 1.02"] += ratio == 1.02
            exposures["beyond at 0.90"] += ratio == 0.90
        for family, decisions in decided.items():
            failed[family] += any(_false_claim(v, t.ratio, b, r, margin)
                                  for (v, b), t, r in zip(decisions, tests, ratios))
            failed_verdicts[family] += any(_false_claim(v, t.ratio, None, r, margin)
                                           for (v, _), t, r in zip(decisions, tests, ratios))
            for (verdict, shown_beyond), test, ratio in zip(decisions, tests, ratios):
                slower = verdict in (Verdict.RELEVANT, Verdict.TRIVIAL) and test.ratio < 1
                equivalent = verdict in (Verdict.EQUIVALENCE, Verdict.TRIVIAL)
                counts = shown[family]
                counts["difference at 0.97"] += ratio == 0.97 and slower
                counts["difference at 0.90"] += ratio == 0.90 and slower
                counts["equivalence at 1.00"] += ratio == 1.00 and equivalent
                counts["equivalence at 1.02"] += ratio == 1.02 and equivalent
                counts["beyond at 0.90"] += ratio == 0.90 and shown_beyond == "slower"
    comparisons = trials * benchmarks
    return [FamilyCheck(pop.name, family, benchmarks, trials, failed[family] / trials,
                        failed_verdicts[family] / trials,
                        tuple((label, shown[family][label] / exposures[label] if exposures[label] else math.nan)
                              for label in labels),
                        agree[family] / comparisons if family in agree else None, comparisons)
            for family in FAMILY_CHOICES]


def family_populations(ferret: np.ndarray) -> list[Population]:
    """The populations of the family simulation: log-normal with a CV of 2% (real-looking dispersion of a
    quiet machine) and the real ferret runs (resampled)."""
    values = np.asarray(ferret, dtype=float)
    return [Population("log-normal CV 2%", lambda rng, shape: 100.0 * rng.lognormal(0.0, 0.02, shape)),
            Population("ferret", lambda rng, shape: rng.choice(values, shape))]
