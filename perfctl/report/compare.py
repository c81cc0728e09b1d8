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
from collections import Counter

from rich import box
from rich.console import Console
from rich.table import Table

from perfctl import units
from perfctl.analysis import stability
from perfctl.analysis.compare import FEW_BENCHMARKS, Comparison
from perfctl.analysis.verdicts import (
    DEFAULT_FAIL_ON,
    SIMULTANEOUS,
    Verdict,
    beyond,
    finding,
    margin_words,
    read_off,
    runs_to_settle,
)
from perfctl.exit_codes import EXIT_NO_VERDICT, outcome_exit
from perfctl.output import paragraph, show
from perfctl.pairing import CompareContext, Compared, compared
from perfctl.report import NORMAL, QUIET, VERBOSE, Report, csv_text, finite, markdown_text
from perfctl.text import cell, visible
from perfctl.units import percent

ROW_FIELDS = ("benchmark", "metric", "n_a", "n_b", "median_a", "median_b", "ratio_a_over_b", "ratio_low",
              "ratio_high", "interval_level", "verdict", "finding", "margin", "beyond", "disturbed",
              "difference_p_adjusted", "equivalence_p_adjusted", "mean_protocol", "median_protocol", "p_a_greater_b",
              "spa_a_low", "spa_a_high", "spa_b_low", "spa_b_high", "speedup_spa_low", "speedup_spa_high", "warnings",
              "remedies")

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
            "finding": finding(r.verdict, tests.ratio if tests else None, r.sparc.beyond if r.sparc else None,
                               margin),
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
            "remedies": tuple(r.remedies),
        })
    return out


def flat(rows: list[dict]) -> list[dict]:
    """The rows as JSON and CSV hold them: each row's warnings one text, "; " between them."""
    return [{**row, "warnings": "; ".join(row["warnings"]), "remedies": "; ".join(row["remedies"])} for row in rows]


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


def headline(comparison: Comparison, table_rows: list[dict], fail_on: str = DEFAULT_FAIL_ON, quote=visible) -> str:
    """The one sentence that leads every output of a comparison: what changed, by how much, with what
    confidence, and why the exit code is what it is. Read off the same rows and intervals as the table.
    ``quote`` is applied to the names (benchmarks, metrics) a file or a server gave: ``visible`` for a
    terminal, Markdown's escaping for Markdown, ``str`` for JSON and HTML (which escape them themselves).

    "B slower on 1 of 3 benchmarks: sort 0.799× [0.702, 0.910]; B faster on 1: matmul 4.319× [4.1, 4.5]
    beyond ±5%; 1 equivalent within ±5%. All 3 intervals hold together with 95% confidence. Exit 3: sort
    slower (--fail-on relevant)."
    """
    p = comparison.parameters
    several = len({row["metric"] for row in table_rows}) > 1

    def named(row: dict) -> str:
        name = quote(row["benchmark"]) + (f" ({quote(row['metric'])})" if several else "")
        return f"{name} {_ratio(row, p.margin)}" + (f" beyond {margin_words(p.margin)}" if row["beyond"] else "")

    def listed(found: list[dict]) -> str:
        shown = ", ".join(named(row) for row in found[:HEADLINE_NAMES])
        return shown + (f" and {len(found) - HEADLINE_NAMES} more" if len(found) > HEADLINE_NAMES else "")

    total = len(table_rows)
    what = f"benchmark{'s' if total != 1 else ''}" + (" x metrics" if several else "")
    # a difference shown beyond the margin or across an edge (a relevant difference), by its direction
    changed = {way: [row for row in table_rows if row["verdict"] == Verdict.RELEVANT and not row["disturbed"]
                     and row["finding"].startswith(f"B {way}")] for way in ("slower", "faster")}
    parts = []
    for way, found in changed.items():
        if found:
            of = f" of {total} {what}" if not parts else ""
            parts.append(f"B {way} on {len(found)}{of}: {listed(found)}")
    shown = {id(row) for found in changed.values() for row in found}
    rest = Counter(row["finding"] for row in table_rows if id(row) not in shown)
    counted = ", ".join(f"{n} {finding}" for finding, n in rest.items())
    if exit_code(comparison, fail_on) == EXIT_NO_VERDICT:
        sentence = f"No benchmark could be judged: {counted}"
    elif parts:
        sentence = "; ".join(parts) + (f"; {counted}" if counted else "")
    elif len(rest) == 1:
        kind = next(iter(rest))
        which = "the benchmark" if total == 1 else f"{'both' if total == 2 else f'all {total}'} {what}"
        if kind.startswith("equivalent"):
            sentence = f"No change: {which} {'is' if total == 1 else 'are'} {kind}"
        elif kind == "no difference shown":
            sentence = f"No difference shown on {which}"
        else:
            sentence = f"{which[0].upper()}{which[1:]}: {kind}"
    else:  # several kinds, none a difference shown beyond an edge: the counts say it
        sentence = f"On {total} {what}: {counted}"
    intervals = any(row["ratio_low"] is not None and row["ratio_high"] is not None for row in table_rows)
    return " ".join(part for part in (f"{sentence}.", _confidence(comparison) if intervals else "",
                                      _exit_reason(comparison, table_rows, fail_on, quote)) if part)


