"""The statistical methods against the numbers printed in their papers, against scipy, and on the ferret
data (examples/data)."""

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from perfctl.analysis import multiple, spa, validity
from perfctl.analysis.compare import Parameters, compare
from perfctl.analysis.rank_tests import hodges_lehmann_center, hodges_lehmann_shift, mann_whitney, wilcoxon_signed_rank
from perfctl.analysis.sparc import overall_test, sparc_suite, sparc_tests
from perfctl.analysis.speedup_test import (
    benchmarks_needed,
    mean_test,
    median_test,
    observed_speedups,
    overall_speedup,
    planning_proportion,
    proportion_interval,
)
from perfctl.analysis.verdicts import Verdict, read_off, relevance

DATA = Path(__file__).resolve().parents[1] / "examples/data"
SMALL_L2 = np.loadtxt(DATA / "ferret-l2_512kB-simticks.csv", delimiter=",")
LARGE_L2 = np.loadtxt(DATA / "ferret-l2_3MB-simticks.csv", delimiter=",")


# --- SPARC (001_b0b9677f55f20b9d.txt) ---

def test_signed_rank_matches_sparc_table_iv():
    ratios = 1.2 + np.arange(30) / 100  # 30 pairs, every ratio above 1
    two_sided = wilcoxon_signed_rank(ratios - 1)
    assert two_sided.zstatistic == pytest.approx(4.772, abs=5e-4)
    assert two_sided.pvalue == pytest.approx(1.825e-6, rel=1e-3)
    one_sided = wilcoxon_signed_rank(ratios - 1, "greater")
    assert one_sided.pvalue == pytest.approx(9.127e-7, rel=1e-3)


def test_overall_test_matches_sparc_table_viii():
    ariane = [0.491, 1.0, 0.285, 1.0, 1.0, 1.0, 1.0, 1.0]
    verdicts = [Verdict.RELEVANT, Verdict.TRIVIAL, Verdict.RELEVANT] + [Verdict.TRIVIAL] * 5
    # the paper's p-values: 0.491 and 0.285 left give p = 0.50, 0.432 alone p = 1.00
    assert wilcoxon_signed_rank(np.array([0.491, 0.285]) - 1).pvalue == 0.5
    assert wilcoxon_signed_rank(np.array([0.432]) - 1).pvalue == 1.0
    # ... which no data could have brought below alpha 0.10 (2/2^k > 0.10 until k = 5): not applied, and said
    result = overall_test(ariane, verdicts, 0.10)
    assert (result.pvalue, result.rejected, result.benchmarks_used, result.set_aside) == (None, False, 2, 6)
    assert result.reason.startswith("needs at least 5 benchmarks to reach alpha 0.1: not applied")
    shakti = overall_test([0.432] + [1.0] * 7, [Verdict.RELEVANT] + [Verdict.TRIVIAL] * 7, 0.10)
    assert shakti.pvalue is None and not shakti.rejected and "needs at least 5" in shakti.reason
    # five benchmarks all slower can reach it: 2/2^5 = 0.0625 <= 0.10
    five = overall_test([0.9, 0.8, 0.85, 0.7, 0.95], [Verdict.RELEVANT] * 5, 0.10)
    assert five.reason is None and five.pvalue == pytest.approx(0.0625) and five.direction == "slower"


def test_table_i_relevance():
    assert relevance(True, True) is Verdict.TRIVIAL
    assert relevance(True, False) is Verdict.RELEVANT
    assert relevance(False, True) is Verdict.EQUIVALENCE
    assert relevance(False, False) is Verdict.INDETERMINATE


def test_sparc_verdicts_on_known_situations():
    rng = np.random.default_rng(5)
    base = rng.lognormal(np.log(100), 0.01, 40)

    def verdict(x, y, **kw):
        suite = sparc_suite([sparc_tests(x, y, **kw)], ["t"])
        return suite.decisions[0].relevance

    assert verdict(base, rng.lognormal(np.log(100), 0.01, 40)) is Verdict.EQUIVALENCE
    assert verdict(base, rng.lognormal(np.log(80), 0.01, 40)) is Verdict.RELEVANT
    assert verdict(base, rng.lognormal(np.log(98), 0.002, 40)) is Verdict.TRIVIAL
    assert verdict(base[:4], rng.lognormal(np.log(103), 0.05, 4)) is Verdict.INDETERMINATE
    paired = verdict(base, base / 1.5, paired=True)
    assert paired is Verdict.RELEVANT


