"""The report of a comparison: table (rich), JSON, CSV, Markdown. It computes nothing (analysis/ does).

``rows()`` is the one flat view of the per-benchmark results, computed once per report
(``CompareReport.rows``; a row's warnings a tuple, joined into one text only where a format holds text:
``flat``); csv, markdown, the table and the page are that view in four shapes, json adds the overall
summaries and every parameter. ``CompareReport`` keeps the two
Datasets (None for a comparison the server renders) and the context, for a report drawn from the runs.
"""

from __future__ import annotations

import functools
import math

from rich import box
from rich.console import Console
from rich.table import Table

from perfctl import units
from perfctl.analysis.compare import Comparison
from perfctl.analysis.verdicts import DEFAULT_FAIL_ON, SIMULTANEOUS, beyond, read_off
from perfctl.exit_codes import EXIT_NO_VERDICT, outcome_exit
from perfctl.pairing import CompareContext, Compared, compared
from perfctl.report import NORMAL, QUIET, VERBOSE, Report, csv_text, finite, markdown_text
from perfctl.text import cell, visible

ROW_FIELDS = ("benchmark", "metric", "n_a", "n_b", "median_a", "median_b", "ratio_a_over_b", "ratio_low",
              "ratio_high", "interval_level", "verdict", "margin", "beyond", "disturbed", "difference_p_adjusted",
              "equivalence_p_adjusted", "mean_protocol", "median_protocol", "p_a_greater_b", "spa_a_low",
              "spa_a_high", "spa_b_low", "spa_b_high", "speedup_spa_low", "speedup_spa_high", "warnings")

# What each verdict means, said under every table (docs/statistics.md): SPARC's Table I read off the interval,
# or, under --family sparc, off the paper's adjusted tests.
VERDICTS_SPARC = ("verdicts from the paper's tests (SPARC Table I on the adjusted p-values), not from the interval: "
                  "relevant difference: a difference is shown and equivalence is not; trivial difference: both "
                  "are shown; equivalence: only equivalence is shown; indeterminate: neither")
VERDICTS = ("relevant difference: the interval excludes 1 and is not inside the margin band; trivial difference: "
            "it excludes 1 and is inside the band; equivalence: it contains 1 and is inside the band; "
            "indeterminate: neither is shown; disturbed: one side's runs spread or shift in a way a change of "
            "speed cannot explain (its warning says which)")


_HL_UNPAIRED = "the median of all A_i/B_j"
_HL_PAIRED = "exp of the median Walsh average of log A_i/B_i"


def margin_relation(low: float | None, high: float | None, margin: float) -> str:
    """Where an A/B interval lies against the band [1 - margin, 1 + margin]: beyond it (the change is shown
    to exceed the margin), inside it, or across an edge ('-' when an end is unbounded)."""
    if low is None or high is None:
        return "-"
    # read as the verdicts are, exactly (analysis/verdicts.py): an end on an edge is inside the closed band
    if beyond(low, high, margin):
        return "beyond"
    if read_off(low, high, margin)[1]:
        return "inside"
    return "crosses"


def rows(comparison: Comparison) -> list[dict]:
    """A dict per benchmark and metric, of ROW_FIELDS in their order: raw numbers, the verdicts as words and
    ``warnings`` a tuple (cannot conclude and disturbed first, then the benchmark's own)."""
    out = []
    margin = comparison.parameters.margin
    for r in comparison.benchmarks:
        tests = r.sparc.tests if r.sparc else None
        low, high = (r.sparc.low, r.sparc.high) if r.sparc else (None, None)
        out.append({
            "benchmark": r.benchmark, "metric": r.metric, "n_a": r.n_a, "n_b": r.n_b,
            "median_a": r.median_a, "median_b": r.median_b,
            # the Hodges-Lehmann ratio and the interval the verdict reads from (--family sparc: unadjusted)
            "ratio_a_over_b": tests.ratio if tests else None, "ratio_low": low, "ratio_high": high,
            "interval_level": r.sparc.level if r.sparc else None,
            "verdict": r.verdict,
            "margin": margin_relation(low, high, margin) if r.sparc and not r.disturbed else "-",
            "beyond": r.sparc.beyond if r.sparc else None, "disturbed": r.disturbed,
            "difference_p_adjusted": r.sparc.difference_adjusted if r.sparc else None,
            "equivalence_p_adjusted": r.sparc.equivalence_adjusted if r.sparc else None,
            "mean_protocol": r.mean_protocol.verdict if r.mean_protocol else None,
            "median_protocol": r.median_protocol.verdict if r.median_protocol else None,
            "p_a_greater_b": r.p_a_greater_b,
            "spa_a_low": r.spa_a.low if r.spa_a else None, "spa_a_high": r.spa_a.high if r.spa_a else None,
            "spa_b_low": r.spa_b.low if r.spa_b else None, "spa_b_high": r.spa_b.high if r.spa_b else None,
            "speedup_spa_low": r.speedup_spa.low if r.speedup_spa else None,
            "speedup_spa_high": r.speedup_spa.high if r.speedup_spa else None,
            "warnings": ((f"cannot conclude: {r.cannot_conclude}",) if r.cannot_conclude else ())
                        + ((f"disturbed: {r.disturbed}",) if r.disturbed else ()) + tuple(r.warnings),
        })
    return out