# how many benchmarks the headline names per direction; the table names them all
HEADLINE_NAMES = 3


def _confidence(comparison: Comparison) -> str:
    p = comparison.parameters
    if comparison.family != SIMULTANEOUS:
        return f"Verdicts from SPARC's tests at alpha {p.alpha:g} ({p.correction}, --family sparc)."
    if comparison.interval_level is None:
        return ""
    m = comparison.family_size
    return (f"The interval{'s' if m != 1 else ''} hold{'' if m != 1 else 's'} {'together ' if m > 1 else ''}"
            f"with {percent(1 - p.alpha)} confidence.")


def _exit_reason(comparison: Comparison, table_rows: list[dict], fail_on: str, quote=visible) -> str:
    code = exit_code(comparison, fail_on)
    if code == EXIT_NO_VERDICT:
        return f"Exit {code}: no benchmark could be judged."
    failed = {(r.benchmark, r.metric) for r in comparison.failures(fail_on)}
    beyond_words = " beyond the margin" if fail_on == "beyond" else ""
    if failed:
        several = len({row["metric"] for row in table_rows}) > 1
        names = [quote(row["benchmark"]) + (f" ({quote(row['metric'])})" if several else "")
                 for row in table_rows if (row["benchmark"], row["metric"]) in failed]
        shown = ", ".join(names[:HEADLINE_NAMES]) + (" and more" if len(names) > HEADLINE_NAMES else "")
        return f"Exit {code}: {shown} slower{beyond_words} (--fail-on {fail_on})."
    return f"Exit {code}: no slowdown of B{beyond_words} (--fail-on {fail_on})."


def footer(comparison: Comparison, context: CompareContext) -> str:
    """The method in one sentence, under the table: what the ratio is, which way is better, the level of the
    intervals and the margin (the whole statement under -v and in docs/statistics.md)."""
    p = comparison.parameters
    metrics = ", ".join(visible(m) for m in context.metrics)
    if comparison.family != SIMULTANEOUS:
        level = (f"verdicts from SPARC's tests ({p.correction} at alpha {p.alpha:g}), intervals at "
                 f"{percent(p.confidence)}, not adjusted")
    elif comparison.interval_level is not None and comparison.family_size > 1:
        level = (f"intervals at {percent(comparison.interval_level)} (Bonferroni over {comparison.family_size}: "
                 f"{percent(1 - p.alpha)} together)")
    else:
        level = f"intervals at {percent(comparison.interval_level or p.confidence)}"
    return (f"A/B = Hodges-Lehmann ratio of {metrics} ({'paired' if p.paired else 'unpaired'} runs), lower is better:"
            f" above 1 B is faster; {level}; margin {margin_words(p.margin)}. -v: the method and details; "
            "docs/statistics.md.")


