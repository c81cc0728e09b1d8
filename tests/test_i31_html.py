"""Issue 31, the HTML report: the page says what changed first, and reads from a 420-pixel phone to a wide
screen. Real runs (`perfctl stat` on the example programs: matmul built -O0 against -O2, some 4x apart,
and sort unchanged), real pages, measured in a real headless Chromium (tests/browser.py) at 420 and 1400
pixels:

- no element wider than the viewport, except inside a box that scrolls sideways (the verdict table); no
  text clipped, in the page or in a plot (every SVG text inside its viewBox);
- the headline (report/compare.py) is the first text of the page, and the verdict column says the direction
  in words;
- every value axis's title names the unit its ticks print, and the ticks read the data in that unit (the
  median bar sits where the ticks put the median); the forest's outer ticks lie beyond every interval;
- the stat page: no legend for its one series, no negative or fractional tick for a count, one note for
  the counters that never changed instead of their plots.

Set PERFCTL_SCREENSHOTS=DIR to keep the screenshots."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from browser import Browser, chromium, measured_builds
from conftest import perfctl

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "examples" / "bin"
WIDTHS = (420, 1400)

pytestmark = pytest.mark.skipif(chromium() is None, reason="probe: no chromium on PATH (deploy/setup.sh installs it)")

SIDES = {"A": [("matmul", ["matmul-O0", "120"]), ("sort", ["sort", "20000"])],
         "B": [("matmul", ["matmul", "120"]), ("sort", ["sort", "20000"])]}


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    """The compare page of the two builds and a stat page of pagetouch, with compare's JSON and headline."""
    directory = tmp_path_factory.mktemp("i31html")
    files = {side: str(path) for side, path in measured_builds(directory, SIDES, warmup=1).items()}
    compare_html = directory / "compare.html"
    made = perfctl("report", files["A"], files["B"], "--metric", "task-clock", "-o", str(compare_html))
    assert made.returncode in (0, 3), made.stderr
    table = perfctl("compare", files["A"], files["B"], "--metric", "task-clock", "--width", "1000")
    document = json.loads(perfctl("compare", files["A"], files["B"], "--metric", "task-clock", "--format",
                                  "json").stdout)
    stat_html = directory / "stat.html"
    done = perfctl("stat", "-q", "-r", "8", "--warmup", "1", "--html", str(stat_html), "--", str(BIN / "pagetouch"),
                   "300")
    assert done.returncode == 0, done.stderr
    headline = table.stdout.strip().split("\n\n")[0]
    assert headline.startswith(("B slower", "B faster", "No change")), table.stdout
    return {"compare": str(compare_html), "stat": str(stat_html), "document": document, "headline": headline}


@pytest.fixture(scope="module", params=WIDTHS)
def browser(request):
    with Browser(width=request.param, height=900) as b:
        yield b


def shots(name: str) -> Path | None:
    directory = os.environ.get("PERFCTL_SCREENSHOTS")
    if not directory:
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    return Path(directory) / name


