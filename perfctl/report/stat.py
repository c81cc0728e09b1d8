"""The report of a `perfctl stat` measurement: gathering per-event values, the summary table, the exit code."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfctl.analysis.summary import Description, describe
from perfctl.dataset import RunIdentity
from perfctl.failures import describe_failure
from perfctl.model import LABELLED, WALL_TIME, InterferencePolicy, Sample, counter_labels
from perfctl.output import EXIT_OK, EXIT_RUN_FAILED, Interrupted
from perfctl.report import NORMAL, QUIET, VERBOSE, Report
from perfctl.text import cell, visible
from perfctl.units import quantity


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
    # labels of the hardware events asked for on a machine without a PMU: their unsupported lines (and the
    # correction note, which then says the same) fold into one
    no_pmu_events: frozenset[str] = frozenset()
    _identity: RunIdentity = field(default_factory=RunIdentity, repr=False, compare=False)  # the runs added

    def add(self, sample: Sample) -> None:
        """One run: counted once (its uuid: a run added again is the same run, docs/samples.md), summarized
        when InterferencePolicy.judge, the rule every reader of samples follows, says it is measured."""
        run = RunIdentity.run(sample.uuid, sample.machine_id)
        if self._identity.seen(run):
            return
        self._identity.read(run)
        # only the ebpf backend accounts for interference: a run without it is never flagged (nor looked at)
        reason, interfered = self.interference.judge(sample.warmup, sample.outcome,
                                                     sample.readings if "ebpf" in sample.backends else (),
                                                     sample.wall_ns)
        if reason == "warmup":
            self.warmups += 1
            return
        self.runs += 1
        self.outcomes[sample.outcome] += 1
        if sample.outcome != "ok":
            if len(self.failure_examples) < 3:
                self.failure_examples.append(describe_failure(sample))
            return
        if interfered:
            self.interfered.append(sample.run_index)
        if reason is not None:
            return
        # get before setdefault: an EventSummary built per reading per run only to be dropped cost more than
        # the rest of add (bench/stat_rate.py)
        wall = self.events.get(WALL_TIME) or self.events.setdefault(WALL_TIME, EventSummary(WALL_TIME, "ns", "perfctl"))
        wall.values.append(sample.wall_ns)
        for reading, name in zip(sample.readings, counter_labels(tuple(map(LABELLED, sample.readings)))):
            entry = self.events.get(name)
            if entry is None:
                entry = self.events[name] = EventSummary(name, reading.unit, reading.backend, reading.source)
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


__all__ = ["NORMAL", "QUIET", "VERBOSE", "EventSummary", "StatReport", "StatSummary", "unsupported_lines"]


def unsupported_lines(summary: StatSummary, verbosity: int = NORMAL) -> list[str]:
    """What could not be counted, and the correction's sentence. Verbose: one line per event, as the backend
    said it. Otherwise one line per distinct reason; on a machine without a PMU its hardware events are one
    line that also carries the correction's sentence (both say the same: no PMU)."""
    unsupported = [e for e in summary.events.values() if e.unsupported is not None and not e.values]
    note = summary.correction_note
    if verbosity >= VERBOSE:
        return [f"unsupported {e.label}: {e.unsupported}" for e in unsupported] + ([note] if note else [])
    lines = []
    # the kernel's ENOENT is the missing PMU; another reason (no event known for this CPU model) stays apart
    no_pmu = [e for e in unsupported if e.label in summary.no_pmu_events and "(ENOENT)" in e.unsupported]
    if no_pmu:
        what = f"{len(no_pmu)} hardware event{'s' if len(no_pmu) > 1 else ''} unsupported"
        # the correction is impossible for the same reason: make_corrector's sentence, kept whole
        lines.append(f"{what}{f' and {note}' if note else ': no PMU counts them here'} (ENOENT) — "
                     "`perfctl info` says why, -v lists them")
        note = ""
    by_reason: dict[str, list[str]] = {}
    for entry in unsupported:
        if entry not in no_pmu:
            by_reason.setdefault(entry.unsupported, []).append(entry.label)
    for reason, labels in by_reason.items():
        lines.append(f"unsupported {', '.join(labels)}: {reason}")
    return lines + ([note] if note else [])


class StatReport(Report):
    """The summary of the measured runs under ``title``; ``interrupted`` when a stop signal ended them."""

    kind = "stat"
    formats = ("table", "html")

    def __init__(self, summary: StatSummary, title: str, verbosity: int = NORMAL,
                 interrupted: Interrupted | None = None, inventory: dict | None = None):
        self.summary, self.title, self.verbosity, self.interrupted = summary, title, verbosity, interrupted
        self.inventory = inventory

    def table(self, console: Console) -> None:
        render(self.summary, console, self.title, self.verbosity)

    def html(self) -> str:
        from perfctl.report.html import stat_page

        return stat_page(self.summary, self.title, self.inventory)

    def exit_code(self) -> int:
        """128 + N when stopped by signal N; else 0 when every measured run exited 0, 1 otherwise."""
        if self.interrupted is not None:
            return self.interrupted.exit_code
        return EXIT_OK if self.summary.all_ok else EXIT_RUN_FAILED


def render(summary: StatSummary, console: Console, title: str, verbosity: int = NORMAL) -> None:
    """The summary table and what it leaves out. QUIET prints only the failed runs."""
    if verbosity > QUIET:
        _render_table(summary, console, title)
        for line in unsupported_lines(summary, verbosity):
            bold, _, rest = line.partition(" ")
            console.print(Text.assemble((bold, "bold"), visible(f" {rest}")) if bold == "unsupported"
                          else visible(line), highlight=False, markup=False)
        if summary.interfered:
            runs = ", ".join(str(i) for i in summary.interfered[:20]) + (
                ", ..." if len(summary.interfered) > 20 else "")
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


def _render_table(summary: StatSummary, console: Console, title: str) -> None:
    table = Table(title=cell(title), title_justify="left")
    for column in ("event", "n", "median", "mean", "stderr", "CV", "min", "max", "note"):
        table.add_column(column, justify="left" if column in ("event", "note") else "right")
    for entry in summary.events.values():
        if entry.unsupported is not None and not entry.values:
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
        table.add_row(cell(entry.label), str(d.n), quantity(d.median, entry.unit), quantity(d.mean, entry.unit),
                      quantity(d.stderr, entry.unit), cv, quantity(d.min, entry.unit), quantity(d.max, entry.unit),
                      cell("; ".join(notes)))
    console.print(table)
