"""A performance history and a list of its changes, rendered (`perfctl history`, `perfctl changes`, `perfctl
report --history`; docs/history.md, "Commands"): text, JSON, Markdown and HTML of the history dict and the
change rows of issue 32's contract, whether files gave them (perfctl/history_files.py) or a server
(perfctl/client.py). Computes nothing: every number is the dict's.

The HTML page (``history_page``): the open changes first, then per series an SVG of every point's median
with its spread (q1-q3 bar, min-max whisker) in build order, each change marked with its ratio and interval,
and a hover (<title>) per point with its commit, job, runs and median; built of report/html.py's page and
tables and report/svg.py's and report/axes.py's plot pieces: offline, self-contained, from 420 pixels to a
wide screen.

Every output leads with a sentence in words (compare's headline: what changed, where, by how much, with
what interval); tables fit the terminal or become lines (perfctl/output.py ``show``). Every name a file or
a server gave is shown through perfctl/text.py.
"""

from __future__ import annotations

import html
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from perfctl import units
from perfctl.analysis.changepoints import FEWEST_POINTS
from perfctl.output import paragraph, show
from perfctl.report import QUIET, VERBOSE, Report, finite, markdown_text
from perfctl.report.axes import nice_ticks, padded, value_axis
from perfctl.report.html import document, html_table, name, td, tone
from perfctl.report.svg import (
    VERDICT_COLOURS,
    Scale,
    axis_x,
    esc,
    fitted,
    mark_path,
    px,
    svg_element,
    text_element,
    y_title,
)
from perfctl.text import cell, visible
from perfctl.units import quantity, ratio

STATES = ("new", "acknowledged", "false positive", "fixed")
HEADLINE_NAMES = 3  # changes named in a headline; the rest counted
SHOWN_POINTS = 12  # a series of more points is summarised by its segments unless -v


def when(ns: int | None, since: int | None = None) -> str:
    """A time as people read a log: UTC to the minute ("2026-11-28 17:32 UTC"), its date left out when it is
    the day of ``since`` (the start of a span: "to 17:36 UTC"); "-" unknown."""
    if not ns:
        return "-"
    day = time.gmtime(ns / 1e9)
    if since and time.gmtime(since / 1e9)[:3] == day[:3]:
        return time.strftime("%H:%M UTC", day)
    return time.strftime("%Y-%m-%d %H:%M UTC", day)


def time_span(points: Sequence[dict]) -> str:
    """When the points' jobs ended, earliest to latest ("2026-11-28 17:35 UTC to 17:36 UTC"), whatever their
    order (a label's, on a server, need not be the time's)."""
    times = [point["time_ns"] for point in points if point.get("time_ns")]
    if not times:
        return "-"
    return f"{when(min(times))} to {when(max(times), min(times))}"


def point_name(side: dict) -> str:
    """A point (or a change's side) as its commit names it, else its job."""
    return side.get("commit") or side.get("job") or "?"


def line_words(line: dict, quote=visible) -> str:
    return ", ".join(f"{quote(key)}={quote(value)}" for key, value in sorted(line.items()))


def change_ratio(row: dict) -> str:
    return ratio(row["ratio"], row["low"], row["high"], row["margin"])


def change_words(row: dict, quote=visible, where: bool = True) -> str:
    """One change in words: "sort on m1 0.910× [0.902, 0.918] at c5 (after c4), after slower beyond ±1%"."""
    named = f"{quote(row['benchmark'])} on {quote(row['machine'])} " if where else ""
    return (f"{named}{change_ratio(row)} at {quote(point_name(row['after']))} (after "
            f"{quote(point_name(row['before']))}), {quote(row['finding'])}")


def open_regressions(rows) -> list[dict]:
    return [row for row in rows if row["state"] == "new" and row["regression"]]


@dataclass(frozen=True)
class Unlisted:
    """The changes a listing leaves out (`perfctl changes --limit N`, the fleet's open changes of `report
    --history`): how many (``capped``: at least that many; the count stops at the client's bound), their
    states, and their open regressions (named or counted in the headline, and seen by the CI gate)."""

    count: int
    states: Counter
    regressions: tuple[dict, ...]
    capped: bool = False

    def words(self) -> str:
        return f"{'more than ' if self.capped else ''}{self.count:,} more"


NO_UNLISTED = Unlisted(0, Counter(), ())


