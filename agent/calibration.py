"""Calibration kernels: static x86-64 programs without libc whose user-mode retired instruction count is
known by construction (Weaver & McKee, ../shared/seeds/003_7d2f7057436bc279.txt, section 3: "counts known
exactly"). Sources in agent/kernels/*.S, each documenting its formula; built with cc (agent/build.py) with
the parameters compiled in, so nothing the kernel does depends on its arguments.

The `dbi` backend reproduces every formula exactly on any machine (tests/test_dbi.py); on a machine with a
PMU, the hardware count exceeds it by the artifacts the audit estimates (page faults, interrupts, fldcw).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from perfctl.agent.build import build_static

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
FLAGS = ("-nostdlib", "-static", "-Wa,--noexecstack")


@dataclass(frozen=True)
class Kernel:
    """A kernel source and its exact counts as functions of its compile-time parameters."""

    name: str
    source: str
    instructions: Callable[[dict], int]
    rep_iterations: Callable[[dict], int] = lambda p: 0
    fldcw: Callable[[dict], int] = lambda p: 0
    touched_pages: Callable[[dict], int] = lambda p: 0
    description: str = ""


KERNELS = {
    "loop": Kernel("loop", "loop.S", lambda p: 2 * p["N"] + 4, description="dec; jnz, N times"),
    "rep_stosb": Kernel("rep_stosb", "rep_stosb.S", lambda p: 6 * p["K"] + 4,
                        rep_iterations=lambda p: p["K"] * (p["L"] + 1),
                        description="rep stosb of L bytes, K times: a rep instruction retires once"),
    "rep_movsb": Kernel("rep_movsb", "rep_movsb.S", lambda p: 7 * p["K"] + 4,
                        rep_iterations=lambda p: p["K"] * (p["L"] + 1),
                        description="rep movsb of L bytes, K times"),
    "fldcw": Kernel("fldcw", "fldcw.S", lambda p: 3 * p["N"] + 4, fldcw=lambda p: p["N"],
                    description="fldcw, N times (Pentium 4 counts each twice)"),
    "pagetouch": Kernel("pagetouch", "pagetouch.S", lambda p: 4 * p["P"] + 13, touched_pages=lambda p: p["P"],
                        description="one write to each of P fresh pages: P page faults"),
}


@dataclass(frozen=True)
class Calibration:
    """One built kernel with its parameters and exact expected counts."""

    kernel: Kernel
    params: dict = field(default_factory=dict)
    path: str = ""

    @property
    def label(self) -> str:
        return self.kernel.name + "".join(f" {k}={v}" for k, v in sorted(self.params.items()))

    @property
    def instructions(self) -> int:
        return self.kernel.instructions(self.params)

    @property
    def rep_iterations(self) -> int:
        return self.kernel.rep_iterations(self.params)

    @property
    def fldcw(self) -> int:
        return self.kernel.fldcw(self.params)

    @property
    def touched_pages(self) -> int:
        return self.kernel.touched_pages(self.params)


def build(name: str, **params: int) -> Calibration:
    """Build (or find) kernel ``name`` with integer parameters; raises BuildError or KeyError."""
    kernel = KERNELS[name]
    for key, value in params.items():
        if not isinstance(value, int) or value < 1 or not key.isalpha():
            raise ValueError(f"{name}: parameter {key}={value!r} must be a positive integer")
    flags = FLAGS + tuple(f"-D{k}={v}" for k, v in sorted(params.items()))
    suffix = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    path, _ = build_static(os.path.join(KERNEL_DIR, kernel.source), flags, f"kernel-{name}-{suffix}")
    return Calibration(kernel, dict(params), path)


def short_set() -> list[Calibration]:
    """The audit's short kernels: a loop, rep strings, fldcw, page touching (each well under a second)."""
    return [build("loop", N=1_000_000), build("rep_stosb", K=1000, L=4096), build("rep_movsb", K=1000, L=4096),
            build("fldcw", N=1_000_000), build("pagetouch", P=1000)]


def long_loop() -> Calibration:
    """A loop lasting seconds: hundreds of timer interrupts land in user mode while it runs."""
    return build("loop", N=6_000_000_000)
