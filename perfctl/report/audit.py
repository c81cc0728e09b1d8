"""The report of `perfctl audit` (agent/audit.py's run_audit): the verdict, the kernels' table, the fit,
what was not checked and how to fix what is not ok; its exit code (docs/audit.md)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from perfctl.report import QUIET, VERBOSE, Report

if TYPE_CHECKING:  # read only: the report does not import the audit's measurement (runner, kernels)
    from perfctl.agent.audit_report import AuditResult

# 0 trusted or no-PMU (what could not be checked is listed), 3 degraded, 4 untrusted
AUDIT_EXIT = {"trusted": 0, "no-PMU": 0, "degraded": 3, "untrusted": 4}


class AuditReport(Report):
    """run_audit's result (complete, or partial when a stop signal ended it)."""

    kind = "audit"
    formats = ("table", "json")

    def __init__(self, result: AuditResult, verbosity: int = 0):
        self.result, self.verbosity = result, verbosity

    def exit_code(self) -> int:
        """The verdict's code (AUDIT_EXIT); 128 + N for an audit stopped by signal N."""
        if self.result.complete:
            return AUDIT_EXIT[self.result.verdict]
        return 128 + signal.Signals[self.result.interrupted_by]

    def document(self) -> dict:
        return self.result.to_dict()

    def table(self, console: Console) -> None:
        result = self.result
        # quiet: only a verdict that fails (degraded, untrusted, interrupted), with its reasons and fixes
        if self.verbosity > QUIET or self.exit_code():
            console.print(f"audit {result.audit_id} of {result.hostname}: [bold]{result.verdict}[/bold] "
                          f"({result.runs} runs per kernel, backends {', '.join(result.backends)}, "
                          f"{result.seconds} s)")
        if self.verbosity > QUIET:
            self._kernels(console)
        for reason in result.reasons:
            console.print(f"reason: {reason}", markup=False, highlight=False)
        if self.verbosity > QUIET:
            for item in result.not_checked:
                console.print(f"not checked: {item}", markup=False, highlight=False)
        for check in result.checks:
            if not check.ok:
                console.print(f"fix {check.item}: {check.fix}", markup=False, highlight=False)
            elif self.verbosity >= VERBOSE:
                console.print(f"ok {check.item}: {check.value}", markup=False, highlight=False)

    def _kernels(self, console: Console) -> None:
        result = self.result
        table = Table(title="kernels", title_justify="left")
        for column in ("kernel", "backend", "expected instructions", "CV", "exact (dbi) / median excess",
                       "page faults", "timer interrupts"):
            table.add_column(column)
        for k in result.kernels:
            detail = ("yes" if k.exact else "NO") if k.backend == "dbi" else str(k.median_excess or "-")
            cv = "-" if k.cv is None else f"{k.cv:.2e}"
            table.add_row(k.kernel, k.backend, f"{k.expected:,}", cv, detail, str(k.page_faults or "-"),
                          str(k.interrupts if k.interrupts is not None else "-"))
        console.print(table)
        if result.fit:
            fit = result.fit
            console.print(f"fit: a = {fit.a:.3f} {fit.a_interval} per page fault, b = {fit.b:.3f} "
                          f"{fit.b_interval} per interrupt, intercept {fit.intercept:.1f}", highlight=False)
        console.print(f"fldcw erratum: k = {result.erratum.k_fldcw} ({result.erratum.note})", highlight=False)


class AuditFailed(Report):
    """An audit that could not run (the calibration kernels cannot be built): exit 2, and with --json a
    document all the same, for a script reading stdout."""

    kind = "audit"
    formats = ("json",)

    def __init__(self, message: str):
        self.message = message

    def document(self) -> dict:
        return {"error": self.message, "complete": False}

    def exit_code(self) -> int:
        return 2