def changes_headline(rows: list[dict], quote=visible, unlisted: Unlisted = NO_UNLISTED) -> str:
    """The sentence a list of changes leads with: the open regressions named, the rest counted by state;
    ``unlisted``: those left out of the listing, counted in. "2 open regressions: sort on m1 0.910× [0.902,
    0.918] at c5 (after c4), after slower beyond ±1%; ... 5 changes in all: 3 new, 1 acknowledged, 1
    fixed." Changes computed on request (no state: `history --order-by` on a server) are counted as such."""
    regressions = open_regressions(rows) + list(unlisted.regressions)
    if not rows and not unlisted.count:
        return "No change found."
    states = Counter(row["state"] or "on request" for row in rows) + unlisted.states
    counted = ", ".join(f"{states[state]:,} {state}" for state in (*STATES, "on request") if states[state])
    total = len(rows) + unlisted.count
    total = (f"{'More than ' if unlisted.capped else ''}{total:,} change{'s' if total != 1 else ''} in all: "
             f"{counted}{' and more' if unlisted.capped else ''}.")
    if unlisted.count:
        total += f" The newest {len(rows):,} listed; {unlisted.words()} (--limit to see them)."
    found = [row for row in rows if row.get("on_request") and row["regression"]]
    if found:  # computed for this answer in a label's order: regressions, though none is open or triaged
        regressions, kind = found, "regression found on request (no state: the server's own order has those)"
    else:
        kind = "open regression"
    if not regressions:
        return f"No open regression. {total}"
    named = "; ".join(change_words(row, quote) for row in regressions[:HEADLINE_NAMES])
    more = f"; and {len(regressions) - HEADLINE_NAMES} more" if len(regressions) > HEADLINE_NAMES else ""
    plural = kind.replace("regression", "regressions", 1) if len(regressions) != 1 else kind
    return f"{len(regressions)} {plural}: {named}{more}. {total}"


def series_title(series: dict, quote=visible) -> str:
    line = line_words(series["line"], quote)
    return (f"{quote(series['benchmark'])} on {quote(series['machine'])}, {quote(series['metric'])}"
            + (f", {line}" if line else ""))


def series_headline(series: dict, quote=visible) -> str:
    """"spin on vm, task-clock, branch=main: 8 points, c1 to c8 (2026-11-28 17:35 UTC to 17:36 UTC); 1 change:
    0.784× [0.779, 0.790] at c5 (after c4), after slower beyond ±1%, new." """
    points, changes = series["points"], series["changes"]
    span = ""
    if points:
        span = (f", {quote(point_name(points[0]))} to {quote(point_name(points[-1]))} "
                f"({time_span(points)})")
    said = f"{series_title(series, quote)}: {len(points):,} point{'s' if len(points) != 1 else ''}{span}; "
    if not changes:
        if len(points) < FEWEST_POINTS:  # not "nothing changed": nothing could be seen to
            return said + (f"too few to find a change (a change needs {FEWEST_POINTS // 2} jobs on each side "
                           "for its interval).")
        return said + "no change."
    shown = changes[-HEADLINE_NAMES:]  # the latest: a long history's changes are listed below it
    listed = "; ".join(change_words(row, quote, where=False) + (f", {row['state']}" if row["state"] else "")
                       for row in shown)
    earlier = f" ({len(changes) - len(shown)} earlier listed below)" if len(shown) < len(changes) else ""
    return said + f"{len(changes)} change{'s' if len(changes) != 1 else ''}{earlier}: {listed}."


def on_request(rows: Sequence[dict]) -> bool:
    """Whether change rows were computed for this answer (a server's history ordered by a label: no id, no
    state) rather than stored."""
    return any(row.get("on_request") for row in rows)


def order_note(series: dict, quote=visible) -> str:
    """What a history ordered by a label on a server says beside its series: the points the order left out
    and, for changes computed on request, that ids and triage belong to the server's own order; "" else."""
    label = series.get("order_by")
    said = []
    if series.get("points_without_order"):
        count = series["points_without_order"]
        said.append(f"{count:,} point{'s' if count != 1 else ''} without a numeric {quote(label)} label left out.")
    if series.get("points_capped"):
        count = series["points_capped"]
        said.append(f"The earliest {count:,} point{'s' if count != 1 else ''} left out: the server orders and "
                    "analyses a bounded number of points on request.")
    if series.get("changes_capped"):
        count = series["changes_capped"]
        said.append(f"The earliest {count:,} stored change{'s' if count != 1 else ''} left out: the server gives a "
                    "series' newest ones (perfctl changes lists them all).")
    if on_request(series["changes"]):
        said.append(f"Changes found on request in {quote(label or 'label')} order: they have no id and no state. "
                    "Ids and triage belong to the server's own order (the time its jobs ended): perfctl history "
                    "MACHINE without --order-by, perfctl changes.")
    return " ".join(said)