def render_table(comparison: Comparison, context: CompareContext, table_rows: list[dict], console: Console,
                 verbose: bool = False, fail_on: str = DEFAULT_FAIL_ON, notes: list[str] = ()) -> None:
    """The headline, the verdict table (per benchmark: runs, medians in their unit, the A/B ratio with the
    interval its verdict reads from, the verdict with its direction), what a reader needs beside it (the
    benchmarks' warnings, what would settle an open verdict, the overall line), then the method in a line.
    -v adds the statement of how, SPARC's words, where each interval lies against the band, the details
    table (the Speedup-Test's protocols, P[A>B], SPA's intervals) and every overall caveat."""
    paragraph(console, headline(comparison, table_rows, fail_on))
    console.print()
    if verbose:
        for line in statement(comparison, context):
            paragraph(console, visible(line))
        console.print()
    metric_units = context.units or {}
    p = comparison.parameters
    level = comparison.interval_level or p.confidence
    # the metric is named in a column only when there are several (the footer names it)
    several = len(context.metrics) > 1
    ratio_column = f"A/B [{percent(level)}]"
    band = margin_words(p.margin)
    table = _table(("benchmark", *(("metric",) if several else ()), "n A/B", "median A", "median B", ratio_column,
                    "verdict", *((band,) if verbose else ())),
                   right=("n A/B", "median A", "median B", ratio_column))
    for row in table_rows:
        unit = metric_units.get(row["metric"])
        metric = (cell(row["metric"]),) if several else ()
        table.add_row(cell(row["benchmark"]), *metric, f"{row['n_a']}/{row['n_b']}",
                      units.quantity(row["median_a"], unit), units.quantity(row["median_b"], unit),
                      _ratio(row, p.margin), row["finding"], *((row["margin"],) if verbose else ()))
    show(console, table, lead=-2 if verbose else -1)  # the verdict first on a line of its own
    console.print()
    said = False
    # each warning once, with every benchmark it concerns ("hashtable, sort: measured in blocks ...")
    concerned: dict[str, list[str]] = {}
    for row in table_rows:
        # the mean protocol's own warnings go with its column, under --verbose
        warned = _both_sides([w for w in row["warnings"] if w and (verbose or not w.startswith("mean protocol:"))])
        settle = next_step(row, p.margin)
        name = visible(row["benchmark"]) + (f" ({visible(row['metric'])})" if several else "")
        for text in warned + ([settle] if settle else []):
            concerned.setdefault(text, []).append(name)
    for text, names in concerned.items():
        paragraph(console, f"{', '.join(names)}: {visible(text)}")
        said = True
    remedies = stability.merged(remedy for row in table_rows for remedy in row["remedies"])
    if remedies:  # each once, for every benchmark whose runs look unstable
        paragraph(console, f"The runs may be unstable: {'; '.join(remedies)}.")
    for summary in comparison.summaries:
        for line in overall_lines(summary, p, verbose):
            paragraph(console, visible(line))
            said = True
    if comparison.only_a or comparison.only_b:
        paragraph(console, visible(f"only in A: {', '.join(comparison.only_a) or '-'}; "
                                   f"only in B: {', '.join(comparison.only_b) or '-'}"))
        said = True
    names = [row["benchmark"] for row in table_rows] + [*comparison.only_a, *comparison.only_b]
    # how benchmarks were paired under other names changes the reading of every row: said without -v too
    for note in ([context.renamed] if context.renamed and not verbose else []) + collapsed(notes, names):
        paragraph(console, visible(f"note: {note}"))
        said = True
    if said:
        console.print()
    if verbose:
        paragraph(console, f"{band}: the interval lies beyond the margin band (the change is shown to exceed "
                           f"it), inside it, or crosses an edge. SPARC: {legend(comparison)}")
        console.print()
        details = _table(("benchmark", *(("metric",) if several else ()), "SPARC", "mean", "median", "P[A>B]"),
                         right=("P[A>B]",))
        details.title = "details: SPARC, the Speedup-Test's protocols, P[A>B]"
        spa = _table(("benchmark", *(("metric",) if several else ()), f"SPA v{p.proportion:g} A", "SPA B"), right=())
        spa.title = f"SPA's {percent(p.confidence)} intervals of each side's {p.proportion:g} quantile"
        details.title_justify = spa.title_justify = "left"
        for row in table_rows:
            unit = metric_units.get(row["metric"])
            named = (cell(row["benchmark"]), *((cell(row["metric"]),) if several else ()))
            details.add_row(*named, row["verdict"], row["mean_protocol"] or "-", row["median_protocol"] or "-",
                            _number(row["p_a_greater_b"], 3))
            spa.add_row(*named, units.interval(row["spa_a_low"], row["spa_a_high"], unit),
                        units.interval(row["spa_b_low"], row["spa_b_high"], unit))
        for extra in (details, spa):
            show(console, extra)
            console.print()
    paragraph(console, footer(comparison, context))


