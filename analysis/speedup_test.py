"""The Speedup-Test (Touati, Worms, Briais, CCPE 2013; ../shared/seeds/004_90ddb49e43171cfa.txt).

X are the initial runs (machine A, old build), Y the candidate's; a speedup means Y is faster. The mean
protocol (Figure 1) and the median protocol (Figure 2) decide whether an observed speedup is statistically
significant at risk alpha, or say "cannot conclude" where the paper does; the overall speedup and gain
(Eq. 1-2) and the proportion of accelerated benchmarks with its confidence interval (section 4) summarize a
suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfctl.analysis import special
from perfctl.analysis.distributions import _finite_sample, _shapiro_wilk_sorted, ks_statistic, ks_two_sided
from perfctl.analysis.rank_tests import _rank_sum_sorted, _sorted_median, median
from perfctl.analysis.verdicts import Verdict  # SPEEDUP, NOT_SIGNIFICANT, CANNOT_CONCLUDE here

LARGE_SAMPLE = 30  # section 3.1.3: "large" means n > 30


@dataclass(frozen=True)
class ObservedSpeedups:
    """min(X)/min(Y), mean(X)/mean(Y), med(X)/med(Y): above 1, Y is faster (section 2)."""

    min: float
    mean: float
    median: float


def observed_speedups(x, y) -> ObservedSpeedups:
    x, y = _finite_sample("x", x), _finite_sample("y", y)
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x, y: speedups need positive values")
    return _observed_speedups(x, y, np.sort(x), np.sort(y))


def _mean(values: np.ndarray) -> float:
    """ndarray.mean of a 1-D float array, the same value (its sum, pairwise, over the count), without the
    method's dispatch: the analysis of one benchmark takes a dozen means of 50 values."""
    return float(np.add.reduce(values)) / values.size


def _sample_variance(values: np.ndarray) -> float:
    """ndarray.var(ddof=1) of a 1-D float array, in numpy's order of operations (so the same value)."""
    deviations = values - np.add.reduce(values) / values.size
    return float(np.add.reduce(deviations * deviations)) / (values.size - 1)


def _observed_speedups(x, y, x_sorted, y_sorted) -> ObservedSpeedups:
    """``observed_speedups`` of validated positive samples, given also in ascending order."""
    return ObservedSpeedups(float(x_sorted[0] / y_sorted[0]), _mean(x) / _mean(y),
                            _sorted_median(x_sorted) / _sorted_median(y_sorted))


@dataclass(frozen=True)
class MeanTestResult:
    """The mean protocol's path and outcome.

    ``test`` is "student" or "welch" (None when the protocol stopped before a t-test); ``pvalue`` is the
    one-sided p-value of H0: mu_X <= mu_Y, ``pvalue_reverse`` that of H0: mu_X >= mu_Y (the same protocol
    asked the other way, for a slowdown). ``risk_approximate`` is set for large samples that were not
    shown normal: the t-test is admitted but its risk level is not exact (section 3.1.4, case 1).
    """

    verdict: Verdict
    alpha: float
    pvalue: float | None = None
    test: str | None = None
    normality_pvalues: tuple[float, float] | None = None
    variance_pvalue: float | None = None
    risk_approximate: bool = False
    reason: str | None = None
    pvalue_reverse: float | None = None


def _shapiro(data: np.ndarray, ascending: np.ndarray) -> float | None:
    """Shapiro-Wilk p-value (AS R94; usable beyond the 5000 values it was fitted for) of a validated sample
    given also in ascending order, None when undefined (fewer than 3 values, or all equal)."""
    if data.size < 3 or ascending[-1] == ascending[0]:
        return None
    return _shapiro_wilk_sorted(data, ascending).pvalue


def mean_test(x, y, alpha: float = 0.05) -> MeanTestResult:
    """Is mu_X > mu_Y (Y faster on average) at risk alpha? Figure 1 of the Speedup-Test.

    Small samples (n <= 30 or m <= 30) must each pass Shapiro-Wilk at alpha, else "cannot conclude"; then
    Fisher's F-test picks Student's (equal variances) or Welch's one-sided unpaired t-test. Large samples
    go to the F-test and t-test directly, with the risk flagged approximate when normality is rejected.
    """
    x, y = _finite_sample("x", x), _finite_sample("y", y)
    return _mean_test(x, y, np.sort(x), np.sort(y), alpha)


