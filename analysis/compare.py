"""One comparison of A (the initial machine or build) with B (the candidate), benchmark by benchmark and
overall, composed from the Speedup-Test, SPARC and SPA. Pure: samples in, a frozen Comparison out.

Conventions, stated in every output: the metric is a cost (time, instructions, cycles: lower is better);
the speedup ratio is A/B (above 1: B is faster), SPARC's S = X/Y and the Speedup-Test's med(X)/med(Y) with
X = A, Y = B. The Speedup-Test protocols are one-sided for a speedup; perfctl runs them both ways, each at
alpha/2, so "B faster" and "B slower" together keep the risk at alpha. Every family of tests (SPARC's;
each Speedup-Test protocol's) is corrected over all benchmarks and metrics of the comparison.

SPARC's verdicts come from one of two families (``Parameters.family``, analysis/sparc.py): "simultaneous"
(default: Bonferroni intervals at 1 - alpha/m, the verdict read off the interval printed beside it) or
"sparc" (the paper's Holm family over 2m + g p-values, beside an unadjusted interval). docs/statistics.md,
"Verdicts, intervals and the family", gives the measured error and power of each.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from perfctl.analysis import spa, stability
from perfctl.analysis.disturbance import disturbed as disturbance
from perfctl.analysis.multiple import DEFAULT_METHOD, METHODS, adjust
from perfctl.analysis.rank_tests import _sorted_median
from perfctl.analysis.ratio_edges import exact_samples
from perfctl.analysis.sparc import (
    OverallTest,
    SparcDecision,
    _sparc_tests,
    family_level,
    simultaneous_suite,
    sparc_suite,
)
from perfctl.analysis.speedup_test import (
    MeanTestResult,
    MedianTestResult,
    ObservedSpeedups,
    OverallSpeedup,
    ProportionInterval,
    _mean,
    _mean_test,
    _median_test,
    _observed_speedups,
    _overall_speedup,
    benchmarks_needed,
    planning_proportion,
    proportion_interval,
)
from perfctl.analysis.summary import GeometricMean, geometric_mean
from perfctl.analysis.verdicts import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MARGIN,
    FAIL_ON,
    FAMILIES,
    SIMULTANEOUS,
    Verdict,
)

# A protocol run both ways says B faster, B slower, not significant or cannot conclude; a benchmark's
# verdict is SPARC's relevance, or disturbed, or cannot conclude: all of them analysis/verdicts.py's Verdict.
# Below this many judged benchmarks the proportion of accelerated ones and the benchmarks needed for a
# precision are planning figures, not findings (Clopper-Pearson at 95% over 9 benchmarks is >= 0.6 wide).
FEW_BENCHMARKS = 10
MIN_PRECISION = 1e-6


MIN_RISK = 1e-12
# the largest A/B ratio (and smallest, its inverse) a benchmark is judged at: 10^300, within a float's
# normal range both ways (_precheck)
MAX_LOG_RATIO_DECADES = 300
MAX_LOG_RATIO = MAX_LOG_RATIO_DECADES * math.log(10)


@dataclass(frozen=True)
class Parameters:
    """The statistics' parameters of one comparison, and their defaults: the one owner of both (the
    command line's options and the server's Compare take them from here)."""

    alpha: float = 0.05
    confidence: float = DEFAULT_CONFIDENCE
    proportion: float = 0.5
    margin: float = DEFAULT_MARGIN
    paired: bool = False
    correction: str = DEFAULT_METHOD
    precision: float = 0.05
    seed: int = 0
    family: str = SIMULTANEOUS

    @classmethod
    def given(cls, **values) -> Parameters:
        """Parameters of the ``values`` given, every other at its default; a value that is None, 0, empty or
        False is not given (as a proto3 field left unset reads)."""
        return cls(**{name: value for name, value in values.items() if value})

    def validate(self) -> None:
        for name in ("alpha", "confidence", "proportion", "margin", "precision"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name}: must be strictly between 0 and 1, got {value}")
        # the half-width of the interval of a proportion of benchmarks: below MIN_PRECISION it would ask for
        # more than 10^11 benchmarks (and below ~1e-154 its square underflows)
        if self.precision < MIN_PRECISION:
            raise ValueError(f"precision: must be between {MIN_PRECISION:g} and 1, got {self.precision}")
        # SPA's minimal sample (Eq. 6-8) grows as 1/proportion: beyond 1e-6 of 0 or 1 it asks for millions of
        # runs per benchmark, and within 1e-16 its base rounds to 1.0 and no number of runs exists
        if not MIN_PRECISION <= self.proportion <= 1 - MIN_PRECISION:
            raise ValueError(f"proportion: must be between {MIN_PRECISION:g} and {1 - MIN_PRECISION}, "
                             f"got {self.proportion}")
        # a risk below 1e-12 asks for confidence no test here can state (its quantile overflows the counts of
        # runs and benchmarks it sizes: alpha 5e-324 ended in an OverflowError)
        for name in ("alpha", "confidence"):
            value = getattr(self, name)
            risk = value if name == "alpha" else 1 - value
            if risk < MIN_RISK * 0.999:  # 1 - (1 - 1e-12) is 0.99998e-12 in floating point
                bound = f"at least {MIN_RISK:g}" if name == "alpha" else f"at most 1 - {MIN_RISK:g}"
                raise ValueError(f"{name}: must be {bound}, got {value}")
        # an interval's end is placed exactly against 1 and both edges (analysis/ratio_edges.py): below
        # 1e-6 an edge and 1 are within a few ulps of each other, closer than an end can be told apart
        if self.margin < MIN_PRECISION:
            raise ValueError(f"margin: must be between {MIN_PRECISION:g} and 1, got {self.margin}")
        if self.correction not in METHODS:
            raise ValueError(f"correction: {', '.join(METHODS[:-1])} or {METHODS[-1]}, got {self.correction!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"family: {' or '.join(FAMILIES)}, got {self.family!r}")


@dataclass(frozen=True)
class ProtocolOutcome:
    """A Speedup-Test protocol run both ways: ``verdict`` is one of B faster, B slower, not significant,
    cannot conclude (Verdict.FASTER, SLOWER, NOT_SIGNIFICANT, CANNOT_CONCLUDE); ``pvalue`` is the two-way
    p-value 2 min(p_faster, p_slower) before correction and ``adjusted`` after."""

    verdict: Verdict
    pvalue: float | None
    adjusted: float | None
    result: MeanTestResult | MedianTestResult
    reason: str | None = None


@dataclass(frozen=True)
class BenchmarkComparison:
    benchmark: str
    metric: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    speedups: ObservedSpeedups | None = None
    sparc: SparcDecision | None = None
    mean_protocol: ProtocolOutcome | None = None
    median_protocol: ProtocolOutcome | None = None
    p_a_greater_b: float | None = None
    spa_a: spa.ValueInterval | None = None
    spa_b: spa.ValueInterval | None = None
    speedup_spa: spa.ValueInterval | None = None
    pairing: str | None = None
    cannot_conclude: str | None = None
    warnings: tuple[str, ...] = ()
    disturbed: str | None = None
    # what to do about the runs' instability the warnings name (analysis/stability.py Finding.advice)
    remedies: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        """SPARC's relevance (Table I), "disturbed" when a side's runs look disturbed in a way a change of
        speed cannot explain (analysis/disturbance.py), or "cannot conclude" when nothing could be judged.

        relevant difference: a difference is shown and equivalence is not (the change may lie inside the
        margin); trivial difference: a difference is shown and so is equivalence; equivalence: equivalence is
        shown, a difference is not; indeterminate: neither. ``sparc.beyond`` says whether the change is shown
        to exceed the margin."""
        if self.cannot_conclude:
            return Verdict.CANNOT_CONCLUDE
        if self.disturbed:
            return Verdict.DISTURBED
        return self.sparc.relevance

    @property
    def relevant_slowdown(self) -> bool:
        """B is shown slower and not shown equivalent (relevant difference, ratio below 1), on undisturbed data."""
        return (self.sparc is not None and not self.disturbed and not self.cannot_conclude
                and self.sparc.relevance is Verdict.RELEVANT and self.sparc.tests.ratio < 1)

    @property
    def beyond_slowdown(self) -> bool:
        """B is shown slower by more than the margin (the interval lies below 1 - margin), on undisturbed data."""
        return (self.sparc is not None and not self.disturbed and not self.cannot_conclude
                and self.sparc.beyond == "slower")


@dataclass(frozen=True)
class MetricSummary:
    metric: str
    benchmarks: int
    speedup_mean: OverallSpeedup | None
    speedup_median: OverallSpeedup | None
    accelerated: ProportionInterval | None
    accelerated_exact: ProportionInterval | None
    benchmarks_needed: int | None
    sparc_overall: OverallTest | None
    proportion_note: str | None = None
    # the geometric mean of the judged, undisturbed benchmarks' ratios with its interval (analysis/summary.py)
    geomean: GeometricMean | None = None


@dataclass(frozen=True)
class Comparison:
    benchmarks: tuple[BenchmarkComparison, ...]
    summaries: tuple[MetricSummary, ...]
    parameters: Parameters
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    family: str = SIMULTANEOUS
    interval_level: float | None = None
    family_size: int = 0

    @property
    def relevant_slowdowns(self) -> tuple[BenchmarkComparison, ...]:
        return tuple(b for b in self.benchmarks if b.relevant_slowdown)

    def failures(self, fail_on: str) -> tuple[BenchmarkComparison, ...]:
        """The benchmarks that fail a gate: "relevant", the relevant slowdowns (a slowdown is shown and it is
        not shown negligible); "beyond", the slowdowns shown to exceed the margin."""
        if fail_on == "relevant":
            return self.relevant_slowdowns
        if fail_on == "beyond":
            return tuple(b for b in self.benchmarks if b.beyond_slowdown)
        raise ValueError(f"fail_on: {' or '.join(FAIL_ON)}, got {fail_on!r}")


def _both_ways(test, alpha: float):
    """A one-sided Speedup-Test protocol (``test``, called with its risk) asked for a speedup (A > B) and for
    a slowdown, each at alpha/2: one run of the protocol gives both one-sided p-values. Returns (result,
    two-way p, reason)."""
    result = test(alpha / 2)
    if result.verdict is Verdict.CANNOT_CONCLUDE:
        return result, None, result.reason
    return result, min(1.0, 2 * min(result.pvalue, result.pvalue_reverse)), None


def _decide(result, adjusted: float | None, alpha: float, reason: str | None) -> Verdict:
    if reason is not None or adjusted is None:
        return Verdict.CANNOT_CONCLUDE
    if adjusted > alpha:
        return Verdict.NOT_SIGNIFICANT
    return Verdict.FASTER if result.pvalue <= result.pvalue_reverse else Verdict.SLOWER


def _cannot(name: str, metric: str, x: np.ndarray, y: np.ndarray, reason: str, notes) -> BenchmarkComparison:
    return BenchmarkComparison(name, metric, int(x.size), int(y.size),
                               float(np.median(x)) if x.size else None, float(np.median(y)) if y.size else None,
                               cannot_conclude=reason, warnings=tuple(notes))


def _precheck(x: np.ndarray, y: np.ndarray, paired: bool) -> str | None:
    if x.size == 0 or y.size == 0:
        return f"no runs on {'A' if x.size == 0 else 'B'}"
    if x.size < 2 or y.size < 2:
        return f"one run on a side cannot show a difference (A has {x.size}, B has {y.size})"
    if np.any(~np.isfinite(x)) or np.any(~np.isfinite(y)):
        return "non-finite values"
    if np.any(x <= 0) or np.any(y <= 0):
        return "values <= 0: the speed ratio is undefined"
    if paired and x.size != y.size:
        return f"--paired needs as many runs on each side (A has {x.size}, B has {y.size})"
    # the ratios are formed in log space (log x - log y) and brought back with exp: beyond 10^±300 the
    # exp overflows or leaves the normal floats (A ~ 1.8e19 ns against B ~ 1e-300 ns ended in an
    # OverflowError); no two measurements of one benchmark differ by such a factor
    log_x, log_y = np.log(x), np.log(y)
    highest, lowest = float(log_x.max() - log_y.min()), float(log_x.min() - log_y.max())
    extreme = highest if highest >= -lowest else lowest
    if abs(extreme) > MAX_LOG_RATIO:
        return (f"A/B ratios reach 10^{extreme / math.log(10):.0f}, beyond 10^±{MAX_LOG_RATIO_DECADES}: no two "
                "measurements differ so much (a unit or a value is wrong)")
    return None


def compare(a: Mapping[tuple[str, str], Sequence[float]], b: Mapping[tuple[str, str], Sequence[float]],
            parameters: Parameters = Parameters(), notes: Mapping[tuple[str, str], Sequence[str]] | None = None,
            only_a: Sequence[str] = (), only_b: Sequence[str] = (),
            workers: Callable[[Callable, Sequence], Iterable] = map) -> Comparison:
    """Compare samples keyed by (benchmark, metric); both mappings must have the same keys.

    ``notes`` carries the data's own warnings per key (multiplexed counters, mixed backends...) into the
    result. Benchmarks present on one side only are passed as ``only_a``/``only_b`` and listed.
    ``workers`` is a map-like callable, as scipy's: ``workers(function, keys)`` gives ``function(key)`` for
    each key, in order; it runs each benchmark's own tests (the family's decisions and the summaries, which
    take all of them, follow here). By default the built-in ``map``: here, in order. The command line
    passes one that computes half of them in another process (perfctl/parallel.py ``halves``); this module
    starts none.
    """
    parameters.validate()
    notes = notes or {}
    if set(a) != set(b):
        raise ValueError("a, b: the same (benchmark, metric) keys on both sides")
    keys = sorted(a)
    p = parameters
    # each benchmark's own tests (``workers``); then what takes all of them: the family's decisions, the
    # adjusted p-values, the summaries
    samples = {key: (np.asarray(a[key], dtype=float), np.asarray(b[key], dtype=float)) for key in keys}
    # the values themselves where a float cannot hold them (counts past 2^53), for the verdict's exact edges
    exact = {key: exact_samples(a[key], b[key], samples[key]) for key in keys}
    reasons = {key: _precheck(x, y, p.paired) for key, (x, y) in samples.items()}
    # the simultaneous family reads its verdicts off intervals at its own level: each benchmark's SPARC
    # tests compute theirs at that level (one Hodges-Lehmann selection, not two), once the family's size
    # is known from the prechecks
    level = family_level(sum(reason is None for reason in reasons.values()), p.alpha) \
        if p.family == SIMULTANEOUS else None
    examine = functools.partial(_examined, samples=samples, reasons=reasons, notes=notes, p=p, level=level,
                                exact=exact)
    prepared = list(workers(examine, keys))
    judged = [item for item in prepared if isinstance(item, dict)]
    tests = [item["sparc"] for item in judged]
    groups = [item["metric"] for item in judged]
    if p.family == SIMULTANEOUS:
        # the values as given where a float cannot hold them (exact_samples): an interval computed again at
        # another level is settled on the counts, as the tests' own was
        suite = simultaneous_suite(tests, [exact[item["name"], item["metric"]] or (item["x"], item["y"])
                                           for item in judged], groups, p.alpha)
    else:
        suite = sparc_suite(tests, groups, p.alpha, p.correction)
    mean_adjusted = iter(_adjust_present([item["mean"][1] for item in judged], p.correction))
    median_adjusted = iter(_adjust_present([item["median"][1] for item in judged], p.correction))
    decisions = iter(suite.decisions)
    results = [item if isinstance(item, BenchmarkComparison)
               else _finish(item, next(decisions), next(mean_adjusted), next(median_adjusted), p)
               for item in prepared]
    judged_samples = {(item["name"], item["metric"]): item for item in judged}
    summaries = tuple(_summarize(metric, [r for r in results if r.metric == metric], judged_samples,
                                 suite.overall.get(metric), p)
                      for metric in dict.fromkeys(m for _, m in keys))
    return Comparison(tuple(results), summaries, p, tuple(only_a), tuple(only_b), family=suite.family,
                      interval_level=suite.interval_level, family_size=suite.family_size)


def _examined(key: tuple[str, str], samples, reasons, notes, p: Parameters, level: float | None,
              exact=None) -> BenchmarkComparison | dict:
    """What one benchmark's runs say on their own: SPARC's tests (their interval at the simultaneous
    family's ``level``, else at the confidence asked), the disturbance check, both protocols both ways,
    SPA's intervals and the pairing; a BenchmarkComparison for a benchmark that cannot be judged
    (``reasons``: _precheck's)."""
    name, metric = key
    x, y = samples[key]
    key_notes = list(notes.get(key, ()))
    reason = reasons[key]
    if reason is not None:
        return _cannot(name, metric, x, y, reason, key_notes)
    # validated (_precheck) and sorted once for every test of the benchmark; the tests whose sums run in the
    # runs' order (means, variances, Levene's deviations, the random pairing) get them as given
    x_sorted, y_sorted = np.sort(x), np.sort(y)
    ratios, pairing = spa.pair_runs(x, y, seed=p.seed, by_index=p.paired)
    sparc = _sparc_tests(x, y, x_sorted, y_sorted, p.margin, p.paired, level or p.confidence,
                         (exact or {}).get(key))
    return {
        "name": name, "metric": metric, "x": x, "y": y, "x_sorted": x_sorted, "y_sorted": y_sorted,
        "notes": key_notes, "disturbed": disturbance(x, y, p.alpha),
        "stability": (stability.check(x.tolist()), stability.check(y.tolist())),
        "sparc": sparc,
        "mean": _both_ways(functools.partial(_mean_test, x, y, x_sorted, y_sorted), p.alpha),
        "median": _both_ways(functools.partial(_median_test, x_sorted, y_sorted), p.alpha),
        "spa_a": spa._value_interval_sorted(x_sorted, p.proportion, p.confidence),
        "spa_b": spa._value_interval_sorted(y_sorted, p.proportion, p.confidence),
        "speedup_spa": spa.value_interval(ratios, p.proportion, p.confidence), "pairing": pairing,
        "speedups": _observed_speedups(x, y, x_sorted, y_sorted)}


def _adjust_present(raw: list[float | None], method: str) -> list[float | None]:
    present = [v for v in raw if v is not None]
    adjusted = iter(adjust(present, method) if present else [])
    return [None if v is None else float(next(adjusted)) for v in raw]


def _finish(item: dict, decision, mean_adjusted, median_adjusted, p: Parameters) -> BenchmarkComparison:
    """A benchmark's row: what _examined found, with the family's SPARC decision and the protocols'
    p-values adjusted across the benchmarks."""
    x, y = item["x"], item["y"]
    warnings = list(item["notes"])
    mean_result, mean_p, mean_reason = item["mean"]
    median_result, median_p, median_reason = item["median"]
    mean = ProtocolOutcome(_decide(mean_result, mean_adjusted, p.alpha, mean_reason), mean_p, mean_adjusted,
                           mean_result, mean_reason)
    median = ProtocolOutcome(_decide(median_result, median_adjusted, p.alpha, median_reason), median_p,
                             median_adjusted, median_result, median_reason)
    if mean_reason:
        warnings.append(f"mean protocol: {mean_reason}")
    if median_result.location_model_rejected:
        warnings.append("KS rejects the location-shift model: the rank tests' risk level is approximate")
    if mean_result.risk_approximate:
        warnings.append("large samples not shown normal: the t-test's risk level is approximate")
    # each side's own runs: outliers, two groups, a drift, a wide spread (analysis/stability.py)
    # (what each found; the remedies apart, so that a report says each once for all the benchmarks)
    found = [(side, finding) for side, checked in zip("AB", item["stability"]) for finding in checked.findings]
    warnings.extend(f"{side}: {finding.what}" for side, finding in found)
    remedies = tuple(stability.merged(advice for _, finding in found for advice in finding.advice))
    spa_a = item["spa_a"]
    needed = spa_a.runs_needed
    if min(x.size, y.size) < needed:
        warnings.append(f"few runs ({x.size} and {y.size}): SPA bounds at proportion {p.proportion} and "
                        f"confidence {p.confidence} need at least {needed} per side")
    return BenchmarkComparison(
        item["name"], item["metric"], int(x.size), int(y.size), _sorted_median(item["x_sorted"]),
        _sorted_median(item["y_sorted"]), speedups=item["speedups"], sparc=decision, mean_protocol=mean,
        median_protocol=median, p_a_greater_b=median_result.p_x_greater_y, spa_a=spa_a, spa_b=item["spa_b"],
        speedup_spa=item["speedup_spa"], pairing=item["pairing"], warnings=tuple(warnings),
        disturbed=item["disturbed"], remedies=remedies)


def _summarize(metric: str, rows: list[BenchmarkComparison], samples: Mapping[tuple[str, str], dict],
               overall: OverallTest | None, p: Parameters) -> MetricSummary:
    judged = [r for r in rows if r.cannot_conclude is None]
    if not judged:
        return MetricSummary(metric, len(rows), None, None, None, None, None, overall)
    judged_samples = [samples[r.benchmark, metric] for r in judged]
    weights = np.ones(len(judged))
    # overall_speedup's summaries (np.mean, median) of the validated samples, each computed once
    speedup_mean = _overall_speedup([_mean(s["x"]) for s in judged_samples], [_mean(s["y"]) for s in judged_samples],
                                    weights, "mean")
    speedup_median = _overall_speedup([_sorted_median(s["x_sorted"]) for s in judged_samples],
                                      [_sorted_median(s["y_sorted"]) for s in judged_samples], weights, "median")
    accelerated = sum(r.median_protocol.verdict is Verdict.FASTER for r in judged)
    wilson = proportion_interval(accelerated, len(judged), p.confidence, "wilson-cc")
    exact = proportion_interval(accelerated, len(judged), p.confidence, "clopper-pearson")
    planned, planning_note = planning_proportion(accelerated, len(judged))
    needed = benchmarks_needed(planned, p.precision, p.confidence)
    notes = []
    if len(judged) < FEW_BENCHMARKS:
        notes.append(f"over {len(judged)} benchmark{'s' if len(judged) != 1 else ''} the proportion's interval "
                     f"says little about a suite, and {needed} benchmarks for ±{p.precision} is a plan, not a finding")
    if planning_note:
        notes.append(planning_note)
    # over the benchmarks with a ratio and a bounded interval, undisturbed (the line says how many of all)
    rated = [r for r in judged if r.sparc is not None and not r.disturbed and r.sparc.low is not None
             and r.sparc.high is not None]
    geomean = geometric_mean([r.sparc.tests.ratio for r in rated], [(r.sparc.low, r.sparc.high, r.sparc.level)
                                                                    for r in rated], 1 - p.alpha)
    return MetricSummary(metric, len(rows), speedup_mean, speedup_median, wilson, exact, needed, overall,
                         "; ".join(notes) or None, geomean)