def history_headline(history: dict, quote=visible) -> str:
    """The sentence a history leads with: how many series and changes, the open regressions named."""
    series = history["series"]
    rows = [row for one in series for row in one["changes"]]
    points = sum(len(one["points"]) for one in series)
    if not series:
        return "No series: no job of that machine and line measured that benchmark (perfctl benchmarks lists them)."
    lead = f"{len(series)} series, {points:,} points. " if len(series) != 1 else ""
    if len(series) == 1:
        return series_headline(series[0], quote)
    return lead + changes_headline(rows, quote)


def _changes_table(rows: list[dict], where: bool = True) -> Table:
    """Change rows as a table; changes computed on request have no id and no state, and get no such
    columns."""
    stored = not on_request(rows)
    table = Table()
    columns = (*((("id", True),) if stored else ()),
               *((("benchmark", False), ("machine", False), ("metric", False)) if where else ()),
               ("commits", False), *((("at", False),) if where else ()), ("ratio [interval]", True),
               ("verdict", False), *((("state", True),) if stored else ()))
    for header, whole in columns:
        table.add_column(header, overflow="fold", no_wrap=whole)
    for row in rows:
        table.add_row(*((cell(row["id"]),) if stored else ()),
                      *((cell(row["benchmark"]), cell(row["machine"]), cell(row["metric"])) if where else ()),
                      cell(f"{point_name(row['before'])} → {point_name(row['after'])}"),
                      *((cell(when(row["after"]["time_ns"])),) if where else ()), change_ratio(row),
                      cell(row["finding"]),
                      *((cell(row["state"] + (f" by {row['fixed_by']}" if row.get("fixed_by") else "")),)
                        if stored else ()))
    return table


def _titled(console: Console, title: str, table: Table, lead: int | None = None) -> None:
    """A table under its title, the title printed as a line of its own: a rich table's title is padded to
    the table's width, with trailing spaces."""
    paragraph(console, title)
    show(console, table, lead)


def _job(job: str, whole: bool) -> str:
    """A job as a table names it: a server's job id by its first 8 characters, as `perfctl jobs JOB` takes
    it (``whole``, -v: all of it); a file's point name as it is."""
    return job if whole or not _JOB_ID.fullmatch(job) else job[:8]


_JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _points_table(series: dict, verbose: bool = False) -> Table:
    table = Table()
    unit = series["unit"]
    points = series["points"]
    ordered = any(point.get("order") is not None for point in points)
    jobs = any(point["job"] != point_name(point) for point in points)  # a job named by its commit: said once
    for header, whole in (("point", False), *((("order", True),) if ordered else ()),
                          *((("job", False),) if jobs else ()), ("time", False), ("runs", True), ("median", True),
                          ("q1 – q3", True), ("min – max", True)):
        table.add_column(header, overflow="fold", no_wrap=whole)
    first = points[0]["time_ns"] if points else None
    for index, point in enumerate(points):
        table.add_row(cell(point_name(point)), *((cell(point.get("order") or "-"),) if ordered else ()),
                      *((cell(_job(point["job"], verbose)),) if jobs else ()),
                      when(point["time_ns"], first if index else None), f"{point['runs']:,}",
                      quantity(point["median"], unit), _span(point["q1"], point["q3"], unit),
                      _span(point["min"], point["max"], unit))
    return table


def _span(low: float, high: float, unit: str) -> str:
    return f"{quantity(low, unit)} – {quantity(high, unit)}"


def segments(series: dict) -> list[tuple[int, int]]:
    """The [start, stop) of the points between the series' changes (the levels a history's summary lists)."""
    cuts = [0]
    index = {point["job"]: i for i, point in enumerate(series["points"])}
    for row in series["changes"]:
        at = index.get(row["after"]["job"])
        if at is not None and at > cuts[-1]:
            cuts.append(at)
    cuts.append(len(series["points"]))
    return list(zip(cuts, cuts[1:]))


