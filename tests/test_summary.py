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
