"""Issue 30: an agent's job commits its samples a few together (agent/spool.py GroupCommit), so that a fleet
job's per-run cost is stat's (a transaction per run was a third of perfctl's own cost of a short run). What
that may cost is bounded: an agent killed (-9) in mid-job measures again at most the runs it held, a clean
stop commits them, and every run is stored once either way.

The runs are counted as the benchmark sees them: each appends a line to a file, so a run measured again
after a restart is a line more. A real server (SQLite) and agent on loopback."""

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from conftest import needs_root
from fleet import free_port, stored_uuids, wait_for

from perfctl.agent.spool import GROUP_RUNS, GROUP_SECONDS, LONG_RUN_NS, GroupCommit, Spool, SpooledRun
from perfctl.wire import JOB_UUID_NAMESPACE

RUNS = 600


@pytest.fixture
def shared():
    """A directory user nobody (the runs) can write in: not under pytest's tree, which is root's alone and which
    every pytest session that starts sets back to 0700 (a concurrent one cut a job's runs off mid-job)."""
    directory = Path(tempfile.mkdtemp(prefix="perfctl-i30-"))
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _run(k: int) -> SpooledRun:
    return SpooledRun(f"u{k}", b"x", "job", k + 1)


def test_runs_are_held_up_to_the_count_the_age_or_a_long_run():
    held = GroupCommit()
    assert not any(held.add(_run(k), 1000) for k in range(GROUP_RUNS - 1))
    assert held.add(_run(GROUP_RUNS - 1), 1000)  # the count
    assert [r.uuid for r in held.take()] == [f"u{k}" for k in range(GROUP_RUNS)] and held.take() == []
    assert not held.add(_run(0), LONG_RUN_NS - 1)
    assert held.add(_run(1), LONG_RUN_NS)  # a long run is not held behind
    held.take()
    assert not held.add(_run(0), 1000)
    time.sleep(GROUP_SECONDS * 1.5)
    assert held.add(_run(1), 1000)  # the age of the first held


def test_samples_added_together_are_one_transaction_with_their_jobs_progress(tmp_path):
    spool = Spool(str(tmp_path))
    try:
        spool.add_job("job", b"spec")
        spool.add_samples([SpooledRun(f"u{k}", b"x", "job", k + 1, float(k) if k % 2 else None) for k in range(5)])
        assert spool.count() == 5 and spool.job("job")[1] == 5
        assert spool.round_values("job") == {1: 1.0, 3: 3.0}
        spool.add_samples([SpooledRun("u4", b"x", "job", 5), SpooledRun("u5", b"x", "job", 6)])  # u4 again: once
        assert spool.count() == 6 and spool.job("job")[1] == 6
    finally:
        spool.close()


def _job_measured_with(fleet, shared: Path, stop) -> tuple[int, list[str], str]:
    """(runs the benchmark counted, uuids stored, job id) of a job of RUNS runs whose agent ``stop`` stops in
    mid-job once a third of them ran, and which a restarted agent finishes."""
    address = f"127.0.0.1:{free_port()}"
    fleet.start_server(address, ["--data-dir", str(fleet.dir / "data")])
    fleet.start_agent("box", address)
    wait_for(lambda: json.loads(fleet.client("machines", "--json", server=address).stdout or "[]"), 60, "the agent")
    lines = shared / "runs"
    lines.touch(mode=0o666)
    os.chmod(lines, 0o666)
    result = fleet.client("submit", "--machines", "box", "-r", str(RUNS), "-e", "page-faults", "--", "/bin/sh",
                          "-c", f"echo >> {lines}", server=address)
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[1]

    def ran() -> int:
        return lines.read_text().count("\n") if lines.exists() else 0

    try:
        wait_for(lambda: ran() >= RUNS // 3, 120, "a third of the runs")
    except AssertionError as err:
        raise AssertionError(f"{err}: {fleet.client('jobs', '--json', server=address).stdout}") from None
    stop()
    fleet.start_agent("box", address)
    expected = {str(uuid.uuid5(JOB_UUID_NAMESPACE, f"{job}/{k}")) for k in range(RUNS)}
    wait_for(lambda: len(stored_uuids(fleet)) >= RUNS, 180, f"{RUNS} samples stored")
    time.sleep(1.5)  # a duplicate re-sent would land now
    stored = stored_uuids(fleet)
    assert set(stored) == expected and len(stored) == RUNS, fleet.log("box")
    return ran(), stored, job


@needs_root
def test_an_agent_killed_in_mid_job_measures_again_at_most_the_runs_it_held(fleet, shared):
    ran, _, _ = _job_measured_with(fleet, shared, lambda: fleet.kill("box", 9))
    # the runs held (at most GROUP_RUNS) and the run in progress when the kill came
    assert RUNS <= ran <= RUNS + GROUP_RUNS + 1, ran


@needs_root
def test_a_clean_stop_commits_the_runs_held(fleet, shared):
    def stop() -> None:  # a stop that ends the agent as a kill would (agent/daemon.py STOP_LIMIT_S) says why
        assert fleet.kill("box", 15) == 0, fleet.log("box")[-6000:]

    ran, _, _ = _job_measured_with(fleet, shared, stop)
    assert RUNS <= ran <= RUNS + 1, ran  # only the run the stop cut short is measured again
