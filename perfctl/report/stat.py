"""The report of a `perfctl stat` measurement: gathering per-event values, the summary table, the exit code."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfctl.agent import cachegrind
from perfctl.analysis.stability import Finding, check, merged
from perfctl.analysis.summary import Description, describe
from perfctl.dataset import RunIdentity
from perfctl.failures import describe_failure
from perfctl.model import LABELLED, WALL_TIME, InterferencePolicy, Sample, counter_labels
from perfctl.output import EXIT_OK, EXIT_RUN_FAILED, Interrupted
from perfctl.report import NORMAL, QUIET, VERBOSE, Report, markdown_text
from perfctl.report.derived import Figure, figures, relative_stderr, scaled
from perfctl.text import visible
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
    shell: ShellCost | None = None  # --shell: the shell's own cost, measured before the runs
    precision_note: str = ""  # how --until-precise or --max-time ended the runs (cli/stat.py RunBudget)
    _identity: RunIdentity = field(default_factory=RunIdentity, repr=False, compare=False)  # the runs added

    def add(self, sample: Sample) -> bool:
        """One run: counted once (its uuid: a run added again is the same run, docs/samples.md), summarized
        when InterferencePolicy.judge, the rule every reader of samples follows, says it is measured.
        Whether its values are in the table (an ok measured run that --exclude-interfered keeps)."""
        run = RunIdentity.run(sample.uuid, sample.machine_id)
        if self._identity.seen(run):
            return False
        self._identity.read(run)
        # only the ebpf backend accounts for interference: a run without it is never flagged (nor looked at)
        reason, interfered = self.interference.judge(sample.warmup, sample.outcome,
                                                     sample.readings if "ebpf" in sample.backends else (),
                                                     sample.wall_ns)
        if reason == "warmup":
            self.warmups += 1
            return False
        self.runs += 1
        self.outcomes[sample.outcome] += 1
        if sample.outcome != "ok":
            if len(self.failure_examples) < 3:
                self.failure_examples.append(describe_failure(sample))
            return False
        if interfered:
            self.interfered.append(sample.run_index)
        if reason is not None:
            return False
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
        return True

    @property
    def all_ok(self) -> bool:
        return self.runs > 0 and self.outcomes["ok"] == self.runs

    def stability(self) -> list[tuple[str, Finding]]:
        """What analysis/stability.py finds in each event's runs (in the order measured), as (event label,
        finding), events in the table's order; a stable measurement finds nothing."""
        return [(entry.label, finding) for entry in self.events.values() if entry.values
                for finding in check(entry.values).findings]

    def figures(self) -> dict[str, Figure]:
        """perf stat's derived figures (perfctl/report/derived.py) of the means over the runs, by event label."""
        return figures({entry.label: (entry.description.mean, entry.unit) for entry in self.events.values()
                        if entry.values})

    def run_notes(self) -> list[str]:
        """How the runs were taken, under the table in every format (terminal, Markdown, HTML): --shell's cost
        and the medians less it, then how --until-precise or --max-time ended the runs."""
        return (self.shell.lines(self) if self.shell else []) + [self.precision_note] * bool(self.precision_note)

    def derived(self) -> dict[str, str]:
        """perf stat's derived figures, by event label, as perf prints them."""
        return {label: scaled(figure) for label, figure in self.figures().items()}


# Events a shell's cost adds to its command's in every run, whose medians are subtracted (docs/stat.md, "Shell
# commands"). The others are not: context switches, migrations and interrupts come from the machine and the
# scheduler rather than from the work of the spawn, and their medians are mostly 0 either way.
SHELL_SUBTRACTED = (WALL_TIME, "task-clock", "instructions", "page-faults", "minor-faults")