def segment_words(series: dict, start: int, stop: int, quote=visible) -> str:
    """"c1 to c4: 4 points, 20 runs, medians 10.81 ms to 11.00 ms, 2026-11-28 17:35 UTC to 17:35 UTC"."""
    points = series["points"][start:stop]
    medians = [point["median"] for point in points]
    unit = series["unit"]
    return (f"{quote(point_name(points[0]))} to {quote(point_name(points[-1]))}: {len(points):,} point"
            f"{'s' if len(points) != 1 else ''}, {sum(p['runs'] for p in points):,} runs, medians "
            f"{quantity(min(medians), unit)} to {quantity(max(medians), unit)}, {time_span(points)}")


class HistoryReport(Report):
    """A history (one or more series with their points and changes): `perfctl history`."""

    kind = "history"
    formats = ("table", "json", "markdown", "html")

    def __init__(self, history: dict, verbosity: int = 0, fleet_changes: list[dict] | None = None,
                 unlisted: Unlisted | None = None):
        self.history = history
        self.verbosity = verbosity
        self.fleet_changes = fleet_changes  # the page lists the fleet's open changes first (report --history)
        self.unlisted = unlisted or NO_UNLISTED  # those of them past --limit

    def table(self, console: Console) -> None:
        paragraph(console, history_headline(self.history))
        if self.verbosity <= QUIET:
            return
        for series in self.history["series"]:
            console.print()
            paragraph(console, series_title(series) + f" ({visible(' '.join(series['argv']))})")
            note = order_note(series)
            if note:
                paragraph(console, note)
            if series["changes"]:
                _titled(console, "changes", _changes_table(series["changes"], where=False),
                        lead=2 if on_request(series["changes"]) else 3)
            points = series["points"]
            if not points:
                continue
            if self.verbosity >= VERBOSE or len(points) <= SHOWN_POINTS:
                _titled(console, f"{len(points):,} point{'s' if len(points) != 1 else ''}",
                        _points_table(series, self.verbosity >= VERBOSE))
                continue
            paragraph(console, f"{len(points):,} points, by level (-v lists each):")
            for start, stop in segments(series):
                paragraph(console, segment_words(series, start, stop), indent=2)

    def document(self) -> dict:
        return finite(self.history)

    def markdown(self) -> str:
        out = [markdown_text(history_headline(self.history, str)), ""]
        for series in self.history["series"]:
            out += [f"## {markdown_text(series_title(series, str))}", ""]
            note = order_note(series, str)
            if note:
                out += [markdown_text(note), ""]
            if series["changes"]:
                stored = not on_request(series["changes"])
                out += ["| " + " | ".join((*(("id",) if stored else ()), "before → after", "at", "ratio [interval]",
                                           "verdict", *(("state",) if stored else ()))) + " |",
                        "|---" * (6 if stored else 4) + "|"]
                out += ["| " + " | ".join((
                    *((markdown_text(row["id"]),) if stored else ()),
                    f"{markdown_text(point_name(row['before']))} → {markdown_text(point_name(row['after']))}",
                    when(row["after"]["time_ns"]), markdown_text(change_ratio(row)), markdown_text(row["finding"]),
                    *((row["state"],) if stored else ()))) + " |" for row in series["changes"]]
                out.append("")
            unit = series["unit"]
            out += ["| point | job | time | runs | median | q1 – q3 | min – max |", "|---|---|---|---|---|---|---|"]
            out += [f"| {markdown_text(point_name(p))} | {markdown_text(p['job'])} | {when(p['time_ns'])} | "
                    f"{p['runs']} | {quantity(p['median'], unit)} | {_span(p['q1'], p['q3'], unit)} | "
                    f"{_span(p['min'], p['max'], unit)} |" for p in series["points"]]
            out.append("")
        return "\n".join(out)

    def html(self) -> str:
        return history_page(self.history, self.fleet_changes, self.unlisted)


