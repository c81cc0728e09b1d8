"""Multiple testing across the tests of one comparison (benchmarks x metrics).

Each function takes p-values and returns adjusted p-values in the same order: reject H_i at family level
alpha iff adjusted_i <= alpha. Holm (default in perfctl) and Bonferroni control the family-wise error rate
(SPARC, 001_b0b9677f55f20b9d.txt, Eq. 2 and 4); Benjamini-Hochberg controls the false discovery rate
(Benjamini & Hochberg 1995, step-up procedure), for suites so large that FWER control leaves no power.
"""

from __future__ import annotations

import numpy as np

METHODS = ("holm", "bonferroni", "bh")
DEFAULT_METHOD = METHODS[0]


def _check(pvalues) -> np.ndarray:
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1 or np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("pvalues: need a 1-D sequence of values in [0, 1]")
    return p


def bonferroni(pvalues, family_size: int | None = None) -> np.ndarray:
    """min(1, m p_i) with m the family size (default: the number of p-values). SPARC Eq. 2 compares p_i
    with alpha/(n + 1) where the family counts the overall test too: pass ``family_size`` for that."""
    p = _check(pvalues)
    m = family_size or len(p)
    return np.minimum(1.0, p * m)


def holm(pvalues, family_size: int | None = None) -> np.ndarray:
    """Holm's step-down: the i-th smallest p (1-based) is multiplied by m - i + 1, then made monotone.
    Hypotheses of the family not in ``pvalues`` (``family_size`` larger) are treated as the least
    significant, which keeps the procedure valid whatever their p-values turn out to be."""
    p = _check(pvalues)
    m = family_size or len(p)
    if len(p) == 0:
        return p
    order = np.argsort(p, kind="mergesort")
    factors = m - np.arange(len(p))
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(p[order] * factors))
    adjusted = np.empty_like(p)
    adjusted[order] = adjusted_sorted
    return adjusted


def benjamini_hochberg(pvalues, family_size: int | None = None) -> np.ndarray:
    """Step-up: the i-th smallest p times m/i, made monotone from the largest down."""
    p = _check(pvalues)
    m = family_size or len(p)
    if len(p) == 0:
        return p
    order = np.argsort(p, kind="mergesort")
    ranks = np.arange(1, len(p) + 1)
    scaled = p[order] * m / ranks
    adjusted_sorted = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    adjusted = np.empty_like(p)
    adjusted[order] = adjusted_sorted
    return adjusted


def adjust(pvalues, method: str = DEFAULT_METHOD, family_size: int | None = None) -> np.ndarray:
    if method == "holm":
        return holm(pvalues, family_size)
    if method == "bonferroni":
        return bonferroni(pvalues, family_size)
    if method == "bh":
        return benjamini_hochberg(pvalues, family_size)
    raise ValueError(f"method: one of {METHODS}, got {method!r}")
