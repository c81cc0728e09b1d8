"""The HTML report: one self-contained file (inline CSS and SVG, a few lines of inline script for the filter;
no network at view time) for a comparison, a ``stat`` run, or the fleet's audits.

Layout of a comparison (docs/report.md): the headline (what changed, how sure, why the exit code); the verdict
table, each finding in words with its direction; the method and legend one click away; overall (per metric the
geometric mean of the ratios and the weighted speedups, the forest plot of every benchmark's A/B interval
against the equivalence band); the two machines' inventories side by side with the differences marked; then
one section per benchmark (both distributions as strips with their SPA intervals and as ECDFs, runs in order
with warm-ups and flagged runs marked, the counters beside time). Every page reads from 420 pixels to a wide
screen: tables scroll sideways in a box of their own, plots scale (tests/test_i31_html.py measures both in
Chromium). The page budget (perfctl/report/svg.py: ``PAGE_BYTES``, ``detail_plan``) keeps any page under 5 MB:
the verdict table lists every benchmark while its rows fit (in chunks the browser lays out as they come into
view), the forest and the sections draw the benchmarks that matter most (``priority``), and each part says
what it left out; sections of more than ``OPEN_LIMIT`` start closed; plots of more runs than a reader can tell
apart are thinned, and say so (``MARK_LIMIT``, ``mark_limit``), so that 10^6 runs make a page of 85 kB and
5,000 benchmarks one of 4.2 MB.

Every number of the verdict table carries its raw value in ``data-value`` (the JSON output's number), so a
test or a script can check the page against ``--format json``."""

from __future__ import annotations

import datetime
import math
import reprlib
from collections.abc import Sequence

from perfctl import units
from perfctl.analysis.verdicts import Verdict
from perfctl.report import scanplot, svg
from perfctl.report.derived import Figure, relative_stderr, scaled
from perfctl.report.svg import esc

OPEN_LIMIT = 20
# the verdict table's rows per table of its own (``_verdict_table``), and a row's height in pixels before the
# browser has laid it out
TABLE_CHUNK = 200
ROW_HEIGHT = 24