@dataclass
class ShellCost:
    """``shell`` run with an empty command (perfctl/cli/around.py measures it before the benchmark's runs,
    which are not samples): its runs' summary, and each event's median, the cost hyperfine subtracts."""

    shell: str
    runs: StatSummary

    def medians(self) -> dict[str, float]:
        """The median of every event counted in the shell's runs, by label."""
        return {label: entry.description.median for label, entry in self.runs.events.items() if entry.values}

    def record(self) -> dict:
        """What every sample records of it (``extra.shell``, docs/samples.md)."""
        return {"argv": [self.shell, "-c", ""], "runs": self.runs.runs, "median": self.medians()}

    def subtracted(self, label: str) -> float | None:
        """The shell's median of the event ``label`` when it is one that is subtracted (SHELL_SUBTRACTED,
        any scope, corrected or not) and the shell's runs counted it, else None."""
        if label.split(":")[0].split(" ")[0] not in SHELL_SUBTRACTED:
            return None
        return self.medians().get(label)

    def lines(self, summary: StatSummary) -> list[str]:
        """The shell's medians, and the command's medians less them for the events that are subtracted."""
        shell = self.medians()
        units = {label: entry.unit for label, entry in self.runs.events.items()}
        subtracted = [label for label in shell if self.subtracted(label) is not None
                      and label in summary.events and summary.events[label].values]
        runs = f"{self.runs.runs} {runs_word(self.runs.runs)}"
        head = f"shell {self.shell} -c '' (median of {runs} before these, not samples)"
        if not subtracted:  # the command's runs counted none of them (all failed): nothing to take off
            return [f"{head}: nothing subtracted, no run of the command was summarized"]
        cost = ", ".join(f"{label} {quantity(shell[label], units[label])}" for label in subtracted)
        less, below = [], []
        for label in subtracted:
            net = summary.events[label].description.median - shell[label]
            if net < 0:  # as hyperfine's executor does (src/benchmark/executor.rs: `.max(0.0)`), and says so
                below.append(label)
            less.append(f"{label} {quantity(max(net, 0.0), units[label])}")
        lines = [f"{head}: {cost}", f"medians less the shell's: {', '.join(less)} (other events include the shell)"]
        if below:
            lines.append(f"{', '.join(below)}: the command's median is below the shell's own, shown as 0: the "
                         "command costs less than the shell's spread can tell (measure it without --shell)")
        return lines


__all__ = ["NORMAL", "QUIET", "VERBOSE", "EventSummary", "ShellCost", "StatReport", "StatSummary", "unsupported_lines"]


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
    formats = ("table", "markdown", "html")

    def __init__(self, summary: StatSummary, title: str, verbosity: int = NORMAL,
                 interrupted: Interrupted | None = None, inventory: dict | None = None):
        self.summary, self.title, self.verbosity, self.interrupted = summary, title, verbosity, interrupted
        self.inventory = inventory

    def table(self, console: Console) -> None:
        render(self.summary, console, self.title, self.verbosity)

    def markdown(self) -> str:
        """The summary as a GitHub table (every column: a page does not run out of width), the lines under
        the terminal's table after it."""
        failed = failed_lines(self.summary)
        if self.verbosity <= QUIET:  # as the terminal's -q: only the failed runs
            return "".join(markdown_text(line) + "  \n" for line in failed)
        rows, notes = _rows(self.summary, self.verbosity)
        columns = [c for c in _COLUMNS if c != "derived" or any(row["derived"] for row in rows)]
        lines = [f"**{markdown_text(self.title)}**"]
        if rows:  # every run failed: no table (a header over nothing), the lines saying why
            lines += ["", "| " + " | ".join(columns) + " |",
                      "|" + "|".join(":---" if c == "event" else "---:" for c in columns) + "|"]
            lines += ["| " + " | ".join(markdown_text(row[c]) for c in columns) + " |" for row in rows]
        under = (self.summary.run_notes() + notes + unsupported_lines(self.summary, self.verbosity)
                 + interfered_lines(self.summary) + failed)
        return "\n".join(lines + ([""] + [markdown_text(n) + "  " for n in under] if under else [])) + "\n"

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
        _render_table(summary, console, title, verbosity)
        for line in summary.run_notes():  # the precision note's head in bold: reached or not
            bold = len(line.partition(":")[0]) if line is summary.precision_note else 0
            _prose(console, visible(line), "bold" if bold else None, bold)
        for line in unsupported_lines(summary, verbosity):
            bold, _, rest = line.partition(" ")
            _prose(console, visible(line), "bold" if bold == "unsupported" else None, len(bold))
        for line in interfered_lines(summary):
            _prose(console, line, "bold yellow", len(line.partition(":")[0]))
    for number, line in enumerate(failed_lines(summary)):
        if number == 0:
            _prose(console, line, "bold red", len(line.partition(" (")[0]))
        else:
            _prose(console, visible(line), indent=4)


def interfered_lines(summary: StatSummary) -> list[str]:
    """The runs --flag-interference flagged, and what was done with them (terminal and Markdown)."""
    if not summary.interfered:
        return []
    runs = ", ".join(str(i) for i in summary.interfered[:20]) + (", ..." if len(summary.interfered) > 20 else "")
    action = ("left out of the statistics above" if summary.interference.exclude
              else "kept in the statistics above (--exclude-interfered leaves them out)")
    return [f"{len(summary.interfered)} of {summary.runs} {runs_word(summary.runs)} flagged: "
            f"{summary.interference.describe()} (runs {runs}); {action}"]


