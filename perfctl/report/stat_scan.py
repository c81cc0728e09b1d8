"""The HTML report of a `perfctl stat` parameter scan (`-P`/`-L`, perfctl/cli/scan.py): each measured
event's median with its interval against the parameter, one line, then a row per value with each event's
median and a link-free summary of its runs, then each value's notes (no runs, failed runs, --until-precise's
stop, --shell's cost; docs/report.md, "Parameter scans")."""

from __future__ import annotations

from collections.abc import Sequence

from perfctl import units
from perfctl.report import Report, scanplot, svg
from perfctl.report.html import document, esc, html_table, name, td


class ScanReport(Report):
    """The (ScanPoint, StatReport) of each value run, in the scan's order (one without runs is listed, with
    why); ``command`` as typed."""

    formats = ("html",)

    def __init__(self, points: Sequence, command: str):
        self.points, self.command = list(points), command

    def html(self) -> str:
        from perfctl.analysis.summary import describe

        reports = [report for _, report in self.points]
        parameters = list(self.points[0][0].values)
        # the last parameter varies fastest (cli/scan.py): it is the axis, a line per value of the others
        axis = parameters[-1]
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, (point, _) in enumerate(self.points):
            groups.setdefault(tuple(point.values[p] for p in parameters[:-1]), []).append(i)
        # every event any value measured: a value without runs (its --setup failed) must not empty the report
        events = list(dict.fromkeys(label for report in reports for label, event in report.summary.events.items()
                                    if event.values))
        plots = []
        for label in events:
            unit = next(r.summary.events[label].unit for r in reports if label in r.summary.events)
            for others, indexes in groups.items():
                line = [scanplot.median_interval(_values(reports[i], label)) for i in indexes]
                title = " ".join(f"{p}={v}" for p, v in zip(parameters, others)) or label
                plots.append(scanplot.plot(axis, [self.points[i][0].values[axis] for i in indexes],
                                           [scanplot.ScanLine(title, *zip(*line))], label, unit))
        rows = []
        for point, report in self.points:
            cells = []
            for label in events:
                values = _values(report, label)
                median = describe(values).median if values else None
                unit = report.summary.events[label].unit if label in report.summary.events else None
                cells.append(td(median, "-" if median is None else units.quantity(median, unit), "median"))
            rows.append(f"<tr><td>{esc(point.suffix)}</td>{td(report.summary.runs, field='n')}"
                        + "".join(cells) + "</tr>")
        title = f"perfctl stat: {self.command} ({len(self.points)} values of {', '.join(parameters)})"
        body = [f"<h1>{name(title)}</h1>", scanplot.section(f"Each event against {axis}", plots),
                "<h2 id=values>Medians at each value</h2>",
                html_table(("value", "runs", *(f"{e} (median)" for e in events)), rows, "values")]
        notes = [f"{point.suffix}: {line}" for point, report in self.points for line in _notes(report.summary)]
        if notes:
            body.append("<h2 id=notes>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
        return document(svg.bounded(title, 200), body)


def _notes(summary) -> list[str]:
    """What the terminal prints under one value's table that the scan's rows do not show: no runs, failed
    runs, how --until-precise or --max-time ended the runs, the shell's cost under --shell."""
    if not summary.runs:
        return ["no measured runs (a failed --setup or hook, or a stop before the first run)"]
    failed = summary.runs - summary.outcomes.get("ok", 0)
    return [f"{failed} of {summary.runs} runs failed"] * bool(failed) + summary.run_notes()


def _values(report, label: str) -> list[float]:
    event = report.summary.events.get(label)
    return list(event.values) if event is not None else []
