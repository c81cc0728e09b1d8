"""Issue 28, part 6: reports that open, and text that stays text.

- A report of 10^6 runs a side is a small page that a real headless Chromium (tests/browser.py) loads and
  paints within seconds: the plots thin beyond svg.MARK_LIMIT runs and say so.
- Markdown cells render as the text they are, under a real CommonMark renderer (markdown-it-py, rich's own
  dependency, with GFM's tables), and CSV cells that a spreadsheet would run as formulas are text (OWASP).
- Long names keep the verdict column whole and the forest plot's labels tell the benchmarks apart, with the
  whole name as a tooltip: measured in Chromium.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from browser import Browser, chromium
from conftest import perfctl, sample_of

needs_chromium = pytest.mark.skipif(chromium() is None,
                                    reason="probe: no chromium on PATH (deploy/setup.sh installs it)")


def _hyperfine(path: Path, commands: dict[str, list[float]]) -> str:
    path.write_text(json.dumps({"results": [{"command": c, "times": t, "exit_codes": [0] * len(t)}
                                            for c, t in commands.items()]}))
    return str(path)


def _times(base: float, n: int = 10) -> list[float]:
    return [base * (1 + 0.01 * i) for i in range(n)]


@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        pytest.skip("probe: no chromium on PATH (deploy/setup.sh installs it)")
    with Browser(timeout=120) as b:
        yield b


# ---- 10^6 runs a side ------------------------------------------------------------------------------------


@needs_chromium
def test_a_million_runs_a_side_make_a_small_page_that_chromium_paints_in_seconds(browser, tmp_path):
    """Before: 74.4 MB, and Chromium had not painted the page (a full-page screenshot) after 300 s."""
    runs = 1_000_000
    rng = np.random.default_rng(28)
    files = []
    for side, scale in (("a", 1.0), ("b", 1.01)):
        path = tmp_path / f"{side}.json"
        times = rng.lognormal(np.log(0.02 * scale), 0.05, runs).round(9).tolist()
        path.write_text(json.dumps({"results": [{"command": "large", "times": times, "exit_codes": [0] * runs}]}))
        files.append(str(path))
    out = tmp_path / "large.html"
    started = time.monotonic()
    done = perfctl("report", *files, "-o", str(out), timeout=900)
    written = time.monotonic() - started
    assert done.returncode in (0, 3), done.stderr
    size = out.stat().st_size
    assert size < 5_000_000, size
    text = out.read_text()
    # each thinned plot says so, in its text and its accessible name
    assert text.count("A 1,000,000, B 1,000,000 runs:") >= 3 * 2, text[:3000]

    warm = tmp_path / "warm.html"  # the browser's first page pays for its first renderer: not the report's
    warm.write_text("<!DOCTYPE html><title>warm</title><p>warm")
    browser.open(str(warm))
    started = time.monotonic()
    page = browser.open(str(out))
    loaded = time.monotonic() - started
    page.screenshot(str(tmp_path / "large.png"), full_page=True)  # every plot painted
    painted = time.monotonic() - started
    assert page.events.errors == [], page.events.errors
    plots = page.evaluate("Array.from(document.querySelectorAll('svg')).map(function (s) {"
                          " return s.querySelectorAll('path').length; })")
    assert len(plots) == 4 and all(n >= 1 for n in plots), plots  # the forest, a strip, an ECDF, runs in order
    assert loaded < 5 and painted < 5, (loaded, painted)
    print(f"10^6 runs a side: {size / 1e3:.0f} kB written in {written:.1f} s (reading and comparing "
          f"included); loaded in {loaded:.2f} s, painted in {painted:.2f} s")


@needs_chromium
def test_many_benchmarks_of_many_runs_share_the_page_budget(browser, tmp_path):
    """50 benchmarks of 5,000 runs a side (18 MB before: every run three times per side): each benchmark's
    plots thin to its share of the page (svg.mark_limit), and the page stays a few MB."""
    from perfctl.report import svg

    rng = np.random.default_rng(50)
    files = []
    for side, scale in (("a", 1.0), ("b", 1.02)):
        files.append(_hyperfine(tmp_path / f"{side}.json", {
            f"bench-{i:02d}": rng.lognormal(np.log(0.02 * scale), 0.05, 5_000).round(9).tolist() for i in range(50)}))
    out = tmp_path / "many.html"
    done = perfctl("report", *files, "-o", str(out), timeout=600)
    assert done.returncode in (0, 3), done.stderr
    size = out.stat().st_size
    assert size < 5_000_000, size
    limit = svg.mark_limit(50)
    # said by each benchmark's strip and ECDF, in the plot and in its accessible name
    assert limit < svg.MARK_LIMIT and out.read_text().count(f"A 5,000, B 5,000 runs: {limit:,} quantiles each") == 200
    page = browser.open(str(out))
    assert page.events.errors == [], page.events.errors
    assert page.evaluate("document.querySelectorAll('#verdicts tbody tr').length") == 50
    print(f"50 benchmarks x 5,000 runs a side: {size / 1e6:.2f} MB")


def _many(tmp_path: Path, count: int, name: str) -> list[str]:
    """Two hyperfine files of ``count`` benchmarks of 20 runs a side: B 10% slower on every 50th, 7% faster
    on every 70th (the slowdowns' sizes vary a little), the same elsewhere."""
    rng = np.random.default_rng(count)
    files = []
    for side in ("a", "b"):
        commands = {}
        for i in range(count):
            shift = 1.0 if side == "a" else 1.08 + (i % 13) / 300 if i % 50 == 0 else 0.93 if i % 70 == 0 else 1.0
            commands[name.format(i)] = rng.lognormal(np.log(0.02 * shift), 0.02, 20).round(9).tolist()
        files.append(_hyperfine(tmp_path / f"{side}.json", commands))
    return files


@needs_chromium
@pytest.mark.parametrize("count, name", [(1000, "bench-{:05d}"), (5000, "bench-{:05d}"),
                                         (5000, "a_benchmark_of_a_long_name_" + "x" * 110 + "_{:05d}")])
def test_any_number_of_benchmarks_make_a_page_under_5_mb_that_chromium_renders_in_seconds(browser, tmp_path,
                                                                                           count, name):
    """Before: 1,000 benchmarks of 20 runs a side made 7.9 MB (3.1 s to load), 5,000 made 39.6 MB (13.4 s):
    every benchmark had its section and three plots, the forest a row each and the table was laid out whole.
    Now the page budget (svg.detail_plan) draws the benchmarks that matter most and says which it left out;
    the table keeps every benchmark while it fits (names of 140 characters: not all 5,000, and it says so)."""
    files = _many(tmp_path, count, name)
    out = tmp_path / "many.html"
    done = perfctl("report", *files, "-o", str(out), timeout=600)
    assert done.returncode == 3, done.stderr
    size = out.stat().st_size
    assert size < 5_000_000, size
    document = json.loads(perfctl("compare", *files, "--format", "json", timeout=600).stdout)["benchmarks"]
    assert len(document) == count

    warm = tmp_path / "warm.html"
    warm.write_text("<!DOCTYPE html><title>warm</title><p>warm")
    browser.open(str(warm))
    started = time.monotonic()
    page = browser.open(str(out))
    loaded = time.monotonic() - started
    page.screenshot(str(tmp_path / "top.png"), full_page=False)
    # the reader goes to the end of the page: every part above is laid out on the way
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.screenshot(str(tmp_path / "end.png"), full_page=False)
    rendered = time.monotonic() - started
    assert page.events.errors == [], page.events.errors
    assert loaded < 5 and rendered < 5, (loaded, rendered)

    text = out.read_text()
    table = page.evaluate("""Array.from(document.querySelectorAll('#verdicts tbody tr')).map(function (row) {
        return [row.dataset.benchmark, row.querySelector('[data-field=verdict]').dataset.value,
                parseFloat(row.querySelector('[data-field=ratio_a_over_b]').dataset.value)]; })""")
    from perfctl.report.html import priority

    ranks = {b["benchmark"]: priority(b) for b in document}
    listed = {name for name, _, _ in table}
    if len(table) < count:  # the table's own line says how many it lists, and they are those that matter most
        assert f"The table lists {len(table):,} of {count:,} benchmarks" in text
        assert max(ranks[n] for n in listed) <= min(r for n, r in ranks.items() if n not in listed)
    else:
        assert "id=table-left-out" not in text
    assert [n for n, _, _ in table] == [b["benchmark"] for b in document if b["benchmark"] in listed]

    # the forest: at most FOREST_ROWS, those that matter most, and it says so
    from perfctl.report import svg

    forest = page.evaluate("Array.from(document.querySelectorAll('.forest g.row title')).map(function (t) {"
                           " return t.textContent.split(': ')[0]; })")
    assert len(forest) == svg.FOREST_ROWS and f"The forest shows {svg.FOREST_ROWS} of {count:,} benchmarks" in text
    assert max(ranks[n] for n in forest) <= min(r for n, r in ranks.items() if n not in set(forest))

    # the sections: as many as the line says, every one of what matters most, and the advice works
    sections = page.evaluate("Array.from(document.querySelectorAll('section h3')).map(function (h) {"
                             " return h.firstChild.textContent.trim(); })")
    said = re.search(r"Shown in detail: ([\d,]+) of ([\d,]+) benchmarks", text)
    assert said and int(said[1].replace(",", "")) == len(sections) and int(said[2].replace(",", "")) == count
    assert 10 <= len(sections) <= svg.DETAIL_LIMIT
    assert max(ranks[n] for n in sections) <= min(r for n, r in ranks.items() if n not in set(sections))
    slowdowns = [b for b in document if b["verdict"] == "relevant difference" and b["ratio_a_over_b"] < 1]
    if len(slowdowns) > len(sections):  # the relevant slowdowns of B come first, the largest first
        assert all(ranks[n][0] == 0 for n in sections)
    else:
        assert {b["benchmark"] for b in slowdowns} <= set(sections)
    assert "--benchmark NAME" in text
    left_out = next(b["benchmark"] for b in document if b["benchmark"] not in set(sections))
    alone = tmp_path / "alone.html"
    done = perfctl("report", *files, "--benchmark", left_out, "-o", str(alone))
    assert done.returncode in (0, 3) and alone.read_text().count("<section") == 1, done.stderr
    assert f"{left_out} <span class=note>" in alone.read_text()
    print(f"{count:,} benchmarks ({len(name.format(0))}-character names) x 20 runs a side: {size / 1e6:.2f} MB, "
          f"{len(table):,} rows, {len(sections)} sections; loaded in {loaded:.2f} s, rendered to the end in "
          f"{rendered:.2f} s")


def test_long_lists_of_names_and_notes_are_capped_on_the_page_and_say_where_the_rest_are(tmp_path):
    """5,000 benchmarks only in A listed every name on the page: it took any size the inputs gave it."""
    a = _hyperfine(tmp_path / "a.json", {"common": _times(0.010), **{f"only-a-{i:04d}-" + "x" * 100: _times(0.01, 2)
                                                                     for i in range(5000)}})
    b = _hyperfine(tmp_path / "b.json", {"common": _times(0.010)})
    out = tmp_path / "only.html"
    done = perfctl("report", a, b, "-o", str(out), timeout=300)
    assert done.returncode in (0, 3, 4), done.stderr
    text = out.read_text()
    from perfctl.report import svg

    assert f"and {5000 - svg.LIST_ITEMS:,} more (--format json lists every one)" in text
    assert text.count("only-a-") == svg.LIST_ITEMS and out.stat().st_size < 200_000
    listed = json.loads(perfctl("compare", a, b, "--format", "json").stdout)["only_a"]
    assert len(listed) == 5000


def _path_points(svg_text: str) -> list[tuple[float, float]]:
    """The marks of the runs (zero-length segments, svg._marks), not the glyphs of the plot's key."""
    return [(float(x), float(y)) for x, y in re.findall(r"M(-?[\d.]+) (-?[\d.]+)h0", svg_text)]


def test_thinned_plots_keep_the_extremes_and_say_how_they_were_drawn():
    """100,000 runs with one far outlier in the middle of the order: the strip (quantiles), the ECDF and
    the runs in order (bins of consecutive runs) still reach it, with at most MARK_LIMIT marks a side."""
    from perfctl.report import svg

    values = list(np.random.default_rng(1).normal(100.0, 1.0, 100_000))
    values[50_000] = 200.0
    series = [svg.Series("A", values)]
    strip = svg.strip(series, None, {}, "value")
    scale = svg.Scale(*svg.padded([min(values), 200.0]), 60, 420)
    xs = [x for x, _ in _path_points(strip)]
    assert len(xs) <= svg.MARK_LIMIT + 10 and max(xs) == pytest.approx(scale(200.0), abs=0.1)
    assert min(xs) == pytest.approx(scale(min(values)), abs=0.1)
    assert "A 100,000 runs: 1,000 quantiles each, min and max kept" in strip
    ecdf = svg.ecdf(series, None, "value")
    assert ecdf.count("H") <= svg.MARK_LIMIT + 5 and "A 100,000 runs: 1,000 quantiles each" in ecdf
    ordered = svg.run_order(series, None, "value")
    # the value axis's ticks, read off the plot: the outlier's bin reaches 200
    tick = r'<text x="84" y="([\d.]+)" text-anchor="end" class="ytick">([\d.]+)<'
    (y0, t0), *_, (y1, t1) = [(float(y) - 4, float(t)) for y, t in re.findall(tick, ordered)]  # baseline: +4
    lines = re.findall(r"M(-?[\d.]+) (-?[\d.]+)V(-?[\d.]+)", ordered)
    assert len(lines) == svg.RUN_BINS
    top = min(float(top) for _, _, top in lines)
    assert t0 + (top - y0) / (y1 - y0) * (t1 - t0) == pytest.approx(200.0, abs=0.5)  # the outlier's bin
    assert "400 bins of consecutive runs" in ordered and len(ordered) < 60_000


def test_thinned_plots_near_the_float_limit_draw_without_nan_or_warnings():
    """Bins and medians of values near 1.7e308 take no mean of two (it would overflow to inf)."""
    import warnings

    from perfctl.report import svg

    values = list(np.linspace(1e307, 1.7e308, 5_000))
    series = [svg.Series("A", values), svg.Series("B", values[::-1] + [float("nan"), float("inf")])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drawn = svg.strip(series, None, {}, "x") + svg.ecdf(series, None, "x") + svg.run_order(series, None, "x")
    assert not re.search(r"nan|inf", drawn), re.findall(r".{20}(?:nan|inf).{20}", drawn)[:3]


def test_a_long_confidence_sequence_is_thinned_and_says_so():
    from perfctl.report import svg

    n = 50_000
    rounds = list(range(1, n + 1))
    low = [1 - 1 / r ** 0.5 for r in rounds]
    high = [1 + 1 / r ** 0.5 for r in rounds]
    drawn = svg.sequence(rounds, [1.0] * n, low, high, 0.05)
    assert "50,000 rounds drawn at 1,000 evenly spaced ones" in drawn and len(drawn) < 100_000


# ---- text that stays text ------------------------------------------------------------------------------

HOSTILE_MARKDOWN = ["**x** [link](http://evil) <b>bold</b>", "<img src=x onerror=alert(1)>", "`code` _em_ ~~del~~",
                    "![i](http://evil/i.png)", "&lt;b&gt; &amp; &#42;", "a\\*b\\", "# heading", "- item",
                    "1. one", "$x^2$ {y}", "<https://evil>", "a|b"]


class _Cells(HTMLParser):
    """The rendered table: each body row's cells as text, and every tag met inside the body."""

    def __init__(self):
        super().__init__()
        self.rows, self.tags, self._in_body, self._cell = [], [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag == "td":
            self._cell = ""
        elif self._in_body:
            self.tags.append(tag)

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif self._in_body and tag == "td":
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def _rendered(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(markdown)


def test_markdown_cells_render_as_the_text_they_are(tmp_path):
    commands = {name: _times(0.010) for name in HOSTILE_MARKDOWN}
    a = _hyperfine(tmp_path / "a.json", commands)
    b = _hyperfine(tmp_path / "b.json", {name: _times(0.012) for name in HOSTILE_MARKDOWN})
    done = perfctl("compare", a, b, "--format", "markdown")
    assert done.returncode == 3, done.stderr
    cells = _Cells()
    cells.feed(_rendered(done.stdout))
    assert sorted(row[0] for row in cells.rows) == sorted(HOSTILE_MARKDOWN)
    assert all(len(row) == 11 for row in cells.rows), cells.rows  # no name forged a column
    assert cells.tags == [], cells.tags  # no link, image, emphasis, code or HTML of a name's own
    rendered = _rendered(done.stdout)
    assert "<h1" not in rendered and "<ol" not in rendered
    # the only list is perfctl's own: the overall lines (a name cannot start one)
    items = re.findall(r"<li>(.*?)</li>", rendered)
    ours = ("geometric mean", "Speedup-Test", "B faster (median protocol)", "note:", "SPARC overall")
    assert items and all(item.startswith(ours) for item in items), items


def test_markdown_statement_and_notes_are_escaped_too(tmp_path):
    """The lines above and below the table name the inputs: a file name is text there too."""
    a = _hyperfine(tmp_path / "**bold** [x](http:evil).json", {"x": _times(0.010)})
    b = _hyperfine(tmp_path / "b.json", {"x": _times(0.012)})
    done = perfctl("compare", a, b, "--format", "markdown")
    assert done.returncode == 3, done.stderr
    rendered = _rendered(done.stdout)
    # the one emphasis is perfctl's: the headline, first
    headline, rest = rendered.split("</strong>", 1)
    assert headline.startswith("<p><strong>B slower on 1 of 1 benchmark: x "), headline
    assert "<strong>" not in rest and "<a " not in rendered and "**bold** [x](http:evil).json" in rendered


FORMULAS = ["=1+2", "+A1", "-1+2", "@SUM(A1:A2)", " =HYPERLINK(\"http://evil\")", "\uff1d1+1",
            "=cmd|' /C calc'!A0"]


def test_csv_cells_a_spreadsheet_would_run_are_text_and_numbers_stay_numbers(tmp_path):
    names = FORMULAS + ["-0.5", "+1", "plain"]  # a name that is a plain number reads as that number: kept
    a = _hyperfine(tmp_path / "a.json", {name: _times(0.010) for name in names})
    b = _hyperfine(tmp_path / "b.json", {name: _times(0.012) for name in names})
    done = perfctl("compare", a, b, "--format", "csv")
    assert done.returncode == 3, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    shown = {row["benchmark"] for row in rows}
    assert shown == {"'" + name for name in FORMULAS} | {"-0.5", "+1", "plain"}, shown
    for line in done.stdout.splitlines()[1:]:
        first = next(csv.reader([line]))[0]
        if first.startswith("'"):
            assert line.startswith('"\''), line  # OWASP: the defused cell is quoted too
        # numbers are bare numbers: the medians (10.45 ms and 12.54 ms in ns) are not quoted
        assert ",10450000.0,12540000.0," in line, line


def test_one_cell_rule():
    from perfctl.formats.csv import cell, line

    assert cell(-0.5) == "-0.5" and cell(-3) == "-3" and cell(None) == "" and cell("-0.5") == "-0.5"
    assert cell("=1+2") == "\"'=1+2\"" and cell("@x") == "\"'@x\"" and cell("a,b") == '"a,b"'
    assert cell("tab\there") == "tab\\there"  # control characters visible: no forged cell or row
    assert cell("\t=1") == "\\t=1"  # made visible first: it starts with a backslash, not a formula
    assert line(["=x", 1.5, "say \"hi\""]) == "\"'=x\",1.5,\"say \"\"hi\"\"\"\r\n"


def test_stat_csv_rows_go_through_the_same_cell_rule(tmp_path):
    """`stat --csv`'s writer, fed a real run whose event name and reason were changed to formulas."""
    from perfctl.formats.csv import CsvWriter

    jsonl = tmp_path / "run.jsonl"
    done = perfctl("stat", "-q", "-r", "1", "-e", "task-clock", "-o", str(jsonl), "--", "/bin/true")
    assert done.returncode == 0, done.stderr
    record = json.loads(jsonl.read_text().splitlines()[1])
    record["readings"][0]["event"] = "=HYPERLINK(\"http://evil\")"
    record["readings"][0]["reason"] = "@SUM(1)"
    out = io.StringIO()
    CsvWriter(out).write_sample(sample_of(record))
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert rows[0]["event"] == "'=HYPERLINK(\"http://evil\")" and rows[0]["reason"] == "'@SUM(1)"
    assert rows[0]["value"] == str(record["readings"][0]["value"])  # a number, as it was

    real = perfctl("stat", "-r", "2", "--csv", "-e", "page-faults,task-clock", "--", "/bin/true")
    assert real.returncode == 0, real.stderr
    rows = list(csv.DictReader(io.StringIO(real.stdout)))
    assert len(rows) == 4 and all(float(r["value"]) > 0 for r in rows)


# ---- long names in the HTML report ----------------------------------------------------------------------

LONG = ["benchmark_with_a_very_long_descriptive_name_that_goes_on_" + "and_on_" * 12 + f"variant_{k}"
        for k in range(3)]


@needs_chromium
def test_long_names_keep_the_verdict_column_whole_and_the_forest_labels_apart(browser, tmp_path):
    """Names of 150 characters: before, each verdict cell was 78 px wide and "relevant difference" broke
    over 4 lines; the forest plot cut every name at 39 characters (the three read alike) with no tooltip."""
    names = LONG + ["short"]
    a = _hyperfine(tmp_path / "a.json", {n: _times(0.010) for n in names})
    b = _hyperfine(tmp_path / "b.json", {n: _times(0.012) for n in names})
    out = tmp_path / "long.html"
    done = perfctl("report", a, b, "-o", str(out))
    assert done.returncode == 3, done.stderr
    page = browser.open(str(out))
    assert page.events.errors == [], page.events.errors
    # every cell that must not wrap is one line box, no wider than its cell
    cells = page.evaluate("""Array.from(document.querySelectorAll(
        '#verdicts td[data-field=verdict], #verdicts td.num, #verdicts td.word, #verdicts th')).map(function (c) {
        var r = document.createRange(); r.selectNodeContents(c);
        return {text: c.textContent, lines: r.getClientRects().length,
                fits: r.getBoundingClientRect().width <= c.getBoundingClientRect().width};
    })""")
    assert cells and all(c["lines"] == 1 and c["fits"] for c in cells), [c for c in cells if c["lines"] != 1]
    verdicts = [c for c in cells if c["text"] == "relevant difference"]
    assert len(verdicts) == 4
    # the names wrap in their own column, which keeps a readable width
    width = page.evaluate("document.querySelector('#verdicts td.name').getBoundingClientRect().width")
    assert width > 150, width
    rows = page.evaluate("""Array.from(document.querySelectorAll('.forest svg g.row')).map(function (g) {
        var label = g.querySelector('text'), box = label.getBBox();
        return {title: g.querySelector('title').textContent, label: label.textContent, left: box.x};
    })""")
    assert [r["title"].split(": ")[0] for r in rows] == names, rows
    assert "B slower beyond ±5%, A/B 0.833× [" in rows[0]["title"]
    assert "(SPARC: relevant difference)" in rows[0]["title"]
    labels = [r["label"] for r in rows]
    assert len(set(labels)) == 4 and labels[3] == "short", labels  # the variants read apart
    assert all(r["left"] >= 0 for r in rows), rows  # no label runs off the plot's left edge
    assert all(lab.endswith(f"variant_{k}") for k, lab in enumerate(labels[:3])), labels
    page.screenshot(str(tmp_path / "long.png"), full_page=True)


def test_a_label_is_shortened_in_its_middle_to_the_room_it_has():
    from perfctl.report import svg

    assert svg.fitted("short", 300) == "short"
    shortened = svg.fitted(LONG[0], 300)
    assert len(shortened) == int(300 / svg.CHAR_WIDTH) and "…" in shortened
    assert shortened.startswith("benchmark_with") and shortened.endswith("variant_0")
    # the fleet's timeline labels machines the same way, with the whole name as a tooltip
    machine = "rack-12-" + "x" * 60 + "-node-7"
    drawn = svg.timeline([(machine, [(1.79e9, "faster", "trusted: audit 1")])])
    assert f"<title>{machine}</title>" in drawn and "…" in drawn and "-node-7</text>" in drawn
