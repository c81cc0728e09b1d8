"""Issue 33: the guide for users of hyperfine, perf stat and iai-callgrind (docs/stat.md, "Coming from
hyperfine, perf stat or iai-callgrind") cannot drift from the code, and the HTML report of `perfctl stat`
shows what its terminal table shows of perf stat (the derived figures, stderr%) and the --until-precise line.

1. Every option the guide's perfctl column names exists in perfctl's parser (stat's or ab's), every
   `perfctl ...` command there parses, every event it gives to -e is an event perfctl knows, and every
   option of the other tools that a row marks as missing (**—**) is indeed not one of stat's or ab's. The
   checker itself is shown to catch each kind of drift on a guide written wrong.
2. A real `perfctl stat --until-precise --html` of examples/bin/pagetouch, opened in a real headless
   Chromium (tests/browser.py) at a narrow and a wide window: the derived column holds, cell for cell, the
   figures the same run's Markdown summary prints; CPUs utilized is the mean task-clock over the mean wall
   time read off the same page; the precision line is the summary's; and the page still fits its window.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
import shlex
from pathlib import Path

import pytest
from browser import Browser, chromium
from conftest import perfctl
from test_i31_html import assert_fits

from perfctl.agent.events import UnknownEvent, parse_events
from perfctl.cli import build_parser
from perfctl.output import UsageError

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "examples" / "bin"
GUIDE = "## Coming from hyperfine, perf stat or iai-callgrind"
MISSING = "**—**"
# an option as a guide writes it: `-e EVENTS`, `--shell=SHELL`, `--format json`
OPTION = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9-]*")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _options(*commands: str) -> set[str]:
    """Every option string of these perfctl commands (``-r``, ``--repeat``, ...)."""
    parsers = _subparsers(build_parser())
    return {s for command in commands for a in parsers[command]._actions for s in a.option_strings}


def _section(text: str) -> str:
    start = text.index(GUIDE)
    end = text.find("\n## ", start + len(GUIDE))
    return text[start:] if end < 0 else text[start:end]


def _rows(section: str) -> list[list[str]]:
    """The cells of every table row but the header and the rule; a pipe escaped inside a cell (``\\|``,
    as in `'sort in \\| cat'`) is the cell's."""
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        if len(cells) == 3 and cells[1] != "perfctl":
            rows.append(cells)
    return rows


def _spans(cell: str) -> list[str]:
    return [span.replace("\\|", "|") for span in re.findall(r"`([^`]+)`", cell)]


def _parses(argv: list[str]) -> str | None:
    """None when perfctl's parser takes ``argv``, else what it said."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            build_parser().parse_args(argv)
    except UsageError as e:  # perfctl's parsers say what is wrong in one line (perfctl/cli/options.py)
        return str(e)
    except SystemExit:
        return said.getvalue().strip().splitlines()[-1] if said.getvalue().strip() else "refused"
    return None


def _events(words: list[str]) -> str | None:
    """None when every -e value among ``words`` names events perfctl knows, else the error."""
    for flag, value in zip(words, words[1:]):
        if flag in ("-e", "--events") and not value.isupper():  # EVENTS is a placeholder, not a value
            try:
                parse_events([value])
            except UnknownEvent as e:
                return str(e)
    return None


def problems(section: str) -> tuple[list[str], dict[str, int]]:
    """What in the guide's tables perfctl does not have or has after all, and how much was checked."""
    ours, found = _options("stat", "ab"), []
    checked = {"commands": 0, "options": 0, "missing": 0}
    for peer, perfctl_cell, note in _rows(section):
        for span in _spans(perfctl_cell):
            words = shlex.split(span)
            if words[0] == "perfctl":
                checked["commands"] += 1
                said = _parses(words[1:]) or _events(words)
                if said:
                    found.append(f"{span}: {said}")
            elif OPTION.fullmatch(words[0].split("=")[0]):
                checked["options"] += 1
                option = words[0].split("=")[0]
                if option not in ours:
                    found.append(f"{span}: perfctl stat and ab have no {option}")
                elif _events(words):
                    found.append(f"{span}: {_events(words)}")
        if note.startswith(MISSING):
            for span in _spans(peer):
                match = OPTION.match(span)
                if match:
                    checked["missing"] += 1
                    if match.group() in ours:
                        found.append(f"{span}: marked missing, but perfctl has {match.group()}")
    return found, checked


def test_every_option_the_guide_names_is_perfctls_and_every_missing_one_is_missing():
    section = _section((ROOT / "docs" / "stat.md").read_text())
    found, checked = problems(section)
    assert found == []
    # the tables were read: each kind of claim is there in numbers (a guide the parser missed checks nothing)
    assert checked["commands"] >= 5 and checked["options"] >= 40 and checked["missing"] >= 15, checked
    # one table per tool
    assert all(f"### {tool}" in section for tool in ("hyperfine", "perf stat", "iai-callgrind")), section[:200]