def test_ratio_estimate_is_the_scale_between_samples():
    rng = np.random.default_rng(6)
    x = rng.lognormal(np.log(100), 0.05, 30)
    tests = sparc_tests(x, x / 1.25)
    assert tests.ratio == pytest.approx(1.25, rel=1e-9)
    assert tests.ratio_low < 1.25 < tests.ratio_high or tests.ratio_low == pytest.approx(1.25)


def test_rank_tests_agree_with_scipy():
    rng = np.random.default_rng(7)
    for n, m in ((8, 11), (15, 12), (40, 33)):
        x, y = rng.normal(0, 1, n), rng.normal(0.4, 1, m)
        for alternative in ("two-sided", "less", "greater"):
            method = "exact" if max(n, m) <= 20 else "asymptotic"
            assert mann_whitney(x, y, alternative).pvalue == pytest.approx(
                stats.mannwhitneyu(x, y, alternative=alternative, method=method).pvalue, rel=1e-9)
    for n in (9, 18, 45):
        d = rng.normal(0.3, 1, n)
        for alternative in ("two-sided", "less", "greater"):
            method = "exact" if n <= 25 else "approx"
            kwargs = {"correction": True} if method == "approx" else {}
            assert wilcoxon_signed_rank(d, alternative).pvalue == pytest.approx(
                stats.wilcoxon(d, alternative=alternative, method=method, **kwargs).pvalue, rel=1e-9)


def test_hodges_lehmann_estimates():
    x = np.array([1.0, 2.0, 4.0])
    y = np.array([0.5, 1.5])
    assert hodges_lehmann_shift(x, y).estimate == np.median((x[:, None] - y[None, :]).ravel())
    d = np.array([1.0, 3.0, 8.0])
    walsh = [1, 3, 8, 2, 4.5, 5.5]
    assert hodges_lehmann_center(d).estimate == np.median(walsh)
    assert hodges_lehmann_center(d, 0.95).low is None  # 3 values cannot bound a 95% interval


# --- Speedup-Test (004_90ddb49e43171cfa.txt) ---

def test_prop_test_examples():
    r = proportion_interval(17, 30, 0.90)
    assert (round(r.low, 7), round(r.high, 7)) == (0.4027157, 0.7184049)
    assert not any("<= 5" in w for w in r.warnings)  # a - a^2/b = 7.37 > 5
    half = proportion_interval(17, 30, 0.50)
    # The paper prints [49.84%, 64.23%]; R's prop.test gives 0.4884 for the lower bound (the upper matches):
    # the printed 49.84 is a transposition of 48.84.
    assert half.high == pytest.approx(0.6423, abs=1e-4) and half.low == pytest.approx(0.4884, abs=1e-4)
    exact = proportion_interval(17, 30, 0.90, "clopper-pearson")
    assert exact.low == pytest.approx(stats.binomtest(17, 30).proportion_ci(0.90, "exact").low)
    assert any("<= 5" in w for w in proportion_interval(2, 30).warnings)


def test_benchmarks_needed_example():
    assert benchmarks_needed(17 / 30, 0.05, 0.95) == 378


@pytest.mark.parametrize("precision", [1e-160, 1e-300, 5e-324])
def test_benchmarks_needed_refuses_a_precision_beyond_floats(precision):
    """r^2 underflows (1e-300: ZeroDivisionError) or the count overflows (1e-160: OverflowError in ceil)."""
    with pytest.raises(ValueError, match=f"precision: {precision} asks for more benchmarks than can be counted"):
        benchmarks_needed(0.5, precision, 0.95)
    assert benchmarks_needed(0.5, 1e-6, 0.95) == 960364705174  # the smallest compare accepts


@pytest.mark.parametrize("precision", [1e-160, 1e-300, 9.9e-7])
def test_compare_parameters_bound_the_precision(precision):
    from perfctl.analysis.compare import Parameters

    with pytest.raises(ValueError, match=rf"^precision: must be between 1e-06 and 1, got {precision}$"):
        Parameters(precision=precision).validate()
    Parameters(precision=1e-6).validate()


def test_overall_speedup_and_gain():
    xs = [np.array([10.0, 10.0]), np.array([30.0, 30.0])]
    ys = [np.array([5.0, 5.0]), np.array([15.0, 15.0])]
    result = overall_speedup(xs, ys)
    assert (result.speedup, result.gain) == (2.0, 0.5)
    weighted = overall_speedup(xs, [np.array([10.0]), np.array([15.0])], weights=[1, 0])
    assert weighted.speedup == 1.0