# Everything drawn, measured: elements past the right edge of the viewport (outside a box that scrolls
# sideways), elements whose text is wider than their box (clipped or spilling), and SVG texts outside their
# plot's viewBox (an SVG clips them).
OVERFLOW = """(function () {
    var width = window.innerWidth, out = {page: document.documentElement.scrollWidth, width: width,
                                          wide: [], clipped: [], plots: []};
    function scroller(e) {
        for (var p = e.parentElement; p; p = p.parentElement) {
            var x = getComputedStyle(p).overflowX;
            if (x === 'auto' || x === 'scroll') return p;
        }
        return null;
    }
    // inside a box that scrolls, an element must lie within what it scrolls over, and no box between them
    // may clip it (paint containment: content-visibility clipped the verdict table's right columns)
    function hidden(e, box, outer) {
        var right = box.right - outer.getBoundingClientRect().left + outer.scrollLeft;
        if (right > outer.scrollWidth + 1) return true;
        for (var p = e.parentElement; p && p !== outer; p = p.parentElement) {
            var style = getComputedStyle(p);
            var clips = style.overflowX !== 'visible' || /paint|strict|content/.test(style.contain)
                        || style.contentVisibility === 'auto';
            if (clips && box.right > p.getBoundingClientRect().right + 1) return true;
        }
        return false;
    }
    document.querySelectorAll('details').forEach(function (d) { d.open = true; });
    document.querySelectorAll('body *').forEach(function (e) {
        var box = e.getBoundingClientRect(), outer = scroller(e);
        if (box.width === 0 || e.closest('svg') && e.tagName !== 'svg') return;
        if (outer) {
            if (hidden(e, box, outer)) out.clipped.push('scrolled: ' + e.tagName + ' ' + e.textContent.slice(0, 30));
            return;
        }
        if (box.right > width + 0.5) out.wide.push(e.tagName + ' ' + (e.id || e.className) + ' ' + box.right);
        if (/^(P|LI|TD|TH|H1|H2|H3|SUMMARY|DIV|SECTION|DETAILS|CODE)$/.test(e.tagName) && e.clientWidth > 0
            && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'auto')
            out.clipped.push(e.tagName + ' ' + e.textContent.slice(0, 40) + ' ' + e.scrollWidth + '>' + e.clientWidth);
    });
    document.querySelectorAll('svg text').forEach(function (t) {
        var svg = t.ownerSVGElement, view = svg.viewBox.baseVal, b = t.getBBox();
        if (!svg.getScreenCTM() || !t.getScreenCTM()) { out.plots.push('not laid out: ' + t.textContent); return; }
        var m = svg.getScreenCTM().inverse().multiply(t.getScreenCTM());  // the text's space to the viewBox's
        var corners = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
            .map(function (c) { var pt = svg.createSVGPoint(); pt.x = c[0]; pt.y = c[1];
                                return pt.matrixTransform(m); });
        var xs = corners.map(function (c) { return c.x; }), ys = corners.map(function (c) { return c.y; });
        if (Math.min.apply(null, xs) < -1 || Math.max.apply(null, xs) > view.width + 1
            || Math.min.apply(null, ys) < -1 || Math.max.apply(null, ys) > view.height + 1)
            out.plots.push(svg.getAttribute('aria-label').slice(0, 40) + ': ' + t.textContent);
    });
    return out;
})()"""


def assert_fits(page) -> None:
    found = page.evaluate(OVERFLOW)
    assert found["page"] <= found["width"], found
    assert found["wide"] == [], found["wide"]
    assert found["clipped"] == [], found["clipped"]
    assert found["plots"] == [], found["plots"]


def test_the_compare_page_fits_the_window_and_says_what_changed_first(pages, browser):
    page = browser.open(pages["compare"])
    assert page.events.errors == [] and page.events.network() == [], page.events.errors
    width = browser.width
    assert page.evaluate("window.innerWidth") == width
    # the headline, as compare prints it, is the first text a reader meets
    first = page.evaluate("document.body.innerText.trim()")
    assert first.startswith(re.sub(r"\s+", " ", pages["headline"])), (first[:300], pages["headline"])
    # the verdict column, second after the name: the finding in words, as JSON has it, coloured by it
    cells = page.evaluate("""Array.from(document.querySelectorAll('#verdicts tbody tr')).map(function (row) {
        return {name: row.dataset.benchmark, text: row.cells[1].textContent, css: row.cells[1].className}; })""")
    assert page.evaluate("document.querySelector('#verdicts th:nth-child(2)').textContent") == "verdict"
    expected = {b["benchmark"]: b["finding"] for b in pages["document"]["benchmarks"]}
    assert {c["name"]: c["text"] for c in cells} == expected
    matmul = next(c for c in cells if c["name"] == "matmul")
    assert matmul["text"].startswith("B faster") and matmul["css"] == "tone-faster", matmul
    # the method is one click away, closed
    assert page.evaluate("document.querySelector('details#method').open") is False
    assert "Bonferroni" in page.evaluate("document.querySelector('details#method').textContent")
    # one level format: the table's and the forest's, as compare prints it
    from perfctl.report.compare import percent

    level = percent(pages["document"]["interval_level"])
    text = page.evaluate("document.body.innerText")
    assert f"low ({level})" in text and f"{level} intervals" in text and "98.3333" not in text
    # the overall section leads with the geometric mean of the ratios and its interval
    assert page.evaluate("document.querySelector('#overall ~ ul.summary li').textContent").startswith(
        "geometric mean of the A/B ratios")
    target = shots(f"i31-compare-{width}.png")
    if target:
        page.screenshot(str(target))
    assert_fits(page)