def test_the_guide_checker_catches_each_kind_of_drift():
    wrong = "\n".join([
        GUIDE, "", "| tool | perfctl | |", "|---|---|---|",
        "| `-r N` | `-r N` | **=** fine |",
        "| `--x` | `--no-such-option` | **=** an option perfctl lacks |",
        "| `x` | `perfctl stat --bogus -- a \\| b` | **≈** a command the parser refuses |",
        "| `x` | `perfctl ab -e no-such-event -- a ::: b` | **≈** an event perfctl does not know |",
        "| `--warmup N` | `--warmup K` | **—** said missing, but perfctl has it |",
    ])
    found, checked = problems(_section(wrong))
    assert len(found) == 4, found
    spans = ["--no-such-option: ", "perfctl stat --bogus -- a | b: ", "perfctl ab -e no-such-event -- a ::: b: ",
             "--warmup N: marked missing"]
    assert all(problem.startswith(span) for problem, span in zip(found, spans)), found
    assert checked == {"commands": 2, "options": 3, "missing": 1}, checked


# 2. the HTML report of stat: perf stat's figures and the precision line

WIDTHS = (420, 1400)


def _unescaped(markdown: str) -> str:
    """A Markdown cell's text as it renders: a backslash escapes the character after it (markdown_text)."""
    return re.sub(r"\\(.)", r"\1", markdown)


@pytest.fixture(scope="module")
def stat_run(tmp_path_factory) -> dict:
    """One real run: its HTML report and, from the same runs, the Markdown summary on stdout.
    page-faults of pagetouch repeat exactly, so --until-precise on it reaches its target (at 6 runs, where
    the sequence has both ends), whatever the load on the machine."""
    directory = tmp_path_factory.mktemp("i33docs")
    html = directory / "stat.html"
    done = perfctl("stat", "--until-precise", "1%", "--metric", "page-faults", "-r", "40", "--format", "markdown",
                   "--html", str(html), "--", str(BIN / "pagetouch"), "300")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| event"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    rows = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(columns, (_unescaped(c.strip()) for c in line.strip("|").split("|"))))
        rows[cells["event"]] = cells
    precision = next(_unescaped(line.strip()) for line in lines if line.startswith("precision "))
    return {"html": str(html), "rows": rows, "precision": precision}


@pytest.fixture(scope="module", params=WIDTHS)
def browser(request):
    with Browser(width=request.param, height=900) as b:
        yield b


READ_EVENTS = """Array.from(document.querySelectorAll('#events tbody tr')).map(function (r) {
    var v = {};
    r.querySelectorAll('td[data-field]').forEach(function (c) {
        v[c.dataset.field] = {value: c.dataset.value, text: c.textContent, what: c.dataset.what || null}; });
    return {event: r.dataset.event, cells: v}; })"""


@pytest.mark.skipif(chromium() is None, reason="probe: no chromium on PATH (deploy/setup.sh installs it)")
def test_the_stat_page_shows_perf_stats_figures_and_the_precision_line(stat_run, browser):
    page = browser.open(stat_run["html"])
    assert page.events.errors == [], page.events.errors
    head = page.evaluate("Array.from(document.querySelectorAll('#events thead th')).map(function (h) {"
                         " return h.textContent; })")
    assert head.index("stderr%") < head.index("CV") < head.index("derived"), head
    events = {row["event"]: row["cells"] for row in page.evaluate(READ_EVENTS)}
    terminal = stat_run["rows"]
    assert set(events) == set(terminal), (events.keys(), terminal.keys())
    # the same runs: every event's figure and stderr% as the summary prints them, cell for cell
    for label, cells in events.items():
        assert cells.get("derived", {}).get("text", "") == terminal[label].get("derived", ""), label
        assert cells["stderr%"]["text"] == terminal[label]["stderr%"], label
    # no PMU here: task-clock's CPUs utilized and the rates per second of task-clock are what perf prints
    clock = events["task-clock"]["derived"]
    assert clock["what"] == "CPUs utilized"
    assert math.isclose(float(clock["value"]), float(events["task-clock"]["mean"]["value"])
                        / float(events["wall-time"]["mean"]["value"]), rel_tol=1e-9)
    faults = events["page-faults"]["derived"]
    assert faults["what"] == "/sec" and faults["text"].endswith("/sec")
    assert math.isclose(float(faults["value"]), float(events["page-faults"]["mean"]["value"])
                        / (float(events["task-clock"]["mean"]["value"]) / 1e9), rel_tol=1e-9)
    assert "derived" not in events["wall-time"]  # perf prints no figure for the clock itself
    # the --until-precise line, as under the terminal's table
    line = page.evaluate("(document.querySelector('#precision') || {}).textContent || ''")
    assert line == stat_run["precision"], line
    assert line.startswith("precision ±1% of the median page-faults reached after "), line
    assert_fits(page)


def test_a_stat_page_without_until_precise_or_figures_has_neither(tmp_path):
    """wall-time alone has no derived figure: no column, and no precision line without --until-precise."""
    html = tmp_path / "plain.html"
    done = perfctl("stat", "-q", "-r", "3", "-e", "page-faults", "--html", str(html), "--", str(BIN / "pagetouch"),
                   "10")
    assert done.returncode == 0, done.stderr
    text = html.read_text()
    assert "<th>stderr%</th>" in text
    assert "<th>derived</th>" not in text and "id=precision" not in text
