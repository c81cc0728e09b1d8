"""An audit's report (agent/audit.py makes it): per kernel and backend, the runs' counts (KernelRuns) and
what they show (KernelResult), the machine's verdict (Assessment, AuditResult), and the latest complete
audit kept on disk, where corrections (agent/corrections.py) read it back."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field

from perfctl.agent import errata, inventory
from perfctl.analysis.correction import ArtifactFit
from perfctl.text import visible


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
        """The JSON document, with its keys in this order (json.dumps-ready; no NaN: see json_number)."""
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


def json_number(value: float) -> float | None:
    """JSON has no NaN: a statistic that does not exist (a CV of fewer than two runs) is null."""
    return None if math.isnan(value) else value


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