CSS = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1240px;padding:0 16px 40px;color:#1a1a1a;
line-height:1.4}
h1{font-size:1.5em;margin:20px 0 4px}h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #ccc}
h1.headline{font-size:1.15em;line-height:1.4;margin:18px 0 6px;font-weight:normal}
h3{font-size:1.05em;margin:4px 0}
.statement{color:#333;margin:2px 0;font-size:.92em}
table{border-collapse:collapse;font-size:.9em;margin:8px 0}
th,td{padding:3px 8px;text-align:left;border-bottom:1px solid #e4e4e4;vertical-align:top;overflow-wrap:break-word}
h1,h3,summary,li,p,code,td.name{overflow-wrap:anywhere}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.wide{overflow-x:auto;max-width:100%}.rows{content-visibility:auto;overflow-x:auto}
#verdicts th,#events th,#events td:first-child,td.word,td[class^=tone-]{white-space:nowrap}
td.name{min-width:11em}td.metric{min-width:6em}
#verdicts th:first-child,#verdicts td.name{position:sticky;left:0;z-index:1}
#verdicts td.name{background:#fff}
.plot{min-width:0;max-width:100%}.plot svg{display:block;max-width:100%;height:auto}
tr.differs td{background:#fff3cd}tr.differs td:first-child{font-weight:bold}
.tone-faster{color:#006b4f;font-weight:bold}.tone-slower{color:#a63d00;font-weight:bold}
.tone-equivalent{color:#1f6f99}.tone-other{color:#555}
.plots{display:flex;flex-wrap:wrap;gap:8px}
details{margin:10px 0;border:1px solid #ddd;border-radius:4px;padding:4px 10px}
summary{cursor:pointer}summary h3{display:inline}
.note{color:#555;font-size:.9em}
#filter{margin:6px 0;padding:3px 6px;width:320px;max-width:100%;box-sizing:border-box}
footer{margin-top:30px;color:#666;font-size:.85em}
@media (max-width:600px){td.name{min-width:7em}body{padding:0 10px 30px}}
"""

# Filters the verdict table by benchmark name or verdict; the only script, inline.
SCRIPT = """
document.getElementById('filter').addEventListener('input', function (event) {
  var needle = event.target.value.toLowerCase();
  document.querySelectorAll('#verdicts tbody tr').forEach(function (row) {
    row.hidden = needle !== '' && row.textContent.toLowerCase().indexOf(needle) < 0;
  });
});
"""

def tone(finding: str) -> str:
    """The colour class of a finding (report/compare.py ``rows``: the verdict with its direction in words,
    always printed beside its colour): B slower or B faster (beyond the margin or within it), equivalent,
    or other (no difference shown, disturbed, cannot conclude)."""
    for words, css in (("B slower", "slower"), ("B faster", "faster"), ("equivalent", "equivalent")):
        if finding.startswith(words):
            return css
    return "other"


def name(text) -> str:
    """A name (benchmark, machine, metric, event, label) where it is read at a glance, a table cell or a
    heading: cut in the middle to svg.NAME_SHOWN characters (escaped), the whole name (up to
    svg.NAME_LIMIT) in its tooltip."""
    shown = svg.bounded(text, svg.NAME_SHOWN)
    whole = svg.tooltip(text)
    return shown if shown == whole else f'<span title="{whole}">{shown}</span>'


def td(value, text: str | None = None, field: str | None = None, numeric: bool = True, css: str = "") -> str:
    """A table cell showing ``text`` (or the value in plain form) that keeps the raw value for scripts;
    ``css`` its class when it is not a number (CSS: ``word`` never wraps, ``name`` and ``metric`` wrap
    anywhere but keep a minimum width)."""
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # as JSON has it: null
    shown = (esc if numeric else name)(text if text is not None else ("-" if value is None else value))
    raw = "" if value is None else (repr(float(value)) if isinstance(value, float) else esc(value))
    attributes = (f' data-field="{field}"' if field else "") + (f' data-value="{raw}"' if field else "")
    css = "num" if numeric else css
    return f'<td{f" class={css}" if css else ""}{attributes}>{shown}</td>'


def html_table(head: Sequence[str], rows: Sequence[str], table_id: str = "", wrapped: bool = True) -> str:
    """A table in a box of its own that scrolls sideways (``wrapped``), so that a table wider than a narrow
    window never widens the page."""
    identity = f' id="{table_id}"' if table_id else ""
    header = ("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead>") if head else ""
    table = f"<table{identity}>{header}<tbody>" + "".join(rows) + "</tbody></table>"
    return f"<div class=wide>{table}</div>" if wrapped else table


def document(title: str, body: Sequence[str], script: bool = False) -> str:
    """The page: ``body`` and the footer; ``script`` the filter's (the page has its box)."""
    from perfctl import __version__
    from perfctl.output_files import HTML_START

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (HTML_START  # perfctl's signature: output_files replaces an existing page only when it starts so
            + '<meta name="viewport" content="width=device-width, initial-scale=1">'
            # no request may leave the page: inline style and script only, images from data: at most
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            + "".join(body)
            + f"<footer>written by perfctl {esc(__version__)} on {now}</footer>"
            + (f"<script>{SCRIPT}</script>" if script else "") + "</body></html>\n")


def write_report(report, output, command: str, quiet: bool = False) -> None:
    """The report's HTML page into the file ``output`` (an output_files.Output) names, whole or not at all
    (perfctl/output_files.py, which has also refused, before the command did anything, a file that must
    not be written); a failure is one line naming the file. The command says where it went, on stderr
    (stdout may be a table or JSON)."""
    from perfctl.output import say
    from perfctl.output_files import replace

    written = replace(output, report.html(), command)
    path = output.path
    if not quiet:
        say(f"{command}: HTML report written to {path} ({written / 1e3:,.0f} kB)")


# -- comparisons ---------------------------------------------------------------------------------------


# the verdict table has its filter box from this many rows: above three rows it is clutter
FILTER_ROWS = 10


def compare_page(comparison, context, rows: Sequence[dict], statement: Sequence[str], notes: Sequence[str] = (),
                 datasets=None, sequence=None, overall: dict[str, list[str]] | None = None, legend: str = "",
                 *, percent, headline: str = "", footer: str = "", caveats: dict[str, list[str]] | None = None) -> str:
    """The report of one comparison, in the order a reader needs it (docs/report.md): the ``headline``
    (report/compare.py: what changed, by how much, with what confidence, why the exit code), the verdict
    table with each finding in words, the method one click away (``footer``, its sentence; ``statement``,
    ``legend`` and every overall ``caveats`` line inside), then the overall section (each metric's
    ``overall`` lines: the geometric mean of the ratios with its interval) with the forest plot, the
    machines, and a section per benchmark. ``context`` is the CompareContext of report/compare.py,
    ``rows`` its rows; ``percent`` report/compare.py's way to write a level ("98.33%"); ``datasets`` the
    two Datasets compared (None: the runs are not at hand, e.g. a comparison the server made, and the
    per-benchmark plots are left out); ``sequence`` a sequential A/B run's confidence sequence (a dict of
    rounds, estimate, low, high), drawn when given."""
    p = comparison.parameters
    metric_units = context.units or {}
    level = percent(comparison.interval_level or p.confidence)
    # what changed in bold, then how sure and the exit code (the headline's first sentence, then the rest)
    changed, _, rest_of = headline.partition(". ")
    body = [f"<h1 class=headline id=headline><strong>{esc(changed)}.</strong> {esc(rest_of)}</h1>"
            if rest_of else f"<h1 class=headline id=headline>{esc(headline)}</h1>" if headline else "",
            f"<p class=statement>A = {name(context.a)} <span class=note>vs</span> B = {name(context.b)}</p>"]
    several = len(context.metrics) > 1
    method = _method(footer, statement, legend, caveats or {})
    summary = []
    for metric, lines in (overall or {}).items():
        if lines:
            summary.append(f"<p><b>{esc(metric)}</b></p><ul class=summary>"
                           + "".join(f"<li>{esc(line.strip())}</li>" for line in lines) + "</ul>")
    # the page budget (svg.py: PAGE_BYTES): what matters most first, in every part that cannot keep all;
    # the sections get what the rest of the page leaves
    order = [priority(r) for r in rows]
    table, listed = _verdict_table(rows, metric_units, p.margin, order, set(), level, several)
    forests = _forests(comparison, context, rows, order, set(), listed == len(rows), level)
    rest = []
    if comparison.only_a or comparison.only_b:
        # each name bounded (svg.tooltip), not the list: a bound on the list would cut it after a few names
        rest.append(f"<p class=note>only in A: {', '.join(map(svg.tooltip, _capped(comparison.only_a))) or '-'}; "
                    f"only in B: {', '.join(map(svg.tooltip, _capped(comparison.only_b))) or '-'}</p>")
    rest.append(scanplot.section("Parameter scans", _scan_plots(rows, metric_units, datasets)))
    if datasets is not None:
        rest.append(_inventories(datasets[0].machine, datasets[1].machine))
    if sequence:
        rest.append("<h2 id=sequence>Confidence sequence</h2>")
        plot = svg.sequence(sequence["rounds"], sequence["estimate"], sequence["low"], sequence["high"], p.margin)
        rest.append(f'<div class="plot">{plot}</div>')
    notes_part = ("<h2 id=notes>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in _capped(notes)) + "</ul>"
                  if notes else "")
    spent = (sum(map(len, body + forests + rest + summary)) + len(table) + len(method) + len(notes_part) + len(CSS)
             + len(SCRIPT))
    detailed, limit = svg.detail_plan(len(rows), spent)
    drawn = set(svg.chosen(order, detailed))
    if drawn:  # again, now with links to the sections drawn (some 20 bytes each)
        table, listed = _verdict_table(rows, metric_units, p.margin, order, drawn, level, several)
        forests = _forests(comparison, context, rows, order, drawn, listed == len(rows), level)
    filtered = len(rows) >= FILTER_ROWS
    if filtered:
        body.append('<input id=filter type=search placeholder="filter benchmarks by name or verdict">')
    if listed < len(rows):
        body.append(f"<p class=note id=table-left-out>The table lists {listed:,} of {len(rows):,} benchmarks, those "
                    f"that matter most ({MATTERS}); the other {len(rows) - listed:,} are left out to keep the page "
                    f"small. <code>perfctl compare A B --format csv</code> lists every one.</p>")
    body += [table, method, "<h2 id=overall>Overall</h2>"] + summary + forests + rest
    body.append("<h2 id=benchmarks>Benchmarks</h2>")
    if len(drawn) < len(rows):
        body.append(f"<p class=note id=left-out>Shown in detail: {len(drawn):,} of {len(rows):,} benchmarks, those "
                    f"that matter most ({MATTERS}); the other {len(rows) - len(drawn):,} are left out to keep the "
                    f"page small (their verdicts are in the table{'' if listed == len(rows) else ' or the CSV'}). "
                    f"To see one in detail, report it alone: "
                    f"<code>perfctl report A B --benchmark NAME -o FILE</code> (the option repeats).</p>")
    open_all = len(drawn) <= OPEN_LIMIT
    for i, (row, result) in enumerate(zip(rows, comparison.benchmarks)):
        if i in drawn:
            body.append(_benchmark_section(i, row, result, context, datasets, open_all, p, limit,
                                           percent(p.confidence)))
    body.append(notes_part)
    return document(f"perfctl: {context.a} vs {context.b}", body, script=filtered)


def _scan_plots(rows: Sequence[dict], metric_units: dict, datasets) -> list[str]:
    """Each parameter scan among the benchmarks compared (report/scanplot.py), per metric: A's and B's
    medians with their intervals against the parameter; without the runs at hand (a comparison the server
    made) the medians only."""
    plots = []
    for metric in dict.fromkeys(r["metric"] for r in rows):
        by_name = {r["benchmark"]: r for r in rows if r["metric"] == metric}
        for (base, parameter), points in scanplot.scans(list(by_name)).items():
            lines = []
            for side, dataset in zip("AB", datasets or (None, None)):
                if dataset is None:
                    medians = [by_name[b][f"median_{side.lower()}"] for _, b in points]
                    lines.append(scanplot.ScanLine(side, medians, [None] * len(points), [None] * len(points)))
                    continue
                found = [dataset.benchmarks.get(b) for _, b in points]
                line = [scanplot.median_interval(bench.metrics.get(_label(dataset, b, metric), []) if bench else [])
                        for bench, (_, b) in zip(found, points)]
                lines.append(scanplot.ScanLine(side, *zip(*line)))
            plots.append(f"<p class=note>{name(base)}: {esc(metric)} against {esc(parameter)}</p>"
                         + scanplot.plot(parameter, [v for v, _ in points], lines, metric, metric_units.get(metric)))
    return plots


def _method(footer: str, statement: Sequence[str], legend: str, caveats: dict[str, list[str]]) -> str:
    """The method one click away: its sentence as the summary (the terminal's footer, whose pointer to -v
    is the click here), and inside the whole statement, what the verdicts mean and every overall caveat."""
    said = footer.partition(" -v:")[0] or "The method"
    inside = [f"<p class=statement>{esc(line)}</p>" for line in statement]
    if legend:
        inside.append(f"<p class=note>{esc(legend)}</p>")
    for metric, lines in caveats.items():
        if lines:
            inside.append(f"<p><b>{esc(metric)}</b>, every overall figure and caveat:</p><ul>"
                          + "".join(f"<li>{esc(line.strip())}</li>" for line in lines) + "</ul>")
    inside.append("<p class=note>Each benchmark's section below has its details: SPA's intervals, the "
                  "Speedup-Test's protocols, P[A&gt;B]. docs/statistics.md says how each is computed.</p>")
    return f"<details id=method><summary>{esc(said)} <b>Method and legend</b></summary>{''.join(inside)}</details>"


def _capped(items: Sequence[str]) -> list[str]:
    """A list the page shows in full up to svg.LIST_ITEMS items (benchmarks only in A, notes): beyond, the
    first ones and how many more, which ``--format json`` lists."""
    items = list(items)
    if len(items) <= svg.LIST_ITEMS:
        return items
    return items[:svg.LIST_ITEMS] + [f"and {len(items) - svg.LIST_ITEMS:,} more (--format json lists every one)"]


MATTERS = "relevant differences first, B's slowdowns before its speedups, then other slowdowns, then by effect size"


def priority(row: dict) -> tuple[int, float]:
    """What matters most to a reader, smallest first (``MATTERS``): a relevant slowdown of B (A/B below 1),
    a relevant speedup, another slowdown that is not an equivalence, then the rest; by the size of the
    effect, |log A/B|, within each. A page that cannot draw every benchmark draws these first."""
    ratio = row["ratio_a_over_b"]
    known = ratio is not None and math.isfinite(ratio) and ratio > 0
    relevant, slower = row["verdict"] == Verdict.RELEVANT, known and ratio < 1
    equivalent = row["verdict"] == Verdict.EQUIVALENCE
    rank = 0 if relevant and slower else 1 if relevant else 2 if slower and not equivalent else 3
    return rank, -abs(math.log(ratio)) if known else 0.0


def _forests(comparison, context, rows: Sequence[dict], order: Sequence, drawn: set[int],
             complete: bool, level: str) -> list[str]:
    """Each metric's forest plot, of at most svg.FOREST_ROWS benchmarks (those that matter most, in the
    table's order), saying so when it leaves some out; ``complete``: the verdict table lists every one."""
    p = comparison.parameters
    out = []
    for metric in context.metrics:
        positions = [i for i, r in enumerate(rows) if r["metric"] == metric]
        if not positions:
            continue
        kept = [positions[k] for k in svg.chosen([order[i] for i in positions],
                                                 svg.FOREST_ROWS // max(len(context.metrics), 1))]
        forest_rows = [svg.ForestRow(rows[i]["benchmark"], rows[i]["ratio_a_over_b"], rows[i]["ratio_low"],
                                     rows[i]["ratio_high"], rows[i]["verdict"], tone(rows[i]["finding"]),
                                     f"b{i}" if i in drawn else "", rows[i]["finding"])
                       for i in kept]
        out.append(f"<h3>A/B ratio of {esc(metric)} (Hodges-Lehmann), {esc(level)} intervals</h3>")
        if len(kept) < len(positions):
            out.append(f"<p class=note>The forest shows {len(kept):,} of {len(positions):,} benchmarks, those that "
                       f"matter most ({MATTERS}); the verdict table below lists "
                       f"{'the others' if complete else 'more, and --format csv every one'}.</p>")
        out.append(f'<div class="plot forest">{svg.forest(forest_rows, p.margin)}</div>')
    return out


def _verdict_table(rows: Sequence[dict], metric_units: dict, margin: float, order: Sequence, drawn: set[int],
                   level: str, several: bool) -> tuple[str, int]:
    """The verdict table and how many rows it lists: every one, unless they pass svg.TABLE_BYTES; then
    those that matter most (``order``) up to it, in their own order. The finding in words comes right
    after the name, so that a narrow window shows both before it scrolls; the metric column only when
    there are ``several``. Names of the ``drawn`` rows link to their sections."""
    out = []
    for i, r in enumerate(rows):
        unit = metric_units.get(r["metric"])
        # the ends with the digits that read as the verdict against the band (units.ratio_ends)
        low, high = units.ratio_ends(r["ratio_low"], r["ratio_high"], margin)
        shown = f'<a href="#b{i}">{name(r["benchmark"])}</a>' if i in drawn else name(r["benchmark"])
        out.append(
            f'<tr data-benchmark="{svg.tooltip(r["benchmark"])}" data-metric="{svg.tooltip(r["metric"])}">'
            f'<td class=name>{shown}</td>'
            f'<td class="tone-{tone(r["finding"])}" data-field="finding" data-value="{esc(r["finding"])}">'
            f'{esc(r["finding"])}</td>'
            f'{td(r["ratio_a_over_b"], units.ratio(r["ratio_a_over_b"]), "ratio_a_over_b")}'
            f'{td(r["ratio_low"], low, "ratio_low")}'
            f'{td(r["ratio_high"], high, "ratio_high")}'
            f'{td(r["median_a"], units.quantity(r["median_a"], unit), "median_a")}'
            f'{td(r["median_b"], units.quantity(r["median_b"], unit), "median_b")}'
            f'{td(r["n_a"], field="n_a")}{td(r["n_b"], field="n_b")}'
            + (td(r["metric"], numeric=False, css="metric") if several else "")
            + f'{td(r["verdict"], field="verdict", numeric=False, css="word")}'
            f'{td(r["margin"], field="margin", numeric=False, css="word")}</tr>')
    if sum(map(len, out)) > svg.TABLE_BYTES:
        spent, kept = 0, set()
        for i in sorted(range(len(out)), key=lambda k: order[k]):
            spent += len(out[i])
            if spent > svg.TABLE_BYTES:
                break
            kept.add(i)
        out = [line for i, line in enumerate(out) if i in kept]
    head = (("benchmark", "verdict", "A/B (HL)", f"low ({level})", "high", "median A", "median B", "runs A",
             "runs B") + (("metric",) if several else ()) + ("SPARC", f"±{margin:g}"))
    # in a scrolling box: the columns that never wrap (numbers, verdicts) may be wider than a narrow window.
    # Cut into tables of TABLE_CHUNK rows that the browser lays out only when they come near the window
    # (content-visibility): 5,000 rows in one table took Chromium 3 to 5 s to lay out before the first paint.
    # Each chunk scrolls by itself: content-visibility clips what overflows it (paint containment), which
    # cut off the table's right columns instead of letting the box around it scroll
    chunks = [out[k:k + TABLE_CHUNK] for k in range(0, len(out), TABLE_CHUNK)] or [[]]
    return ("<div class=wide id=verdicts>"
            + "".join(f'<div class=rows style="contain-intrinsic-size:auto {ROW_HEIGHT * (len(c) + 1)}px">'
                      + html_table(head, c, wrapped=False) + "</div>" for c in chunks) + "</div>", len(out))


def _plain(value) -> str:
    return "…" if value is None else f"{value:.3f}"


# the inventory items a reader asks about first when B is slower, in this order, then all the others
FIRST_ITEMS = ("hostname", "kernel.release", "cpu.model_name", "cpu.microcode", "governors", "smt", "smt_active",
               "turbo", "perf_event_paranoid", "pmu.present", "hz", "tick_mode", "isolated_cpus", "nmi_watchdog",
               "aslr", "audit", "audit.verdict", "audit.time_ns", "audit.why")


# An inventory is three levels deep (cpu.model_name, audit.verdict); a machine line from a file or a server
# may be anything, so flattening is bounded: deeper values and items beyond the count are named, not shown
# (a line nested 1,000 deep ended the report in a RecursionError)
FLATTEN_DEPTH = 16
FLATTEN_ITEMS = 2000
_NESTED = reprlib.Repr()
_NESTED.maxlevel, _NESTED.maxstring, _NESTED.maxother = 3, 80, 80


def flatten(inventory, prefix: str = "") -> dict[str, str]:
    """An inventory (a dict read from a file or the server, or agent/inventory's typed one) as dotted
    items: {"kernel.release": "6.1.0", ...}. Iterative, and bounded by FLATTEN_DEPTH levels and
    FLATTEN_ITEMS items: what lies beyond is one item saying so."""
    if hasattr(inventory, "to_dict"):
        inventory = inventory.to_dict()
    out: dict[str, str] = {}
    # depth first, in the mapping's order (as the recursion it replaces), with a stack of open mappings
    stack = [(prefix, iter((inventory or {}).items()))]
    while stack:
        level_prefix, items = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            continue
        if len(out) >= FLATTEN_ITEMS:
            out["(more items)"] = f"not shown: the machine record has more than {FLATTEN_ITEMS} items"
            break
        key, value = entry
        item = f"{level_prefix}{key}"
        if isinstance(value, dict):
            if len(stack) >= FLATTEN_DEPTH:
                out[item] = f"not shown: nested deeper than {FLATTEN_DEPTH} levels"
            else:
                stack.append((item + ".", iter(value.items())))
        elif key == "time_ns" and isinstance(value, int) and not isinstance(value, bool):
            out[item] = f"{_utc(value)} UTC ({_age(value)})"
        elif isinstance(value, list):
            # a list's items are plain values in an inventory; a nested one is shown cut short (reprlib)
            out[item] = ", ".join(_NESTED.repr(v) if isinstance(v, (dict, list)) else str(v) for v in value) or "-"
        else:
            out[item] = "-" if value is None else str(value)
    return out


def _inventories(a: dict | None, b: dict | None) -> str:
    if not a and not b:
        return "<h2 id=machines>Machines</h2><p class=note>neither input records its machine.</p>"
    left, right = flatten(a), flatten(b)
    left.pop("type", None), right.pop("type", None)
    keys = [k for k in FIRST_ITEMS if k in left or k in right]
    keys += sorted((left.keys() | right.keys()) - set(keys))
    differing = [k for k in keys if left.get(k) != right.get(k)]
    rows = [f'<tr class="{"differs" if k in differing else ""}"><td>{esc(k)}</td>'
            f'<td>{esc(left.get(k, "(not recorded)"))}</td><td>{esc(right.get(k, "(not recorded)"))}</td></tr>'
            for k in keys]
    said = (f"{len(differing)} items differ: {', '.join(map(svg.tooltip, differing))}" if differing
            else "the two inventories are the same")
    same = [row for k, row in zip(keys, rows) if k not in differing]
    return (f"<h2 id=machines>Machines</h2><p>{said}</p>"
            + (html_table(("item", "A", "B"), [row for k, row in zip(keys, rows) if k in differing], "inventories")
               if differing else "")
            + (f"<details><summary>{len(same)} items the same on both</summary>"
               + html_table(("item", "A", "B"), same, "same-inventory") + "</details>" if same else ""))


def _benchmark_section(index: int, row: dict, result, context, datasets, open_all: bool, p, limit: int,
                       spa_level: str) -> str:
    unit = (context.units or {}).get(row["metric"])
    head = (f'<summary><h3>{name(row["benchmark"])} <span class=note>({name(row["metric"])})</span></h3> '
            f'<span class="tone-{tone(row["finding"])}">{esc(row["finding"])}</span> '
            f'<span class=note>({esc(row["verdict"])})</span>, A/B '
            f'{esc(units.ratio(row["ratio_a_over_b"], row["ratio_low"], row["ratio_high"], p.margin))}</summary>')
    facts = [
        ("runs A / B", f"{row['n_a']} / {row['n_b']}"),
        ("median A / B", f"{units.quantity(row['median_a'], unit)} / {units.quantity(row['median_b'], unit)}"),
        (f"SPA: the value {p.proportion:g} of runs stay under, A",
         units.interval(row["spa_a_low"], row["spa_a_high"], unit)),
        ("… B", units.interval(row["spa_b_low"], row["spa_b_high"], unit)),
        ("SPA speedup interval", f"[{_plain(row['speedup_spa_low'])}, {_plain(row['speedup_spa_high'])}]"),
        ("Speedup-Test mean / median protocol", f"{row['mean_protocol'] or '-'} / {row['median_protocol'] or '-'}"),
        ("P[A>B]", "-" if row["p_a_greater_b"] is None else f"{row['p_a_greater_b']:.3f}"),
    ]
    if row["warnings"]:
        facts.append(("warnings", "; ".join(row["warnings"])))
    parts = [f'<section id="b{index}"><details{" open" if open_all else ""}>{head}',
             html_table((), [f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in facts])]
    if datasets is not None:
        # the bracket of the strip plot, in words: SPA's interval of the value a proportion of runs stay under
        bracket = f"{spa_level} interval of the value {p.proportion:g} of runs stay under (SPA)"
        parts.append(_benchmark_plots(row, result, unit, datasets, limit, bracket))
    parts.append("</details></section>")
    return "".join(parts)


def series_of(bench, metric: str, name: str, limit: int = svg.MARK_LIMIT) -> svg.Series:
    """One side's runs of ``metric`` as a plot series; ``limit`` the runs beyond which its plots thin."""
    values = bench.metrics.get(metric, []) if bench else []
    flagged = getattr(bench, "flagged", {}) or {}
    before = (getattr(bench, "warmups", {}) or {}).get(metric, ())
    return svg.Series(name, values, {i: why for i, why in flagged.items() if i < len(values)}, before, limit)


def _label(dataset, benchmark: str, metric: str) -> str:
    """The reading label of ``metric`` in this dataset (``instructions`` may be read as ``instructions:u``)."""
    from perfctl.model import metric_label

    bench = dataset.benchmarks.get(benchmark)
    return (metric_label(metric, bench.metrics) if bench is not None else None) or metric


def _benchmark_plots(row: dict, result, unit: str | None, datasets, limit: int, bracket: str) -> str:
    a_bench, b_bench = (d.benchmarks.get(row["benchmark"]) for d in datasets)
    metric = row["metric"]
    series = [series_of(a_bench, _label(datasets[0], row["benchmark"], metric), "A", limit),
              series_of(b_bench, _label(datasets[1], row["benchmark"], metric), "B", limit)]
    intervals = {"A": (row["spa_a_low"], row["spa_a_high"]), "B": (row["spa_b_low"], row["spa_b_high"])}
    plots = [svg.strip(series, unit, intervals, metric, bracket=bracket), svg.ecdf(series, unit, metric),
             svg.run_order(series, unit, metric)]
    return ('<div class="plots">' + "".join(f'<div class="plot">{p}</div>' for p in plots) + "</div>"
            + _counters(a_bench, b_bench))


def _counters(a_bench, b_bench) -> str:
    """Every metric both sides recorded for this benchmark, by median: the counters beside time."""
    if a_bench is None or b_bench is None:
        return ""
    rows = []
    for metric in sorted(a_bench.metrics.keys() & b_bench.metrics.keys()):
        a, b = a_bench.metrics[metric], b_bench.metrics[metric]
        if not a or not b:
            continue
        unit = a_bench.units.get(metric)
        ma, mb = _median(a), _median(b)
        ratio = ma / mb if mb else None
        rows.append(f"<tr><td>{esc(metric)}</td>{td(ma, units.quantity(ma, unit))}"
                    f"{td(mb, units.quantity(mb, unit))}"
                    f"{td(ratio, '-' if ratio is None or not math.isfinite(ratio) else f'{ratio:.3f}')}</tr>")
    if not rows:
        return ""
    return ("<p class=note>every counter both sides recorded (medians; the ratio of medians, A/B, is not a "
            "test)</p>" + html_table(("counter", "median A", "median B", "A/B of medians"), rows))


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


# -- the fleet's audits --------------------------------------------------------------------------------

AUDIT_TONES = {"trusted": "faster", "no-PMU": "equivalent", "degraded": "other", "untrusted": "slower"}


def fleet_page(history: dict[str, list[dict]], drifts: dict[str, list[str]], spread: Sequence[dict],
               notes: Sequence[str] = ()) -> str:
    """The fleet's audits (``perfctl report --machines``): every machine's verdicts over time, what drifted
    between its consecutive audits, each machine's history, and the spread of calibrated counts across
    machines."""
    body = ["<h1>Fleet audits</h1>",
            f"<p class=statement>{len(history)} machines, {sum(map(len, history.values()))} audits</p>"]
    rows = [(machine, [((r.get("time_ns") or 0) / 1e9, AUDIT_TONES.get(r.get("verdict"), "other"),
                        f"{r.get('verdict')}: audit {str(r.get('audit_id', '?'))[:8]}, kernel {r.get('kernel')}, "
                        f"microcode {r.get('microcode')}") for r in reports])
            for machine, reports in sorted(history.items())]
    if rows:
        body.append(f'<div class="plot">{svg.timeline(rows)}</div>')
    body.append("<p class=note>marks: trusted (green square), no-PMU (sky-blue square), degraded (grey square), "
                "untrusted (vermillion circle); hover a mark for its audit</p>")
    body.append("<h2 id=drift>Drift between consecutive audits</h2>")
    changes = [(m, c) for m, items in sorted(drifts.items()) for c in items]
    body.append(html_table(("machine", "what changed"), [f"<tr><td>{name(m)}</td><td>{esc(c)}</td></tr>"
                                                         for m, c in changes], "drift")
                if changes else "<p>no machine changed between consecutive audits.</p>")
    body.append("<h2 id=spread>Spread of instruction counts per kernel (latest audits)</h2>")
    if not spread:
        body.append("<p>no latest audit carries a usable instruction count.</p>")
    body.append(html_table(("kernel", "machines", "source", "median", "CV across machines"),
                           [f"<tr><td>{esc(r['kernel'])}</td>{td(r['machines'])}<td>{esc(r['source'])}</td>"
                            f"{td(r['median'], units.count(r['median']))}"
                            f"{td(r['cv'], _cv(r['cv']))}</tr>"
                            for r in spread], "spread"))
    body.append("<h2 id=history>History per machine</h2>")
    for machine, reports in sorted(history.items()):
        lines = [f"<tr><td>{esc(_utc(r.get('time_ns')))}</td>"
                 f"<td class=\"tone-{AUDIT_TONES.get(r.get('verdict'), 'other')}\">{esc(r.get('verdict'))}</td>"
                 f"<td>{esc(r.get('kernel'))}</td><td>{esc(r.get('microcode'))}</td>"
                 f"<td>{'; '.join(map(esc, r.get('reasons') or [])) or '-'}</td></tr>"
                 for r in reversed(reports)]
        body.append(f"<details open><summary><h3>{name(machine)}</h3> ({len(reports)} audits)</summary>"
                    + html_table(("time (UTC)", "verdict", "kernel", "microcode", "reasons"), lines) + "</details>")
    if notes:
        body.append("<h2 id=notes>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return document("perfctl: fleet audits", body)


def _utc(ns) -> str:
    if not ns:
        return "?"
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _cv(value) -> str:
    return "-" if value is None else f"{value:.2e}"


# -- one stat run --------------------------------------------------------------------------------------


def stat_page(summary, title: str, inventory: dict | None = None, notes: Sequence[str] = ()) -> str:
    """The report of one ``perfctl stat``: the summary table of every event, then each measured event's
    runs as a strip, an ECDF and in order (flagged runs hollow), one line for the events that read the same
    in every run instead of their plots, and the machine."""
    from perfctl.analysis.summary import describe

    body = [f"<h1>{name(title)}</h1>",
            f"<p class=statement>{summary.runs} measured runs ({summary.outcomes.get('ok', 0)} ok), "
            f"{summary.warmups} warm-ups; {len(summary.interfered)} runs flagged as interfered-with</p>"]
    # --shell's cost and --until-precise's outcome, as under the terminal's table
    body += [f"<p class=statement{' id=precision' * (line is summary.precision_note)}>{esc(line)}</p>"
             for line in summary.run_notes()]
    rows, sections, constant = [], [], []
    measured = [e for e in summary.events.values() if e.values]
    # perf stat's derived figures, as the terminal's table has them: a column only when an event has one
    figures = summary.figures()
    for i, event in enumerate(measured):
        d = describe(event.values)
        # a counter that read the same in every run: one line says it, three plots of one value said nothing
        still = d.min == d.max
        shown = name(event.label) if still else f'<a href="#e{i}">{name(event.label)}</a>'
        rows.append(f'<tr data-event="{svg.tooltip(event.label)}"><td>{shown}</td>'
                    f'{td(d.n, field="n")}{td(d.median, units.quantity(d.median, event.unit), "median")}'
                    f'{td(d.mean, units.quantity(d.mean, event.unit), "mean")}'
                    f'{_percent(relative_stderr(d.stderr, d.mean), "stderr%", "±")}{_percent(d.cv, "cv")}'
                    f'{td(d.min, units.quantity(d.min, event.unit), "min")}'
                    f'{td(d.max, units.quantity(d.max, event.unit), "max")}'
                    + (_derived(figures.get(event.label)) if figures else "")
                    + f'<td>{esc(event.backend)}{esc(f" ({event.source})" if event.source else "")}</td></tr>')
        if still:
            constant.append(f"{name(event.label)} {esc(units.quantity(d.min, event.unit))}")
            continue
        positions = {run: k for k, run in enumerate(sorted(summary.interfered))}
        series = [svg.Series("A", event.values, {k: "interfered-with" for k in positions.values()
                                                 if k < len(event.values)}, limit=svg.mark_limit(len(measured)))]
        plots = [svg.strip(series, event.unit, {}, event.label), svg.ecdf(series, event.unit, event.label),
                 svg.run_order(series, event.unit, event.label)]
        sections.append(f'<section id="e{i}"><details{" open" if len(measured) <= OPEN_LIMIT else ""}>'
                        f"<summary><h3>{name(event.label)}</h3></summary><div class=plots>"
                        + "".join(f'<div class="plot">{p}</div>' for p in plots) + "</div></details></section>")
    unsupported = [e for e in summary.events.values() if not e.values and e.unsupported]
    head = ("event", "n", "median", "mean", "stderr%", "CV", "min", "max") + ("derived",) * bool(figures)
    body.append(html_table(head + ("backend (source)",), rows, "events"))
    if unsupported:
        # each item bounded (svg.esc), not the list, which may be long and is worth reading whole
        body.append("<p class=note>not counted here: " + "; ".join(esc(f"{e.label}: {e.unsupported}")
                                                                   for e in unsupported) + "</p>")
    if summary.correction_note:
        body.append(f"<p class=note>{esc(summary.correction_note)}</p>")
    body.append("<h2 id=runs>Runs of each event</h2>")
    if constant:
        body.append(f"<p class=note id=constant>The same in every run, so not plotted: {'; '.join(constant)}.</p>")
    body += sections
    if inventory:
        keys = [k for k in FIRST_ITEMS if k in flatten(inventory)]
        items = flatten(inventory)
        keys += sorted(items.keys() - set(keys) - {"type"})
        body.append("<h2 id=machines>Machine</h2>"
                    + html_table(("item", "value"), [f"<tr><td>{esc(k)}</td><td>{esc(items[k])}</td></tr>"
                                                     for k in keys], "inventory"))
    if notes:
        body.append("<h2 id=notes>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return document(title, body)


def _age(ns: int) -> str:
    seconds = datetime.datetime.now(datetime.UTC).timestamp() - ns / 1e9
    if seconds < 0:
        return "in the future"
    return f"{seconds / 86400:.1f} days ago" if seconds >= 86400 else f"{seconds / 3600:.1f} hours ago"


def _percent(value: float, field: str, sign: str = "") -> str:
    """A fraction shown as a percentage ("-" when there is none: one run, a mean of 0), its raw value kept."""
    return td(value, "-" if not math.isfinite(value) else f"{sign}{value:.2%}", field)


def _derived(figure: Figure | None) -> str:
    """perf stat's figure of one event (perfctl/report/derived.py ``Figure``), as perf prints it, or an empty cell;
    ``data-what`` says what it is ("insn per cycle", "CPUs utilized", "/sec", "GHz") beside its raw value."""
    if figure is None:
        return "<td></td>"
    return (f'<td class="num word" data-field="derived" data-value="{figure.value!r}" data-what="{esc(figure.what)}">'
            f"{esc(scaled(figure))}</td>")

