"""Hodges-Lehmann estimates and intervals by selection (analysis/rank_tests.py) against their quadratic
definition: the same floating-point values, ``==``, for the estimate and both bounds, on inputs with and
without ties; and 200,000 runs per side in memory the quadratic definition could never have."""

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from perfctl.analysis import rank_tests
from perfctl.analysis.rank_tests import hodges_lehmann_center, hodges_lehmann_shift

CONFIDENCES = (0.5, 0.9, 0.95, 0.999)


def _reference_bounds(values: np.ndarray, k: int) -> tuple[float | None, float | None]:
    if k < 1:
        return None, None
    size = len(values)
    part = np.partition(values, [k - 1, size - k])
    return float(part[k - 1]), float(part[size - k])


def quadratic_shift(x, y, confidence: float) -> tuple[float, float | None, float | None]:
    """The definition: every x_i - y_j built, np.median, the k-th smallest and k-th largest."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n, m = len(x), len(y)
    differences = (x[:, None] - y[None, :]).ravel()
    pmf = rank_tests._rank_sum_pmf(n, m) if n <= rank_tests.EXACT_MAX_INTERVAL and m <= rank_tests.EXACT_MAX_INTERVAL \
        else None
    k = rank_tests._critical_rank(pmf, n * m / 2, math.sqrt(n * m * (n + m + 1) / 12), (1 - confidence) / 2)
    return (float(np.median(differences)),) + _reference_bounds(differences, min(k, (n * m + 1) // 2))


def quadratic_center(d, confidence: float) -> tuple[float, float | None, float | None]:
    """The definition: every Walsh average (d_i + d_j)/2, i <= j, built."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    i, j = np.triu_indices(n)
    walsh = (d[i] + d[j]) / 2
    pmf = rank_tests._signed_rank_pmf(n) if n <= rank_tests.EXACT_MAX_INTERVAL else None
    count = len(walsh)
    k = rank_tests._critical_rank(pmf, count / 2, math.sqrt(n * (n + 1) * (2 * n + 1) / 24), (1 - confidence) / 2)
    return (float(np.median(walsh)),) + _reference_bounds(walsh, min(k, (count + 1) // 2))


def _samples(kind: str, n: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if kind == "continuous":
        return rng.lognormal(0, 0.3, n), rng.lognormal(0.05, 0.3, m)
    if kind == "small integers":  # heavy ties within and across samples
        return rng.integers(-3, 4, n).astype(float), rng.integers(-2, 5, m).astype(float)
    if kind == "repeated values":
        pool = rng.normal(size=7)
        return rng.choice(pool, n), rng.choice(pool, m)
    if kind == "identical samples":
        x = rng.normal(size=n)
        return x, x[:m].copy() if m <= n else np.resize(x, m)
    if kind == "all equal":
        return np.full(n, 2.5), np.full(m, 2.5)
    if kind == "negative":
        return -rng.exponential(1.0, n), -rng.exponential(2.0, m)
    if kind == "magnitudes":  # 1e-150 .. 1e150: differences absorb the smaller value, so fl(x - t) misleads
        return (rng.normal(size=n) * 10.0 ** rng.integers(-150, 150, n),
                rng.normal(size=m) * 10.0 ** rng.integers(-150, 150, m))
    if kind == "absorbed":  # 1e16 - y rounds to a handful of values for every y in [0, 4)
        return 1e16 + rng.integers(0, 3, n) * 2.0, rng.uniform(0, 4, m)
    raise AssertionError(kind)


KINDS = ("continuous", "small integers", "repeated values", "identical samples", "all equal", "negative",
         "magnitudes", "absorbed")
SIZES = ((1, 1), (1, 37), (29, 1), (2, 3), (20, 20), (50, 51), (120, 75), (400, 333))


@pytest.fixture(params=[False, True], ids=["default", "many rounds"])
def rounds(request, monkeypatch):
    """Selection as shipped, and with tiny brackets and samples so that small inputs go through many rounds
    of cuts and pivots (what 10^6 runs per side do) before the last bracket is built."""
    if request.param:
        monkeypatch.setattr(rank_tests, "SELECTION_BUILD", 40)
        monkeypatch.setattr(rank_tests, "SELECTION_SAMPLE", 32)
    return request.param


@pytest.mark.parametrize("kind", KINDS)
def test_selection_equals_the_quadratic_definition(kind, rounds):
    rng = np.random.default_rng(sum(map(ord, kind)))
    for n, m in SIZES:
        x, y = _samples(kind, n, m, rng)
        for confidence in CONFIDENCES:
            shift = hodges_lehmann_shift(x, y, confidence)
            assert (shift.estimate, shift.low, shift.high) == quadratic_shift(x, y, confidence), (kind, n, m)
            center = hodges_lehmann_center(x, confidence)
            assert (center.estimate, center.low, center.high) == quadratic_center(x, confidence), (kind, n)


@pytest.mark.parametrize("kind", ("continuous", "small integers", "magnitudes"))
def test_selection_at_3000_runs(kind):
    """Sizes where the default selection cuts several rounds before it builds (3000 x 2500 differences,
    4.5 million Walsh averages)."""
    rng = np.random.default_rng(3000)
    x, y = _samples(kind, 3000, 2500, rng)
    for confidence in (0.95, 0.999):
        shift = hodges_lehmann_shift(x, y, confidence)
        assert (shift.estimate, shift.low, shift.high) == quadratic_shift(x, y, confidence)
    center = hodges_lehmann_center(x, 0.95)
    assert (center.estimate, center.low, center.high) == quadratic_center(x, 0.95)


def test_too_few_runs_for_the_confidence_give_no_bounds():
    assert quadratic_shift([1.0, 2.0], [1.5], 0.95)[1:] == (None, None)
    shift = hodges_lehmann_shift([1.0, 2.0], [1.5], 0.95)
    assert (shift.estimate, shift.low, shift.high) == (0.0, None, None)
    center = hodges_lehmann_center([1.0, 2.0, 6.0], 0.95)
    assert (center.estimate, center.low, center.high) == (2.75, None, None)


@pytest.mark.parametrize("bad", ([], [1.0, math.nan], [math.inf, 1.0], [[1.0, 2.0]]))
def test_samples_must_be_finite_and_non_empty(bad):
    with pytest.raises(ValueError, match="x: need a non-empty 1-D sample of finite values"):
        hodges_lehmann_shift(bad, [1.0])
    with pytest.raises(ValueError, match="d: need a non-empty 1-D sample of finite values"):
        hodges_lehmann_center(bad)


def test_200000_runs_per_side_in_linear_memory():
    """4 * 10^10 differences and 2 * 10^10 Walsh averages: 320 GB and 160 GB as float64 arrays. The
    selection's peak (ru_maxrss of a fresh process, less what it held before) stays below 300 MB."""
    script = textwrap.dedent("""
        import resource
        import numpy as np
        from perfctl.analysis.rank_tests import hodges_lehmann_center, hodges_lehmann_shift
        rng = np.random.default_rng(1)
        x, y = np.log(rng.lognormal(0, 0.1, 200_000)), np.log(rng.lognormal(0.01, 0.1, 200_000))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        shift = hodges_lehmann_shift(x, y, 0.95)
        center = hodges_lehmann_center(x - y, 0.95)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(grown, shift.low, shift.estimate, shift.high, center.low, center.estimate, center.high)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grown_kib, *values = result.stdout.split()
    shift_low, shift_estimate, shift_high, center_low, center_estimate, center_high = map(float, values)
    assert int(grown_kib) < 300 * 1024
    # true shift -0.01; the 95% intervals from 200,000 runs per side are about +-0.0006 wide
    assert shift_low < shift_estimate < shift_high and abs(shift_estimate + 0.01) < 0.002
    assert center_low < center_estimate < center_high and abs(center_estimate + 0.01) < 0.002
