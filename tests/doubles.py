"""Test doubles, named as such and imported only by tests: nothing in perfctl can select them.

SimulatedCounterSource stands in for a hardware instruction counter where none exists (this machine has no
PMU): it returns, for a calibration kernel's exact count, the raw count a PMU with known artifacts would
report, so the correction and audit code can be checked against known a, b and k_fldcw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class SimulatedCounterSource:
    """A fake PMU: raw = exact + a*PF + b*IRQ + (k - 1)*fldcw + rare disturbances (a TEST DOUBLE)."""

    a: float = 1.0
    b: float = 1.0
    k_fldcw: float = 1.0
    disturbance_rate: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def run(self, exact: int, pages: int, seconds: float, fldcw: int = 0, hz: int = 250) -> dict:
        page_faults = pages + int(self.rng.integers(0, 4))
        interrupts = int(self.rng.poisson(hz * seconds))
        raw = exact + self.a * page_faults + self.b * interrupts + (self.k_fldcw - 1) * fldcw
        if self.rng.random() < self.disturbance_rate:
            raw += int(self.rng.integers(50, 5000))  # something else ran and was counted: robust fit must shrug
        return {"instructions": raw, "page_faults": page_faults, "interrupts": interrupts}