class ChangesReport(Report):
    """A list of change rows: `perfctl changes`. With ``gate`` (-q), exit 3 (a relevant slowdown shown,
    exit_codes.py) when one of them is an open regression (state new), so CI can gate on `perfctl changes
    --state new -q`; a listing alone exits 0."""

    kind = "changes"
    formats = ("table", "json", "markdown")

    def __init__(self, rows: list[dict], verbosity: int = 0, gate: bool = False, unlisted: Unlisted = NO_UNLISTED):
        self.rows = rows
        self.verbosity = verbosity
        self.gate = gate
        self.unlisted = unlisted  # the changes past --limit: counted in the headline, seen by the gate

    def table(self, console: Console) -> None:
        paragraph(console, changes_headline(self.rows, unlisted=self.unlisted))
        if self.verbosity <= QUIET or not self.rows:
            return
        show(console, _changes_table(self.rows), lead=7)
        if self.verbosity >= VERBOSE:
            for row in self.rows:
                said = [f"{row['id']}: {line_words(row['line']) or 'no line'}; {' '.join(row['argv'])}",
                        f"before {point_name(row['before'])}: {row['before']['points']:,} points, "
                        f"{row['before']['runs']:,} runs; after {point_name(row['after'])}: "
                        f"{row['after']['points']:,} points, {row['after']['runs']:,} runs; p = {row['p_value']:.3g}"]
                said += [f"note: {row['note']}"] if row.get("note") else []
                said += [f"link: {row['link']}"] if row.get("link") else []
                paragraph(console, visible("; ".join(said)))

    def document(self) -> list:
        return [finite(row) for row in self.rows]

    def markdown(self) -> str:
        out = [markdown_text(changes_headline(self.rows, str, self.unlisted)), ""]
        if self.rows:
            out += ["| id | benchmark | machine | metric | before → after | ratio [interval] | verdict | state |",
                    "|---|---|---|---|---|---|---|---|"]
            out += ["| " + " | ".join(markdown_text(text) for text in (
                row["id"], row["benchmark"], row["machine"], row["metric"],
                f"{point_name(row['before'])} → {point_name(row['after'])}", change_ratio(row), row["finding"],
                row["state"])) + " |" for row in self.rows]
        return "\n".join(out) + "\n"

    def exit_code(self) -> int:
        from perfctl.exit_codes import EXIT_OK, EXIT_SLOWDOWN

        regression = open_regressions(self.rows) or self.unlisted.regressions
        return EXIT_SLOWDOWN if self.gate and regression else EXIT_OK


class ChangeUpdated(Report):
    """One change after `perfctl changes ack|reopen`: its new state in a sentence, or its row as JSON."""

    kind = "change"

    def __init__(self, row: dict):
        self.row = row

    def table(self, console: Console) -> None:
        row = self.row
        extra = "".join(f"; {key} {visible(row[key])}" for key in ("note", "link") if row.get(key))
        paragraph(console, f"{visible(row['id'])} {row['state']}: {change_words(row)}{extra}.")

    def document(self) -> dict:
        return finite(self.row)


# -- the HTML page ------------------------------------------------------------------------------------

PLOT_WIDTH = 640
PLOT_HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 90, 20, 34, 50
POINTS_LISTED = 200  # a series' points table lists this many (the plot draws them all)


def history_page(history: dict, fleet_changes: Sequence[dict] | None = None,
                 unlisted: Unlisted = NO_UNLISTED) -> str:
    """The page of ``history`` (the contract's dict); ``fleet_changes``: the fleet's open changes (change rows,
    from the server), listed first when given, else the history's own open ones; ``unlisted``: the fleet's
    open changes past the listing (`report --limit`), counted in its sentence."""
    rows = [row for series in history["series"] for row in series["changes"]]
    listed = list(fleet_changes) if fleet_changes is not None else [row for row in rows if row["state"] == "new"]
    shown = f"{len(listed):,}" + (f" of {'more than ' if unlisted.capped else ''}{len(listed) + unlisted.count:,}"
                                  if unlisted.count else "")
    body = [f'<h1 class="headline">{esc(history_headline(history, str))}</h1>',
            f"<h2 id=open>{'The fleet’s open changes' if fleet_changes is not None else 'Open changes'} "
            f"({shown})</h2>",
            f'<p class="statement">{esc(changes_headline(listed, str, unlisted))}</p>']
    if listed:
        body.append(changes_table(listed, "open-changes"))
    for index, series in enumerate(history["series"]):
        body.append(_section(series, index))
    return document(f"perfctl history: {history_headline(history, str)[:120]}", body)


