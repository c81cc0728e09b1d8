"""Issue 32, the user's half: `perfctl history FILE...` over real `perfctl stat` samples that carry labels
(tests/i32_history_files.py: spin's work 1.3 times from commit c5), its JSON (the contract's history dict,
versioned), text that fits an 80-column terminal, Markdown, and the one-line errors of `history` and
`changes`. The server-backed `changes` and `history MACHINE` are tested against a real server in
tests/test_i32_cli_server.py and tests/test_i32_history_e2e.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import perfctl
from i32_history_files import COMMITS, SPIN, build, measure_history


@pytest.fixture(scope="module")
def history_file(tmp_path_factory):
    return str(measure_history(tmp_path_factory.mktemp("i32cli") / "history.jsonl"))


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory):
    path = tmp_path_factory.mktemp("i32plain") / "plain.jsonl"
    done = perfctl("stat", "-q", "--no-progress", "-r", "3", "-e", "task-clock", "-o", str(path), "--", "true")
    assert done.returncode == 0, done.stderr
    return str(path)


def history_json(*args: str) -> dict:
    result = perfctl("history", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_history_of_files_finds_the_change_at_c5_slower_after(history_file):
    document = history_json(history_file)
    assert document["schema"] == "perfctl.history/1" and document["perfctl"]
    (series,) = document["series"]
    assert (series["benchmark"], series["metric"], series["line"], series["unit"]) == ("spin", "task-clock",
                                                                                       {"branch": "main"}, "ns")
    assert [point["commit"] for point in series["points"]] == COMMITS  # in the order the runs were made
    assert all(point["runs"] == 5 and point["min"] <= point["q1"] <= point["median"] <= point["q3"] <= point["max"]
               for point in series["points"]), series["points"]  # five measured runs: the warm-up left out
    (change,) = series["changes"]
    assert (change["before"]["commit"], change["after"]["commit"]) == ("c4", "c5"), change
    assert (change["before"]["points"], change["after"]["points"]) == (4, 4), change
    assert (change["before"]["runs"], change["after"]["runs"]) == (20, 20), change
    # 1.3 times the CPU time: A/B about 0.77, slower after, beyond the 1% margin
    assert 0.7 < change["ratio"] < 0.85 and change["low"] <= change["ratio"] <= change["high"] < 0.99, change
    assert change["regression"] and change["state"] == "new" and change["margin"] == 0.01, change
    assert "slower" in change["finding"] and change["verdict"] == "relevant difference", change
    assert change["after"]["median"] > change["before"]["median"]
    # the same files, the same change id
    assert history_json(history_file)["series"][0]["changes"][0]["id"] == change["id"]


def test_order_by_a_numeric_label_orders_the_points_by_it(history_file):
    (series,) = history_json(history_file, "--order-by", "build")["series"]
    assert [point["commit"] for point in series["points"]] == COMMITS[::-1]
    assert [point["order"] for point in series["points"]] == [str(n) for n in range(1, 9)]
    (change,) = series["changes"]  # read backwards, the work falls at c4: faster after
    assert (change["before"]["commit"], change["after"]["commit"]) == ("c5", "c4"), change
    assert change["ratio"] > 1.15 and change["low"] > 1.01 and not change["regression"], change


def test_the_text_leads_with_the_change_and_fits_80_columns(history_file):
    result = perfctl("history", history_file, "--width", "80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), result.stdout
    headline = result.stdout.split("\n\n")[0]
    assert headline.startswith("spin on vm") or headline.startswith("spin on "), headline
    assert "at c5 (after c4)" in headline and "slower" in headline and "×" in headline, headline
    assert "1 change:" in " ".join(headline.split()), headline
    for commit in COMMITS:  # eight points: each listed
        assert f"\n{commit}" in result.stdout or f"│ {commit} " in result.stdout, (commit, result.stdout)
    quiet = perfctl("history", history_file, "-q")  # the headline alone
    assert " ".join(quiet.stdout.split()) == " ".join(headline.split()), (quiet.stdout, headline)


def test_markdown_and_output_file(history_file, tmp_path):
    out = tmp_path / "history.md"
    result = perfctl("history", history_file, "--format", "markdown", "-o", str(out))
    assert result.returncode == 0 and result.stdout == "", (result.stdout, result.stderr)
    text = out.read_text()
    assert text.startswith("spin on vm") or text.startswith("spin on"), text
    assert "| c4 → c5 |" in text or "c4 → c5" in text, text
    assert text.count("\n| c") == len(COMMITS), text  # a row per point


def test_the_changes_listing_renders_the_file_changes_and_gates(history_file):
    """`perfctl changes` renders the contract's rows: here those the files give (the server's are the same
    dicts): the open regression named in the headline; exit 3 only as the CI gate (-q)."""
    from rich.console import Console

    from perfctl.history_files import read_history
    from perfctl.report.history import ChangesReport

    rows = read_history([history_file])["series"][0]["changes"]
    for width in (80, 120):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))
        report = ChangesReport(rows)
        report.table(console)
        text = console.export_text()
        assert all(len(line.rstrip()) <= width for line in text.splitlines()), text
        assert text.startswith("1 open regression: spin on "), text
        assert report.exit_code() == 0 and ChangesReport(rows, gate=True).exit_code() == 3
    markdown = ChangesReport(rows).markdown()
    assert markdown.startswith("1 open regression\\: spin on ") and "| c4 → c5 |" in markdown, markdown
    assert markdown.count("\n|") == 3 and f"| {rows[0]['id']} | spin |" in markdown, markdown  # head, rule, row
    acknowledged = [{**rows[0], "state": "acknowledged"}]
    assert ChangesReport(acknowledged, gate=True).exit_code() == 0


def one_line_error(result, command: str = "perfctl history") -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{command}: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_history_errors_are_one_line(history_file, unlabelled, tmp_path):
    said = one_line_error(perfctl("history", str(tmp_path / "missing.jsonl")))
    assert "No such file" in said and "--server" in said, said  # a machine's name, perhaps: how to ask for it
    said = one_line_error(perfctl("history", unlabelled))
    assert "no labels" in said and "--label" in said, said
    said = one_line_error(perfctl("history", history_file, "--order-by", "commit"))
    assert "commit='c1', not a number" in said or "not a number" in said, said
    said = one_line_error(perfctl("history", history_file, "--order-by", "size"))
    assert "lacks it" in said, said
    said = one_line_error(perfctl("history", history_file, "--benchmark", "nosuch"))
    assert "no benchmark 'nosuch'" in said and "spin" in said, said
    assert "margin" in one_line_error(perfctl("history", history_file, "--margin", "150%"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "sample", "labels": {"commit": "c1"}}\n')
    assert str(bad) in one_line_error(perfctl("history", str(bad)))
    # an output is never an input, --force or not: the text and the page alike
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(Path(history_file).read_bytes())
    for command in (("history",), ("report", "--history")):
        said = one_line_error(perfctl(*command, str(copy), "-o", str(copy), "--force"), f"perfctl {command[0]}")
        assert "one of the inputs" in said, said
    assert copy.read_bytes() == Path(history_file).read_bytes()
    # a count that is 0 in some job has no ratio of levels: said in one line, naming the series
    zeros = tmp_path / "zeros.jsonl"
    for commit in ("c1", "c2"):
        assert perfctl("stat", "-q", "-r", "2", "-e", "major-faults,task-clock", "--label", f"commit={commit}",
                       "-o", str(zeros), "--", "/bin/true").returncode == 0
    said = one_line_error(perfctl("history", str(zeros), "--metric", "major-faults"))
    assert "major-faults" in said and "above 0" in said, said


def test_changes_usage_errors_are_one_line(tmp_path):
    said = one_line_error(perfctl("changes", "--since", "3 months"), "perfctl changes")
    assert "duration" in said, said
    assert "give the change's ID" in one_line_error(perfctl("changes", "ack"), "perfctl changes ack")
    assert "go with ack" in one_line_error(perfctl("changes", "--note", "why"), "perfctl changes")
    said = one_line_error(perfctl("changes", "reopen", "abc", "--false-positive"), "perfctl changes reopen")
    assert "go with ack" in said, said
    said = one_line_error(perfctl("changes", "ack", "abc", "--machine", "m1"), "perfctl changes ack")
    assert "select a listing" in said, said


def test_names_from_a_file_are_shown_literally(history_file, tmp_path):
    """A benchmark and a machine named with terminal escapes and rich markup (a file's names are anyone's):
    the text shows them as escapes, Markdown as literal text, JSON as the strings they are."""
    hostile = tmp_path / "hostile.jsonl"
    text = open(history_file).read()
    hostile.write_text(text.replace('"name":"spin"', '"name":"sp\\u001b[31min [bold]x[/bold]"')
                       .replace('"hostname":"', '"hostname":"\\u001b]0;owned\\u0007'))
    shown = perfctl("history", str(hostile), "--width", "100")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, shown.stdout
    assert "sp\\x1b[31min [bold]x[/bold]" in shown.stdout and "\\x1b]0;owned\\x07" in shown.stdout, shown.stdout
    markdown = perfctl("history", str(hostile), "--format", "markdown").stdout
    assert "\x1b" not in markdown and "\\[bold\\]" in markdown, markdown
    (series,) = history_json(str(hostile))["series"]
    assert series["benchmark"] == "sp\x1b[31min [bold]x[/bold]" and series["machine"].startswith("\x1b]0;owned")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="probe: tmux not on PATH (deploy/setup.sh)")
@pytest.mark.parametrize("columns", (80, 132))
def test_history_on_a_terminal_cuts_no_name_or_number(history_file, tmp_path, columns):
    """On a real terminal (tmux) of 80 and 132 columns: the headline first, no line wider than the
    terminal, no name or number cut (test_i31_terminal's reading), every point's median printed."""
    from test_i31_terminal import assert_readable, on_screen

    text, code = on_screen(tmp_path, columns, "history", history_file, "-v")
    assert code == 0, text
    assert_readable(text, columns)
    assert " ".join(text.split("\n\n")[0].split()).startswith("spin on "), text
    document = history_json(history_file)
    from perfctl.units import quantity

    for point in document["series"][0]["points"]:
        assert quantity(point["median"], "ns") in text, (point, text)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="probe: tmux not on PATH (deploy/setup.sh)")
def test_text_written_to_a_file_from_a_terminal_has_no_colours(history_file, tmp_path):
    """-o FILE from a terminal: the file is laid out as piped output (100 columns), without escapes."""
    from test_i31_terminal import on_screen

    out = tmp_path / "history.txt"
    text, code = on_screen(tmp_path, 80, "history", history_file, "-o", str(out))
    assert code == 0 and text.strip() == "", text
    written = out.read_text()
    assert "\x1b" not in written and written.startswith("spin on "), written
    assert max(len(line) for line in written.splitlines()) <= 100, written


def test_files_without_labels_are_a_point_each_in_the_order_measured(tmp_path):
    paths = []
    for n in range(3):
        path = tmp_path / f"build{2 - n}.jsonl"  # names against the order measured: the order is the runs'
        done = perfctl("stat", "-q", "--no-progress", "-r", "3", "-e", "task-clock", "--name", "spin", "-o", str(path),
                       "--", str(SPIN), "0.005")
        assert done.returncode == 0, done.stderr
        paths.append(str(path))
    (series,) = history_json(*sorted(paths))["series"]
    assert [point["job"] for point in series["points"]] == paths, series["points"]
    assert all(point["commit"] is None and point["runs"] == 3 for point in series["points"]), series["points"]


def test_a_history_too_short_for_a_change_says_so_not_no_change(tmp_path):
    """Two commits, the second 1.5 times the work: no interval can be had from one job a side, and the
    headline says the history is too short rather than that nothing changed."""
    path = tmp_path / "short.jsonl"
    for commit, work in (("c1", "0.010"), ("c2", "0.015")):
        assert perfctl("stat", "-q", "-r", "3", "-e", "task-clock", "--label", f"commit={commit}", "-o", str(path),
                       "--", str(build(tmp_path, work))).returncode == 0
    said = " ".join(perfctl("history", str(path), "-q").stdout.split())
    assert "2 points" in said and "too few to find a change (a change needs 4 jobs on each side" in said, said
