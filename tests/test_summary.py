import math
import statistics

import numpy as np
import pytest

from perfctl.analysis.summary import describe


def test_describe_matches_definitions():
    values = [10.0, 12.0, 11.0, 13.0, 9.0]
    d = describe(values)
    sd = np.std(values, ddof=1)
    assert (d.n, d.median, d.mean, d.min, d.max) == (5, 11.0, 11.0, 9.0, 13.0)
    assert d.stderr == pytest.approx(sd / math.sqrt(5))
    assert d.cv == pytest.approx(sd / 11.0)


def test_constant_values_have_exactly_no_spread_and_their_own_mean():
    """The fsum two-pass formula left 1e-17 of spread around a rounded mean of [0.1] * 3."""
    d = describe([0.1] * 3)
    assert (d.mean, d.stderr, d.cv) == (0.1, 0.0, 0.0)


def test_the_spread_of_counts_a_long_way_from_zero_is_exact_to_rounding():
    """Counts near 2^63 (what the readers accept) and values that differ in their last bits, against
    statistics.stdev's exact fractions (numpy's float sums are off by 3% on the first)."""
    values = [2.0**63 - 2**11 * k for k in range(7)] + [1e9 + 0.5 * k for k in range(3)]
    for sample in (values[:7], values[7:]):
        d = describe(sample)
        assert d.stderr * math.sqrt(len(sample)) == pytest.approx(statistics.stdev(sample), rel=1e-12)


def test_single_value_has_no_spread():
    d = describe([7])
    assert d.median == 7 and math.isnan(d.stderr) and math.isnan(d.cv)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [[1, 2], [3, 4]]])
def test_bad_input_names_the_argument(bad):
    with pytest.raises(ValueError, match="values"):
        describe(bad)


def test_geometric_mean_interval_covers_the_suites_ratio():
    """The geometric mean's interval (analysis/summary.py geometric_mean: each benchmark's rank interval read
    as a normal standard error, the delta method on the mean of logs) covers the geometric mean of the true
    ratios of the benchmarks it summarizes (the undisturbed ones) at about its 95%: simulated suites of 2 to
    6 benchmarks, 20 log-normal runs a side with CVs of 1% and 3%, true ratios from 0.8 to 1.25."""
    import numpy as np

    from perfctl.analysis.compare import Parameters, compare

    rng = np.random.default_rng(31)
    hits = trials = 0
    for _ in range(400):
        k = int(rng.integers(2, 7))
        true = rng.uniform(0.8, 1.25, k)
        a, b = {}, {}
        for i in range(k):
            cv = float(rng.choice([0.01, 0.03]))
            b[f"b{i}", "t"] = rng.lognormal(np.log(1000), cv, 20)
            a[f"b{i}", "t"] = rng.lognormal(np.log(1000 * true[i]), cv, 20)
        comparison = compare(a, b, Parameters())
        g = comparison.summaries[0].geomean
        kept = [true[i] for i, r in enumerate(comparison.benchmarks) if not r.disturbed]
        assert g.benchmarks == len(kept) and g.low < g.ratio < g.high
        trials += 1
        hits += g.low <= float(np.exp(np.mean(np.log(kept)))) <= g.high
    assert 0.92 <= hits / trials <= 0.99, hits / trials  # 0.955 here; binomial sd 0.011


def test_geometric_mean_refuses_what_it_cannot_summarize():
    from perfctl.analysis.summary import geometric_mean

    assert geometric_mean([], [], 0.95) is None
    assert geometric_mean([1.0], [(None, 1.1, 0.95)], 0.95) is None
    assert geometric_mean([1.0], [(0.0, 1.1, 0.95)], 0.95) is None
    one = geometric_mean([1.2], [(1.1, 1.3, 0.95)], 0.95)  # one benchmark: its own interval, near enough
    assert 1.09 < one.low < 1.11 and 1.29 < one.high < 1.31