def changes_table(rows: Sequence[dict], table_id: str) -> str:
    """Change rows as a table: each number keeps its raw value (``data-value``) as the JSON has it."""
    stored = not on_request(rows)  # computed on request: no id, no state, no triage's note
    head = (*(("id",) if stored else ()), "benchmark", "machine", "metric", "before → after", "at",
            "ratio [interval]", "verdict", *(("state", "note") if stored else ()))
    out = []
    for row in rows:
        finding = row["finding"].replace("after ", "B ", 1)  # report/html.py's tones read "B slower"
        out.append("<tr>" + (td(row["id"], numeric=False, css="word") if stored else "")
                   + td(row["benchmark"], numeric=False, css="name")
                   + td(row["machine"], numeric=False) + td(row["metric"], numeric=False, css="metric")
                   + td(f"{point_name(row['before'])} → {point_name(row['after'])}", numeric=False)
                   + td(row["after"]["time_ns"], when(row["after"]["time_ns"]), "after_time_ns")
                   + td(row["ratio"], change_ratio(row), "ratio")
                   + f'<td class="tone-{tone(finding)}">{esc(row["finding"])}</td>'
                   + (td(row["state"], numeric=False, css="word") + _note(row) if stored else "") + "</tr>")
    return html_table(head, out, table_id)


def _note(row: dict) -> str:
    """The triage's note and link: the link a hyperlink only when it is http(s) (a link is the user's text,
    never a script to run on a click)."""
    note, link = row.get("note") or "", row.get("link") or ""
    shown = esc(note)
    if link:
        target = (f'<a href="{html.escape(visible(link), quote=True)}" rel="noopener noreferrer">{esc(link)}</a>'
                  if re.match(r"https?://", link, re.I) else esc(link))
        shown = f"{shown} {target}" if shown else target
    return f"<td>{shown}</td>"


def _section(series: dict, index: int) -> str:
    unit = series["unit"]
    points = series["points"]
    parts = [f"<h2 id=series-{index}>{name(series_title(series, str))}</h2>",
             f'<p class="statement">{esc(" ".join(series["argv"]))}</p>']
    note = order_note(series, str)
    if note:
        parts.append(f'<p class="statement on-request">{esc(note)}</p>')
    if not points:  # every point lacked the --order-by label
        return "".join(parts)
    parts.append(f'<div class="plot">{history_plot(series)}</div>')
    if series["changes"]:
        parts.append(changes_table(series["changes"], f"changes-{index}"))
    shown = points[-POINTS_LISTED:]
    rows = ["<tr>" + td(point_name(p), numeric=False, css="word") + td(p["job"], numeric=False)
            + td(p["time_ns"], when(p["time_ns"]), "time_ns") + td(p["runs"], f"{p['runs']:,}", "runs")
            + td(p["median"], units.quantity(p["median"], unit), "median")
            + td(p["q1"], units.quantity(p["q1"], unit), "q1") + td(p["q3"], units.quantity(p["q3"], unit), "q3")
            + td(p["min"], units.quantity(p["min"], unit), "min")
            + td(p["max"], units.quantity(p["max"], unit), "max") + "</tr>" for p in shown]
    said = f"{len(points):,} points" + (f", the last {len(shown):,} listed" if len(shown) < len(points) else "")
    parts.append(f"<details><summary>{said}</summary>"
                 + html_table(("point", "job", "time", "runs", "median", "q1", "q3", "min", "max"), rows)
                 + "</details>")
    return "".join(parts)