def next_step(row: dict, margin: float) -> str | None:
    """For a benchmark with no verdict yet (no difference shown, and equivalence not shown either): about how
    many runs a side could settle it, if the runs spread as these do (analysis/verdicts.py runs_to_settle)."""
    if row["verdict"] != Verdict.INDETERMINATE or row["ratio_a_over_b"] is None:
        return None
    n = min(row["n_a"], row["n_b"])
    if row["ratio_low"] is None or row["ratio_high"] is None:
        return f"no interval: {n} runs a side are too few for one at this level; measure more runs"
    needed = runs_to_settle(row["ratio_a_over_b"], row["ratio_low"], row["ratio_high"], n, margin)
    if needed is None:
        return (f"no difference shown, and equivalence within {margin_words(margin)} not either; more than "
                f"100 times the runs would be needed (now {n} a side)")
    return (f"no difference shown yet: about {needed} runs a side could settle it, if they spread as these "
            f"{n} do (an estimate)")


def _both_sides(warnings: list[str]) -> list[str]:
    """A warning said of A and of B in the same words, said once of both ("A and B: ...")."""
    said = list(dict.fromkeys(warnings))
    out = []
    for warning in said:
        if warning.startswith("B: ") and f"A: {warning[3:]}" in said:
            continue
        if warning.startswith("A: ") and f"B: {warning[3:]}" in said:
            warning = f"A and B: {warning[3:]}"
        out.append(warning)
    return out


def collapsed(notes, names) -> list[str]:
    """The notes once each, those that differ only in the benchmark they name said once for all of them
    ("A and B: matmul, sort: left out 4 warmup runs", not a line per benchmark)."""
    groups: dict[str, list[str]] = {}
    longest_first = sorted(set(names), key=len, reverse=True)
    for note in dict.fromkeys(notes):
        named = next((n for n in longest_first if f"{n}: " in note), None)
        template = note.replace(f"{named}: ", "\0: ", 1) if named else note
        groups.setdefault(template, [])
        if named:
            groups[template].append(named)
    return [template.replace("\0", ", ".join(found), 1) if found else template
            for template, found in groups.items()]


def legend(comparison: Comparison) -> str:
    return VERDICTS if comparison.family == SIMULTANEOUS else VERDICTS_SPARC