def test_protocols_on_the_ferret_data():
    speedups = observed_speedups(SMALL_L2, LARGE_L2)
    assert speedups.median == pytest.approx(np.median(SMALL_L2) / np.median(LARGE_L2))
    mean = mean_test(SMALL_L2, LARGE_L2, 0.05)
    assert mean.verdict is Verdict.SPEEDUP and mean.test == "welch"  # the F-test rejects equal variances
    median = median_test(SMALL_L2, LARGE_L2, 0.05)
    assert median.verdict is Verdict.SPEEDUP and median.p_x_greater_y == pytest.approx(0.7544, abs=1e-4)
    assert median.location_model_rejected  # the KS test flags the bimodal small-L2 runs
    assert median_test(LARGE_L2, SMALL_L2, 0.05).verdict is Verdict.NOT_SIGNIFICANT


def test_mean_protocol_cannot_conclude_on_small_non_normal_samples():
    skewed = np.concatenate([np.full(10, 100.0), [150.0, 400.0]]) + np.arange(12) * 1e-3
    result = mean_test(skewed, skewed * 0.9, 0.05)
    assert result.verdict is Verdict.CANNOT_CONCLUDE and "not shown normal" in result.reason


# --- SPA (000_458b5c1aa5ac6831.txt) ---

def test_minimal_samples_eq_6_to_8():
    result = spa.minimal_samples(0.9, 0.9)
    assert (result.positive, result.negative, result.required) == (22, 1, 22)
    # strictly inside (0, 1) but 1.0 in floating point: a ValueError naming it, not a ZeroDivisionError
    for proportion in (1e-300, 1e-17):
        with pytest.raises(ValueError, match="too close to 0 or 1"):
            spa.minimal_samples(proportion, 0.9)


def test_clopper_pearson_confidence_is_a_binomial_tail():
    for successes in range(0, 23):
        assertion, confidence = spa.clopper_pearson_confidence(successes, 22, 0.7)
        if successes / 22 >= 0.7:
            assert assertion is spa.Assertion.POSITIVE
            assert confidence == pytest.approx(stats.binom.cdf(successes - 1, 22, 0.7))
        else:
            assert assertion is spa.Assertion.NEGATIVE
            assert confidence == pytest.approx(stats.binom.sf(successes, 22, 0.7))


def test_algorithm_1_stops_once_confident_and_algorithm_2_may_answer_none():
    result = spa.smc_sequential(iter([True] * 100), 0.9, 0.9)
    assert result.assertion is spa.Assertion.POSITIVE and result.trials == 22
    assert spa.smc_fixed([True] * 21, 0.9, 0.9).assertion is None
    assert spa.smc_fixed([True] * 22, 0.9, 0.9).assertion is spa.Assertion.POSITIVE
    ran_out = spa.smc_sequential(iter([True, False] * 3), 0.5, 0.99)
    assert ran_out.assertion is None and ran_out.trials == 6


