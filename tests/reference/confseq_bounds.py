"""Test reference: a line-by-line Python transcription of confseq's C++ quantile boundaries.

Source: https://github.com/gostevehoward/confseq (commit 70b1ef3), file src/confseq/uniform_boundaries.h,
Copyright (c) 2021 confseq developers, MIT License (full text in CONFSEQ_LICENSE beside this file).
confseq's `empirical_process_lil_bound` and `double_stitching_bound` exist only in C++ (exposed to Python
through pybind11 in src/confseq/quantiles.cpp); there is no pure-Python implementation to copy, so this file
transcribes the C++. Boost's root finders and minimiser are replaced by scipy's (brentq to machine
precision; a bounded minimiser over eta), and boost::math::zeta by scipy.special.zeta.
"""

import math

from scipy.optimize import brentq, minimize_scalar
from scipy.special import zeta


def find_optimal_C(alpha, A):
    # uniform_boundaries.h lines 521-556, EmpiricalProcessLILBound::find_optimal_C.
    def error_bound(C, eta):
        gamma_sq = 2 / eta * (A - math.sqrt(2 * (eta - 1) / C)) ** 2
        if gamma_sq <= 1:
            return math.inf
        return 4 * math.exp(-gamma_sq * C) * (1 + 1 / ((gamma_sq - 1) * math.log(eta)))

    def optimum_error(C):
        eta_upper = brentq(lambda eta: math.sqrt(eta / 2) + math.sqrt(2 * (eta - 1) / C) - A,
                           1.0, 2 * A * A, xtol=1e-300, rtol=8.9e-16)
        result = minimize_scalar(lambda eta: error_bound(C, eta), bounds=(1.0, eta_upper),
                                 method="bounded", options={"xatol": 1e-11})
        return result.fun

    low, high = 5.0, 5.0
    while optimum_error(high) - alpha > 0:
        high *= 2
    while optimum_error(low) - alpha <= 0:
        low /= 2
    return brentq(lambda C: optimum_error(C) - alpha, low, high, xtol=1e-300, rtol=8.9e-16)


def empirical_process_lil_bound(t, alpha, t_min, A=0.85):
    # uniform_boundaries.h lines 513-519, EmpiricalProcessLILBound::operator().
    C = find_optimal_C(alpha, A)
    if t < t_min:
        return math.inf
    return A * math.sqrt((math.log(1 + math.log(t / t_min)) + C) / t)


def logit(p):
    return math.log(p / (1 - p))


def expit(x):
    return 1 / (1 + math.exp(-x))


def double_stitching_bound(quantile_p, t, alpha, t_opt, delta=0.5, s=1.4, eta=2):
    # uniform_boundaries.h lines 276-277 (k1, k2) and 567-582, DoubleStitchingBound::operator().
    # Line 574 calls unqualified abs(logit(p)); read here as the double overload (fabs).
    p = quantile_p
    k1 = (eta ** 0.25 + eta ** -0.25) / math.sqrt(2)
    k2 = (math.sqrt(eta) + 1) / 2
    t_max_m = max(t, t_opt)
    r = p if p >= 0.5 else min(0.5, expit(logit(p) + 2 * delta * math.sqrt(t_opt * eta / t_max_m)))
    sigma_sq = r * (1 - r)
    j = math.sqrt(t_max_m / t_opt) * abs(logit(p)) / (2 * delta) + 1
    zeta_s = zeta(s)
    ell = (s * math.log(math.log(eta * t_max_m / t_opt)) + s * math.log(j)
           + math.log(2 * zeta_s * (2 * zeta_s + 1) / (alpha * math.log(eta) ** s)))
    cp = (1 - 2 * p) / 3
    term2 = k2 * cp * ell
    return (delta * math.sqrt(eta * t_max_m * sigma_sq / t_opt)
            + math.sqrt(k1 * k1 * sigma_sq * t_max_m * ell + term2 * term2) + term2)


def quantile_confidence_bound(sorted_values, p, lower_radius, upper_radius):
    # demo/quantiles.py lines 6-15, quantile_confidence_bound (the CS from order statistics).
    # Guard added here: math.floor(-inf) raises, and an infinite radius means that end is unbounded.
    t = len(sorted_values)
    if math.isinf(lower_radius) or math.isinf(upper_radius):
        return (-math.inf if math.isinf(lower_radius) else None,
                math.inf if math.isinf(upper_radius) else None)
    lower_index = math.floor(t * (p - lower_radius) + 1)
    lower = -math.inf if lower_index < 1 else sorted_values[lower_index - 1]
    upper_index = math.ceil(t * (p + upper_radius))
    upper = math.inf if upper_index > t else sorted_values[upper_index - 1]
    return lower, upper