def failed_lines(summary: StatSummary) -> list[str]:
    """How many runs failed and how, then examples of their messages indented (terminal, -q and Markdown)."""
    failed = summary.runs - summary.outcomes["ok"]
    if not failed:
        return []
    counts = ", ".join(f"{n} {k}" for k, n in sorted(summary.outcomes.items()) if k != "ok")
    return ([f"{failed} of {summary.runs} {runs_word(summary.runs)} failed ({counts}); they are recorded but not "
             "summarized"] + [f"  {line}" for line in summary.failure_examples])


def runs_word(count: int) -> str:
    """"run" or "runs" after a count ("1 run", "2 runs")."""
    return "run" if count == 1 else "runs"


_JOINED = "\x00"  # never in a line: visible() escapes control characters
_FIGURE_UNIT = re.compile(r"(?<=[0-9]) (?=(?:ns|µs|ms|s|min|h|B|KiB|MiB|GiB|TiB|K|M|G|T)\b)")


def _prose(console: Console, text: str, style: str | None = None, styled: int = 0, indent: int = 2) -> None:
    """A line of prose under the table, wrapped at the console's width with its continuation lines indented
    (``indent``), so a wrapped sentence never reads as a new one; its first ``styled`` characters in ``style``.
    Printed literally: no markup, no highlighting."""
    # a figure and its unit are one word while wrapping ("task-clock 1.573" / "ms" would read as two):
    # joined by a character that is no space (rich breaks at every whitespace, no-break space included),
    # which is a space again when printed
    line = Text(_FIGURE_UNIT.sub(_JOINED, text), no_wrap=False)
    if style and styled:
        line.stylize(style, 0, styled)
    lines = line.wrap(console, max(console.width - indent, 20))
    for number, part in enumerate(lines):
        part.rstrip()
        part = Text(part.plain.replace(_JOINED, " "), spans=part.spans, end="")
        console.print(part if number == 0 else Text.assemble(" " * indent, part), highlight=False, markup=False,
                      soft_wrap=True)


# The table's columns: the event, how many runs it summarizes, then its statistics, then perf stat's derived
# figure (perfctl/report/derived.py). stderr% is perf stat's "( +- x% )": the standard error of the mean over the
# mean. A terminal too narrow for all of them leaves out these first, in this order: the derived figures,
# which then print under the table (nothing is lost), then (a line under the table says so) the standard
# error, which is stderr% x mean, and the mean, which stands beside the median. A name or a number is never
# cut.
_COLUMNS = ("event", "n", "median", "mean", "stderr", "stderr%", "CV", "min", "max", "derived")
_LEFT_OUT_FIRST = ("derived", "stderr", "mean")
# at most this many stability warnings under the table (-v prints them all), then one line of advice
_STABILITY_LINES = 4


def _rows(summary: StatSummary, verbosity: int) -> tuple[list[dict[str, str]], list[str]]:
    """The table's cells per event (column -> text) and the notes printed under it ("event: note")."""
    rows, notes = [], []
    derived = summary.derived()
    for entry in summary.events.values():
        if entry.unsupported is not None and not entry.values:
            continue
        label = visible(entry.label)
        said = []
        if verbosity >= VERBOSE and entry.source and entry.source != entry.label:
            said.append(f"counts {entry.source}")  # how the event is counted: the method, for -v
        if entry.multiplexed:
            said.append(f"scaled: multiplexed in {entry.multiplexed} runs")
        if entry.label.partition(":")[0] == cachegrind.ESTIMATED:
            said.append(cachegrind.MODEL)
        for reason, count in entry.errors.items():
            said.append(f"{count} errors: {reason}")
        if said:
            notes.append(visible(f"{entry.label}: {'; '.join(said)}"))
        d = entry.description
        if d is None:
            rows.append({"event": label, "n": "0", **{c: "-" for c in _COLUMNS[2:-1]}, "derived": ""})
            continue
        spread = relative_stderr(d.stderr, d.mean)
        rows.append({"event": label, "n": str(d.n), "median": quantity(d.median, entry.unit),
                     "mean": quantity(d.mean, entry.unit), "stderr": quantity(d.stderr, entry.unit),
                     "stderr%": "-" if math.isnan(spread) else f"±{spread:.2%}",
                     "CV": "-" if math.isnan(d.cv) else f"{d.cv:.2%}", "min": quantity(d.min, entry.unit),
                     "max": quantity(d.max, entry.unit), "derived": derived.get(entry.label, "")})
    return rows, notes