def _mean_test(x: np.ndarray, y: np.ndarray, x_sorted: np.ndarray, y_sorted: np.ndarray,
               alpha: float) -> MeanTestResult:
    """``mean_test`` of validated samples, given also in ascending order (for Shapiro-Wilk)."""
    n, m = x.size, y.size
    if n < 2 or m < 2:
        return MeanTestResult(Verdict.CANNOT_CONCLUDE, alpha, reason=f"a t-test needs 2 runs per side (have {n}, {m})")
    var_x, var_y = _sample_variance(x), _sample_variance(y)
    if var_x == 0 and var_y == 0:
        return MeanTestResult(Verdict.CANNOT_CONCLUDE, alpha,
                              reason="no variation on either side: the t-test is undefined (see the median protocol)")
    normality = (_shapiro(x, x_sorted), _shapiro(y, y_sorted))
    small = n <= LARGE_SAMPLE or m <= LARGE_SAMPLE
    shown_normal = all(p is not None and p > alpha for p in normality)
    normality_pvalues = None if None in normality else normality
    if small and not shown_normal:
        which = "X" if normality[0] is None or normality[0] <= alpha else "Y"
        return MeanTestResult(Verdict.CANNOT_CONCLUDE, alpha, normality_pvalues=normality_pvalues,
                              reason=f"small sample and {which} is not shown normal (Shapiro-Wilk at {alpha})")
    if var_x > 0 and var_y > 0:
        f = var_x / var_y
        variance_p = float(2 * min(special.fdtr_pair(n - 1, m - 1, f)))
    else:
        variance_p = 0.0
    equal_variances = variance_p > alpha
    if equal_variances:
        pooled = ((n - 1) * var_x + (m - 1) * var_y) / (n + m - 2)
        se = math.sqrt(pooled * (1 / n + 1 / m))
        dof = n + m - 2
    else:
        se = math.sqrt(var_x / n + var_y / m)
        dof = (var_x / n + var_y / m) ** 2 / ((var_x / n) ** 2 / (n - 1) + (var_y / m) ** 2 / (m - 1))
    t = (_mean(x) - _mean(y)) / se
    pvalue, pvalue_reverse = special.stdtr_pair(dof, -t)
    return MeanTestResult(Verdict.SPEEDUP if pvalue <= alpha else Verdict.NOT_SIGNIFICANT, alpha, pvalue,
                          "student" if equal_variances else "welch", normality_pvalues, variance_p,
                          risk_approximate=not small and not shown_normal, pvalue_reverse=pvalue_reverse)


@dataclass(frozen=True)
class MedianTestResult:
    """The median protocol's outcome. ``pvalue``: one-sided Wilcoxon-Mann-Whitney of H0: F_X >= F_Y.
    ``p_x_greater_y`` = U/(nm), the estimate of P[X > Y] (a random run of Y beats one of X).
    ``pvalue_reverse``: the same test the other way (H0: F_X <= F_Y), for a slowdown.
    ``location_model_rejected``: the KS test of the median-centred samples rejected the location-shift
    model, so the risk level is not guaranteed (section 3.2.1)."""

    verdict: Verdict
    alpha: float
    pvalue: float | None
    p_x_greater_y: float
    ks_pvalue: float | None
    location_model_rejected: bool
    method: str
    reason: str | None = None
    pvalue_reverse: float | None = None


def _location_model_pvalue(x_sorted: np.ndarray, y_sorted: np.ndarray) -> float:
    """Two-sided KS p-value of the median-centred samples (section 3.2.1): exact (as scipy's ks_2samp) up to
    KS_EXACT_MAX runs per side, Kolmogorov's limit beyond (analysis/distributions.py)."""
    x_centred, y_centred = x_sorted - _sorted_median(x_sorted), y_sorted - _sorted_median(y_sorted)
    return ks_two_sided(len(x_sorted), len(y_sorted), ks_statistic(x_centred, y_centred)).pvalue