@pytest.mark.parametrize("proportion", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("per_bound", [False, True])
def test_exact_interval_agrees_with_the_threshold_search(proportion, per_bound):
    rng = np.random.default_rng(8)
    for sample in (SMALL_L2 / 1e9, rng.lognormal(0, 0.2, 40), np.round(rng.normal(50, 2, 60))):
        exact = spa.value_interval(sample, proportion, 0.9, per_bound=per_bound)
        granularity = 1e-3
        low, high = spa.threshold_search_interval(sample, proportion, 0.9, granularity, per_bound=per_bound)
        if exact.high is None:
            assert high is None
        else:
            assert exact.high <= high < exact.high + granularity + 1e-9
        if exact.low is None:
            assert low is None
        else:
            assert exact.low - granularity - 1e-9 < low < exact.low


def test_interval_needs_enough_runs_and_says_how_many():
    interval = spa.value_interval(np.arange(1.0, 23.0), 0.9, 0.9)  # bounds at 0.95 each need 29 runs
    assert interval.high is None and interval.runs_needed == 29
    assert spa.value_interval(np.arange(1.0, 30.0), 0.9, 0.9).high is not None
    papers = spa.value_interval(np.arange(1.0, 23.0), 0.9, 0.9, per_bound=True)
    assert papers.high == 22.0  # the paper's construction: 22 runs suffice for C = F = 0.9 per bound


def test_at_least_direction_is_the_mirrored_quantile():
    sample = np.arange(1.0, 101.0)
    at_most = spa.value_interval(sample, 0.1, 0.9)
    at_least = spa.value_interval(sample, 0.9, 0.9, direction="at_least")
    assert (at_most.low, at_most.high) == (at_least.low, at_least.high)


def test_speedup_pairing_is_stated_and_seeded():
    ratios_a, how = spa.pair_runs([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], by_index=True)
    assert list(ratios_a) == [2.0, 2.0, 2.0] and "by run index" in how
    first, how_random = spa.pair_runs(SMALL_L2, LARGE_L2, seed=3)
    again, _ = spa.pair_runs(SMALL_L2, LARGE_L2, seed=3)
    assert np.array_equal(first, again) and "seed 3" in how_random


# --- multiple testing ---

def test_corrections():
    p = [0.01, 0.04, 0.03, 0.005]
    assert np.allclose(multiple.holm(p), [0.03, 0.06, 0.06, 0.02])
    assert np.allclose(multiple.bonferroni(p), [0.04, 0.16, 0.12, 0.02])
    assert np.allclose(multiple.benjamini_hochberg(p), [0.02, 0.04, 0.04, 0.02])
    assert np.allclose(multiple.bonferroni([0.001], family_size=34), [0.034])  # SPARC Eq. 2
    with pytest.raises(ValueError, match="pvalues"):
        multiple.holm([0.5, 1.5])


# --- Verdicts, intervals and the family (issue 14) ---

def _suite(seed: int = 13):
    """Four equivalent benchmarks and one ~3% slower with a CV of 3%, 20 runs per side."""
    rng = np.random.default_rng(seed)
    a, b = {}, {}
    for i in range(4):
        a[f"eq{i}", "t"] = 100 * rng.lognormal(0, 0.01, 20)
        b[f"eq{i}", "t"] = 100 * rng.lognormal(0, 0.01, 20)
    a["target", "t"] = 100 * rng.lognormal(0, 0.03, 20)
    b["target", "t"] = 100 / 0.97 * rng.lognormal(0, 0.03, 20)
    return a, b


def _row(comparison, name):
    return next(r for r in comparison.benchmarks if r.benchmark == name)


def test_sparc_family_can_say_indeterminate_beside_an_interval_excluding_1_and_simultaneous_cannot():
    a, b = _suite()
    paper = compare(a, b, Parameters(family="sparc"))
    target = _row(paper, "target")
    # the report: raw rank-sum p 0.033, Holm over 2*5 + 1 = 11 tests -> 0.229, "indeterminate" beside
    # the unadjusted 95% interval [0.947, 0.995] that excludes 1
    assert (paper.family, paper.family_size, paper.interval_level) == ("sparc", 11, None)
    assert target.sparc.tests.difference_pvalue == pytest.approx(0.0326, abs=5e-4)
    assert target.sparc.difference_adjusted == pytest.approx(0.2285, abs=5e-4)
    assert target.verdict == "indeterminate" and not target.sparc.reads_off and target.sparc.level == 0.95
    assert target.sparc.high == pytest.approx(0.9948, abs=1e-4) and target.sparc.high < 1
    # simultaneous: the 1 - 0.05/5 = 99% interval includes 1, and says the same as the verdict beside it
    ours = compare(a, b, Parameters())
    row = _row(ours, "target")
    assert (ours.family, ours.family_size, ours.interval_level) == ("simultaneous", 5, pytest.approx(0.99))
    assert row.sparc.reads_off and row.sparc.level == pytest.approx(0.99)
    assert row.sparc.low == pytest.approx(0.9388, abs=1e-4) and row.sparc.high == pytest.approx(1.0100, abs=1e-4)
    assert row.verdict == "indeterminate"
    for r in ours.benchmarks:
        assert r.sparc.relevance is relevance(*read_off(r.sparc.low, r.sparc.high, 0.05))
    assert {r.verdict for r in ours.benchmarks if r.benchmark != "target"} == {"equivalence"}


def test_family_is_validated():
    with pytest.raises(ValueError, match="family: simultaneous or sparc, got 'holm'"):
        Parameters(family="holm").validate()


def test_relevant_within_the_margin_is_not_beyond_and_fail_on_chooses():
    rng = np.random.default_rng(21)
    base = 100 * rng.lognormal(0, 0.01, 30)
    a = {("inside", "t"): base, ("outside", "t"): base}
    # 5% slower: a difference is shown, equivalence is not (the interval crosses 0.95), nothing beyond the margin
    # 15% slower: the whole interval lies below 0.95
    b = {("inside", "t"): 100 / 0.95 * rng.lognormal(0, 0.01, 30),
         ("outside", "t"): 100 / 0.85 * rng.lognormal(0, 0.01, 30)}
    c = compare(a, b)
    inside, outside = _row(c, "inside"), _row(c, "outside")
    assert inside.verdict == outside.verdict == "relevant difference"
    assert inside.sparc.low < 0.95 < inside.sparc.high < 1 and inside.sparc.beyond is None
    assert outside.sparc.high < 0.95 and outside.sparc.beyond == "slower"
    assert [r.benchmark for r in c.failures("relevant")] == ["inside", "outside"]
    assert [r.benchmark for r in c.failures("beyond")] == ["outside"]
    assert c.failures("relevant") == c.relevant_slowdowns
    with pytest.raises(ValueError, match="fail_on"):
        c.failures("trivial")
    # B faster by 15%: beyond "faster", not a failure of either gate
    faster = compare({("w", "t"): base}, {("w", "t"): 0.85 * rng.lognormal(0, 0.01, 30) * 100})
    assert faster.benchmarks[0].sparc.beyond == "faster" and faster.failures("beyond") == ()
    assert faster.failures("relevant") == ()


def test_disturbed_side_is_never_a_slowdown():
    rng = np.random.default_rng(3)
    x = 24 * rng.lognormal(0, 0.01, 20)
    y = 26.4 * rng.lognormal(0, 0.01, 20)
    y[:12] *= 2  # B's block disturbed: its median doubles, far beyond the 10% change
    c = compare({("w", "t"): x}, {("w", "t"): y})
    row = c.benchmarks[0]
    assert row.disturbed is not None and "B" in row.disturbed
    assert row.verdict == "disturbed" and row.sparc.relevance is Verdict.RELEVANT and row.sparc.beyond == "slower"
    assert not row.relevant_slowdown and not row.beyond_slowdown
    assert c.failures("relevant") == c.failures("beyond") == ()


def test_one_benchmark_overall_test_says_it_cannot_apply_and_why():
    rng = np.random.default_rng(8)
    c = compare({("w", "t"): 100 * rng.lognormal(0, 0.01, 20)},
                {("w", "t"): 100 / 0.9 * rng.lognormal(0, 0.01, 20)})
    assert c.benchmarks[0].verdict == "relevant difference"
    summary = c.summaries[0]
    overall = summary.sparc_overall
    assert overall.pvalue is None and not overall.rejected
    assert overall.reason.startswith("needs at least 6 benchmarks to reach alpha 0.05: not applied")
    # 0 of 1 accelerated: the benchmarks needed are planned with 0.5, not the observed 0 (which asked for 1)
    assert summary.accelerated.accelerated == 0
    assert summary.benchmarks_needed == benchmarks_needed(0.5, 0.05, 0.95) == 385
    assert "over 1 benchmark the proportion's interval says little" in summary.proportion_note
    assert "worst case proportion 0.5" in summary.proportion_note
    # under the paper's family the overall test's share is alpha / (2 + 1): it needs 7
    paper = compare({("w", "t"): 100 * rng.lognormal(0, 0.01, 20)},
                    {("w", "t"): 100 / 0.9 * rng.lognormal(0, 0.01, 20)}, Parameters(family="sparc"))
    assert paper.summaries[0].sparc_overall.reason.startswith("needs at least 7 benchmarks")


def test_planning_proportion_and_no_note_with_enough_benchmarks():
    assert planning_proportion(3, 10) == (0.3, None)
    proportion, note = planning_proportion(10, 10)
    assert proportion == 0.5 and note.startswith("all of 10 accelerated")


def test_simultaneous_verdicts_agree_with_their_interval_in_a_seeded_simulation():
    pop = validity.family_populations(LARGE_L2)[1]
    checks = {c.family: c for c in validity.family_checks(pop, 5, 40, np.random.default_rng(1))}
    assert checks["simultaneous"].agreement == 1.0 and checks["simultaneous"].comparisons == 200
    # the paper's family does not: its verdicts are Holm-corrected, its interval is not
    assert checks["sparc"].agreement < 1.0


def test_simultaneous_family_keeps_its_family_wise_error_at_the_least_favourable_ratios():
    pop = validity.family_populations(SMALL_L2)[0]
    trials = 150
    checks = {c.family: c for c in validity.family_checks(pop, 5, trials, np.random.default_rng(2),
                                                          ratios=validity.BOUNDARY_RATIOS)}
    assert checks["simultaneous"].fwer <= 0.05 + validity.tolerance(0.05, trials)