def test_the_compare_page_axes_say_the_unit_their_ticks_print(pages, browser):
    page = browser.open(pages["compare"])
    plots = page.evaluate("""Array.from(document.querySelectorAll('.plots svg')).map(function (s) {
        var axes = s.querySelectorAll('g.axis');
        var last = axes[axes.length - 1];
        var medians = Array.from(s.querySelectorAll('line > title')).filter(function (t) {
            return t.textContent.indexOf('median ') === 0; });
        return {label: s.getAttribute('aria-label'), keys: Array.from(s.querySelectorAll(':scope > text'))
                    .map(function (t) { return t.textContent; }),
                title: s.querySelector('text.axis-title:not(.y)').textContent,
                ytitle: (s.querySelector('text.axis-title.y') || {}).textContent || null,
                ticks: Array.from(last.querySelectorAll('text.tick')).map(function (t) {
                    return [parseFloat(t.getAttribute('x')), t.textContent]; }),
                median: medians.length ? [parseFloat(medians[medians.length - 1].parentNode.getAttribute('x1')),
                                          medians[medians.length - 1].textContent] : null};
    })""")
    assert len(plots) == 3 * len(pages["document"]["benchmarks"])
    factor = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}
    strips = [p for p in plots if p["label"].startswith("runs of A and B")]
    assert len(strips) == len(pages["document"]["benchmarks"])
    for plot in plots:
        if plot["label"].startswith("runs in order"):
            assert re.fullmatch(r"task-clock \((ms|µs|s|ns)\)", plot["ytitle"]), plot
            continue
        unit = re.fullmatch(r"task-clock \((ms|µs|s|ns)\)", plot["title"])
        assert unit, plot["title"]
        # the ticks are plain numbers in that unit: no unit of their own ("28.000 ms" under "(ns)" before)
        assert all(re.fullmatch(r"-?[\d,]+(\.\d+)?", text) for _, text in plot["ticks"]), plot["ticks"]
        if plot["label"].startswith("empirical CDF"):
            assert plot["ytitle"] == "share of runs ≤ value"
            continue
        # the strip: its median bar read off the ticks is the median in the title's unit
        (x0, t0), (x1, t1) = plot["ticks"][0], plot["ticks"][-1]
        t0, t1 = float(t0.replace(",", "")), float(t1.replace(",", ""))
        x, said = plot["median"]
        value, said_unit = said.split()[1:3]
        read = t0 + (x - x0) / (x1 - x0) * (t1 - t0)
        wanted = float(value.replace(",", "")) * factor[said_unit] / factor[unit[1]]
        # the title's median is rounded to the digits it prints (1.155 ms for 1.1555 ms): half its last digit
        # on top of 1% of the axis (a narrow axis made that rounding alone exceed 1% of it)
        decimals = len(value.partition(".")[2])
        rounding = 0.5 * 10 ** -decimals * factor[said_unit] / factor[unit[1]]
        assert abs(read - wanted) <= 0.01 * abs(t1 - t0) + rounding, (plot["label"], read, wanted)
        # the key explains the bar and the bracket
        assert "median" in plot["keys"] and any("interval of the value 0.5 of runs stay under" in k
                                                for k in plot["keys"]), plot["keys"]
    # matmul's builds are some 4x apart: each side gets its own axis, and its bracket stays a bracket
    brackets = page.evaluate("""Array.from(document.querySelectorAll('#b' + Array.from(document.querySelectorAll(
        '#verdicts tbody tr')).findIndex(function (r) { return r.dataset.benchmark === 'matmul'; })
        + ' .plots svg')[0].querySelectorAll('path > title')).map(function (t) {
            return t.parentNode.getBBox().width; })""")
    assert len(brackets) == 2 and min(brackets) >= 30, brackets


def test_the_forest_ticks_span_every_interval(pages, browser):
    page = browser.open(pages["compare"])
    forest = page.evaluate("""(function () {
        var s = document.querySelector('.forest svg');
        return {ticks: Array.from(s.querySelectorAll('text.tick')).map(function (t) {
                    return [parseFloat(t.getAttribute('x')), parseFloat(t.textContent)]; }),
                lines: Array.from(s.querySelectorAll('g.row line')).map(function (l) {
                    return [parseFloat(l.getAttribute('x1')), parseFloat(l.getAttribute('x2'))]; })};
    })()""")
    ticks = sorted(forest["ticks"])
    assert len(forest["lines"]) == len(pages["document"]["benchmarks"]) and len(ticks) >= 3
    assert ticks[0][0] <= min(x for x, _ in forest["lines"]) and ticks[-1][0] >= max(x for _, x in forest["lines"])
    # and in values: the outer ticks bracket every interval the JSON has
    rows = pages["document"]["benchmarks"]
    assert ticks[0][1] <= min(r["ratio_low"] for r in rows) and ticks[-1][1] >= max(r["ratio_high"] for r in rows)