def overall_lines(summary, p, verbose: bool = True, quote=str) -> list[str]:
    """The overall summary of one metric, each number saying what it is (the table's and the page's): the
    geometric mean of the ratios with its interval, the Speedup-Test's weighted speedups, and, for a suite
    large enough to say something (or under -v), the proportion of benchmarks B speeds up and SPARC's
    overall test."""
    if summary.speedup_median is None:
        return [f"overall, {quote(summary.metric)}: no benchmark could be judged"]
    median, mean = summary.speedup_median, summary.speedup_mean
    if median.benchmarks < 2 and not verbose:  # one benchmark's table row says it all
        return []
    lines = [f"overall, {quote(summary.metric)}, {median.benchmarks} benchmark{'s' if median.benchmarks != 1 else ''}:"]
    g = summary.geomean
    if g is not None:
        way = "B faster" if g.low > 1 else "B slower" if g.high < 1 else "no overall difference shown"
        others = median.benchmarks - g.benchmarks
        lines.append(f"  geometric mean of the A/B ratios {units.ratio(g.ratio, g.low, g.high, p.margin)} at "
                     f"{percent(g.confidence)} ({way}; the suite as it is, over {g.benchmarks} of its "
                     f"{median.benchmarks} benchmarks" + (f": {others} disturbed or without an interval left out)"
                                                          if others else ")"))
    lines.append(f"  Speedup-Test's weighted speedups: of medians {_fixed(median.speedup)} (sum of A's medians / "
                 f"sum of B's, gain {_fixed(median.gain, '+.2%')}), of means {_fixed(mean.speedup)} (gain "
                 f"{_fixed(mean.gain, '+.2%')}); equal weights, so the longest benchmarks dominate (Eq. 1-2)")
    if not verbose and median.benchmarks < FEW_BENCHMARKS:
        return lines
    acc, exact = summary.accelerated, summary.accelerated_exact
    lines.append(f"  B faster (median protocol) on {acc.accelerated} of {acc.benchmarks}: proportion "
                 f"{acc.proportion:.3f}, {acc.confidence:.0%} CI {_interval(acc.low, acc.high, 3)} (Wilson, "
                 f"continuity-corrected) / {_interval(exact.low, exact.high, 3)} (Clopper-Pearson); "
                 f"{summary.benchmarks_needed} benchmarks for ±{p.precision}")
    note = summary.proportion_note
    lines += [f"  note: {text}" for text in ((note,) if note else ()) + tuple(acc.warnings)]
    overall = summary.sparc_overall
    if overall is not None and (verbose or overall.pvalue is not None):
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
                proportion_note=s.proportion_note)
        if s.geomean is not None:  # the geometric mean of the ratios with its interval (analysis/summary.py)
            entry["geometric_mean"] = {"ratio": s.geomean.ratio, "low": s.geomean.low, "high": s.geomean.high,
                                       "confidence": s.geomean.confidence, "benchmarks": s.geomean.benchmarks}
        if s.sparc_overall is not None:
            o = s.sparc_overall
            entry["sparc_overall"] = {"pvalue": o.pvalue, "alpha": o.alpha, "rejected": o.rejected,
                                      "direction": o.direction, "benchmarks_used": o.benchmarks_used,
                                      "set_aside": o.set_aside, "reason": o.reason}
        summaries.append(entry)
    p = comparison.parameters
    out = {
        "headline": headline(comparison, table_rows, fail_on, str),
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


def to_markdown(comparison: Comparison, context: CompareContext, table_rows: list[dict], notes: list[str] = (),
                fail_on: str = DEFAULT_FAIL_ON) -> str:
    """The comparison as Markdown, for a CI comment: the headline in bold, the verdict table, the overall
    lines, the notes, then the statement of method. Every text a user, a file, an agent or a server gave goes
    through the one escaping owner (perfctl/report's ``markdown_text``), so names and units render as the
    text they are; perfctl's own words and numbers are written as they are (plain text in Markdown: no * `
    | < or link syntax), so that they read as written (``metric:``, not ``metric\\:``). Notes mix both and
    are escaped whole; the headline escapes the names it gives (``headline``'s ``quote``)."""
    p = comparison.parameters
    lines = [f"**{headline(comparison, table_rows, fail_on, markdown_text)}**", ""]
    level = percent(comparison.interval_level or p.confidence)
    lines.append("| " + " | ".join(("benchmark", "metric", "n A/B", "median A", "median B", f"A/B [{level}]",
                                    "verdict", margin_words(p.margin), "SPARC", "median",
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
                                        _ratio(row, p.margin), row['finding'], row['margin'], row['verdict'],
                                        row['median_protocol'] or '-',
                                        _number(row['p_a_greater_b'], 3)))) + " |")
    overall = [line for summary in comparison.summaries
               for line in overall_lines(summary, p, verbose=False, quote=markdown_text)]
    if overall:
        lines += ["", overall[0], *(f"- {line.strip()}" for line in overall[1:])]
    names = [row["benchmark"] for row in table_rows] + [*comparison.only_a, *comparison.only_b]
    if notes:
        lines.append("")
        lines += [f"- note: {markdown_text(note)}" for note in collapsed(notes, names)]
    lines += ["", *(f"> {line}" for line in statement(comparison, context, markdown_text)),
              "", f"Verdicts: {legend(comparison)}."]
    return "\n".join(lines) + "\n"