def median_test(x, y, alpha: float = 0.05) -> MedianTestResult:
    """Is med(X) > med(Y) and P[X > Y] > 1/2 at risk alpha? Figure 2 of the Speedup-Test."""
    x, y = _finite_sample("x", x), _finite_sample("y", y)
    return _median_test(np.sort(x), np.sort(y), alpha)


def _median_test(x: np.ndarray, y: np.ndarray, alpha: float) -> MedianTestResult:
    """``median_test`` of validated samples in ascending order (the rank tests merge them, KS reads them)."""
    ranked = _rank_sum_sorted(x, y)
    wmw = ranked.test("greater")
    reverse = ranked.test("less").pvalue
    p_greater = wmw.statistic / (x.size * y.size)
    ks_p = None
    if x.size >= 2 and y.size >= 2:
        ks_p = _location_model_pvalue(x, y)
    rejected = ks_p is not None and ks_p <= alpha
    if x.size < 2 or y.size < 2:
        return MedianTestResult(Verdict.CANNOT_CONCLUDE, alpha, wmw.pvalue, p_greater, ks_p, False, wmw.method,
                                reason=f"one run on a side cannot show a difference (have {x.size}, {y.size})",
                                pvalue_reverse=reverse)
    verdict = Verdict.SPEEDUP if wmw.pvalue <= alpha else Verdict.NOT_SIGNIFICANT
    return MedianTestResult(verdict, alpha, wmw.pvalue, p_greater, ks_p, rejected, wmw.method,
                            pvalue_reverse=reverse)


@dataclass(frozen=True)
class OverallSpeedup:
    """Eq. 1-2 over a suite: S = sum W ET(X_j) / sum W ET(Y_j), G = 1 - 1/S, ET the chosen summary."""

    speedup: float
    gain: float
    function: str
    benchmarks: int


_SUMMARIES = {"mean": np.mean, "median": median, "min": np.min}


def overall_speedup(xs, ys, weights=None, function: str = "median") -> OverallSpeedup:
    """Weighted overall speedup and gain; ``xs``/``ys`` are per-benchmark samples, ``weights`` default 1."""
    if function not in _SUMMARIES:
        raise ValueError(f"function: one of {sorted(_SUMMARIES)}, got {function!r}")
    if len(xs) != len(ys) or not xs:
        raise ValueError("xs, ys: need the same non-zero number of benchmarks")
    w = np.ones(len(xs)) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (len(xs),) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("weights: one non-negative weight per benchmark, not all zero")
    summarize = _SUMMARIES[function]
    return _overall_speedup([summarize(_finite_sample("xs", x)) for x in xs],
                            [summarize(_finite_sample("ys", y)) for y in ys], w, function)


def _overall_speedup(initial: list[float], candidate: list[float], weights: np.ndarray,
                     function: str) -> OverallSpeedup:
    """Eq. 1-2 from each benchmark's summary (``function``) of X and of Y."""
    speedup = float(np.dot(weights, initial)) / float(np.dot(weights, candidate))
    return OverallSpeedup(speedup, 1 - 1 / speedup, function, len(initial))


@dataclass(frozen=True)
class ProportionInterval:
    """Confidence interval of the proportion p of benchmarks accelerated, from a of b (section 4)."""

    accelerated: int
    benchmarks: int
    proportion: float
    low: float
    high: float
    confidence: float
    method: str
    warnings: tuple[str, ...]


