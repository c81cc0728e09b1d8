"""Corrections of a run's instruction count (Weaver & McKee, ../shared/seeds/003_7d2f7057436bc279.txt): the
latest complete audit's artifact fit (agent/audit_report.py), applied to each run's readings by the
corrector a measurement asks for (agent/measurement.py corrector_for), with the fldcw term where the
erratum makes it matter."""

from __future__ import annotations

import dataclasses
import math
import time

from perfctl.agent import session
from perfctl.agent.audit_report import AuditResult, load_latest
from perfctl.agent.events import parse_events, uncorrectable
from perfctl.agent.machine import Inventory
from perfctl.analysis.audits import AUDIT_MAX_AGE_NS
from perfctl.analysis.correction import MODEL_VERSION, Correction, correct
from perfctl.text import visible


def latest_correction(inv: Inventory) -> tuple[Correction | None, str]:
    """correction_for the last complete audit kept on disk, or None and why there is none."""
    report, unusable = load_latest()
    return correction_for(report, inv) if report is not None else (None, unusable)


def correction_for(report: AuditResult | None, inv: Inventory,
                   now_ns: int | None = None) -> tuple[Correction | None, str]:
    """The correction to apply to this machine's instruction counts, or None and why not (said in output)."""
    now_ns = now_ns or time.time_ns()
    if report is None:
        return None, "no audit of this machine: run perfctl audit"
    if report.machine_id != inv.machine_id:
        return None, "the latest audit is of another machine"
    if report.kernel != inv.kernel.release or report.microcode != inv.cpu.microcode:
        return None, "kernel or microcode changed since the latest audit: run perfctl audit"
    if report.complete is False:
        return None, "the latest audit was interrupted: run perfctl audit again"
    if now_ns - report.time_ns > AUDIT_MAX_AGE_NS:
        return None, f"the latest audit is older than {AUDIT_MAX_AGE_NS // (86400 * 10**9)} days: run perfctl audit"
    if report.verdict not in ("trusted", "degraded") or not report.fit:
        verdict = visible(str(report.verdict)[:40])
        return None, f"the latest audit ({verdict}) has no artifact fit to correct with"
    return (Correction(a=report.fit.a, b=report.fit.b, k_fldcw=report.erratum.k_fldcw, audit_id=report.audit_id),
            f"corrected with model {MODEL_VERSION}, audit {report.audit_id}")


def user_mode_interrupts(readings) -> tuple[float, str] | None:
    """IRQ_user of the correction and where it came from, or None when the run has no interrupt count.

    From the ebpf backend when it accounted the run: the scheduler ticks that interrupted user mode, scaled
    to all of the run's timer interrupts by the ticks' user share (the tick is the only timer interrupt whose
    mode the kernel records, agent/runacct.bpf.c). Else perf_event's timer-interrupts, every mode: a
    benchmark that spends time in the kernel is then over-corrected by its kernel-mode interrupts.
    """
    ebpf = {r.label: r for r in readings if r.backend == "ebpf" and r.status == "ok"}
    timer, user, kernel = (ebpf.get(label) for label in ("timer-interrupts", "timer-ticks:u", "timer-ticks:k"))
    if timer is not None and user is not None and kernel is not None:
        ticks = user.value + kernel.value
        if ticks:
            return user.value * timer.value / ticks, "irq-user-ebpf"
        if timer.value == 0:
            return 0.0, "irq-user-ebpf"
    counted = next((r for r in readings if r.label == "timer-interrupts" and r.backend != "ebpf"), None)
    if counted is not None and counted.status == "ok":
        return float(counted.value), "irq-all-perf_event"
    return None


def apply_correction(readings, correction: Correction, fldcw_executed: float = 0.0):
    """Readings with instructions:u corrected (raw kept; model version, interrupt source and audit id
    recorded). Needs the run's user page faults and interrupts among the readings; otherwise returns them
    unchanged."""
    instructions = next((r for r in readings if r.label == "instructions:u"), None)
    faults = next((r for r in readings if r.label == "page-faults:u" and r.status == "ok"), None)
    interrupts = user_mode_interrupts(readings)
    if instructions is None or instructions.status != "ok" or faults is None or interrupts is None:
        return readings
    irq_user, source = interrupts
    value = correct(instructions.value, faults.value, irq_user, fldcw_executed, correction)
    corrected = dataclasses.replace(instructions, corrected=value, audit_id=correction.audit_id,
                                    correction_model=f"{correction.model_version}/{source}")
    return [corrected if r is instructions else r for r in readings]


# fldcw counts of benchmarks already profiled, by executable digest and input digest: a DBI run costs
# seconds, once per benchmark per process.
_FLDCW_CACHE: dict[tuple, float] = {}


def make_corrector(inv: Inventory, resolved_argv: list[str], bench, control, runner, specs,
                   ebpf: bool = False) -> tuple[object | None, str]:
    """A function readings -> readings applying the machine's current correction, or None; and the sentence
    the output shows either way. The fldcw term needs the benchmark's fldcw count, taken once from the dbi
    backend, only where the erratum makes it matter (k_fldcw != 1)."""
    impossible = uncorrectable(specs, inv.pmu.present)
    if impossible is not None:
        return None, impossible
    labels = {spec.label for spec in specs}
    # the ebpf backend counts user page faults and user-mode interrupts itself
    if not ebpf and not {"page-faults:u", "timer-interrupts"} <= labels:
        return None, ("instructions not corrected: the correction needs page-faults:u and timer-interrupts measured "
                      "too (or --backend perf_event,ebpf)")
    correction, why = latest_correction(inv)
    if correction is None:
        return None, f"instructions not corrected: {why}"
    fldcw = 0.0
    key = (bench.executable_sha256, bench.input_digest)
    if correction.k_fldcw != 1 and key in _FLDCW_CACHE:
        fldcw = _FLDCW_CACHE[key]
    elif correction.k_fldcw != 1:
        try:
            dbi = session.make_backend("dbi", parse_events(["fldcw-instructions"]), inv)
            try:
                _, readings = dbi.measure(runner, resolved_argv, control)
            finally:
                dbi.close()
            fldcw = float(readings[0].value) if readings[0].status == "ok" else math.nan
        except Exception as err:  # noqa: BLE001 - no valgrind, or it cannot run the benchmark
            return None, f"instructions not corrected: the fldcw count needs the dbi backend ({err})"
        if math.isnan(fldcw):
            return None, "instructions not corrected: the dbi backend could not count fldcw for this benchmark"
        _FLDCW_CACHE[key] = fldcw
    return (lambda readings: apply_correction(readings, correction, fldcw)), f"instructions {why}"
