"""Test reference: a line-by-line Python transcription of confseq's C++ quantile boundaries.

Source: https://github.com/gostevehoward/confseq (commit 70b1ef3), file src/confseq/uniform_boundaries.h,
Copyright (c) 2021 confseq developers, MIT License (full text in CONFSEQ_LICENSE beside this file).
confseq's `empirical_process_lil_bound` and `double_stitching_bound` exist only in C++ (exposed to Python
through pybind11 in src/confseq/quantiles.cpp); there is no pure-Python implementation to copy, so this file
transcribes the C++. For the two bounds, boost's root finders and minimiser are replaced by scipy's (brentq
to machine precision; a bounded minimiser over eta), and boost::math::zeta by scipy.special.zeta. For the
beta-binomial mixture and the quantile A/B test (QuantileABTest, exposed as quantiles.quantile_ab_p_value),
boost's bisect and brent_find_minima are transcribed too (see that section).
"""

import bisect
import math
import struct

from scipy.optimize import brentq, minimize_scalar
from scipy.special import betainc, zeta


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


# --- BetaBinomialMixture and QuantileABTest (uniform_boundaries.h, quantiles.cpp) ---------------------------
# boost::math::lgamma is read as math.lgamma and boost::math::ibeta as scipy.special.betainc. boost's bisect
# and brent_find_minima (boost 1.74, boost/math/tools/roots.hpp and minima.hpp) are transcribed below, since
# the test's result depends on the minimiser's exact iteration path.


def boost_bisect(f, min_, max_, bits):
    # roots.hpp, bisect(), with eps_tolerance<double>(bits) from toms748_solve.hpp.
    eps = max(math.ldexp(1.0, 1 - bits), 4 * 2.220446049250313e-16)
    fmin = f(min_)
    fmax = f(max_)
    if fmin == 0:
        return min_, min_
    if fmax == 0:
        return max_, max_
    if min_ >= max_:
        raise ArithmeticError("Arguments in wrong order in boost::math::tools::bisect")
    if fmin * fmax >= 0:
        raise ArithmeticError("No change of sign in boost::math::tools::bisect")
    while not (abs(min_ - max_) <= eps * min(abs(min_), abs(max_))):
        mid = (min_ + max_) / 2
        fmid = f(mid)
        if mid == max_ or mid == min_:
            break
        if fmid == 0:
            min_ = max_ = mid
            break
        elif sign(fmid) * sign(fmin) < 0:
            max_ = mid
        else:
            min_ = mid
            fmin = fmid
    return min_, max_


def sign(z):
    return (z > 0) - (z < 0)


