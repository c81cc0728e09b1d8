"""The instruction-count correction of counter artifacts (Weaver & McKee, IISWC 2008,
../shared/seeds/003_7d2f7057436bc279.txt, sections 4-5; DESIGN.md "Corrections"):

    I_corrected = I_raw - a * PF_user - b * IRQ_user - (k_fldcw - 1) * N_fldcw

a and b (extra retired instructions per page fault and per interrupt landing in user mode; 1 and 1 on the
x86 machines of the paper, 0 on Pentium 4) are estimated per machine by ``fit_artifacts`` from calibration
kernels whose exact count is known: excess_i = I_raw,i - I_exact,i is regressed on PF_i and IRQ_i, robustly:
a Huber M-estimate (Huber 1981) finds the runs disturbed by something else, which are set aside, and least
squares on the rest gives the coefficients with t intervals. k_fldcw comes from the errata table
(agent/errata.py), N_fldcw from the dbi
backend. Pure functions: the audit decides when a fit is current enough to apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MODEL_VERSION = "wm2008-1"
HUBER_K = 1.345  # 95% efficiency at the normal (Huber 1981)
OUTLIER_SCALES = 6.0
# Counts are integers: a count is known to within half an instruction, an error whose variance, taken as
# uniform, is 1/12 (Sheppard's correction for grouping, Sheppard 1898). A residual variance below that is
# floating-point round-off of exact counts, not precision: it would collapse every interval onto a round-off
# value that excludes the true coefficient (seen: "unexplained excess of 0.0 instructions").
COUNT_RESOLUTION_VARIANCE = 1.0 / 12.0
# An excess within half an instruction per run is no excess: the counts cannot show less.
EXCESS_TOLERANCE = 0.5


@dataclass(frozen=True)
class ArtifactFit:
    """excess = intercept + a PF + b IRQ, fitted robustly; intervals at ``confidence``.

    ``intercept`` should be 0 when the analytic counts are exact and every artifact is modelled: the audit
    reports an interval that lies wholly beyond half an instruction as unexplained excess
    (``unexplained_excess``). ``residual_scale`` is the residuals' own; the intervals use at least the
    counts' resolution (``COUNT_RESOLUTION_VARIANCE``), so exact counts never give a zero-width interval.
    """

    a: float
    b: float
    intercept: float
    a_interval: tuple[float, float]
    b_interval: tuple[float, float]
    intercept_interval: tuple[float, float]
    residual_scale: float
    n: int
    confidence: float
    set_aside: int = 0
    method: str = ("Huber M-estimate to set aside disturbed runs (> 6 scales), then least squares, t intervals "
                   "with the residual variance at least 1/12 (integer counts)")

    def unexplained_excess(self) -> bool:
        """Whether the fit shows an excess the model does not explain: the intercept's interval lies wholly
        beyond +-EXCESS_TOLERANCE instructions per run."""
        low, high = self.intercept_interval
        return low > EXCESS_TOLERANCE or high < -EXCESS_TOLERANCE


def _huber_weights(residuals, scale: float):
    import numpy as np

    u = np.abs(residuals) / scale
    return np.where(u <= HUBER_K, 1.0, HUBER_K / np.maximum(u, 1e-300))


def fit_artifacts(excess, page_faults, interrupts, confidence: float = 0.95, iterations: int = 50) -> ArtifactFit:
    """Robust regression of per-run excess instructions on per-run user page faults and interrupts."""
    # numpy and scipy load here, not at import: `perfctl stat` imports this module for correct() on every
    # invocation, and scipy's import cost a quarter of a 1000-run measurement (bench/stat_rate.py).
    import numpy as np
    from scipy import stats

    y = np.asarray(excess, dtype=float)
    x = np.column_stack([np.ones_like(y), np.asarray(page_faults, dtype=float), np.asarray(interrupts, dtype=float)])
    n = y.size
    if x.shape[0] != n or n < 6:
        raise ValueError("excess, page_faults, interrupts: need the same length, at least 6 runs")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("excess, page_faults, interrupts: all values must be finite")
    if np.linalg.matrix_rank(x) < 3:
        raise ValueError("page_faults and interrupts must each vary, and not in proportion to each other: "
                         "run kernels that differ in faults and in duration")
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    scale = 1.0
    for _ in range(iterations):
        residuals = y - x @ beta
        mad = float(np.median(np.abs(residuals - np.median(residuals)))) * 1.4826
        scale = max(mad, 1e-9 * max(1.0, float(np.abs(y).max())))
        w = _huber_weights(residuals, scale)
        new = np.linalg.lstsq(x * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)[0]
        if np.allclose(new, beta, rtol=1e-10, atol=1e-12):
            beta = new
            break
        beta = new
    # The Huber fit locates the bulk of the runs; runs beyond 6 robust scales are disturbances (something
    # else was counted) and are set aside; least squares on the rest gives t intervals that keep their
    # coverage (checked by simulation in tests/test_correction.py: Huber's own sandwich intervals undercover
    # at the 20-40 runs an audit takes).
    keep = np.abs(y - x @ beta) <= OUTLIER_SCALES * scale
    if keep.sum() < 6 or np.linalg.matrix_rank(x[keep]) < 3:
        keep = np.ones(n, dtype=bool)
    xk, yk = x[keep], y[keep]
    beta = np.linalg.lstsq(xk, yk, rcond=None)[0]
    p = x.shape[1]
    dof = int(keep.sum()) - p
    residual_variance = float(np.sum((yk - xk @ beta) ** 2)) / max(dof, 1)
    covariance = max(residual_variance, COUNT_RESOLUTION_VARIANCE) * np.linalg.inv(xk.T @ xk)
    half = stats.t.ppf((1 + confidence) / 2, max(dof, 1)) * np.sqrt(np.diag(covariance))
    scale = math.sqrt(residual_variance)
    set_aside = int(n - keep.sum())

    def interval(i: int) -> tuple[float, float]:
        return float(beta[i] - half[i]), float(beta[i] + half[i])

    return ArtifactFit(float(beta[1]), float(beta[2]), float(beta[0]), interval(1), interval(2), interval(0),
                       scale, n, confidence, set_aside=set_aside)


@dataclass(frozen=True)
class Correction:
    """Everything a correction needs, and where it came from (stored beside every corrected value)."""

    a: float
    b: float
    k_fldcw: float
    audit_id: str
    model_version: str = MODEL_VERSION


def correct(raw_instructions: float, page_faults_user: float, interrupts_user: float, fldcw_executed: float,
            correction: Correction) -> float:
    """I_raw - a PF_user - b IRQ_user - (k_fldcw - 1) N_fldcw."""
    for name, value in (("raw_instructions", raw_instructions), ("page_faults_user", page_faults_user),
                        ("interrupts_user", interrupts_user), ("fldcw_executed", fldcw_executed)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name}: must be a finite count >= 0, got {value!r}")
    return (raw_instructions - correction.a * page_faults_user - correction.b * interrupts_user
            - (correction.k_fldcw - 1) * fldcw_executed)
