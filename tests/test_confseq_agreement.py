"""analysis/sequential.py against the compiled confseq 0.0.11 itself (Steven Howard's package, MIT; the C++
of src/confseq/uniform_boundaries.h through pybind11).

confseq is a test tool here, not a dependency of perfctl: deploy/setup.sh builds it from deploy/confseq.lock
(its sdist does not build as published on Python 3.11). CI always runs setup.sh, so a missing confseq is a
broken setup and these tests fail, saying so, rather than skip. tests/test_sequential.py checks the same
functions against a Python transcription of the C++, which needs no build.

Tolerances are relative. confseq computes with boost (lgamma, zeta, its root finders and minimiser), perfctl
with Python's lgamma, its own zeta and, for Theorem 2's constant C, a root found to machine precision where
confseq stops at a relative 2^-39 and minimises over eta to 24 bits: agreement is to 1e-9 throughout, 1e-12
where both compute the same formula the same way. The log mixture itself is compared on the scale of its
largest log-gamma term (see that test).
"""

import math

import numpy as np
import pytest

from perfctl.analysis import mixture, sequential

CONFSEQ_VERSION = "0.0.11"
ALPHAS = [0.001, 0.01, 0.05, 0.1, 0.3]
QUANTILES = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99]
TIMES = np.array([1, 2, 5, 10, 37, 100, 101, 999, 1000, 12345, 10**6])


@pytest.fixture(scope="module")
def confseq():
    """confseq's quantiles and boundaries modules, or a failure that says how to install them."""
    try:
        from importlib.metadata import version

        import confseq.boundaries
        import confseq.quantiles
    except ImportError as error:
        pytest.fail(f"confseq is not installed ({error}); run ./deploy/setup.sh", pytrace=False)
    installed = version("confseq")
    if installed != CONFSEQ_VERSION:
        pytest.fail(f"confseq {installed} is installed, the suite checks against {CONFSEQ_VERSION}; "
                    "run ./deploy/setup.sh", pytrace=False)
    return confseq


def _max_relative_difference(ours, theirs):
    ours, theirs = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    assert np.array_equal(np.isfinite(ours), np.isfinite(theirs))
    finite = np.isfinite(theirs)
    assert np.array_equal(ours[~finite], theirs[~finite])
    if not finite.any():
        return 0.0
    return float(np.max(np.abs(ours[finite] - theirs[finite]) / np.abs(theirs[finite])))


@pytest.mark.parametrize("t_min", [1, 10, 100])
@pytest.mark.parametrize("A", [0.75, 0.85, 1.2])
def test_empirical_process_lil_bound(confseq, t_min, A):
    for alpha in ALPHAS:
        theirs = confseq.quantiles.empirical_process_lil_bound(TIMES, alpha, t_min, A)
        ours = sequential.empirical_process_lil_bound(TIMES, alpha, t_min, A)
        assert _max_relative_difference(ours, theirs) < 1e-9, (alpha, t_min, A)
        assert np.isinf(ours[TIMES < t_min]).all()


@pytest.mark.parametrize("t_opt", [1, 10, 100, 1000, 10000])
def test_double_stitching_bound(confseq, t_opt):
    for alpha in ALPHAS:
        for p in QUANTILES:
            theirs = confseq.quantiles.double_stitching_bound(p, TIMES.astype(float), alpha, t_opt)
            ours = sequential.double_stitching_bound(p, TIMES, alpha, t_opt)
            assert _max_relative_difference(ours, theirs) < 1e-12, (alpha, p, t_opt)
    for delta, s, eta in [(0.25, 1.1, 1.5), (1.0, 2.0, 3.0)]:
        theirs = confseq.quantiles.double_stitching_bound(0.3, TIMES.astype(float), 0.05, t_opt, delta, s, eta)
        ours = sequential.double_stitching_bound(0.3, TIMES, 0.05, t_opt, delta, s, eta)
        assert _max_relative_difference(ours, theirs) < 1e-12