def boost_brent_find_minima(f, min_, max_, bits):
    # minima.hpp, brent_find_minima(); policies::digits<double>() / 2 = 26.
    bits = min(53 // 2, bits)
    tolerance = math.ldexp(1.0, 1 - bits)
    golden = struct.unpack("f", struct.pack("f", 0.3819660))[0]  # the float literal 0.3819660f, widened
    x = w = v = max_
    fw = fv = fx = f(x)
    delta2 = delta = 0.0
    while True:
        mid = (min_ + max_) / 2
        fract1 = tolerance * abs(x) + tolerance / 4
        fract2 = 2 * fract1
        if abs(x - mid) <= (fract2 - (max_ - min_) / 2):
            break
        if abs(delta2) > fract1:
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2 * (q - r)
            if q > 0:
                p = -p
            q = abs(q)
            td = delta2
            delta2 = delta
            if (abs(p) >= abs(q * td / 2)) or (p <= q * (min_ - x)) or (p >= q * (max_ - x)):
                delta2 = min_ - x if x >= mid else max_ - x
                delta = golden * delta2
            else:
                delta = p / q
                u = x + delta
                if ((u - min_) < fract2) or ((max_ - u) < fract2):
                    delta = -abs(fract1) if (mid - x) < 0 else abs(fract1)
        else:
            delta2 = min_ - x if x >= mid else max_ - x
            delta = golden * delta2
        u = (x + delta) if abs(delta) >= fract1 else ((x + abs(fract1)) if delta > 0 else (x - abs(fract1)))
        fu = f(u)
        if fu <= fx:
            if u >= x:
                min_ = x
            else:
                max_ = x
            v = w
            w = x
            x = u
            fv = fw
            fw = fx
            fx = fu
        else:
            if u < x:
                min_ = u
            else:
                max_ = u
            if (fu <= fw) or (w == x):
                v = w
                w = u
                fv = fw
                fw = fu
            elif (fu <= fv) or (v == x) or (v == w):
                v = u
                fv = fu
    return x, fx


def log_beta(a, b):
    # uniform_boundaries.h lines 475-478.
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def log_incomplete_beta(a, b, x):
    # uniform_boundaries.h lines 480-487.
    if x == 1:
        return log_beta(a, b)
    return c_log(betainc(a, b, x)) + log_beta(a, b)


def c_log(x):
    # C's log: log(0) is -inf (boost's ibeta underflows to 0 far in the tail), not an error.
    return -math.inf if x == 0 else math.log(x)


def two_sided_normal_best_rho(v, alpha):
    # uniform_boundaries.h lines 419-423.
    return v / (2 * math.log(1 / alpha) + math.log(1 + 2 * math.log(1 / alpha)))


def one_sided_normal_best_rho(v, alpha):
    # uniform_boundaries.h lines 432-434.
    return two_sided_normal_best_rho(v, 2 * alpha)


class BetaBinomialMixture:
    # uniform_boundaries.h lines 177-214 (class), 489-504 (log_superMG, s_upper_bound), 388-404
    # (find_mixture_bound; s_upper_bound is finite here, so find_s_upper_bound is never reached).
    def __init__(self, v_opt, alpha_opt, g, h, is_one_sided):
        self.r_ = self.optimal_r(v_opt, alpha_opt, g, h, is_one_sided)
        self.g_ = g
        self.h_ = h
        self.is_one_sided_ = is_one_sided
        self.normalizer_ = log_incomplete_beta(self.r_ / (g * (g + h)), self.r_ / (h * (g + h)),
                                               h / (g + h) if is_one_sided else 1)

    @staticmethod
    def optimal_r(v_opt, alpha_opt, g, h, is_one_sided):
        rho = (one_sided_normal_best_rho(v_opt, alpha_opt) if is_one_sided
               else two_sided_normal_best_rho(v_opt, alpha_opt))
        return max(rho - g * h, 1e-3 * g * h)

    def log_superMG(self, s, v):
        g_, h_, r_ = self.g_, self.h_, self.r_
        x = h_ / (g_ + h_) if self.is_one_sided_ else 1
        return (v / (g_ * h_) * math.log(g_ + h_)
                - ((v + h_ * s) / (h_ * (g_ + h_))) * math.log(g_)
                - ((v - g_ * s) / (g_ * (g_ + h_))) * math.log(h_)
                + log_incomplete_beta((r_ + v - g_ * s) / (g_ * (g_ + h_)),
                                      (r_ + v + h_ * s) / (h_ * (g_ + h_)),
                                      x)
                - self.normalizer_)

    def s_upper_bound(self, v):
        return v / self.g_

    def bound(self, v, log_threshold):
        def root_fn(s):
            return self.log_superMG(s, v) - log_threshold

        s_upper_bound = self.s_upper_bound(v)
        if root_fn(s_upper_bound) < 0:
            return s_upper_bound
        first, second = boost_bisect(root_fn, 0.0, s_upper_bound, 40)
        return (first + second) / 2


def beta_binomial_log_mixture(s, v, v_opt, g, h, alpha_opt=0.05, is_one_sided=True):
    # uniform_boundaries.h lines 737-743.
    return BetaBinomialMixture(v_opt, alpha_opt, g, h, is_one_sided).log_superMG(s, v)


def beta_binomial_mixture_bound(v, alpha, v_opt, g, h, alpha_opt=0.05, is_one_sided=True):
    # uniform_boundaries.h lines 745-751.
    return BetaBinomialMixture(v_opt, alpha_opt, g, h, is_one_sided).bound(v, math.log(1 / alpha))


class StaticOrderStatistics:
    # uniform_boundaries.h lines 305-331.
    def __init__(self, values):
        self.sorted_values_ = sorted(values)

    def get_order_statistic(self, order_index):
        return self.sorted_values_[order_index - 1]

    def count_less(self, value):
        return bisect.bisect_left(self.sorted_values_, value)

    def count_less_or_equal(self, value):
        return bisect.bisect_right(self.sorted_values_, value)

    def size(self):
        return len(self.sorted_values_)


class QuantileABTest:
    # uniform_boundaries.h lines 333-370 (class), 584-679 (methods).
    def __init__(self, quantile_p, t_opt, alpha_opt, arm1_os, arm2_os):
        self.quantile_p_ = quantile_p
        self.mixture_ = BetaBinomialMixture(t_opt * quantile_p * (1 - quantile_p), alpha_opt, quantile_p,
                                            1 - quantile_p, False)
        self.arm1_os_ = arm1_os
        self.arm2_os_ = arm2_os

    def p_value(self):
        return min(1.0, math.exp(-self.log_superMG_lower_bound()))

    def log_superMG_lower_bound(self):
        arm_1_G = self.get_G_fn(1)
        arm_2_G = self.get_G_fn(2)
        if arm_1_G[2] <= arm_2_G[2]:
            return self.find_log_superMG_lower_bound(arm_1_G, arm_2_G, 2)
        return self.find_log_superMG_lower_bound(arm_2_G, arm_1_G, 1)

    def arm_log_superMG(self, arm, prop_below):
        N = self.order_stats(arm).size()
        s = (prop_below - self.quantile_p_) * N
        v = self.quantile_p_ * (1 - self.quantile_p_) * N
        return self.mixture_.log_superMG(s, v)

    def get_G_fn(self, arm):
        # Returns (G, minimum_start_x, minimum_end_x), confseq's GFunction.
        minimizer = boost_brent_find_minima(lambda a: self.arm_log_superMG(arm, a), 0.0, 1.0, 20)[0]
        os_ = self.order_stats(arm)
        N = os_.size()
        x_lower = os_.get_order_statistic(math.ceil(minimizer * N))
        x_upper = os_.get_order_statistic(math.floor(minimizer * N) + 1)

        def G_callable(x):
            if x < x_lower:
                prop_below = os_.count_less_or_equal(x) / os_.size()
            elif x > x_upper:
                prop_below = os_.count_less(x) / os_.size()
            else:
                prop_below = minimizer
            return self.arm_log_superMG(arm, prop_below)

        return G_callable, x_lower, x_upper

    def find_log_superMG_lower_bound(self, first_arm_G, second_arm_G, second_arm):
        assert first_arm_G[2] <= second_arm_G[2]

        def objective(x):
            return first_arm_G[0](x) + second_arm_G[0](x)

        min_value = min(objective(first_arm_G[2]), objective(second_arm_G[1]))
        os_ = self.order_stats(second_arm)
        start_index = os_.count_less_or_equal(first_arm_G[2])
        end_index = os_.count_less_or_equal(second_arm_G[1])
        assert start_index <= end_index
        assert end_index >= 1
        i = max(1, start_index)
        while i <= end_index:
            x = os_.get_order_statistic(i)
            i = os_.count_less_or_equal(x)
            value = objective(x)
            if value < min_value:
                min_value = value
            i += 1
        return min_value

    def order_stats(self, arm):
        assert arm in (1, 2)
        return self.arm1_os_ if arm == 1 else self.arm2_os_


def quantile_ab_p_value(a_values, b_values, quantile_p, t_opt, alpha_opt=0.05):
    # quantiles.cpp lines 8-21.
    test = QuantileABTest(quantile_p, t_opt, alpha_opt, StaticOrderStatistics(a_values),
                          StaticOrderStatistics(b_values))
    return test.p_value()