def history_plot(series: dict, width: int = PLOT_WIDTH, height: int = PLOT_HEIGHT) -> str:
    """Every point's median (a dot), its q1-q3 (a bar) and min-max (a whisker) in build order; the level of
    each stretch between changes (a line at the median of its runs) and each change (a dashed line before
    its first point, labelled with its ratio and interval, slower in the slower colour)."""
    points, changes, unit = series["points"], series["changes"], series["unit"]
    count = max(len(points), 1)
    xs = Scale(-0.5, count - 0.5, LEFT, width - RIGHT)
    extent = [v for p in points for v in (p["min"], p["max"])]
    axis = value_axis(series["metric"], unit, extent)
    ys = Scale(*padded(extent), height - BOTTOM, TOP)
    step = (width - LEFT - RIGHT) / count
    body = _x_axis(points, xs, height)
    ticks = axis.ticks(ys.low, ys.high, 4)
    for tick in ticks:
        body.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{px(ys(tick))}" y2="{px(ys(tick))}" stroke="#eee"/>')
        body.append(text_element(LEFT - 6, ys(tick) + 4, axis.text(tick, ticks), "end", ' class="ytick"'))
    body.append(y_title(16, (height - BOTTOM + TOP) / 2, axis.title))
    whiskers = "".join(f"M{px(xs(i))} {px(ys(p['min']))}V{px(ys(p['max']))}" for i, p in enumerate(points))
    bars = "".join(f"M{px(xs(i))} {px(ys(p['q1']))}V{px(ys(p['q3']))}" for i, p in enumerate(points))
    colour = "#0072B2"
    body.append(f'<path class="whiskers" d="{whiskers}" stroke="#999" stroke-width="1"/>')
    body.append(f'<path class="bars" d="{bars}" stroke="{colour}" stroke-width="{px(max(1.0, min(8.0, step * 0.6)))}" '
                'opacity="0.45"/>')
    body.append(mark_path([(xs(i), ys(p["median"])) for i, p in enumerate(points)], colour, "round",
                          max(2.0, min(6.0, step * 0.8))))
    body += _levels(series, xs, ys) + _change_marks(changes, points, xs, ys, height)
    for i, p in enumerate(points):  # the hover: one transparent column per point
        said = (f"{point_name(p)} · job {p['job']} · {when(p['time_ns'])} · {p['runs']:,} runs · median "
                f"{units.quantity(p['median'], unit)} (q1–q3 {units.quantity(p['q1'], unit)} – "
                f"{units.quantity(p['q3'], unit)})")
        body.append(f'<rect class="point" x="{px(xs(i) - step / 2)}" y="{TOP}" width="{px(step)}" '
                    f'height="{height - BOTTOM - TOP}" fill="transparent"><title>{esc(said)}</title></rect>')
    label = f"history of {series_title(series, str)}: {len(points):,} points, {len(changes):,} changes"
    return svg_element(width, height, label, body, grow=1.9)


def _x_axis(points: Sequence[dict], xs: Scale, height: int) -> list[str]:
    """The build order, its ticks named by the points' commits (or jobs), a few of them."""
    if not points:
        return []
    places = [int(t) for t in nice_ticks(0, len(points) - 1, 6, integer=True)] or [0]
    room = (xs.end - xs.start) / max(len(places), 1)
    return axis_x(xs, places, height - BOTTOM, TOP, f"point, in order ({time_span(points)})",
                  lambda t: fitted(point_name(points[int(t)]), room - 8))


def _levels(series: dict, xs: Scale, ys: Scale) -> list[str]:
    """The level of each stretch between changes: its runs' median, as the change rows give it."""
    changes, count = series["changes"], len(series["points"])
    if not changes:
        return []
    index = {p["job"]: i for i, p in enumerate(series["points"])}
    cuts = [index.get(row["after"]["job"], 0) for row in changes]
    levels = [changes[0]["before"]["median"]] + [row["after"]["median"] for row in changes]
    bounds = [0] + cuts + [count]
    path = "".join(f"M{px(xs(start - 0.5))} {px(ys(level))}H{px(xs(stop - 0.5))}"
                   for start, stop, level in zip(bounds, bounds[1:], levels))
    return [f'<path class="levels" d="{path}" stroke="#333" stroke-width="1.5" fill="none"/>']


def _change_marks(changes: Sequence[dict], points: Sequence[dict], xs: Scale, ys: Scale, height: int) -> list[str]:
    index = {p["job"]: i for i, p in enumerate(points)}
    out = []
    for n, row in enumerate(changes):
        at = index.get(row["after"]["job"])
        if at is None:
            continue
        x = xs(at - 0.5)
        way = "slower" if row["regression"] else "faster" if row["ratio"] > 1 else "other"
        colour = VERDICT_COLOURS[way]
        said = (f"{row['id'] + ': ' if row['id'] else ''}{change_ratio(row)} at {point_name(row['after'])} (after "
                f"{point_name(row['before'])}), {row['finding']}{', ' + row['state'] if row['state'] else ''}")
        anchor = "end" if x > (xs.start + xs.end) / 2 else "start"
        shift = -4 if anchor == "end" else 4
        out.append(f'<g class="change"><title>{esc(said)}</title>'
                   f'<line x1="{px(x)}" x2="{px(x)}" y1="{TOP - 4}" y2="{height - BOTTOM}" stroke="{colour}" '
                   f'stroke-width="2" stroke-dasharray="5 3"/>'
                   + text_element(x + shift, TOP - 8 - 12 * (n % 2), fitted(change_ratio(row), 260), anchor,
                                  f' fill="{colour}" class="change-label"') + "</g>")
    return out

