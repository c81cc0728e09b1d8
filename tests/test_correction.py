"""The artifact correction, checked against a simulated counter with known artifacts (a test double, since
this machine has no PMU), including the coverage of the fitted coefficients' intervals by simulation."""

import numpy as np
import pytest
from doubles import SimulatedCounterSource

from perfctl.agent import errata
from perfctl.analysis.correction import Correction, correct, fit_artifacts

# (exact instructions, pages touched, seconds): kernels that differ in faults and in duration
KERNELS = [(2_000_004, 3, 0.002), (4_013, 1000, 0.004), (400_013, 100_000, 0.2), (4_000_000_004, 3, 1.5),
           (3_000_004, 3, 0.003), (2_000_000_004, 3, 0.8)]


def _runs(source, repeats=6):
    exact, pf, irq, raw = [], [], [], []
    for instructions, pages, seconds in KERNELS:
        for _ in range(repeats):
            run = source.run(instructions, pages, seconds)
            exact.append(instructions)
            raw.append(run["instructions"])
            pf.append(run["page_faults"])
            irq.append(run["interrupts"])
    return np.array(raw) - np.array(exact), np.array(pf), np.array(irq)


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (0.0, 0.0), (1.0, 2.0)])
def test_fit_recovers_known_artifacts_despite_disturbed_runs(a, b):
    excess, pf, irq = _runs(SimulatedCounterSource(a=a, b=b, disturbance_rate=0.1, seed=3))
    fit = fit_artifacts(excess, pf, irq)
    assert fit.a == pytest.approx(a, abs=0.05) and fit.b == pytest.approx(b, abs=0.05)
    # without counting noise the fit is exact and the intervals have zero width: allow round-off
    assert fit.a_interval[0] - 1e-9 <= a <= fit.a_interval[1] + 1e-9
    assert fit.intercept_interval[0] - 1e-6 <= 0 <= fit.intercept_interval[1] + 1e-6
    assert fit.set_aside >= 1  # the disturbed runs were found


def test_fit_intervals_cover_by_simulation():
    misses, trials = 0, 400
    for seed in range(trials):
        source = SimulatedCounterSource(a=1.0, b=1.0, disturbance_rate=0.0, seed=seed)
        source.run = _noisy(source)
        excess, pf, irq = _runs(source, repeats=4)
        fit = fit_artifacts(excess, pf, irq, confidence=0.9)
        misses += not fit.b_interval[0] <= 1.0 <= fit.b_interval[1]
    assert misses / trials <= 0.1 + 3 * np.sqrt(0.09 / trials)


def _noisy(source):
    """Add symmetric counting noise (a few instructions per run) so the intervals have width to test."""
    plain = type(source).run

    def run(exact, pages, seconds, fldcw=0, hz=250):
        result = plain(source, exact, pages, seconds, fldcw, hz)
        result["instructions"] += float(source.rng.normal(0, 3))
        return result

    return run


def test_correction_applies_every_term():
    model = Correction(a=1.0, b=1.0, k_fldcw=2.0, audit_id="audit-1")
    assert correct(10_000, 10, 20, 5, model) == 10_000 - 10 - 20 - 5
    with pytest.raises(ValueError, match="page_faults_user"):
        correct(10, -1, 0, 0, model)


def test_fit_needs_informative_runs():
    with pytest.raises(ValueError, match="at least 6"):
        fit_artifacts([1, 2], [1, 2], [1, 2])
    with pytest.raises(ValueError, match="vary"):
        fit_artifacts([5] * 8, [3] * 8, [7] * 8)


def test_errata_table():
    pentium4 = errata.lookup({"cpu": {"vendor": "GenuineIntel", "family": 15, "model": 2}})
    assert pentium4.k_fldcw == 2.0 and "Weaver" in pentium4.source
    zen = errata.lookup({"cpu": {"vendor": "AuthenticAMD", "family": 0x17, "model": 49}})
    assert "1291" in zen.note
    assert errata.lookup({"cpu": {"vendor": "AuthenticAMD", "family": 26, "model": 2}}) is errata.DEFAULT
