"""The fleet's listings: `perfctl machines`, `perfctl jobs` and `perfctl audit report`, from the server's
answers (perfctl/client.py). Every string in them is an agent's or another client's: shown literally
(perfctl/text.py)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from perfctl.report import QUIET, Report, finite
from perfctl.text import cell, visible
from perfctl.wire import inventory_of

FAILED_JOB_STATES = ("failed", "refused")
FAILED_VERDICTS = ("degraded", "untrusted")


def ago(ns: int) -> str:
    if not ns:
        return "never"
    seconds = max(0.0, time.time() - ns / 1e9)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _item(inventory: dict, section: str, key: str):
    """inventory[section][key] when it is a plain value, else '?'."""
    value = inventory.get(section)
    value = value.get(key, "?") if isinstance(value, dict) else "?"
    return value if isinstance(value, (str, int, float, bool)) else "?"


def _listing(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


class MachinesReport(Report):
    """ListMachines' machines. Quiet: only those disconnected or whose latest audit failed."""

    kind = "machines"

    def __init__(self, machines, verbosity: int = 0):
        self.machines, self.verbosity = list(machines), verbosity

    def document(self) -> list:
        return [{"name": m.name, "machine_id": m.machine_id, "connected": m.connected,
                 "audit_verdict": m.audit_verdict or None, "audit_time_ns": m.audit_time_ns or None,
                 "last_heard_ns": m.last_heard_ns, "samples": m.samples, "backends": list(m.backends),
                 "inventory": inventory_of(m.inventory_json),
                 "events": [{"event": e.event, "supported": e.supported, "reason": e.reason} for e in m.events]}
                for m in self.machines]

    def table(self, console: Console) -> None:
        table = _listing("machines", ("name", "connected", "last heard", "samples", "CPU", "kernel", "PMU", "audit",
                                      "backends", "counters available", "unsupported"))
        for m in self.machines:
            if self.verbosity <= QUIET and m.connected and m.audit_verdict not in FAILED_VERDICTS:
                continue
            inv = inventory_of(m.inventory_json)
            table.add_row(*map(cell, (
                m.name, "yes" if m.connected else "no", ago(m.last_heard_ns), str(m.samples),
                f"{_item(inv, 'cpu', 'vendor')} {_item(inv, 'cpu', 'family')}/{_item(inv, 'cpu', 'model')}",
                _item(inv, "kernel", "release"),
                {True: "present", False: "absent"}.get(_item(inv, "pmu", "present"), "?"),
                f"{m.audit_verdict} ({ago(m.audit_time_ns)})" if m.audit_verdict else "never",
                ", ".join(m.backends),
                ", ".join(e.event for e in m.events if e.supported),
                ", ".join(e.event for e in m.events if not e.supported))))
        if table.row_count or self.verbosity > QUIET:
            console.print(table)


class JobsReport(Report):
    """GetJobs' jobs. Quiet: only the failed and refused ones."""

    kind = "jobs"

    def __init__(self, jobs, verbosity: int = 0):
        self.jobs, self.verbosity = list(jobs), verbosity

    def document(self) -> list:
        return [{"job_id": j.job_id, "machine": j.machine, "state": j.state, "message": j.message,
                 "samples": j.samples, "submitted_ns": j.submitted_ns, "updated_ns": j.updated_ns,
                 "commands": [list(c.argv) for c in j.job.commands], "repetitions": j.job.repetitions}
                for j in self.jobs]

    def table(self, console: Console) -> None:
        table = _listing("jobs", ("job", "machine", "state", "runs done", "commands", "updated", "message"))
        for j in self.jobs:
            if self.verbosity <= QUIET and j.state not in FAILED_JOB_STATES:
                continue
            table.add_row(*map(cell, (j.job_id[:8], j.machine, j.state, str(j.samples),
                                      " ::: ".join(" ".join(c.argv) for c in j.job.commands), ago(j.updated_ns),
                                      j.message)))
        if table.row_count or self.verbosity > QUIET:
            console.print(table)


class AuditHistoryReport(Report):
    """`perfctl audit report`: per machine its audit history (``history``, oldest first) with ``drifts``;
    per kernel the fleet-wide ``spread`` (analysis/audits.py); ``notes`` on reports set aside. Quiet: the
    machines whose latest audit failed or that drifted, and the notes."""

    kind = "audit report"
    formats = ("table", "json", "html")

    def __init__(self, history: dict[str, list[dict]], drifts: dict[str, list[str]], spread: list[dict],
                 notes: list[str], verbosity: int = 0):
        self.history, self.drifts, self.spread, self.notes = history, drifts, spread, notes
        self.verbosity = verbosity

    def html(self) -> str:
        from perfctl.report.html import fleet_page

        return fleet_page(self.history, self.drifts, self.spread, self.notes)

    def document(self) -> dict:
        return finite({"machines": {m: {"audits": len(r), "latest": r[-1]["verdict"], "drift": self.drifts[m]}
                                    for m, r in self.history.items()}, "spread": self.spread, "notes": self.notes})

    def table(self, console: Console) -> None:
        quiet = self.verbosity <= QUIET
        table = _listing("audits", ("machine", "audits", "latest", "when", "drift"))
        for machine, reports in sorted(self.history.items()):
            if quiet and reports[-1]["verdict"] not in FAILED_VERDICTS and not self.drifts[machine]:
                continue
            table.add_row(*map(cell, (machine, str(len(reports)), reports[-1]["verdict"], ago(reports[-1]["time_ns"]),
                                      "; ".join(self.drifts[machine]) or "none")))
        if table.row_count or not quiet:
            console.print(table)
        if not quiet:
            table = Table(title="fleet-wide spread of instruction counts per kernel (latest audits)",
                          title_justify="left")
            for column in ("kernel", "machines", "source", "median", "CV"):
                table.add_column(column)
            for row in self.spread:
                table.add_row(*map(cell, (row["kernel"], str(row["machines"]), row["source"], f"{row['median']:,.0f}",
                                          "-" if row["cv"] is None else f"{row['cv']:.3e}")))
            console.print(table)
        for note in self.notes:
            console.print(cell(f"note: {note}"))


class SubmitReport(Report):
    """SubmitJob's answer: one line per machine, its name and the job id it was given (tab-separated, for
    scripts); printed under --quiet too, since it is the output."""

    kind = "submit"
    formats = ("table",)

    def __init__(self, machines: list[str], job_ids) -> None:
        self.machines, self.job_ids = machines, list(job_ids)

    def table(self, console: Console) -> None:
        for machine, job_id in zip(self.machines, self.job_ids):
            console.file.write(f"{visible(machine)}\t{visible(job_id)}\n")