def test_the_stat_page_fits_and_draws_one_series_as_one(pages, browser):
    page = browser.open(pages["stat"])
    assert page.events.errors == [], page.events.errors
    events = page.evaluate("""Array.from(document.querySelectorAll('#events tbody tr')).map(function (r) {
        var v = {};
        r.querySelectorAll('td[data-field]').forEach(function (c) { v[c.dataset.field] = c.dataset.value; });
        return {event: r.dataset.event, min: parseFloat(v.min), max: parseFloat(v.max)}; })""")
    constant = [e["event"] for e in events if e["min"] == e["max"]]
    varied = [e["event"] for e in events if e["min"] != e["max"]]
    assert constant and varied, events  # pagetouch: major-faults stay 0, task-clock varies
    note = page.evaluate("(document.querySelector('#constant') || {}).textContent || ''")
    assert all(f"{e} " in note for e in constant), note
    sections = page.evaluate("Array.from(document.querySelectorAll('section h3')).map(function (h) {"
                             " return h.textContent; })")
    assert sections == varied
    texts = page.evaluate("Array.from(document.querySelectorAll('svg text')).map(function (t) {"
                          " return t.textContent; })")
    assert "A" not in texts  # one series: no legend, no row label
    axes = page.evaluate("""Array.from(document.querySelectorAll('svg')).map(function (s) {
        function texts(css) { return Array.from(s.querySelectorAll(css)).map(function (t) { return t.textContent; }); }
        var ordered = s.querySelector('text.axis-title.y') && s.querySelector('text.ytick');
        return ordered ? {title: s.querySelector('text.axis-title.y').textContent, ticks: texts('text.ytick')}
                       : {title: s.querySelector('text.axis-title').textContent, ticks: texts('text.tick')}; })""")
    assert len(axes) == 3 * len(varied)
    for axis in axes:
        values = [float(t.replace(",", "")) for t in axis["ticks"]]
        assert values and min(values) >= 0, axis  # no tick at -0.50 for data that are never negative
        if "(" not in axis["title"]:  # a count: "page-faults", where a time is "task-clock (ms)"
            assert all(v == int(v) for v in values), axis  # whole counts
    target = shots(f"i31-stat-{browser.width}.png")
    if target:
        page.screenshot(str(target))
    assert_fits(page)


@pytest.mark.parametrize("values", [[0] * 8, [0, 1, 0, 2, 0, 1, 3, 0], [5, 5, 5, 6]])
def test_a_count_axis_has_whole_ticks_and_none_below_zero(values):
    """A count that is 0 in every run, or a few: its axes had ticks at -1, -0.50, 0.50 (page faults)."""
    from perfctl.report import svg

    series = [svg.Series("A", values)]
    for drawn in (svg.strip(series, None, {}, "major-faults"), svg.ecdf(series, None, "major-faults"),
                  svg.run_order(series, None, "major-faults")):
        ticks = re.findall(r'class="y?tick">([^<]+)<', drawn)
        values_read = [float(t.replace(",", "")) for t in ticks]
        assert values_read and min(values_read) >= 0 and all(v == int(v) for v in values_read), ticks
        assert ">A<" not in drawn  # one series: no legend, no row label


def test_the_fleet_page_fits_the_window(browser, tmp_path):
    """The fleet's audits (html.fleet_page, as `perfctl report --machines` draws them; the server's side is
    tests/test_html_report.py's): two machines, one with a long name and long reasons, at 420 and 1400."""
    from perfctl.report.html import fleet_page

    day = 86400 * 10**9
    base = 1_790_000_000 * 10**9
    long_name = "rack-12-" + "x" * 60 + "-node-7"
    audit = {"audit_id": "3f2a9c1e-0000", "kernel": "6.1.0-18-amd64", "microcode": "0xa201016"}
    history = {
        "box-a": [{**audit, "verdict": "trusted", "time_ns": base, "reasons": []},
                  {**audit, "verdict": "degraded", "time_ns": base + day,
                   "reasons": ["the timer interrupt rate rose from 250 to 1000 per second (CONFIG_HZ changed: "
                               "/sys/kernel/mm/transparent_hugepage/enabled=always)"]}],
        long_name: [{**audit, "verdict": "untrusted", "time_ns": base + 2 * day, "reasons": ["no PMU"]}]}
    drifts = {"box-a": ["verdict trusted -> degraded", "kernel 6.1.0-17-amd64 -> 6.1.0-18-amd64"]}
    spread = [{"kernel": "6.1.0-18-amd64", "machines": 2, "source": "calibrated", "median": 1.2e9, "cv": 3.1e-4}]
    path = tmp_path / "fleet.html"
    path.write_text(fleet_page(history, drifts, spread))
    page = browser.open(str(path))
    assert page.events.errors == [], page.events.errors
    assert page.evaluate("document.querySelectorAll('svg').length") == 1
    assert_fits(page)