def flat(rows: list[dict]) -> list[dict]:
    """The rows as JSON and CSV hold them: each row's warnings one text, "; " between them."""
    return [{**row, "warnings": "; ".join(row["warnings"])} for row in rows]


def statement(comparison: Comparison, context: CompareContext, quote=str) -> list[str]:
    """The lines that say what was compared and how: shown above every table, and in the JSON. ``quote``
    is applied to every part a user or a file gave (names of the inputs, metrics, units, the pairing and
    renaming notes that carry names): Markdown escapes those and leaves perfctl's own words as written."""
    p = comparison.parameters
    units = context.units or {}
    unit_text = ", ".join(f"{quote(m)} in {quote(units[m])}" for m in context.metrics if units.get(m))
    lines = [f"A = {quote(context.a)}  B = {quote(context.b)}  ({quote(context.format)})",
             f"metric: {quote(context.metric_choice)}{f' ({unit_text})' if unit_text else ''}; ratio = A/B, the "
             f"Hodges-Lehmann estimate ({_HL_PAIRED if p.paired else _HL_UNPAIRED}); above 1 B is faster "
             f"(lower {', '.join(quote(m) for m in context.metrics)} is better)",
             _levels(comparison),
             f"equivalence margin [{1 - p.margin:g}, {1 + p.margin:g}]; SPA proportion {p.proportion} at "
             f"confidence {p.confidence}; {quote(context.pairing or 'paired') if p.paired else 'unpaired runs'}"]
    if context.renamed:
        lines.append(quote(context.renamed))
    return lines


def percent(level: float) -> str:
    """A confidence level as people write it: 0.95 -> '95%', 0.99833 -> '99.83%', 0.99998 -> '99.998%'
    (never rounded up to 100%)."""
    for digits in range(2, 9):
        text = f"{level * 100:.{digits}f}"
        if level >= 1 or not text.startswith("100"):
            break
    return f"{text.rstrip('0').rstrip('.')}%"


def _levels(comparison: Comparison) -> str:
    """The line that says at which level the intervals are and how the verdicts follow from them."""
    p = comparison.parameters
    if comparison.family == SIMULTANEOUS and comparison.interval_level is None:
        return f"alpha {p.alpha}: no benchmark could be judged, so no interval is adjusted"
    if comparison.interval_level is not None:
        m = comparison.family_size
        return (f"alpha {p.alpha}: every verdict reads off its A/B interval, at {percent(comparison.interval_level)} "
                f"(1 - {p.alpha:g}/{m}, Bonferroni over {m} benchmark{'s' if m != 1 else ''} x metrics: all "
                f"intervals hold together at {percent(1 - p.alpha)})")
    return (f"alpha {p.alpha} ({p.correction} over SPARC's {comparison.family_size} tests, --family sparc); "
            f"intervals at {percent(p.confidence)}, not adjusted: a verdict may not read off its interval")


def _interval(low, high, digits: int = 4) -> str:
    def fmt(value):
        return "…" if value is None else _number(value, digits)
    return f"[{fmt(low)}, {fmt(high)}]"


