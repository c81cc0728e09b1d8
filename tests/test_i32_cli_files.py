"""Issue 32, what `perfctl history FILE...` does at its edges (the last engineer's list): a file series is a
benchmark's name and argv, as the server's; `-o FILE` replaces its own earlier text, JSON and Markdown but
never an input or a file perfctl did not write, and `-o /dev/stdout` prints; another tool's file is named;
a second --order-by is refused; table titles end without spaces; and a history whose changes were computed
on request (a server's `--order-by`: no id, no state) is shown without id and state in every format. The
samples are real `perfctl stat` runs (tests/i32_history_files.py)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import perfctl
from i32_history_files import SPIN, measure_history
from test_i32_cli import one_line_error


@pytest.fixture(scope="module")
def history_file(tmp_path_factory):
    return str(measure_history(tmp_path_factory.mktemp("i32files") / "history.jsonl"))


def test_two_argvs_under_one_name_are_two_series(tmp_path):
    """The server's series are name and argv (server/history_store.py): a file's too, so that `history FILE`
    and `history MACHINE` of the same runs agree."""
    path = tmp_path / "two.jsonl"
    for commit in ("c1", "c2"):
        for work in ("0.004", "0.006"):
            done = perfctl("stat", "-q", "-r", "3", "-e", "task-clock", "--name", "spin", "--label",
                           f"commit={commit}", "-o", str(path), "--", str(SPIN), work)
            assert done.returncode == 0, done.stderr
    result = perfctl("history", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    series = json.loads(result.stdout)["series"]
    assert sorted(one["argv"][1:] for one in series) == [["0.004"], ["0.006"]], series
    assert all(one["benchmark"] == "spin" and [p["commit"] for p in one["points"]] == ["c1", "c2"]
               and all(p["runs"] == 3 for p in one["points"]) for one in series), series


@pytest.mark.parametrize("fmt", ("text", "json", "markdown"))
def test_o_replaces_its_own_output_but_no_other_file(history_file, tmp_path, fmt):
    out = tmp_path / f"history.{fmt}"
    for _ in range(2):  # the second replaces the first, without --force
        result = perfctl("history", history_file, "--format", fmt, "-o", str(out))
        assert result.returncode == 0 and result.stdout == "", result.stderr
    written = out.read_text()
    if fmt == "json":
        assert json.loads(written)["schema"] == "perfctl.history/1"
    else:
        assert written.startswith("spin on ") and written.count("written by perfctl history") == 1, written
    foreign = tmp_path / "notes.txt"
    foreign.write_text("a user's notes\n")
    said = one_line_error(perfctl("history", history_file, "--format", fmt, "-o", str(foreign)))
    assert "it exists and is not perfctl's history" in said and "--force" in said, said
    assert foreign.read_text() == "a user's notes\n"
    page = tmp_path / "page.html"  # perfctl's, but not a history: not replaced without --force either
    assert perfctl("report", "--history", history_file, "-o", str(page)).returncode == 0
    said = one_line_error(perfctl("history", history_file, "--format", fmt, "-o", str(page)))
    assert "not perfctl's history" in said, said
    assert perfctl("history", history_file, "--format", fmt, "-o", str(foreign), "--force").returncode == 0
    assert foreign.read_text() != "a user's notes\n"


def test_o_dev_stdout_prints(history_file):
    printed = perfctl("history", history_file, "-q")
    result = perfctl("history", history_file, "-q", "-o", "/dev/stdout")
    assert result.returncode == 0 and result.stdout == printed.stdout and result.stdout.startswith("spin on "), \
        result.stderr


@pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH (deploy/setup.sh)")
def test_another_tools_file_is_named(tmp_path):
    exported = tmp_path / "hyperfine.json"
    subprocess.run(["hyperfine", "-N", "--runs", "3", "--export-json", str(exported), "true"], check=True,
                   capture_output=True)
    said = one_line_error(perfctl("history", str(exported)))
    assert "a hyperfine file, not perfctl JSON Lines" in said and "--label" in said, said
    assert "unknown record type" not in said


def test_order_by_given_twice_is_refused(history_file, tmp_path):
    said = one_line_error(perfctl("history", history_file, "--order-by", "build", "--order-by", "size"))
    assert "--order-by given 2 times (build, size)" in said, said
    said = one_line_error(perfctl("report", "--history", history_file, "--order-by", "build", "--order-by", "build",
                                  "-o", str(tmp_path / "p.html")), "perfctl report")
    assert "--order-by given 2 times" in said, said


def test_table_titles_end_without_spaces(history_file):
    result = perfctl("history", history_file, "--width", "160")
    lines = result.stdout.splitlines()
    assert "changes" in lines and "8 points" in lines, result.stdout
    assert [line for line in lines if line != line.rstrip()] == [], result.stdout


def on_request(history: dict) -> dict:
    """The history as a server answers `--order-by`: each change computed for the answer (perfctl/client.py
    makes these rows through history_rows.change_row with on_request)."""
    from perfctl.history_rows import change_row

    for series in history["series"]:
        series["order_by"], series["points_without_order"] = "build", 2
        series["changes"] = [change_row(**{**row, "on_request": True}) for row in series["changes"]]
    return history


def test_changes_computed_on_request_show_no_id_or_state(history_file):
    from rich.console import Console

    from perfctl.history_files import read_history
    from perfctl.report.history import HistoryReport, history_page

    history = on_request(read_history([history_file], order_by="build"))
    (row,) = history["series"][0]["changes"]
    assert row["id"] is None and row["state"] is None and row["on_request"], row
    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    HistoryReport(history).table(console)
    text = console.export_text()
    flat = " ".join(text.split())
    assert "at c4 (after c5), after faster beyond ±1%." in flat and ", new" not in flat, text
    assert "2 points without a numeric build label left out." in flat, text
    assert "Ids and triage belong to the server's own order" in flat, text
    assert "┃ id" not in text and "┃ state" not in text and "┃ commits" in text, text
    markdown = HistoryReport(history).markdown()
    assert "| before → after | at | ratio [interval] | verdict |\n|---|---|---|---|\n| c5 → c4 |" in markdown, markdown
    page = history_page(history)
    table = page.split('<table id="changes-0">')[1].split("</table>")[0]
    assert "<th>id</th>" not in table and "<th>state</th>" not in table and "c5 → c4" in table, table
    assert "Changes found on request in build order" in page
    assert "None" not in page.split("<svg", 1)[1].split("</svg>")[0]  # the change's hover: no id, no state
    from perfctl.report.history import changes_headline

    # a regression found on request is named as one, never hidden behind "No open regression"
    headline = changes_headline([{**row, "regression": True}])
    assert headline.startswith("1 regression found on request (no state: the server's own order has those): "
                               "spin on vm"), headline