@pytest.mark.parametrize("is_one_sided", [True, False])
def test_beta_binomial_mixture(confseq, is_one_sided):
    for g, h in [(0.5, 0.5), (0.1, 0.9), (0.9, 0.1), (0.3, 1.2)]:
        for v_opt in [1.0, 25.0, 1000.0]:
            for alpha_opt in [0.01, 0.05, 0.2]:
                for v in [0.5, 10.0, 250.0, 1e4]:
                    s = np.array([-0.3 * v / h, 0.0, 0.2 * v / g, 0.9 * v / g])
                    theirs = confseq.boundaries.beta_binomial_log_mixture(s, v, v_opt, g, h, alpha_opt,
                                                                          is_one_sided)
                    ours = [mixture.beta_binomial_log_mixture(float(x), v, v_opt, g, h, alpha_opt,
                                                                 is_one_sided) for x in s]
                    # ln m is a difference of log-gamma terms up to lgamma((r + v) / (g h)), which may be
                    # 1e6 where ln m is near 0: boost's and C's lgamma agree to a few ulps of those terms
                    # (seen: 4e-16 of the largest), so the difference is compared on that scale.
                    r = mixture.BetaBinomialMixture(v_opt, alpha_opt, g, h, is_one_sided).r
                    scale = abs(math.lgamma((r + v) / (g * h)))
                    finite = np.isfinite(theirs)
                    assert np.array_equal(np.asarray(ours)[~finite], theirs[~finite])
                    assert np.allclose(np.asarray(ours)[finite], theirs[finite], rtol=1e-9, atol=2e-15 * scale)
                    for alpha in [0.001, 0.05, 0.3]:
                        theirs = confseq.boundaries.beta_binomial_mixture_bound(v, alpha, v_opt, g, h, alpha_opt,
                                                                                is_one_sided)
                        ours = mixture.beta_binomial_mixture_bound(v, alpha, v_opt, g, h, alpha_opt,
                                                                      is_one_sided)
                        assert ours == pytest.approx(float(theirs), rel=1e-9)


def _arms(kind, rng, sizes):
    size_a, size_b = sizes
    if kind == "equal":
        return rng.normal(size=size_a), rng.normal(size=size_b)
    if kind == "shifted":
        return rng.normal(size=size_a), rng.normal(0.4, size=size_b)
    if kind == "tied":
        return rng.integers(0, 4, size=size_a).astype(float), rng.integers(0, 5, size=size_b).astype(float)
    return rng.lognormal(size=size_a), rng.lognormal(0.2, 1.5, size=size_b)


@pytest.mark.parametrize("kind", ["equal", "shifted", "tied", "lognormal"])
def test_quantile_ab_p_value(confseq, kind):
    rng = np.random.default_rng(sum(map(ord, kind)) + 1)
    p_values = []
    for sizes in [(1, 1), (2, 9), (30, 30), (13, 200), (500, 60), (1000, 1000)]:
        a_values, b_values = _arms(kind, rng, sizes)
        for quantile_p in [0.1, 0.25, 0.5, 0.75, 0.9]:
            for t_opt in [10, 100, 1000, 10000]:
                for alpha_opt in [0.01, 0.05, 0.2]:
                    theirs = confseq.quantiles.quantile_ab_p_value(a_values, b_values, quantile_p, t_opt,
                                                                   alpha_opt)
                    ours = sequential.quantile_ab_p_value(a_values, b_values, quantile_p, t_opt, alpha_opt)
                    assert ours == pytest.approx(theirs, rel=1e-9), (sizes, quantile_p, t_opt, alpha_opt)
                    p_values.append(ours)
    assert max(p_values) == 1.0 and min(p_values) < (1e-2 if kind in ("shifted", "lognormal") else 1.0)


def test_quantile_ab_p_value_documented_example(confseq):
    a_values, b_values = np.arange(1.0, 1001.0), np.arange(86.0, 1086.0)  # confseq's R documentation
    theirs = confseq.quantiles.quantile_ab_p_value(a_values, b_values, 0.5, 100)
    assert sequential.quantile_ab_p_value(a_values, b_values, 0.5, 100) == pytest.approx(theirs, rel=1e-9)
    assert 0.05 < theirs < 0.1 and not math.isclose(theirs, 1.0)