def proportion_interval(accelerated: int, benchmarks: int, confidence: float = 0.95,
                        method: str = "wilson-cc") -> ProportionInterval:
    """``wilson-cc``: the Wilson score interval with Yates' continuity correction exactly as R's
    ``prop.test(a, b, conf.level = C)`` computes it (correction min(0.5, |a - b/2|)); the paper's Example 1
    gives [0.4027157, 0.7184049] for 17 of 30 at 90%. ``clopper-pearson``: the exact binomial interval.

    >>> r = proportion_interval(17, 30, 0.90)
    >>> round(r.low, 7), round(r.high, 7)
    (0.4027157, 0.7184049)
    """
    if benchmarks < 1 or not 0 <= accelerated <= benchmarks:
        raise ValueError(f"accelerated, benchmarks: need 0 <= a <= b and b >= 1, got {accelerated}, {benchmarks}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be strictly between 0 and 1, got {confidence}")
    a, b = accelerated, benchmarks
    estimate = a / b
    if method == "wilson-cc":
        yates = min(0.5, abs(a - b * 0.5))
        z = float(special.ndtri((1 + confidence) / 2))
        z22n = z * z / (2 * b)
        centre = estimate + yates / b
        high = 1.0 if centre >= 1 else (centre + z22n + z * math.sqrt(centre * (1 - centre) / b + z22n / (2 * b))) / (
            1 + 2 * z22n)
        centre = estimate - yates / b
        low = 0.0 if centre <= 0 else (centre + z22n - z * math.sqrt(centre * (1 - centre) / b + z22n / (2 * b))) / (
            1 + 2 * z22n)
    elif method == "clopper-pearson":
        tail = (1 - confidence) / 2
        low = 0.0 if a == 0 else float(special.betaincinv(a, b - a + 1, tail))
        high = 1.0 if a == b else float(special.betaincinv(a + 1, b - a, 1 - tail))
    else:
        raise ValueError(f"method: 'wilson-cc' or 'clopper-pearson', got {method!r}")
    notes = ["valid only if the benchmarks were selected at random from a large representative set"]
    if a - a * a / b <= 5:
        notes.append(f"a - a^2/b = {a - a * a / b:.2f} <= 5: the normal approximation behind the interval is "
                     "inaccurate (the Clopper-Pearson interval does not need it)")
    return ProportionInterval(a, b, estimate, max(0.0, low), min(1.0, high), confidence, method, tuple(notes))


def benchmarks_needed(proportion: float, precision: float, confidence: float = 0.95) -> int:
    """Fewest random benchmarks for an interval of half-width r: b >= z^2 C(1 - C) / r^2 (section 4).

    >>> benchmarks_needed(17 / 30, 0.05, 0.95)
    378
    """
    if not 0 < precision < 1:
        raise ValueError(f"precision: must be strictly between 0 and 1, got {precision}")
    if not 0 <= proportion <= 1:
        raise ValueError(f"proportion: must be in [0, 1], got {proportion}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be strictly between 0 and 1, got {confidence}")
    z = float(special.ndtri((1 + confidence) / 2))
    # (z / r)^2, not z^2 / r^2: r^2 underflows to 0 below r ~ 1e-162; a count beyond floats is refused
    try:
        needed = (z / precision) ** 2 * proportion * (1 - proportion)
    except OverflowError:
        needed = math.inf
    if not math.isfinite(needed):
        raise ValueError(f"precision: {precision} asks for more benchmarks than can be counted")
    return max(1, math.ceil(needed - 1e-9))


def planning_proportion(accelerated: int, benchmarks: int) -> tuple[float, str | None]:
    """The proportion to plan ``benchmarks_needed`` with, and a note when it is not the observed one.

    Section 4's b >= z^2 C(1 - C) / r^2 takes C from the benchmarks observed; when all or none were
    accelerated, C(1 - C) = 0 asks for one benchmark whatever the precision. The worst case C = 0.5 (the
    largest C(1 - C)) is used instead, and the note says so.

    >>> planning_proportion(17, 30)
    (0.5666666666666667, None)
    >>> planning_proportion(0, 1)[0]
    0.5
    """
    if benchmarks < 1 or not 0 <= accelerated <= benchmarks:
        raise ValueError(f"accelerated, benchmarks: need 0 <= a <= b and b >= 1, got {accelerated}, {benchmarks}")
    if 0 < accelerated < benchmarks:
        return accelerated / benchmarks, None
    observed = "all" if accelerated == benchmarks else "none"
    return 0.5, (f"{observed} of {benchmarks} accelerated: the benchmarks needed are planned with the worst case "
                 "proportion 0.5 (the observed 0 or 1 would ask for one)")
