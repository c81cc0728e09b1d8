"""The summary of a `perfctl stat` measurement: gathering per-event values, and rendering them with rich."""

from __future__ import annotations

import math
import signal
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfctl.analysis.summary import Description, describe
from perfctl.model import InterferencePolicy, Sample, distinct_labels
from perfctl.text import cell, visible

WALL_TIME = "wall-time"


@dataclass
class EventSummary:
    label: str
    unit: str
    backend: str
    source: str | None = None
    values: list[float] = field(default_factory=list)
    multiplexed: int = 0
    errors: Counter = field(default_factory=Counter)
    unsupported: str | None = None

    @property
    def description(self) -> Description | None:
        return describe(self.values) if self.values else None


@dataclass
class StatSummary:
    """Everything the table shows; measured runs only (warmups are recorded in the file, not summarized)."""

    events: dict[str, EventSummary] = field(default_factory=dict)
    runs: int = 0
    warmups: int = 0
    outcomes: Counter = field(default_factory=Counter)
    failure_examples: list[str] = field(default_factory=list)
    correction_note: str = ""
    interference: InterferencePolicy = field(default_factory=InterferencePolicy)
    interfered: list[int] = field(default_factory=list)  # run indexes of flagged measured runs

    def add(self, sample: Sample) -> None:
        if sample.warmup:
            self.warmups += 1
            return
        self.runs += 1
        self.outcomes[sample.outcome] += 1
        if sample.outcome != "ok":
            if len(self.failure_examples) < 3:
                self.failure_examples.append(describe_failure(sample))
            return
        if self.interference.flags(sample.readings, sample.wall_ns):
            self.interfered.append(sample.run_index)
            if self.interference.exclude:
                return
        wall = self.events.setdefault(WALL_TIME, EventSummary(WALL_TIME, "ns", "perfctl"))
        wall.values.append(sample.wall_ns)
        labels = distinct_labels([(r.label, r.backend) for r in sample.readings])
        for reading, name in zip(sample.readings, labels):
            entry = self.events.setdefault(name, EventSummary(name, reading.unit, reading.backend, reading.source))
            if reading.status == "ok":
                entry.values.append(reading.value)
                if reading.corrected is not None:
                    label = f"{name} corrected"
                    self.events.setdefault(label, EventSummary(label, reading.unit, reading.backend,
                                                               f"audit {reading.audit_id}")).values.append(
                        reading.corrected)
            elif reading.status == "multiplexed" and reading.scaled is not None:
                entry.values.append(reading.scaled)
                entry.multiplexed += 1
            elif reading.status == "unsupported":
                entry.unsupported = reading.reason
            else:
                entry.errors[reading.reason] += 1

    @property
    def all_ok(self) -> bool:
        return self.runs > 0 and self.outcomes["ok"] == self.runs


_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}  # their default action stops


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def describe_failure(sample: Sample) -> str:
    """One line: which run failed and how."""
    if sample.outcome == "timeout":
        what = "timed out and was killed with its process tree"
    elif sample.outcome == "signal" and sample.signal in _STOP_SIGNALS:
        # a stop signal cannot kill: perfctl saw a stop that would never end and killed the tree itself
        what = f"stopped by signal {sample.signal} ({_signal_name(sample.signal)})"
    elif sample.outcome == "signal":
        what = f"killed by signal {sample.signal} ({_signal_name(sample.signal)})"
    else:
        what = f"exited with status {sample.exit_status}"
    tail = f": {sample.stderr_tail}" if sample.stderr_tail else ""
    return f"run {sample.run_index} {what}{tail}"


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "ns":
        for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
            if abs(value) >= scale:
                return f"{value / scale:.3f} {suffix}"
        return f"{value:.0f} ns"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.2f}"


def render(summary: StatSummary, console: Console, title: str) -> None:
    table = Table(title=cell(title), title_justify="left")
    for column in ("event", "n", "median", "mean", "stderr", "CV", "min", "max", "note"):
        table.add_column(column, justify="left" if column in ("event", "note") else "right")
    unsupported = []
    for entry in summary.events.values():
        if entry.unsupported is not None and not entry.values:
            unsupported.append(entry)
            continue
        notes = []
        if entry.source and entry.source != entry.label:
            notes.append(entry.source)
        if entry.multiplexed:
            notes.append(f"scaled: multiplexed in {entry.multiplexed} runs")
        for reason, count in entry.errors.items():
            notes.append(f"{count} errors: {reason}")
        d = entry.description
        if d is None:
            table.add_row(cell(entry.label), "0", *["-"] * 6, cell("; ".join(notes)))
            continue
        cv = "-" if math.isnan(d.cv) else f"{d.cv:.2%}"
        table.add_row(cell(entry.label), str(d.n), _fmt(d.median, entry.unit), _fmt(d.mean, entry.unit),
                      _fmt(d.stderr, entry.unit), cv, _fmt(d.min, entry.unit), _fmt(d.max, entry.unit),
                      cell("; ".join(notes)))
    console.print(table)
    for entry in unsupported:
        console.print(Text.assemble(("unsupported", "bold"), visible(f" {entry.label}: {entry.unsupported}")),
                      highlight=False)
    if summary.correction_note:
        console.print(visible(summary.correction_note), highlight=False, markup=False)
    if summary.interfered:
        runs = ", ".join(str(i) for i in summary.interfered[:20]) + (", ..." if len(summary.interfered) > 20 else "")
        action = ("left out of the statistics above" if summary.interference.exclude
                  else "kept in the statistics above (--exclude-interfered leaves them out)")
        console.print(f"[bold yellow]{len(summary.interfered)} of {summary.runs} runs flagged[/bold yellow]: "
                      f"{summary.interference.describe()} (runs {runs}); {action}", highlight=False)
    failed = summary.runs - summary.outcomes["ok"]
    if failed:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(summary.outcomes.items()) if k != "ok")
        console.print(f"[bold red]{failed} of {summary.runs} runs failed[/bold red] ({counts}); "
                      "they are recorded but not summarized", highlight=False)
        for line in summary.failure_examples:
            console.print(visible(f"  {line}"), highlight=False, markup=False)
