"""Issue 32's commands against a real server and agent (SERVER's history, ALGO's detection): a job per commit
c1..c8 of examples/work.c built with a block cost of 100, and 130 from c5 (the same path and arguments: one
series on the server, whose benchmark identity holds the argv). `perfctl history MACHINE` shows the change at c5,
`perfctl changes` lists it in words that fit 80 columns and gates CI with -q (exit 3 while it is open),
`changes ack`/`reopen` triage it in one line, unknown ids are one-line errors, and `perfctl report --history
MACHINE` writes the page with the fleet's open changes first. The full acceptance run (fixed regressions,
triage across later jobs) is tests/test_i32_history_e2e.py."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from conftest import needs_root
from fleet import finished_job, start_agent_with, start_sqlite_server, submit_job, wait_connected
from i32_history_files import COMMITS
from test_i32_history_e2e import build

COST = {commit: 100 if n < 4 else 130 for n, commit in enumerate(COMMITS)}


pytestmark = [needs_root,
              pytest.mark.skipif(shutil.which("cc") is None, reason="probe: no C compiler (cc)")]


def listed_changes(fleet, server, want: int, timeout: float = 60) -> list[dict]:
    """The server's changes once ``want`` are listed (the server analyses an ended job within seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        result = fleet.client("changes", "--format", "json", server=server)
        assert result.returncode == 0, result.stderr
        found = json.loads(result.stdout)
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def one_line(result, command: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{command}: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_history_and_changes_from_a_real_server(fleet, tmp_path, shared_dir):
    directory = shared_dir  # the agent runs benchmarks as nobody: pytest's tmp_path is under a 0700 directory
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", [str(directory / "*")])
    wait_connected(fleet, server, "box-a")

    empty = fleet.client("changes", server=server)
    assert empty.returncode == 0 and empty.stdout.strip() == "No change found.", (empty.stdout, empty.stderr)
    assert json.loads(fleet.client("changes", "--format", "json", server=server).stdout) == []
    said = one_line(fleet.client("changes", "ack", "0123456789ab", server=server), "perfctl changes")
    assert "0123456789ab" in said or "NOT_FOUND" in said or "no change" in said, said
    # a misspelt machine is an error, not "no change": a CI gate on it must not pass green
    said = one_line(fleet.client("changes", "--machine", "box-typo", "--state", "new", "-q", server=server),
                    "perfctl changes")
    assert "no machine 'box-typo'" in said and "box-a" in said, said

    for commit in COMMITS:
        program = build(directory, COST[commit])
        job = submit_job(fleet, server, "box-a", "-r", "8", "--warmup", "1", "-e", "task-clock", "--name", "work",
                         "--label", f"commit={commit}", "--label", "branch=main", "--label",
                         f"build={len(COMMITS) - COMMITS.index(commit)}", "--", program, "20")
        assert finished_job(fleet, server, job, timeout=120)["state"] == "done", fleet.log("box-a")
    (change,) = listed_changes(fleet, server, 1)

    shown = fleet.client("history", "box-a", "--benchmark", "work", "--width", "80", server=server)
    assert shown.returncode == 0, shown.stderr
    assert all(len(line.rstrip()) <= 80 for line in shown.stdout.splitlines()), shown.stdout
    headline = " ".join(shown.stdout.split("\n\n")[0].split())
    assert headline.startswith("work on box-a") and "at c5 (after c4)" in headline, headline

    # --order-by: the server orders the points by the label and finds the changes for this answer, read
    # backwards here (build counts down): the step at c5 is a speed-up after c5 -> c4, with no id and no state
    ordered = json.loads(fleet.client("history", "box-a", "--benchmark", "work", "--order-by", "build", "--format",
                                      "json", server=server).stdout)
    (series,) = ordered["series"]
    assert series["order_by"] == "build" and series["points_without_order"] == series["points_capped"] == 0
    assert [point["commit"] for point in series["points"]] == COMMITS[::-1], series["points"]
    (backwards,) = series["changes"]
    assert backwards["on_request"] and backwards["id"] is None and backwards["state"] is None, backwards
    assert (backwards["before"]["commit"], backwards["after"]["commit"]) == ("c5", "c4"), backwards
    assert backwards["ratio"] > 1.1 and not backwards["regression"], backwards
    text = fleet.client("history", "box-a", "--benchmark", "work", "--order-by", "build", "--width", "100",
                        server=server).stdout
    flat = " ".join(text.split())
    assert "at c4 (after c5)" in flat and "faster" in flat and ", new" not in flat, text
    assert "Changes found on request in build order: they have no id and no state." in flat, text
    assert change["id"] not in text and "┃ id" not in text and "┃ state" not in text, text
    markdown = fleet.client("history", "box-a", "--benchmark", "work", "--order-by", "build", "--format",
                            "markdown", server=server).stdout
    assert "| before → after | at | ratio [interval] | verdict |\n" in markdown, markdown
    page = tmp_path / "ordered.html"
    assert fleet.client("report", "--history", "box-a", "--order-by", "build", "-o", str(page),
                        server=server).returncode == 0
    ordered_html = page.read_text()
    assert "Changes found on request in build order" in ordered_html, ordered_html[:2000]
    computed = ordered_html.split('<table id="changes-0">')[1].split("</table>")[0]
    assert "<th>id</th>" not in computed and "<th>state</th>" not in computed and "c5 → c4" in computed, computed
    fleets = ordered_html.split('<table id="open-changes">')[1].split("</table>")[0]  # the stored ones: ids
    assert "<th>id</th>" in fleets and change["id"] in fleets, fleets
    said = one_line(fleet.client("history", "box-a", "--order-by", "commit", server=server), "perfctl history")
    assert "--order-by commit: none of the" in said and "has a numeric value of it" in said, said

    listed = fleet.client("changes", "--width", "80", server=server)
    assert listed.returncode == 0, listed.stderr  # a listing alone: exit 0
    assert all(len(line.rstrip()) <= 80 for line in listed.stdout.splitlines()), listed.stdout
    assert " ".join(listed.stdout.split()).startswith("1 open regression: work on box-a"), listed.stdout
    assert change["schema"] == "perfctl.changes/1" and change["after"]["commit"] == "c5", change
    assert fleet.client("changes", "--state", "new", "-q", server=server).returncode == 3

    acked = fleet.client("changes", "ack", change["id"][:8], "--note", "bigger input", server=server)
    assert acked.returncode == 0, acked.stderr
    assert acked.stdout.startswith(f"{change['id']} acknowledged: work on box-a"), acked.stdout
    assert "bigger input" in acked.stdout, acked.stdout
    assert fleet.client("changes", "--state", "new", "-q", server=server).returncode == 0
    assert fleet.client("changes", "reopen", change["id"], server=server).returncode == 0
    assert fleet.client("changes", "--state", "new", "-q", server=server).returncode == 3

    said = one_line(fleet.client("history", "box-typo", server=server), "perfctl history")
    assert "no machine 'box-typo'" in said, said
    said = one_line(fleet.client("history", "box-a", "--benchmark", "nosuch", server=server), "perfctl history")
    assert "no series of 'box-a' with benchmark 'nosuch'" in said, said

    page = tmp_path / "history.html"
    made = fleet.client("report", "--history", "box-a", "-o", str(page), server=server)
    assert made.returncode == 0, made.stderr
    html = page.read_text()
    assert "The fleet’s open changes (1)" in html and change["id"] in html, html[:2000]
    assert "<td>bigger input</td>" in html  # the triage's note beside its change