def exit_code(comparison: Comparison, fail_on: str = DEFAULT_FAIL_ON) -> int:
    """perfctl/exit_codes.py's mapping of a comparison: 3 a slowdown of B that --fail-on counts (relevant: a
    relevant difference with B slower; beyond: an interval entirely below 1 - margin); 4 no benchmark could
    be judged (docs/statistics.md); else 0."""
    return outcome_exit(slowdown=bool(comparison.failures(fail_on)),
                        decided=not all(r.cannot_conclude or r.disturbed for r in comparison.benchmarks))


def _unjudged(r, family: str) -> str | None:
    """Why a benchmark's verdict is no judgement (None when it is one): it cannot be concluded, its runs
    look disturbed, or (verdicts read off intervals) too few runs gave no interval, so "no difference
    shown" says nothing about the change."""
    if r.cannot_conclude:
        return r.cannot_conclude
    if r.disturbed:
        return f"disturbed: {r.disturbed}"
    if family == SIMULTANEOUS and (r.sparc is None or r.sparc.low is None or r.sparc.high is None):
        return f"too few runs for an interval ({r.n_a} and {r.n_b})"
    return None



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
                paragraph(console, visible(line))
            return
        render_table(self.comparison, self.context, self.rows, console, verbose=self.verbosity >= VERBOSE,
                     fail_on=self.fail_on, notes=self.notes)
        if self.sequential is not None:
            from perfctl.report.ab import replay_line

            paragraph(console, visible(replay_line(self.sequential)))

    @functools.cached_property
    def headline(self) -> str:
        """The sentence every output of the comparison leads with (``headline``)."""
        return headline(self.comparison, self.rows, self.fail_on)

    def document(self) -> dict:
        out = document(self.comparison, self.context, self.rows, self.notes, self.fail_on)
        if self.sequential is not None:
            from perfctl.report.ab import replay_document

            out["sequential"] = replay_document(self.sequential)
        return out

    def csv(self) -> str:
        return to_csv(self.rows)

    def markdown(self) -> str:
        return to_markdown(self.comparison, self.context, self.rows, self.notes, self.fail_on)

    def html(self) -> str:
        from perfctl.report.html import compare_page

        p = self.comparison.parameters
        # the page shows what the table shows, and every caveat one click away (as -v does)
        overall = {s.metric: overall_lines(s, p, verbose=False)[1:] for s in self.comparison.summaries}
        caveats = {summary.metric: overall_lines(summary, p)[1:] for summary in self.comparison.summaries}
        said = (f"±{p.margin:g}: the interval lies beyond the margin band (the change is shown to exceed it), "
                f"inside it, or crosses an edge. {legend(self.comparison)}.")
        return compare_page(self.comparison, self.context, self.rows,
                            statement(self.comparison, self.context), self.notes, _as_compared(self.datasets,
                                                                                                self.context),
                            overall=overall, legend=said, headline=self.headline,
                            footer=footer(self.comparison, self.context), caveats=caveats, percent=percent)

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
        reasons = "; ".join(f"{r.benchmark}: {_unjudged(r, comparison.family)}"
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