def _number(value, digits: int = 4) -> str:
    """A unitless statistic (a p-value, a proportion): ``digits`` significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def _ratio(row: dict, margin: float) -> str:
    """The A/B ratio and its interval, with the digits that make the printed ends read as the verdict does
    against the printed band (units.ratio_ends)."""
    return units.ratio(row["ratio_a_over_b"], row["ratio_low"], row["ratio_high"], margin)


def _table(columns: tuple[str, ...], right: tuple[str, ...]) -> Table:
    # no vertical rules, and only the names may fold: on a terminal of 100 columns a long benchmark name
    # takes more lines, never a number, an interval or a verdict cut in two (tests/test_compare_cli.py)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for column in columns:
        named = column in ("benchmark", "metric")
        table.add_column(column, overflow="fold", no_wrap=not named, min_width=8 if named else None,
                         justify="right" if column in right else "left")
    return table


def render_table(comparison: Comparison, context: CompareContext, table_rows: list[dict], console: Console,
                 verbose: bool = False) -> None:
    """The verdict table (per benchmark: runs, medians in their unit, the A/B ratio with the interval its
    verdict reads from, SPARC's verdict, where the interval lies against the margin band), what the verdicts
    mean, then the details table (the Speedup-Test's median protocol, and its mean protocol under
    --verbose; P[A>B], SPA's intervals), warnings and the overall summaries."""
    for line in statement(comparison, context):
        console.print(visible(line), markup=False, highlight=False)
    metric_units = context.units or {}
    p = comparison.parameters
    level = comparison.interval_level or p.confidence
    # the metric is named in a column only when there are several (the statement above names it): the
    # tables of a one-metric comparison fit 100 columns
    several = len(context.metrics) > 1
    ratio_column = f"A/B [{percent(level)}]"
    band = f"±{p.margin:g}"
    table = _table(("benchmark", *(("metric",) if several else ()), "n A/B", "median A", "median B", ratio_column,
                    "SPARC", band), right=("n A/B", "median A", "median B", ratio_column))
    details = _table(("benchmark", *(("metric",) if several else ()), *(("mean",) if verbose else ()), "median",
                      "P[A>B]", f"SPA v{p.proportion:g} A", "SPA B"), right=("P[A>B]",))
    details.title = ("details: the Speedup-Test's " + ("mean and median protocols" if verbose else "median protocol")
                     + f", P[A>B], SPA's {percent(p.confidence)} intervals")
    details.title_justify = "left"
    for row in table_rows:
        unit = metric_units.get(row["metric"])
        metric = (cell(row["metric"]),) if several else ()
        table.add_row(cell(row["benchmark"]), *metric, f"{row['n_a']}/{row['n_b']}",
                      units.quantity(row["median_a"], unit), units.quantity(row["median_b"], unit),
                      _ratio(row, p.margin), row["verdict"], row["margin"])
        details.add_row(cell(row["benchmark"]), *metric, *((row["mean_protocol"] or "-",) if verbose else ()),
                        row["median_protocol"] or "-", _number(row["p_a_greater_b"], 3),
                        units.interval(row["spa_a_low"], row["spa_a_high"], unit),
                        units.interval(row["spa_b_low"], row["spa_b_high"], unit))
    console.print(table)
    console.print()
    console.print(f"{band}: the interval lies beyond the margin band (the change is shown to exceed it), inside "
                  "it, or crosses an edge. " + legend(comparison), markup=False, highlight=False)
    console.print()
    console.print(details)
    console.print()
    for row in table_rows:
        # the mean protocol's own warnings go with its column, under --verbose
        said = [w for w in row["warnings"] if w and (verbose or not w.startswith("mean protocol:"))]
        if said:
            console.print(visible(f"  {row['benchmark']} ({row['metric']}): {'; '.join(said)}"), markup=False,
                          highlight=False)
    for summary in comparison.summaries:
        for line in overall_lines(summary, p):
            console.print(visible(line), markup=False, highlight=False)
    if comparison.only_a or comparison.only_b:
        console.print(visible(f"only in A: {', '.join(comparison.only_a) or '-'}; "
                              f"only in B: {', '.join(comparison.only_b) or '-'}"),
                      markup=False, highlight=False)


def legend(comparison: Comparison) -> str:
    return VERDICTS if comparison.family == SIMULTANEOUS else VERDICTS_SPARC


def overall_lines(summary, p) -> list[str]:
    """The overall summary of one metric, each number saying what it is (the table's and the page's)."""
    lines = [f"overall, {summary.metric}:"]
    if summary.speedup_median is None:
        return lines + ["  no benchmark could be judged"]
    median, mean = summary.speedup_median, summary.speedup_mean
    lines.append(f"  speedup of medians {_fixed(median.speedup)} = sum of A's medians / sum of B's (gain "
                 f"{_fixed(median.gain, '+.2%')}), of means {_fixed(mean.speedup)} (gain {_fixed(mean.gain, '+.2%')}),"
                 f" over {median.benchmarks} benchmark{'s' if median.benchmarks != 1 else ''} (Speedup-Test Eq. 1-2, "
                 "equal weights; not the "
                 "Hodges-Lehmann ratios of the table)")
    acc, exact = summary.accelerated, summary.accelerated_exact
    lines.append(f"  B faster (median protocol) on {acc.accelerated} of {acc.benchmarks}: proportion "
                 f"{acc.proportion:.3f}, {acc.confidence:.0%} CI {_interval(acc.low, acc.high, 3)} (Wilson, "
                 f"continuity-corrected) / {_interval(exact.low, exact.high, 3)} (Clopper-Pearson); "
                 f"{summary.benchmarks_needed} benchmarks for ±{p.precision}")
    note = getattr(summary, "proportion_note", None)
    lines += [f"  note: {text}" for text in ((note,) if note else ()) + tuple(acc.warnings)]
    overall = summary.sparc_overall
    if overall is not None:
        if overall.pvalue is None:
            text = overall.reason
        else:
            text = (f"Wilcoxon signed-rank over {overall.benchmarks_used} benchmarks' ratios of medians "
                    f"({overall.set_aside} set aside as equivalent or trivial): p = {overall.pvalue:.4g} at "
                    f"alpha {overall.alpha:.4g}: " + (f"B {overall.direction} overall" if overall.rejected
                                                      else "no overall difference shown"))
        lines.append(f"  SPARC overall: {text}")
    return lines


def _fixed(value, spec: str = ".4f") -> str:
    return f"{value:{spec}}" if value is not None and math.isfinite(value) else "-"


def document(comparison: Comparison, context: CompareContext, table_rows: list[dict], notes: list[str] = (),
             fail_on: str = DEFAULT_FAIL_ON) -> dict:
    """The JSON document: the per-benchmark rows, the overall summaries, every parameter, raw numbers."""
    summaries = []
    for s in comparison.summaries:
        entry = {"metric": s.metric, "benchmarks": s.benchmarks}
        if s.speedup_median is not None:
            entry.update(
                speedup_median=s.speedup_median.speedup, gain_median=s.speedup_median.gain,
                speedup_mean=s.speedup_mean.speedup, gain_mean=s.speedup_mean.gain,
                accelerated=s.accelerated.accelerated, judged=s.accelerated.benchmarks,
                accelerated_proportion=s.accelerated.proportion,
                accelerated_ci_wilson_cc=[s.accelerated.low, s.accelerated.high],
                accelerated_ci_clopper_pearson=[s.accelerated_exact.low, s.accelerated_exact.high],
                accelerated_notes=list(s.accelerated.warnings), benchmarks_needed=s.benchmarks_needed,
                proportion_note=getattr(s, "proportion_note", None))
        if s.sparc_overall is not None:
            o = s.sparc_overall
            entry["sparc_overall"] = {"pvalue": o.pvalue, "alpha": o.alpha, "rejected": o.rejected,
                                      "direction": o.direction, "benchmarks_used": o.benchmarks_used,
                                      "set_aside": o.set_aside, "reason": o.reason}
        summaries.append(entry)
    p = comparison.parameters
    out = {
        "a": context.a, "b": context.b, "format": context.format, "metrics": list(context.metrics),
        "metric_choice": context.metric_choice, "ratio": "A/B (above 1: B faster)",
        # the unit of each metric's raw values (medians, SPA bounds): "ns" for times, "count" or the tool's
        "units": {metric: (context.units or {}).get(metric) or None for metric in context.metrics},
        "parameters": {"alpha": p.alpha, "confidence": p.confidence, "proportion": p.proportion,
                       "margin": p.margin, "paired": p.paired, "correction": p.correction,
                       "precision": p.precision, "seed": p.seed, "family": p.family, "fail_on": fail_on},
        # the level of every interval the verdicts read from (null under --family sparc: they do not)
        "interval_level": comparison.interval_level, "family_size": comparison.family_size,
        "verdicts": legend(comparison),
        "statement": statement(comparison, context),
        "benchmarks": flat(table_rows), "overall": summaries,
        "only_a": list(comparison.only_a), "only_b": list(comparison.only_b),
        "relevant_slowdowns": [r.benchmark for r in comparison.relevant_slowdowns],
        "failures": [r.benchmark for r in comparison.failures(fail_on)],
        # what was left out of the inputs and why (warmups, failed or interfered runs, unusable samples)
        "notes": list(notes),
    }
    return finite(out)


def to_csv(table_rows: list[dict]) -> str:
    return csv_text(flat(table_rows), ROW_FIELDS)


def to_markdown(comparison: Comparison, context: CompareContext, table_rows: list[dict], notes: list[str] = ()) -> str:
    """The comparison as Markdown, for a CI comment: every text a user, a file, an agent or a server gave
    goes through the one escaping owner (perfctl/report's ``markdown_text``), so names and units render as
    the text they are; perfctl's own words and numbers are written as they are (plain text in Markdown:
    no * ` | < or link syntax), so that they read as written (``metric:``, not ``metric\\:``). Notes mix
    both and are escaped whole."""
    lines = [f"> {line}" for line in statement(comparison, context, markdown_text)] + [""]
    level = percent(comparison.interval_level or comparison.parameters.confidence)
    lines.append("| " + " | ".join(("benchmark", "metric", "n A/B", "median A", "median B", f"A/B [{level}]",
                                    "SPARC", f"±{comparison.parameters.margin:g}", "mean", "median",
                                    "P[A&gt;B]")) + " |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    metric_units = context.units or {}
    for row in table_rows:
        unit = metric_units.get(row["metric"])
        # names and quantities (a unit comes from a file) escaped; the rest are perfctl's numbers and words
        lines.append("| " + " | ".join(map(str, (markdown_text(row['benchmark']), markdown_text(row['metric']),
                                        f"{row['n_a']}/{row['n_b']}",
                                        markdown_text(units.quantity(row['median_a'], unit)),
                                        markdown_text(units.quantity(row['median_b'], unit)),
                                        _ratio(row, comparison.parameters.margin), row['verdict'], row['margin'],
                                        row['mean_protocol'] or '-', row['median_protocol'] or '-',
                                        _number(row['p_a_greater_b'], 3)))) + " |")
    for summary in comparison.summaries:
        if summary.speedup_median is not None:
            lines.append("")
            lines.append(f"Overall ({markdown_text(summary.metric)}): speedup of medians (sum of A's medians / "
                         f"sum of B's) {_fixed(summary.speedup_median.speedup)}, "
                         f"B faster on {summary.accelerated.accelerated} of {summary.accelerated.benchmarks}.")
    lines += ["", f"Verdicts: {legend(comparison)}."]
    if notes:
        lines.append("")
        lines += [f"- note: {markdown_text(note)}" for note in notes]
    return "\n".join(lines) + "\n"



def exit_code(comparison: Comparison, fail_on: str = DEFAULT_FAIL_ON) -> int:
    """perfctl/exit_codes.py's mapping of a comparison: 3 a slowdown of B that --fail-on counts (relevant: a
    relevant difference with B slower; beyond: an interval entirely below 1 - margin); 4 no benchmark could
    be judged (docs/statistics.md); else 0."""
    return outcome_exit(slowdown=bool(comparison.failures(fail_on)),
                        decided=not all(r.cannot_conclude or r.disturbed for r in comparison.benchmarks))


class CompareReport(Report):
    """A comparison with its context and the notes on what the inputs left out; ``datasets`` are the two
    perfctl.formats Datasets it was computed from (None when the server compared stored samples)."""

    kind = "compare"
    formats = ("table", "json", "csv", "markdown", "html")

    def __init__(self, comparison: Comparison, context: CompareContext, notes: list[str] = (), datasets=None,
                 verbosity: int = NORMAL, fail_on: str = DEFAULT_FAIL_ON, sequential=None):
        self.comparison, self.context, self.notes = comparison, context, list(notes)
        self.datasets, self.verbosity, self.fail_on = datasets, verbosity, fail_on
        self.sequential = sequential

    @functools.cached_property
    def rows(self) -> list[dict]:
        """The rows of every format, computed once (``rows``)."""
        return rows(self.comparison)

    def table(self, console: Console) -> None:
        if self.verbosity <= QUIET:  # only what fails a CI job: the relevant slowdowns, or nothing judged
            for line in failure_lines(self.comparison, self.rows, self.fail_on):
                console.print(visible(line), markup=False, highlight=False)
            return
        render_table(self.comparison, self.context, self.rows, console, verbose=self.verbosity >= VERBOSE)
        if self.sequential is not None:
            from perfctl.report.ab import replay_line

            console.print(visible(replay_line(self.sequential)), markup=False, highlight=False)
        for note in self.notes:
            console.print(visible(f"note: {note}"), markup=False, highlight=False)

    def document(self) -> dict:
        out = document(self.comparison, self.context, self.rows, self.notes, self.fail_on)
        if self.sequential is not None:
            from perfctl.report.ab import replay_document

            out["sequential"] = replay_document(self.sequential)
        return out

    def csv(self) -> str:
        return to_csv(self.rows)

    def markdown(self) -> str:
        return to_markdown(self.comparison, self.context, self.rows, self.notes)

    def html(self) -> str:
        from perfctl.report.html import compare_page

        p = self.comparison.parameters
        overall = {summary.metric: overall_lines(summary, p)[1:] for summary in self.comparison.summaries}
        said = (f"±{p.margin:g}: the interval lies beyond the margin band (the change is shown to exceed it), "
                f"inside it, or crosses an edge. {legend(self.comparison)}.")
        return compare_page(self.comparison, self.context, self.rows,
                            statement(self.comparison, self.context), self.notes, _as_compared(self.datasets,
                                                                                                self.context),
                            overall=overall, legend=said)

    def exit_code(self) -> int:
        return exit_code(self.comparison, self.fail_on)


def _as_compared(datasets, context: CompareContext):
    """A and B's datasets with each of B's benchmarks under the name of the A benchmark it was compared
    with (the pairing's mapping, CompareContext.renames): the report's rows are named after A, and its plots
    look B's runs up under that name."""
    if datasets is None or not context.renames:
        return datasets
    from dataclasses import replace

    a, b = datasets
    wanted = {name_b: name_a for name_a, name_b in context.renames.items()}
    benchmarks = {wanted.get(name, name): bench for name, bench in b.benchmarks.items()}
    return a, replace(b, benchmarks=benchmarks)


def failure_lines(comparison: Comparison, table_rows: list[dict], fail_on: str = DEFAULT_FAIL_ON) -> list[str]:
    """What makes the exit code non-zero, one line each (the table under --quiet)."""
    slow = {(r.benchmark, r.metric) for r in comparison.failures(fail_on)}
    what = "relevant slowdown of B" if fail_on == "relevant" else "slowdown of B beyond the margin"
    lines = [f"{what}: {row['benchmark']} ({row['metric']}) A/B {_ratio(row, comparison.parameters.margin)}"
             for row in table_rows if (row["benchmark"], row["metric"]) in slow]
    if not lines and exit_code(comparison, fail_on) == EXIT_NO_VERDICT:
        reasons = "; ".join(f"{r.benchmark}: {r.cannot_conclude or 'disturbed: ' + r.disturbed}"
                            for r in comparison.benchmarks[:3])
        lines.append("no benchmark could be judged" + (f": {reasons}" if reasons else ""))
    return lines


def compare_report(a, b, metrics, parameters, labels: tuple[str, str], verbosity: int = NORMAL,
                   fail_on: str = DEFAULT_FAIL_ON, workers=map) -> CompareReport:
    """Pair two Datasets and compare them (``workers``: see analysis/compare.py). Raises PairingError."""
    result = compared(a, b, metrics, parameters, labels, workers)
    return CompareReport(result.comparison, result.context, result.notes, datasets=(a, b), verbosity=verbosity,
                         fail_on=fail_on)


def from_compared(result: Compared, verbosity: int = NORMAL, fail_on: str = DEFAULT_FAIL_ON,
                  sequential=None) -> CompareReport:
    """The report of a comparison computed elsewhere (the server's, rebuilt by perfctl/results.py), with the
    --until-settled job's own decision beside it when the server replayed one (analysis/ab.py Replay)."""
    return CompareReport(result.comparison, result.context, result.notes, verbosity=verbosity, fail_on=fail_on,
                         sequential=sequential)
