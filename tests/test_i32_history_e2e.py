"""Issue 32's acceptance test: a real server and agent run a history of jobs, one per commit, of a real program
(examples/work.c) whose build makes every block of its work 1.3 times as costly from commit c07 and brings it
back at c13. The server finds the changes at those commits with their direction and ratio, `perfctl changes`
lists them (and exits 3 with -q while the regression is open), the triage (acknowledged, with a note) survives
the jobs that follow, and the regression is marked fixed by the change that undoes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import ROOT, needs_root
from fleet import finished_job, start_agent_with, start_sqlite_server, submit_job, wait_connected, wait_for

COST = {**{f"c{n:02}": 100 for n in range(1, 7)}, **{f"c{n:02}": 130 for n in range(7, 13)},
        **{f"c{n:02}": 100 for n in range(13, 19)}}


def build(directory, cost: int) -> str:
    """examples/work.c built with a block cost of ``cost``, installed at the same path each commit (as a CI
    job's checkout builds it): a new executable digest every time the cost changes."""
    target, fresh = directory / "work", directory / "work.new"
    subprocess.run([shutil.which("cc") or "gcc", "-O2", f"-DBLOCK_COST={cost}", "-o", str(fresh),
                    str(ROOT / "examples" / "work.c")], check=True)
    os.replace(fresh, target)
    return str(target)


def run_commits(fleet, server, directory, commits) -> None:
    for commit in commits:
        program = build(directory, COST[commit])
        job = submit_job(fleet, server, "box-a", "-r", "12", "--warmup", "1", "--name", "work", "--label",
                         f"commit={commit}", "--label", "branch=main", "--", program, "30")
        assert finished_job(fleet, server, job, timeout=120)["state"] == "done", fleet.log("box-a")


def analysed(fleet, server, points: int) -> dict:
    """The series once the server has analysed ``points`` ended jobs (its points and changes are written in
    one transaction, by whichever replica takes the ended job, a moment after the job is done)."""
    def series():
        shown = fleet.client("history", "box-a", "--benchmark", "work", "--format", "json", server=server)
        found = json.loads(shown.stdout)["series"] if shown.returncode == 0 else []
        return found[0] if found and len(found[0]["points"]) == points else None
    return wait_for(series, 60, f"{points} points analysed")


def changes(fleet, server, *args):
    result = fleet.client("changes", "--format", "json", *args, server=server)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    return document["changes"] if isinstance(document, dict) else document


@needs_root
def test_a_fleet_history_finds_the_commits_that_changed_the_work_and_keeps_their_triage(fleet, shared_dir):
    directory = shared_dir  # the agent runs benchmarks as nobody: a directory every user may enter
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", [str(directory / "*")])
    wait_connected(fleet, server, "box-a")

    run_commits(fleet, server, directory, [f"c{n:02}" for n in range(1, 13)])
    analysed(fleet, server, 12)
    found = changes(fleet, server)
    assert len(found) == 1, found
    regression = found[0]
    assert (regression["before"]["commit"], regression["after"]["commit"]) == ("c06", "c07"), regression
    assert regression["machine"] == "box-a" and regression["benchmark"] == "work", regression
    assert regression["regression"] and regression["state"] == "new", regression
    # 1.3 times the blocks' work: task-clock about 1/1.25 of before (the process's start costs the same)
    assert 0.65 < regression["ratio"] < 0.9 and regression["low"] <= regression["ratio"] <= regression["high"]
    assert regression["high"] < 1 - regression["margin"] and "slower" in regression["finding"], regression
    gate = fleet.client("changes", "--state", "new", "-q", server=server)
    assert gate.returncode == 3, (gate.stdout, gate.stderr)

    acked = fleet.client("changes", "ack", regression["id"], "--note", "expected: the new hashing", server=server)
    assert acked.returncode == 0, acked.stderr
    assert fleet.client("changes", "--state", "new", "-q", server=server).returncode == 0  # acknowledged

    run_commits(fleet, server, directory, [f"c{n:02}" for n in range(13, 19)])
    series = analysed(fleet, server, 18)
    by_id = {change["id"]: change for change in changes(fleet, server)}
    assert len(by_id) == 2, by_id
    kept = by_id[regression["id"]]  # the same change, under the same id, with its triage
    assert kept["note"] == "expected: the new hashing" and kept["state"] == "fixed", kept
    (fix,) = [change for change in by_id.values() if change["id"] != regression["id"]]
    assert (fix["before"]["commit"], fix["after"]["commit"]) == ("c12", "c13") and not fix["regression"], fix
    assert fix["ratio"] > 1 + fix["margin"] and kept["fixed_by"] == fix["id"], (fix, kept)

    assert [point["commit"] for point in series["points"]] == [f"c{n:02}" for n in range(1, 19)]
    assert all(point["runs"] == 12 for point in series["points"]), series["points"]
    assert [change["id"] for change in series["changes"]] == [regression["id"], fix["id"]]
    shown = fleet.client("history", "box-a", "--benchmark", "work", server=server)
    assert shown.returncode == 0 and "c07" in shown.stdout and "c13" in shown.stdout, shown.stdout


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="probe: no C compiler")
def test_the_example_program_costs_what_its_build_says(tmp_path):
    """The premise of the test above, on this machine's real counters: the 1.3x build takes longer."""
    from conftest import perfctl

    medians = {}
    for cost in (100, 130):
        directory = tmp_path / str(cost)
        directory.mkdir()
        program = build(directory, cost)
        out = tmp_path / f"{cost}.jsonl"
        assert perfctl("stat", "-q", "-r", "8", "-e", "task-clock", "-o", str(out), "--", program, "30").returncode == 0
        values = sorted(r["readings"][0]["value"] for r in map(json.loads, out.read_text().splitlines())
                        if r.get("type") == "sample" and not r.get("warmup"))
        medians[cost] = values[len(values) // 2]
    assert 1.1 < medians[130] / medians[100] < 1.5, medians
