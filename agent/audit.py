"""`perfctl audit`: check this machine's counters against programs whose counts are known exactly.

Runs the calibration kernels (agent/calibration.py) N times with every backend available and reports
(Weaver & McKee, ../shared/seeds/003_7d2f7057436bc279.txt): determinism (coefficient of variation per
kernel and event), the excess of the hardware count over the analytic count and its robust fit against
user page faults and timer interrupts (analysis/correction.py), agreement of the dbi reference with the
analytic counts, and the environment settings that disturb counting, each with its fix. Verdict:
trusted, degraded, untrusted, or no-PMU, with reasons; what could not be checked is said.

``assess`` is the pure part: it takes per-run counts, so it is tested with a simulated counter source
where no PMU exists (tests/test_audit.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import uuid
from dataclasses import asdict, dataclass, field

from perfctl.agent import calibration, errata, inventory, session
from perfctl.agent.events import parse_events, uncorrectable
from perfctl.agent.machine import Inventory
from perfctl.agent.runner import Runner, make_control
from perfctl.analysis.audits import AUDIT_MAX_AGE_NS
from perfctl.analysis.correction import EXCESS_TOLERANCE, MODEL_VERSION, ArtifactFit, Correction, correct, fit_artifacts
from perfctl.analysis.summary import describe
from perfctl.text import visible

HARDWARE_EVENTS = ["instructions:u", "page-faults:u", "timer-interrupts", "task-clock"]
DBI_EVENTS = ["instructions", "rep-iterations", "fldcw-instructions"]
MAX_CV_AFTER_CORRECTION = 1e-5  # Weaver & McKee reach 0.002% across machines; one machine must do better


@dataclass(frozen=True)
class KernelRuns:
    """Per-run counts of one kernel on one backend (lists align by run)."""

    label: str
    backend: str
    expected_instructions: int
    expected_rep_iterations: int
    expected_fldcw: int
    touched_pages: int
    instructions: list[float]
    page_faults: list[float] = field(default_factory=list)
    interrupts: list[float] = field(default_factory=list)
    rep_iterations: list[float] = field(default_factory=list)
    fldcw: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class KernelResult:
    """One kernel on one backend as the audit judged it. ``cv`` is None with fewer than two runs; the dbi
    backend has ``exact`` (its counts equal the analytic ones), a hardware backend the medians of its excess
    over the analytic count, its page faults and its interrupts (None where nothing was counted)."""

    kernel: str
    backend: str
    expected: int
    runs: int
    cv: float | None
    exact: bool | None = None
    median_excess: float | None = None
    page_faults: float | None = None
    interrupts: float | None = None

    def to_dict(self) -> dict:
        document = {"kernel": self.kernel, "backend": self.backend, "expected": self.expected, "runs": self.runs,
                    "cv": self.cv}
        if self.backend == "dbi":
            document.update(exact=self.exact)
        else:
            document.update(median_excess=self.median_excess, page_faults=self.page_faults,
                            interrupts=self.interrupts)
        return document

    @classmethod
    def from_dict(cls, document: dict) -> KernelResult:
        common = {key: document[key] for key in ("kernel", "backend", "expected", "runs", "cv")}
        if document["backend"] == "dbi":
            return cls(**common, exact=document["exact"])
        return cls(**common, median_excess=document["median_excess"], page_faults=document["page_faults"],
                   interrupts=document["interrupts"])


@dataclass(frozen=True)
class Assessment:
    verdict: str
    reasons: tuple[str, ...]
    not_checked: tuple[str, ...]
    fit: ArtifactFit | None
    kernels: tuple[KernelResult, ...]


@dataclass(frozen=True)
class AuditResult:
    """What `perfctl audit` found (run_audit): complete, or partial when a stop signal ended it
    (``interrupted_by`` names the signal). ``to_dict`` is the JSON document printed by `perfctl audit
    --json`, kept in audit-latest.json and sent to the server (ReportAudit), which stores it as is;
    ``from_dict`` reads one back (docs/audit.md)."""

    audit_id: str
    machine_id: str
    hostname: str
    time_ns: int
    seconds: float
    kernel: str
    microcode: str | None
    aslr: str
    verdict: str
    reasons: tuple[str, ...]
    complete: bool
    interrupted_by: str | None
    not_checked: tuple[str, ...]
    backends: tuple[str, ...]
    fit: ArtifactFit | None
    erratum: errata.Erratum
    kernels: tuple[KernelResult, ...]
    checks: tuple[inventory.Check, ...]
    runs: int

    def to_dict(self) -> dict:
        """The JSON document, with its keys in this order (json.dumps-ready; no NaN: see _json_number)."""
        return {
            "audit_id": self.audit_id, "machine_id": self.machine_id, "hostname": self.hostname,
            "time_ns": self.time_ns, "seconds": self.seconds, "kernel": self.kernel, "microcode": self.microcode,
            "aslr": self.aslr, "verdict": self.verdict, "reasons": list(self.reasons), "complete": self.complete,
            "interrupted_by": self.interrupted_by, "not_checked": list(self.not_checked),
            "backends": list(self.backends), "fit": asdict(self.fit) if self.fit else None,
            "erratum": asdict(self.erratum), "kernels": [k.to_dict() for k in self.kernels],
            "checks": [asdict(c) for c in self.checks], "runs": self.runs,
        }

    @classmethod
    def from_dict(cls, document: dict) -> AuditResult:
        """A report read back from its JSON form; ValueError says what is missing or misshapen (the values
        corrections use are checked apart, by _malformed)."""
        try:
            fit, erratum = document["fit"], document["erratum"]
            return cls(
                **{key: document[key] for key in _PLAIN_FIELDS},
                reasons=tuple(document["reasons"]), not_checked=tuple(document["not_checked"]),
                backends=tuple(document["backends"]),
                fit=None if fit is None else ArtifactFit(**{**fit, **{key: tuple(fit[key]) for key in _INTERVALS}}),
                erratum=errata.Erratum(**{**erratum, "models": None if erratum["models"] is None
                                          else tuple(erratum["models"])}),
                kernels=tuple(KernelResult.from_dict(k) for k in document["kernels"]),
                checks=tuple(inventory.Check(**c) for c in document["checks"]))
        except KeyError as err:
            raise ValueError(f"no {visible(str(err.args[0]))[:40]}") from None
        except (TypeError, AttributeError) as err:  # a list where an object belongs, a field of another name
            raise ValueError(f"not shaped as perfctl writes it ({visible(str(err))[:80]})") from None


# the report's fields read back as they are, and the fit's intervals (JSON lists, tuples in ArtifactFit)
_PLAIN_FIELDS = ("audit_id", "machine_id", "hostname", "time_ns", "seconds", "kernel", "microcode", "aslr", "verdict",
                 "complete", "interrupted_by", "runs")
_INTERVALS = ("a_interval", "b_interval", "intercept_interval")


def _json_number(value: float) -> float | None:
    """JSON has no NaN: a statistic that does not exist (a CV of fewer than two runs) is null."""
    return None if math.isnan(value) else value


def _cv(values: list[float]) -> float:
    if len(values) < 2:
        return math.nan
    d = describe(values)
    return 0.0 if d.mean == 0 and d.max == d.min else d.cv


def assess(runs: list[KernelRuns], pmu_present: bool, pmu_reason: str, checks: list[inventory.Check]) -> Assessment:
    """Turn per-run counts into a verdict with reasons (no I/O)."""
    reasons, not_checked, kernels = [], [], []
    severe = False
    for r in runs:
        common = dict(kernel=r.label, backend=r.backend, expected=r.expected_instructions, runs=len(r.instructions),
                      cv=_json_number(_cv(r.instructions)))
        if r.backend == "dbi":
            exact = all(v == r.expected_instructions for v in r.instructions)
            reps_ok = all(v == r.expected_rep_iterations for v in r.rep_iterations)
            fldcw_ok = all(v == r.expected_fldcw for v in r.fldcw)
            entry = KernelResult(**common, exact=exact and reps_ok and fldcw_ok)
            if not entry.exact:
                severe = True
                reasons.append(f"dbi disagrees with the analytic count of {r.label}: {sorted(set(r.instructions))} "
                               f"vs {r.expected_instructions}")
        else:
            excess = sorted(v - r.expected_instructions for v in r.instructions)
            entry = KernelResult(**common, median_excess=excess[len(excess) // 2] if excess else None,
                                 page_faults=sorted(r.page_faults)[len(r.page_faults) // 2] if r.page_faults else None,
                                 interrupts=sorted(r.interrupts)[len(r.interrupts) // 2] if r.interrupts else None)
            if r.touched_pages and r.page_faults and min(r.page_faults) < r.touched_pages:
                severe = True
                reasons.append(f"{r.label}: {min(r.page_faults):.0f} page faults counted for {r.touched_pages} "
                               "touched pages")
        kernels.append(entry)
    fit = None
    hardware = [r for r in runs if r.backend != "dbi" and r.instructions]
    if not pmu_present:
        not_checked += [f"hardware instruction counts: {pmu_reason}",
                        "the excess fit against page faults and interrupts (needs instructions from a PMU)"]
    elif hardware:
        excess = [v - r.expected_instructions for r in hardware for v in r.instructions]
        faults = [v for r in hardware for v in r.page_faults]
        interrupts = [v for r in hardware for v in r.interrupts]
        try:
            fit = fit_artifacts(excess, faults, interrupts)
        except ValueError as err:
            not_checked.append(f"the excess fit: {err}")
        if fit is not None:
            if fit.unexplained_excess():
                low, high = fit.intercept_interval
                reasons.append(f"unexplained excess of {fit.intercept:.1f} [{low:.1f}, {high:.1f}] instructions per "
                               "run after page faults and interrupts (the fit's intercept interval lies beyond "
                               f"+-{EXCESS_TOLERANCE} instruction)")
            corrected_cv = max((_cv([v - fit.a * pf - fit.b * irq for v, pf, irq in
                                     zip(r.instructions, r.page_faults, r.interrupts)]) for r in hardware),
                               default=0.0)
            if corrected_cv > MAX_CV_AFTER_CORRECTION:
                reasons.append(f"corrected counts vary: CV up to {corrected_cv:.2e} (> {MAX_CV_AFTER_CORRECTION:g})")
    for check in checks:
        if not check.ok:
            reasons.append(f"{check.item}: {check.value} ({check.meaning})")
    if severe:
        verdict = "untrusted"
    elif not pmu_present:
        verdict = "no-PMU"
    elif reasons:
        verdict = "degraded"
    else:
        verdict = "trusted"
    return Assessment(verdict, tuple(reasons), tuple(not_checked), fit, tuple(kernels))


def _measure(kernel: calibration.Calibration, backend_name: str, events: list[str], runs: int,
             inv: Inventory) -> KernelRuns:
    backend = session.make_backend(backend_name, parse_events(events), inv)
    runner = Runner()
    try:
        plan = session.Plan([kernel.path], runs, 0, make_control(clean_env=True))
        samples = list(session.run(plan, backend, runner, inv.machine_id))
    finally:
        backend.close()
        runner.close()

    def values(label: str) -> list[float]:
        readings = [s.reading(label) for s in samples]
        return [r.value for r in readings if r is not None and r.status == "ok"]

    return KernelRuns(kernel.label, backend_name, kernel.instructions, kernel.rep_iterations, kernel.fldcw,
                      kernel.touched_pages, values("instructions:u"), values("page-faults:u"),
                      values("timer-interrupts"), values("rep-iterations:u"), values("fldcw-instructions:u"))


def run_audit(runs: int = 5) -> AuditResult:
    """Run the kernels and assess (complete, or partial when a stop signal cut it short)."""
    inv = inventory.collect()
    erratum = errata.lookup(inv.to_dict())  # the errata table reads inventories of other machines too
    short = calibration.short_set()
    long_loop = calibration.long_loop()
    started = time.time()
    results: list[KernelRuns] = []
    backends = ["perf_event"]
    not_run = []
    interrupted: KeyboardInterrupt | None = None
    try:
        for kernel in [*short, long_loop]:
            results.append(_measure(kernel, "perf_event", HARDWARE_EVENTS, runs, inv))
        try:
            for kernel in short:  # the long loop would take minutes under valgrind and adds nothing exact
                results.append(_measure(kernel, "dbi", DBI_EVENTS, max(2, runs // 2), inv))
            backends.append("dbi")
        except KeyboardInterrupt:
            raise
        except Exception as err:  # noqa: BLE001 - valgrind missing or failing: say so, audit the rest
            not_run.append(f"dbi reference: {err}")
    except KeyboardInterrupt as stop:  # perfctl.output.Interrupted names its signal; Ctrl-C otherwise
        interrupted = stop
        not_run.append(f"interrupted after {len(results)} of {len(short) * 2 + 1} kernel measurements")
    checks = inventory.checks(inv)
    assessment = assess(results, inv.pmu.present, inv.pmu.reason, checks)
    verdict, reasons = assessment.verdict, list(assessment.reasons)
    if interrupted:
        reasons.append("the audit was interrupted: partial results, not used for corrections")
        if verdict == "trusted":  # a partial audit never vouches for the counters
            verdict = "degraded"
    return AuditResult(
        audit_id=str(uuid.uuid4()), machine_id=inv.machine_id, hostname=inv.hostname, time_ns=time.time_ns(),
        seconds=round(time.time() - started, 1), kernel=inv.kernel.release, microcode=inv.cpu.microcode,
        aslr=f"system randomize_va_space={inv.aslr}; perfctl turns it off for every run (personality)",
        verdict=verdict, reasons=tuple(reasons), complete=interrupted is None,
        interrupted_by=None if interrupted is None else getattr(interrupted, "name", "SIGINT"),
        not_checked=(*assessment.not_checked, *not_run), backends=tuple(backends), fit=assessment.fit,
        erratum=erratum, kernels=assessment.kernels, checks=tuple(checks), runs=runs)


# --- the latest audit, kept on disk for corrections ---


def latest_path() -> str:
    """The last complete audit: what corrections use."""
    from perfctl.agent.build import cache_dir

    return os.path.join(cache_dir(), "audit-latest.json")


def interrupted_path() -> str:
    """The last interrupted audit, kept beside the complete one for the record, never used for corrections."""
    return os.path.join(os.path.dirname(latest_path()), "audit-interrupted.json")


def save_latest(report: AuditResult) -> str:
    """Keep the audit where `perfctl stat` and the agent find it; returns the path written.

    A complete audit replaces audit-latest.json; an interrupted one goes to audit-interrupted.json, so a
    machine that had a valid audit keeps its corrections. Written whole or not at all (agent/build.py
    write_trusted: a full disk leaves the previous file), mode 0644, where load_latest reads it back.
    """
    from perfctl.agent.build import write_trusted

    path = latest_path() if report.complete else interrupted_path()
    write_trusted(path, json.dumps(report.to_dict(), allow_nan=False).encode())
    return path


def load_latest() -> tuple[AuditResult | None, str]:
    """The last complete audit, or None and why there is none to use.

    Corrections change every instruction count perfctl stores, so the file is trusted as the exec gate is
    (agent/build.py): not a symlink, owned by us, writable by nobody else, in a directory of ours that
    nobody else can write to (agent/build.py read_trusted). Its content may still be damaged or edited:
    the values corrections use are checked first (_malformed), then the whole report is read back.
    """
    from perfctl.agent.build import UntrustedError, read_trusted

    path = latest_path()
    try:
        text = read_trusted(path)
    except FileNotFoundError:
        return None, "no audit of this machine: run perfctl audit"
    except UntrustedError as err:
        return None, f"the latest audit is not trusted ({err}): remove it and run perfctl audit"
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror}"
    try:
        report = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None, f"{path} is not JSON: run perfctl audit"
    if not isinstance(report, dict):
        return None, f"{path} is not an audit report: run perfctl audit"
    malformed = _malformed(report)
    if malformed is None:
        try:
            return AuditResult.from_dict(report), ""
        except ValueError as err:
            malformed = str(err)
    return None, f"the latest audit is malformed ({malformed}): run perfctl audit"


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


def _finite(value) -> bool:
    # the bound first: math.isfinite cannot take an int beyond a float's range
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 2**64 \
        and math.isfinite(value)


def _malformed(report: dict) -> str | None:
    """What in a kept audit cannot drive a correction (a file edited or damaged since it was written), or
    None. Only the fields corrections read; the report's other contents are for people."""
    if not isinstance(report.get("time_ns"), int) or isinstance(report.get("time_ns"), bool):
        return "time_ns is not an integer"
    audit_id = report.get("audit_id")
    if not isinstance(audit_id, str) or not 0 < len(audit_id) <= 64 or not audit_id.isprintable():
        return "audit_id is not a short printable name"
    fit = report.get("fit")
    if fit is None:
        return None  # no fit: nothing to correct with, said by the caller
    if not isinstance(fit, dict) or not all(_finite(fit.get(term)) for term in ("a", "b")):
        return "fit.a and fit.b are not finite numbers"
    erratum = report.get("erratum")
    if not isinstance(erratum, dict) or not _finite(erratum.get("k_fldcw")):
        return "erratum.k_fldcw is not a finite number"
    return None


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
