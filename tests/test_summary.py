import math

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


def test_single_value_has_no_spread():
    d = describe([7])
    assert d.median == 7 and math.isnan(d.stderr) and math.isnan(d.cv)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [[1, 2], [3, 4]]])
def test_bad_input_names_the_argument(bad):
    with pytest.raises(ValueError, match="values"):
        describe(bad)
