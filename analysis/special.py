"""The special functions of the compare path, in Python over math (numpy for the array forms, imported only
by them), so ``perfctl compare`` never imports scipy.special for ordinary inputs.

scipy 1.17's special imports array_api_compat, which loads numpy.f2py, numpy.testing, numpy.ma and
numpy.random: about 0.3 s of a 2 s budget. The compare path needs a dozen of its functions; each is here
under scipy's name and with scipy's meaning, to a relative 1e-13 of scipy's value (absolute 1e-300 where the
value underflows) on the domain stated in its docstring, which tests/test_special.py checks on dense grids.
Outside that domain a function says so by calling scipy.special itself, imported inside the function, so
only such inputs pay the import:

- ``ndtr``, ``ndtri``: the standard normal distribution and its inverse;
- ``betainc``, ``betaincc``: the regularized incomplete beta I_x(a, b) and its complement (binomial tails);
- ``betaincinv``: the inverse of I_x(a, b) in x (Clopper-Pearson bounds);
- ``stdtr`` (``stdtr_pair``: both directions at once): Student's t distribution, any real df > 0 (Welch);
- ``fdtr``, ``fdtrc`` (``fdtr_pair``: both at once): Fisher's F distribution and its upper tail;
- ``kolmogorov``: the upper tail of Kolmogorov's limiting distribution;
- ``smirnov``: the upper tail of the one-sided one-sample Smirnov statistic D_n^+.

The incomplete beta is the continued fraction of Numerical Recipes (Press et al., 3rd ed. 2007, section 6.4,
Eq. 6.4.5, evaluated by the modified Lentz method of section 5.2), as Cephes ``incbet`` and DiDonato &
Morris (ACM TOMS 18(3), 1992, Algorithm 708) use it, on the side of the mean where it converges quickly.
Its prefactor x^a (1-x)^b / B(a, b) is not taken from lgamma, which loses |ln| * eps where a and b are
large (3e-13 at a = b = 2500), but from Loader's saddle-point form (C. Loader, "Fast and accurate computation
of binomial probabilities", 2000; the form R's dbinom uses):

    ln[x^a y^b / B(a, b)] = -bd0(a, n x) - bd0(b, n y) + s(n) - s(a) - s(b) + ln(a b / (2 pi n)) / 2,

with n = a + b, y = 1 - x, s the error of Stirling's formula and bd0(a, M) = a ln(a/M) + M - a, whose
argument a - n x is formed exactly (Dekker's product) and whose series in v = (a - M)/(a + M) keeps it to
relative accuracy near the mean, where it is the difference of two large numbers.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_SQRT1_2 = math.sqrt(0.5)
_LN_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_EPS = 2.0**-52
# Lentz's method stops when a step changes the fraction by less than this (two ulps of 1).
_CF_TOLERANCE = 4.5e-16
# The continued fraction needs O(sqrt(max(a, b))) steps (Numerical Recipes 6.4); a value still moving after
# this many is scipy's to compute.
_CF_MAX_STEPS = 3000
# I_x(a, b) is computed here for a and b in [BETA_MIN, BETA_MAX] (binomial tails to 1000 runs, Clopper-
# Pearson to 1000 benchmarks, t and F to 2000 degrees of freedom), scipy's outside. Measured against
# scipy: within 5e-14 for values above 1e-10 up to a, b = 1000, 1e-13 at 2000, 3e-13 at 10^4 (where the
# fraction's few hundred steps and scipy's own powers each lose ~sqrt(a) eps; in deep tails both lose
# |ln I| eps, scipy the more: at 1e-250, 5e-14 here against 1e-12 for scipy, by 40-digit references).
BETA_MIN = 0.5
BETA_MAX = 1000.0
# smirnov(n, x) by the Birnbaum-Tingey sum up to this n (its terms' powers lose n * eps); scipy beyond.
SMIRNOV_MAX_N = 140

# Stirling's error s(z) = ln Gamma(z + 1) - (z + 1/2) ln z + z - ln sqrt(2 pi) at z = k/2, k = 0..30
# (s(0) unused), computed in 60-digit decimal arithmetic (tests/test_special.py recomputes them).
_STIRLING_HALVES = (
    0.0, 0.15342640972002736, 0.08106146679532726, 0.05481412105191765, 0.0413406959554093,
    0.03316287351993629, 0.02767792568499834, 0.023746163656297496, 0.020790672103765093,
    0.018488450532673187, 0.016644691189821193, 0.015134973221917378, 0.013876128823070748,
    0.012810465242920227, 0.01189670994589177, 0.011104559758206917, 0.010411265261972096,
    0.009799416126158804, 0.009255462182712733, 0.008768700134139386, 0.00833056343336287,
    0.00793411456431402, 0.007573675487951841, 0.007244554301320383, 0.00694284010720953,
    0.006665247032707682, 0.006408994188004207, 0.006171712263039458, 0.0059513701127588475,
    0.0057462165130101155, 0.005554733551962801,
)
# Stirling's series 1/12, 1/360, 1/1260, 1/1680, 1/1188 (Abramowitz & Stegun 6.1.41).
_S0, _S1, _S2, _S3, _S4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188


def _numpy():
    """numpy, imported by the array paths only: the scalar ones serve ``perfctl ab`` after every round
    (analysis/mixture.py), which never imports numpy (~80 ms of its start)."""
    import numpy

    return numpy


def _scipy_special():
    # Only inputs outside this module's measured domain reach here (see the module docstring).
    from scipy import special

    return special


# --- the normal distribution -------------------------------------------------------------------------------

def ndtr(x: float) -> float:
    """P[Z <= x] for a standard normal Z, as Cephes ``ndtr`` computes it (scipy.special.ndtr): 1/2 + erf/2
    for |x| < 1, erfc of |x|/sqrt(2) beyond, so the lower tail keeps its relative accuracy to x = -38.

    >>> ndtr(0.0), round(ndtr(-1.959963984540054), 12)
    (0.5, 0.025)
    """
    x = float(x)
    if math.isnan(x):
        return math.nan
    z = x * _SQRT1_2
    if abs(z) < _SQRT1_2:
        return 0.5 + 0.5 * math.erf(z)
    tail = 0.5 * math.erfc(abs(z))
    return 1.0 - tail if z > 0 else tail


def ndtri(p: float) -> float:
    """The x with ndtr(x) = p (scipy.special.ndtri): Wichura's Algorithm AS 241 (PPND16, Applied Statistics
    37(3), 1988), relative accuracy about 1e-16, as statistics.NormalDist.inv_cdf implements it; -inf at 0,
    inf at 1, NaN outside [0, 1].

    >>> round(ndtri(0.975), 10)
    1.9599639845
    """
    p = float(p)
    if not 0.0 < p < 1.0:
        return -math.inf if p == 0.0 else math.inf if p == 1.0 else math.nan
    return _STANDARD_NORMAL.inv_cdf(p)


_STANDARD_NORMAL = NormalDist()


# --- the regularized incomplete beta function --------------------------------------------------------------

def _two_product(a: float, b: float) -> tuple[float, float]:
    """a * b = high + low exactly (Dekker, "A floating-point technique for extending the available
    precision", Numerische Mathematik 18, 1971: Veltkamp's split)."""
    high = a * b
    split = 134217729.0 * a
    a_high = split - (split - a)
    a_low = a - a_high
    split = 134217729.0 * b
    b_high = split - (split - b)
    b_low = b - b_high
    return high, ((a_high * b_high - high) + a_high * b_low + a_low * b_high) + a_low * b_low


def _stirling_error(z: float) -> float:
    """s(z) = ln Gamma(z + 1) - (z + 1/2) ln z + z - ln sqrt(2 pi) (Loader 2000): tabulated at half-integers
    to 15, Stirling's series beyond (its first omitted term below 1e-18 there), from lgamma otherwise."""
    if z <= 15.0:
        twice = z + z
        if twice == int(twice):
            return _STIRLING_HALVES[int(twice)]
        return math.lgamma(z + 1.0) - (z + 0.5) * math.log(z) + z - _LN_SQRT_2PI
    zz = z * z
    if z > 500:
        return (_S0 - _S1 / zz) / z
    if z > 80:
        return (_S0 - (_S1 - _S2 / zz) / zz) / z
    if z > 35:
        return (_S0 - (_S1 - (_S2 - _S3 / zz) / zz) / zz) / z
    return (_S0 - (_S1 - (_S2 - (_S3 - _S4 / zz) / zz) / zz) / zz) / z


def _deviance(a: float, mean: float, gap: float) -> float:
    """bd0(a, M) = a ln(a/M) + M - a for M = ``mean``, gap = a - M given to full precision (Loader 2000):
    the series gap * v + 2a (v^3/3 + v^5/5 + ...), v = gap/(a + M), while |v| <= 1/2 (at most 26 terms),
    where the direct form would cancel; the direct form beyond, where it is at least 0.43 a."""
    v = gap / (a + mean)
    if abs(v) > 0.5:
        return a * math.log(a / mean) - gap
    total = gap * v
    vv = v * v
    power = 2 * a * v
    j = 1
    while True:
        power *= vv
        j += 2
        updated = total + power / j
        if updated == total:
            return total
        total = updated


def _log_prefactor(a: float, b: float, x: float, y: float) -> float:
    """ln[x^a y^b / B(a, b)] by Loader's saddle-point form (module docstring), x + y = 1."""
    n = a + b
    # a - n x formed exactly from the smaller of x and y (the one given to full relative precision)
    if x <= y:
        high, low = _two_product(n, x)
        gap = (a - high) - low
        mean_a = high + low
        mean_b = n - mean_a
    else:
        high, low = _two_product(n, y)
        gap = (high - b) + low
        mean_b = high + low
        mean_a = n - mean_b
    return (-_deviance(a, mean_a, gap) - _deviance(b, mean_b, -gap) + _stirling_error(n) - _stirling_error(a)
            - _stirling_error(b) + 0.5 * math.log(a * b / n) - _LN_SQRT_2PI)


def _continued_fraction(a: float, b: float, x: float) -> float | None:
    """Numerical Recipes' continued fraction for I_x(a, b) * a B(a, b) / (x^a (1-x)^b) (Eq. 6.4.5), by the
    modified Lentz method; None when it has not converged in _CF_MAX_STEPS steps."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < tiny:
        d = tiny
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAX_STEPS + 1):
        m2 = 2 * m
        # the even then the odd coefficient of step m, each one Lentz update
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            if abs(d) < tiny:
                d = tiny
            c = 1.0 + aa / c
            if abs(c) < tiny:
                c = tiny
            d = 1.0 / d
            step = d * c
            h *= step
        if abs(step - 1.0) < _CF_TOLERANCE:
            return h
    return None


def _beta_pair(a: float, b: float, x: float, y: float) -> tuple[float, float] | None:
    """(I_x(a, b), 1 - I_x(a, b)) for a, b in the module's domain, 0 < x < 1, y = 1 - x given separately
    (to full precision where the caller has it): the fraction on the side of the mean where it converges
    (x < (a + 1)/(a + b + 2), else the complement by symmetry, I_x(a, b) = 1 - I_y(b, a)), so the smaller
    of the two has full relative precision. None when the fraction does not converge."""
    prefactor = math.exp(_log_prefactor(a, b, x, y))
    if x * (a + b + 2.0) < a + 1.0:
        fraction = _continued_fraction(a, b, x)
        if fraction is None:
            return None
        value = prefactor * fraction / a
        return value, 1.0 - value
    fraction = _continued_fraction(b, a, y)
    if fraction is None:
        return None
    complement = prefactor * fraction / b
    return 1.0 - complement, complement


def _in_domain(a: float, b: float) -> bool:
    return BETA_MIN <= a <= BETA_MAX and BETA_MIN <= b <= BETA_MAX


def _beta_scalar(a: float, b: float, x: float, y: float) -> tuple[float, float] | None:
    """(I, 1 - I) with the ends and NaNs as scipy has them; None outside the domain (scipy's to answer)."""
    if math.isnan(a) or math.isnan(b) or math.isnan(x) or a < 0 or b < 0 or not 0.0 <= x <= 1.0:
        return math.nan, math.nan
    if x == 0.0:
        return 0.0, 1.0
    if x == 1.0:
        return 1.0, 0.0
    if not _in_domain(a, b):
        return None
    return _beta_pair(a, b, x, y)


def _beta_vector(a, b, x, want_complement: bool) -> np.ndarray:
    """betainc or betaincc over broadcast arrays: the scalar algorithm (the same operations) run as numpy
    array steps, each element stopping its fraction when it has converged."""
    np = _numpy()
    a, b, x = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                                  np.asarray(x, dtype=float))
    shape = a.shape
    a, b, x = a.ravel(), b.ravel(), x.ravel()
    out = np.full(a.shape, np.nan)
    with np.errstate(invalid="ignore"):
        valid = (a >= 0) & (b >= 0) & (x >= 0) & (x <= 1)
    out[valid & (x == 0)] = 1.0 if want_complement else 0.0
    out[valid & (x == 1)] = 0.0 if want_complement else 1.0
    inner = valid & (x > 0) & (x < 1)
    ours = inner & (a >= BETA_MIN) & (a <= BETA_MAX) & (b >= BETA_MIN) & (b <= BETA_MAX)
    if ours.any():
        values, converged = _beta_array(a[ours], b[ours], x[ours], want_complement)
        index = np.flatnonzero(ours)
        out[index[converged]] = values[converged]
        ours[index[~converged]] = False
    theirs = inner & ~ours
    if theirs.any():
        function = _scipy_special().betaincc if want_complement else _scipy_special().betainc
        out[theirs] = function(a[theirs], b[theirs], x[theirs])
    return out.reshape(shape)


def _deviance_array(a: np.ndarray, mean: np.ndarray, gap: np.ndarray) -> np.ndarray:
    np = _numpy()
    v = gap / (a + mean)
    far = np.abs(v) > 0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = a * np.log(a / mean) - gap
    total = gap * v
    vv = v * v
    power = 2 * a * v
    j = 1
    near = ~far
    while near.any():
        power = power * vv
        j += 2
        updated = total + power / j
        near &= updated != total
        total = np.where(near, updated, total)
    return np.where(far, direct, total)


def _stirling_error_array(z: np.ndarray) -> np.ndarray:
    np = _numpy()
    result = np.empty(z.shape)
    small = z <= 15.0
    twice = z + z
    halves = small & (twice == np.floor(twice))
    result[halves] = np.take(_STIRLING_HALVES, twice[halves].astype(int))
    other = small & ~halves
    for i in np.flatnonzero(other):
        result[i] = _stirling_error(float(z[i]))
    large = ~small
    zl = z[large]
    zz = zl * zl
    result[large] = np.where(
        zl > 500, (_S0 - _S1 / zz) / zl, np.where(
            zl > 80, (_S0 - (_S1 - _S2 / zz) / zz) / zl, np.where(
                zl > 35, (_S0 - (_S1 - (_S2 - _S3 / zz) / zz) / zz) / zl,
                (_S0 - (_S1 - (_S2 - (_S3 - _S4 / zz) / zz) / zz) / zz) / zl)))
    return result


def _beta_array(a: np.ndarray, b: np.ndarray, x: np.ndarray, want_complement: bool):
    """(I or 1 - I, converged) over 1-d arrays with 0 < x < 1 and a, b in the domain."""
    np = _numpy()
    y = 1.0 - x
    n = a + b
    use_y = x > y  # y = 1 - x is exact there (Sterbenz)
    small = np.where(use_y, y, x)
    high, low = _two_product(n, small)  # elementwise: the same operations on arrays
    gap = np.where(use_y, (high - b) + low, (a - high) - low)
    mean_small = high + low
    mean_a = np.where(use_y, n - mean_small, mean_small)
    mean_b = np.where(use_y, mean_small, n - mean_small)
    log_prefactor = (-_deviance_array(a, mean_a, gap) - _deviance_array(b, mean_b, -gap) + _stirling_error_array(n)
                     - _stirling_error_array(a) - _stirling_error_array(b) + 0.5 * np.log(a * b / n)
                     - _LN_SQRT_2PI)
    swap = x * (n + 2.0) >= a + 1.0
    p, q, z = np.where(swap, b, a), np.where(swap, a, b), np.where(swap, y, x)
    fraction, converged = _continued_fraction_array(p, q, z)
    direct = np.exp(log_prefactor) * fraction / p  # I_x(a, b), or its complement where swapped
    value = np.where(swap == want_complement, direct, 1.0 - direct)
    return value, converged


def _continued_fraction_array(a: np.ndarray, b: np.ndarray, x: np.ndarray):
    np = _numpy()
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones(a.shape)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1.0 / d
    h = d.copy()
    active = np.ones(a.shape, dtype=bool)
    for m in range(1, _CF_MAX_STEPS + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        h = np.where(active, h * (d * c), h)
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        step = d * c
        h = np.where(active, h * step, h)
        active &= ~(np.abs(step - 1.0) < _CF_TOLERANCE)
        if not active.any():
            break
    return h, ~active


def _scalars(*values) -> bool:
    """Whether every value is a number, not an array: plain ints and floats without numpy."""
    if all(isinstance(value, (int, float)) for value in values):
        return True
    np = _numpy()
    return not any(np.ndim(value) for value in values)


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) = B(x; a, b)/B(a, b) (scipy.special.betainc),
    by the continued fraction with Loader's prefactor (module docstring). Scalars give a float, arrays an
    array (broadcast). Computed here for a, b in [BETA_MIN, BETA_MAX], by scipy.special outside (and where
    the fraction needs more than _CF_MAX_STEPS steps). A binomial tail: P[Bin(n, p) > k] = I_p(k + 1, n - k)
    (Abramowitz & Stegun 26.5.24).

    >>> round(betainc(2.0, 3.0, 0.4), 15)   # P[Bin(4, 0.4) > 1] = 1 - 0.6^4 - 4 * 0.4 * 0.6^3
    0.5248
    """
    if not _scalars(a, b, x):
        return _beta_vector(a, b, x, want_complement=False)
    a, b, x = float(a), float(b), float(x)
    pair = _beta_scalar(a, b, x, 1.0 - x)
    return float(_scipy_special().betainc(a, b, x)) if pair is None else pair[0]


def betaincc(a, b, x):
    """1 - I_x(a, b) to full relative precision where it is small (scipy.special.betaincc); the domain of
    ``betainc``. P[Bin(n, p) <= k] = betaincc(k + 1, n - k, p).

    >>> round(betaincc(2.0, 3.0, 0.4), 15)
    0.4752
    """
    if not _scalars(a, b, x):
        return _beta_vector(a, b, x, want_complement=True)
    a, b, x = float(a), float(b), float(x)
    pair = _beta_scalar(a, b, x, 1.0 - x)
    return float(_scipy_special().betaincc(a, b, x)) if pair is None else pair[1]


# Below this p the root lies where I_x(a, b) underflows near it (x of order p^(1/a)) and Newton's steps lose
# it (measured: wrong roots from about 1e-73 at a = b = 2.5, 1e-116 at a = b = 1000): scipy's instead.
# Clopper-Pearson asks for alpha/2, never near it.
BETAINCINV_MIN_P = 1e-40


def betaincinv(a: float, b: float, p: float) -> float:
    """The x in [0, 1] with I_x(a, b) = p (scipy.special.betaincinv): Newton's method on ``betainc`` kept
    inside a bracket that bisection takes over whenever a step leaves it (Press et al. 2007, section 9.4),
    started from Abramowitz & Stegun 26.5.22 (as Numerical Recipes' invbetai, section 6.14). For p > 1/2 it
    solves 1 - I_x(a, b) = 1 - p (1 - p exact there), the complement computed directly, so both tails keep
    their precision and so does a small x. Clopper & Pearson's
    exact binomial bounds (Biometrika 26(4), 1934) are betaincinv(k, n - k + 1, alpha/2) and
    betaincinv(k + 1, n - k, 1 - alpha/2). The domain of ``betainc``; scipy's outside it.

    >>> round(betaincinv(17, 14, 0.05), 7)   # Clopper-Pearson lower 90% bound for 17 of 30
    0.4016289
    """
    a, b, p = float(a), float(b), float(p)
    if math.isnan(a) or math.isnan(b) or not 0.0 <= p <= 1.0 or a < 0 or b < 0:
        return math.nan
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    if not _in_domain(a, b) or p < BETAINCINV_MIN_P:
        return float(_scipy_special().betaincinv(a, b, p))
    root = _beta_root(a, b, p)
    return float(_scipy_special().betaincinv(a, b, p)) if root is None else root


def _beta_start(a: float, b: float, p: float) -> float:
    """Numerical Recipes' initial guess for I_x(a, b) = p (section 6.14; A&S 26.5.22 for a, b >= 1)."""
    if a >= 1 and b >= 1:
        t = math.sqrt(-2 * math.log(min(p, 1 - p)))
        z = (2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t
        if p > 0.5:
            z = -z
        al = (z * z - 3) / 6
        h = 2 / (1 / (2 * a - 1) + 1 / (2 * b - 1))
        w = z * math.sqrt(al + h) / h - (1 / (2 * b - 1) - 1 / (2 * a - 1)) * (al + 5 / 6 - 2 / (3 * h))
        return a / (a + b * math.exp(max(-700.0, min(2 * w, 700.0))))
    lna, lnb = math.log(a / (a + b)), math.log(b / (a + b))
    t, u = math.exp(a * lna) / a, math.exp(b * lnb) / b
    w = t + u
    if p < t / w:
        return (a * w * p) ** (1 / a)
    return 1 - (b * w * (1 - p)) ** (1 / b)


def _beta_root(a: float, b: float, p: float) -> float | None:
    """x with I_x(a, b) = p, 0 < p < 1: safeguarded Newton. The derivative is
    x^(a-1) (1-x)^(b-1) / B(a, b), the prefactor over x (1 - x). Above p = 1/2 the residual is taken on
    the complement, (1 - p) - (1 - I_x), both sides of it to full relative precision."""
    upper = p > 0.5
    target = 1.0 - p if upper else p
    low, high = 0.0, 1.0
    x = _beta_start(a, b, p)
    if not 0.0 < x < 1.0:
        x = 0.5
    for _ in range(200):
        y = 1.0 - x
        pair = _beta_pair(a, b, x, y)
        if pair is None:
            return None
        residual = target - pair[1] if upper else pair[0] - target  # increasing in x
        if residual == 0.0:
            return x
        if residual < 0:
            low = x
        else:
            high = x
        density = math.exp(_log_prefactor(a, b, x, y)) / (x * y)
        step = residual / density if density > 0 else math.inf
        candidate = x - step
        if not low < candidate < high:
            candidate = 0.5 * (low + high)
        if candidate == x or abs(candidate - x) <= 1e-16 * x or candidate in (low, high):
            return candidate
        x = candidate
    return None  # not converged: the caller asks scipy


# --- Student's t and Fisher's F ----------------------------------------------------------------------------

def stdtr_pair(df: float, t: float) -> tuple[float, float]:
    """P[T <= t] for Student's t with df > 0 degrees of freedom, real df included (Welch's test):
    (1/2) I_(df/(df + t^2))(df/2, 1/2) is the tail beyond |t| (Abramowitz & Stegun 26.7.1), evaluated as
    Boost's students_t cdf does, on 1 - I_(t^2/(df + t^2))(1/2, df/2) where df > 2 t^2 (each argument
    and its complement formed directly, neither as 1 minus the other). df/2 in the domain of ``betainc``.

    Returns (stdtr(df, t), stdtr(df, -t)), both from one evaluation (the t-test's two directions).

    >>> [round(v, 10) for v in stdtr_pair(10, -2.228138851986274)]   # the 2.5% point of t_10
    [0.025, 0.975]
    """
    df, t = float(df), float(t)
    if math.isnan(df) or math.isnan(t) or df <= 0:
        return math.nan, math.nan
    if t == 0:
        return 0.5, 0.5
    if math.isinf(t):
        return (1.0, 0.0) if t > 0 else (0.0, 1.0)
    tt = t * t
    if tt > 1e300 or not _in_domain(0.5 * df, 0.5):
        return float(_scipy_special().stdtr(df, t)), float(_scipy_special().stdtr(df, -t))
    if df > 2 * tt:
        pair = _beta_pair(0.5, 0.5 * df, tt / (df + tt), df / (df + tt))
        tail = None if pair is None else 0.5 * pair[1]
    else:
        pair = _beta_pair(0.5 * df, 0.5, df / (df + tt), tt / (df + tt))
        tail = None if pair is None else 0.5 * pair[0]
    if tail is None:
        return float(_scipy_special().stdtr(df, t)), float(_scipy_special().stdtr(df, -t))
    return (tail, 1.0 - tail) if t < 0 else (1.0 - tail, tail)


def stdtr(df: float, t: float) -> float:
    """P[T <= t] for Student's t with df degrees of freedom (scipy.special.stdtr); see ``stdtr_pair``.

    >>> round(stdtr(10, -2.228138851986274), 10)
    0.025
    """
    return stdtr_pair(df, t)[0]


def fdtr_pair(dfn: float, dfd: float, f: float) -> tuple[float, float]:
    """(fdtr, fdtrc): (P[F <= f], P[F > f]) for F(dfn, dfd) from one evaluation: I_w(dfn/2, dfd/2),
    w = dfn f/(dfn f + dfd) (A&S 26.6.2), w and 1 - w each formed directly (as Boost's fisher_f cdf).

    >>> [round(v, 8) for v in fdtr_pair(3, 10, 3.708264819)]
    [0.95, 0.05]
    """
    dfn, dfd, f = float(dfn), float(dfd), float(f)
    if math.isnan(dfn) or math.isnan(dfd) or math.isnan(f) or dfn <= 0 or dfd <= 0 or f < 0:
        return math.nan, math.nan
    if f == 0:
        return 0.0, 1.0
    if math.isinf(f):
        return 1.0, 0.0
    a, b = 0.5 * dfn, 0.5 * dfd
    scaled = dfn * f
    if not _in_domain(a, b) or math.isinf(scaled):
        special = _scipy_special()
        return float(special.fdtr(dfn, dfd, f)), float(special.fdtrc(dfn, dfd, f))
    pair = _beta_pair(a, b, scaled / (scaled + dfd), dfd / (scaled + dfd))
    if pair is None:
        special = _scipy_special()
        return float(special.fdtr(dfn, dfd, f)), float(special.fdtrc(dfn, dfd, f))
    return pair


def fdtr(dfn: float, dfd: float, f: float) -> float:
    """P[F <= f] for Fisher's F on (dfn, dfd) degrees of freedom (scipy.special.fdtr); dfn/2 and dfd/2 in
    the domain of ``betainc``.

    >>> round(fdtr(3, 10, 3.708264819), 8)   # the 95% point of F(3, 10)
    0.95
    """
    return fdtr_pair(dfn, dfd, f)[0]


def fdtrc(dfn: float, dfd: float, f: float) -> float:
    """P[F > f] for Fisher's F (scipy.special.fdtrc), computed directly (not 1 - fdtr); see ``fdtr``.

    >>> round(fdtrc(3, 10, 3.708264819), 8)
    0.05
    """
    return fdtr_pair(dfn, dfd, f)[1]


# --- Kolmogorov and Smirnov --------------------------------------------------------------------------------

def kolmogorov(y: float) -> float:
    """P[K > y] for Kolmogorov's limiting distribution K of sqrt(n) D_n (Kolmogorov 1933), as scipy's
    ``kolmogorov`` (xsf, after van Mulbregt, arXiv:1803.00426) evaluates it: the theta-function series
    1 - sqrt(2 pi)/y sum exp(-(2k-1)^2 pi^2/(8 y^2)) to y = 0.82, 2 sum (-1)^(k-1) exp(-2 k^2 y^2) beyond,
    each 3 or 4 terms, which reach double precision on its side (Simard & L'Ecuyer, "Computing the
    two-sided Kolmogorov-Smirnov distribution", Journal of Statistical Software 39(11), 2011, section 2).

    >>> round(kolmogorov(1.3580986393225507), 10)   # the 5% point
    0.05
    """
    y = float(y)
    if math.isnan(y):
        return math.nan
    if y <= math.pi / math.sqrt(746 * 8):  # the cdf underflows
        return 1.0
    if y <= 0.82:
        w = math.sqrt(2 * math.pi) / y
        log_u8 = -math.pi * math.pi / (y * y)
        u = math.exp(log_u8 / 8)
        if u == 0:
            cdf = math.exp(log_u8 / 8 + math.log(w))
        else:
            u8 = math.exp(log_u8)
            series = 1 + u8**3
            series = 1 + u8 * u8 * series
            series = 1 + u8 * series
            cdf = w * u * series
        return min(1.0, max(0.0, 1 - cdf))
    v = math.exp(-2 * y * y)
    v3 = v**3
    series = 1 - v3 * v3 * v
    series = 1 - v3 * v * v * series
    series = 1 - v3 * series
    return min(1.0, max(0.0, 2 * v * series))


def smirnov(n: int, d: float) -> float:
    """P[D_n^+ >= d] for the one-sided one-sample statistic D_n^+ = sup (F_n - F) (scipy.special.smirnov):
    the Birnbaum-Tingey sum of positive terms (Birnbaum & Tingey, "One-sided confidence contours for
    probability distribution functions", Annals of Mathematical Statistics 22(4), 1951, Eq. 3.0),
    d * sum_{j=0}^{floor(n(1-d))} C(n, j) (d + j/n)^(j-1) (1 - d - j/n)^(n-j), each term from exact binomial
    coefficients and powers, summed in log-scaled form. For n up to SMIRNOV_MAX_N; scipy's (which carries
    double-double arithmetic) beyond.

    >>> round(smirnov(5, 0.5), 12)   # 0.5 * [0.5^5 + 5 (0.4)^4 (0.7)^0 + 10 (0.3)^3 (0.9) + 10 (0.2)^2 (1.1)^2]
    0.056
    """
    d = float(d)
    if math.isnan(d) or not n >= 1 or n != int(n):
        return math.nan
    n = int(n)
    if d <= 0:
        return 1.0
    if d >= 1:
        return 0.0
    if n == 1:
        return 1.0 - d
    if n > SMIRNOV_MAX_N:
        return float(_scipy_special().smirnov(n, d))
    last = math.floor(n * (1 - d))
    if n * (1 - d) - last < 0 or last > n:
        last = min(n, max(0, last))
    logs = []
    for j in range(last + 1):
        low_side = 1 - d - j / n
        if low_side <= 0:
            break
        term = (math.log(math.comb(n, j)) + (j - 1) * math.log(d + j / n) + (n - j) * math.log(low_side))
        logs.append(term)
    if not logs:
        return 0.0
    top = max(logs)
    return min(1.0, max(0.0, d * math.exp(top) * math.fsum(math.exp(v - top) for v in logs)))