def _width(rows: list[dict[str, str]], columns: list[str]) -> int:
    """The table's width with every cell on one line: its widest cell per column, and two columns between
    (``_table``'s padding and divider). rich's own measure counts a cell's longest word, not the cell."""
    return sum(max([cell_len(c), *(cell_len(row[c]) for row in rows)]) for c in columns) + 2 * (len(columns) - 1)


def _table(rows: list[dict[str, str]], columns: list[str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for column in columns:
        table.add_column(column, justify="left" if column == "event" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(row[c]) for c in columns))
    return table


def _stacked(console: Console, rows: list[dict[str, str]], columns: list[str]) -> None:
    """The table for a terminal too narrow for it: each event's name on a line, then its statistics as
    "median 16.589 ms" pairs, as many to a line as fit; a pair is never split."""
    for row in rows:
        _prose(console, row["event"], "bold", len(row["event"]))
        line = ""
        for column in (c for c in columns[1:] if row[c]):  # an event without a derived figure has no pair
            pair = f"{column} {row[column]}"
            if line and 2 + cell_len(line) + 2 + cell_len(pair) > console.width:
                console.print(Text("  " + line), soft_wrap=True)
                line = ""
            line = f"{line}  {pair}" if line else pair
        console.print(Text("  " + line), soft_wrap=True)


def _pairs(console: Console, lead: str, pairs: list[str]) -> None:
    """``lead`` (bold) and ``pairs`` separated by "; ", as many to a line as fit; a pair ("page-faults 79.586
    K/sec") is never split between lines, as a number and its unit must stay together."""
    line = Text(lead, style="bold")
    for number, pair in enumerate(pairs):
        piece = pair + (";" if number < len(pairs) - 1 else "")
        if cell_len(line.plain) + 1 + cell_len(piece) > console.width and line.plain.strip():
            console.print(line, soft_wrap=True, highlight=False, markup=False)
            line = Text("  ")
        line.append((" " if line.plain.strip() else "") + piece)
    console.print(line, soft_wrap=True, highlight=False, markup=False)


def _render_table(summary: StatSummary, console: Console, title: str, verbosity: int = NORMAL) -> None:
    rows, notes = _rows(summary, verbosity)
    _prose(console, visible(title), "bold", len(visible(title)))  # a long command wraps, indented
    # n is the title's "(N runs" for every event, unless failed, interfered or erroneous runs made it less;
    # derived only when an event has a figure
    columns = [c for c in _COLUMNS if (c != "n" or any(row["n"] != str(summary.runs) for row in rows))
               and (c != "derived" or any(row["derived"] for row in rows))]
    left_out = []
    for column in _LEFT_OUT_FIRST:
        if _width(rows, columns) <= console.width:
            break
        if column not in columns:  # no derived column: no event has a figure
            continue
        columns.remove(column)
        left_out.append(column)
    # no rows when every run failed: the lines under the title say so
    if rows and _width(rows, columns) <= console.width:
        console.print(_table(rows, columns))
    elif rows:  # narrower still: each event on its own lines, every statistic of it (none left out)
        left_out = []
        _stacked(console, rows, [c for c in _COLUMNS if c in columns or c in _LEFT_OUT_FIRST])
    for note in notes:
        _prose(console, note)
    if "derived" in left_out:  # perf stat's figures are what its users read: under the table, not lost
        left_out.remove("derived")
        _pairs(console, "derived (as perf stat):", [f"{row['event']} {row['derived']}" for row in rows
                                                     if row["derived"]])
    if left_out:
        _prose(console, f"({' and '.join(left_out)} left out to fit {console.width} columns: a wider terminal "
                        "or --width shows them)")
    _stability_lines(summary, console, verbosity)


def _stability_lines(summary: StatSummary, console: Console, verbosity: int) -> None:
    """What analysis/stability.py found in each event's runs: one line each (at most _STABILITY_LINES, -v
    all), then the advice once (pyperf's "the benchmark result may be unstable", with the remedies)."""
    found = summary.stability()
    if not found:
        return
    shown = found if verbosity >= VERBOSE else found[:_STABILITY_LINES]
    for label, finding in shown:
        _prose(console, visible(f"unstable {label}: {finding.what}"), "bold yellow", len("unstable"))
    more = len(found) - len(shown)
    # each kind of remedy once, with the first event's number (wall-time's)
    remedies = merged(remedy for _, finding in found for remedy in finding.advice)
    _prose(console, f"The result may be unstable{f' ({more} more: -v lists them)' if more else ''}: "
                    f"{'; '.join(remedies)}. -q hides these lines.")
