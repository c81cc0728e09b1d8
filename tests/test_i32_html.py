"""Issue 32, the history page (`perfctl report --history`): real `perfctl stat` samples under commits c1..c8
(tests/i32_history_files.py, the work 1.3 times from c5), the page measured in a real headless Chromium at
420 and 1400 pixels (tests/browser.py): nothing wider than the window or clipped (test_i31_html's measure),
no request leaves the page, the headline first, the open change listed before the series, the plot's
value axis in the unit its ticks print, a hover per point naming its commit, job, runs and median, and the
change marked at c5 with its ratio and interval.

Set PERFCTL_SCREENSHOTS=DIR to keep the screenshots."""

from __future__ import annotations

import json

import pytest
from browser import Browser, chromium
from conftest import perfctl
from i32_history_files import COMMITS, measure_history
from test_i31_html import assert_fits, shots

pytestmark = pytest.mark.skipif(chromium() is None, reason="probe: no chromium on PATH (deploy/setup.sh installs it)")


@pytest.fixture(scope="module")
def page_files(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("i32html")
    samples = str(measure_history(directory / "history.jsonl"))
    html = directory / "history.html"
    made = perfctl("report", "--history", samples, "-o", str(html))
    assert made.returncode == 0, made.stderr
    assert "HTML report written to" in made.stderr
    document = json.loads(perfctl("history", samples, "--format", "json").stdout)
    headline = perfctl("history", samples, "-q", "--width", "1000").stdout.strip()
    return {"html": str(html), "document": document, "headline": headline}


@pytest.fixture(scope="module", params=(420, 1400))
def browser(request):
    with Browser(width=request.param, height=900) as b:
        yield b


def test_the_history_page_fits_and_marks_the_change(page_files, browser):
    page = browser.open(page_files["html"])
    assert page.events.errors == [] and page.events.network() == [], page.events.errors
    text = page.evaluate("document.body.innerText.trim()")
    assert text.startswith(page_files["headline"]), (text[:300], page_files["headline"])
    (series,) = page_files["document"]["series"]
    (change,) = series["changes"]
    # the open changes come first: their table before the series' plot, the change's id and ratio in it
    order = page.evaluate("""Array.from(document.querySelectorAll('#open-changes, svg')).map(e => e.tagName)""")
    assert order[0] == "TABLE", order
    ratio = page.evaluate("document.querySelector('#open-changes td[data-field=ratio]').dataset.value")
    assert float(ratio) == change["ratio"]
    assert change["id"] in page.evaluate("document.querySelector('#open-changes').textContent")
    # a hover per point, in order, with commit, job, runs and median
    hovers = page.evaluate("Array.from(document.querySelectorAll('rect.point title')).map(t => t.textContent)")
    assert [h.split(" · ")[0] for h in hovers] == COMMITS, hovers
    assert all("5 runs" in h and "median" in h and "job" in h for h in hovers), hovers
    # the change marked between c4 and c5, labelled with its ratio and interval
    marks = page.evaluate("""Array.from(document.querySelectorAll('g.change')).map(g => ({
        title: g.querySelector('title').textContent, label: g.querySelector('text').textContent,
        x: +g.querySelector('line').getAttribute('x1')}))""")
    assert len(marks) == 1 and "at c5 (after c4)" in marks[0]["title"] and marks[0]["label"].startswith("0."), marks
    xs = page.evaluate("""Array.from(document.querySelectorAll('rect.point')).map(r =>
        +r.getAttribute('x') + +r.getAttribute('width') / 2)""")
    assert xs[3] < marks[0]["x"] < xs[4], (xs, marks)
    # the value axis says the unit its ticks print, and the ticks read the data in it
    title = page.evaluate("document.querySelector('svg .axis-title.y').textContent")
    assert title == "task-clock (ms)", title
    ticks = page.evaluate("Array.from(document.querySelectorAll('svg .ytick')).map(t => +t.textContent)")
    medians = [point["median"] / 1e6 for point in series["points"]]
    assert min(ticks) <= max(medians) and max(ticks) >= min(medians), (ticks, medians)
    target = shots(f"i32-history-{browser.width}.png")
    if target:
        page.screenshot(str(target))
    assert_fits(page)
