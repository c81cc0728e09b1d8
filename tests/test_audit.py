"""`perfctl audit`: the real audit on this machine, and its assessment with a simulated counter source (a
test double) standing in for the PMU this machine does not have."""

import json
import shutil

import numpy as np
import pytest

from perfctl.agent.audit import EnvironmentCheck, KernelRuns, assess
from conftest import perfctl, pmu_reason, tracepoint_reason
from doubles import SimulatedCounterSource

KERNELS = [("loop N=1000000", 2_000_004, 0, 0.002), ("pagetouch P=1000", 4_013, 1000, 0.004),
           ("pagetouch P=100000", 400_013, 100_000, 0.2), ("loop N=2000000000", 4_000_000_004, 0, 1.5),
           ("fldcw N=1000000", 3_000_004, 0, 0.003)]


def _hardware_runs(source, runs=5):
    out = []
    for label, exact, pages, seconds in KERNELS:
        counts = [source.run(exact, pages, seconds) for _ in range(runs)]
        out.append(KernelRuns(label, "perf_event", exact, 0, 0, pages, [c["instructions"] for c in counts],
                              [c["page_faults"] for c in counts], [c["interrupts"] for c in counts]))
    return out


def _dbi_run(exact=2_000_004, counted=2_000_004):
    return KernelRuns("loop N=1000000", "dbi", exact, 0, 0, 0, [counted] * 3, rep_iterations=[0] * 3, fldcw=[0] * 3)


def test_a_machine_whose_artifacts_are_modelled_is_trusted():
    result = assess(_hardware_runs(SimulatedCounterSource(a=1, b=1, disturbance_rate=0.05, seed=4)) + [_dbi_run()],
                    True, "", [])
    assert result.verdict == "trusted", result.reasons
    assert result.fit.a == pytest.approx(1, abs=0.01) and result.fit.b == pytest.approx(1, abs=0.01)


def test_unexplained_or_noisy_excess_degrades():
    class Drifting(SimulatedCounterSource):
        def run(self, exact, pages, seconds, fldcw=0, hz=250):
            result = super().run(exact, pages, seconds, fldcw, hz)
            result["instructions"] += 40 + float(self.rng.normal(0, 30))  # an artifact nobody models
            return result

    result = assess(_hardware_runs(Drifting(seed=5, disturbance_rate=0)) + [_dbi_run()], True, "", [])
    assert result.verdict == "degraded"
    assert any("unexplained excess" in r or "vary" in r for r in result.reasons)


def test_dbi_disagreement_or_missing_faults_are_untrusted():
    runs = _hardware_runs(SimulatedCounterSource(seed=6))
    assert assess(runs + [_dbi_run(counted=2_000_005)], True, "", []).verdict == "untrusted"
    short = KernelRuns("pagetouch P=1000", "perf_event", 4_013, 0, 0, 1000, [], [10, 10], [0, 0])
    assert assess([short], False, "no PMU", []).verdict == "untrusted"


def test_environment_problems_degrade_with_their_reason():
    check = EnvironmentCheck("NMI watchdog", False, "1", "it holds a hardware counter", "sysctl kernel.nmi_watchdog=0")
    result = assess(_hardware_runs(SimulatedCounterSource(seed=7)) + [_dbi_run()], True, "", [check])
    assert result.verdict == "degraded" and any("NMI watchdog" in r for r in result.reasons)


def test_without_a_pmu_the_audit_says_what_it_could_not_check():
    result = assess([_dbi_run()], False, "perf_event_open(instructions) -> ENOENT", [])
    assert result.verdict == "no-PMU" and result.fit is None
    assert any("ENOENT" in item for item in result.not_checked)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="probe: valgrind not on PATH")
def test_real_audit_of_this_machine():
    result = perfctl("audit", "--json", "-r", "2", timeout=300)
    assert result.returncode in (0, 3, 4), result.stderr
    report = json.loads(result.stdout)
    dbi = [k for k in report["kernels"] if k["backend"] == "dbi"]
    assert len(dbi) == 4 and all(k["exact"] for k in dbi)  # valgrind reproduces every formula
    touch = next(k for k in report["kernels"] if k["kernel"] == "pagetouch P=1000" and k["backend"] == "perf_event")
    assert 1000 <= touch["page_faults"] <= 1010
    long_loop = next(k for k in report["kernels"] if k["kernel"] == "loop N=2000000000")
    if tracepoint_reason() is None:
        assert long_loop["interrupts"] > 20  # a fraction of a second of CPU at HZ >= 100
    assert all(c["fix"] for c in report["checks"] if not c["ok"])
    if pmu_reason() is not None:
        assert report["verdict"] == "no-PMU" and report["fit"] is None
        assert any("PMU" in item for item in report["not_checked"])
    else:
        assert report["verdict"] in ("trusted", "degraded") and report["fit"] is not None
    assert np.isfinite(report["seconds"])
