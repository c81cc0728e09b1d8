"""Issue 29, point 6: one meaning for every exit code. compare, ab and `submit --until-settled --wait` on the
same pair of commands exit the same way on the same verdict (perfctl/exit_codes.py owns the mapping): a
real server (SQLite) and agent on loopback for submit, ab on this machine, compare of both results."""

import json
import subprocess

from conftest import needs_root
from fleet import free_port, perfctl_command, wait_for

from perfctl.exit_codes import (
    EXIT_NO_VERDICT,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_SLOWDOWN,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
    outcome_exit,
)

FAST, SLOW = ["/bin/sleep", "0.01"], ["/bin/sleep", "0.04"]  # B four times A's wall time: settles in ~6 rounds



def test_the_most_serious_outcome_names_the_code():
    assert outcome_exit() == EXIT_OK
    assert outcome_exit(decided=False) == EXIT_NO_VERDICT
    assert outcome_exit(slowdown=True, decided=False) == EXIT_SLOWDOWN  # a slowdown shown is never hidden
    assert outcome_exit(slowdown=True, timed_out=True) == EXIT_SLOWDOWN
    assert outcome_exit(timed_out=True, decided=False) == EXIT_WAIT_TIMEOUT
    assert outcome_exit(unusable=True, slowdown=True) == EXIT_USAGE
    assert outcome_exit(run_failed=True, slowdown=True, unusable=True) == EXIT_RUN_FAILED


def _ab(tmp_path, name: str, a: list[str], b: list[str], *rule: str) -> tuple[int, str]:
    out = tmp_path / f"{name}.jsonl"
    result = subprocess.run(perfctl_command("ab", "--metric", "wall-time", "-e", "task-clock", *rule, "-o", str(out),
                                            "-q", "--", *a, ":::", *b), capture_output=True, text=True, timeout=120)
    assert result.returncode in (EXIT_OK, EXIT_SLOWDOWN, EXIT_NO_VERDICT), result.stderr
    return result.returncode, str(out)


def _submit(fleet, server: str, a: list[str], b: list[str], *rule: str) -> tuple[int, str]:
    result = fleet.client("submit", "--machines", "box-a", "--until-settled", "--metric", "wall-time", "-e",
                          "task-clock", *rule, "--wait", "-q", "--", *a, ":::", *b, server=server, timeout=180)
    job_id = result.stdout.split()[-1]
    return result.returncode, job_id


def _compare(fleet, server: str | None, a: str, b: str) -> int:
    args = ("compare", a, b, "--paired", "--metric", "wall-time", "-q")
    result = fleet.client(*args, server=server) if server else \
        subprocess.run(perfctl_command(*args), capture_output=True, text=True, timeout=60)
    assert result.returncode in (EXIT_OK, EXIT_SLOWDOWN, EXIT_NO_VERDICT), result.stderr
    return result.returncode


@needs_root
def test_compare_ab_and_submit_exit_alike_on_each_verdict(fleet, tmp_path):
    """The same commands, the same rule: B relevantly slower exits 3 in all three (submit said 0), B faster
    exits 0, too few rounds to settle exits 4 in ab and submit (submit said 0)."""
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    fleet.start_agent("box-a", server)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=server)).returncode == 0 and
             sum(m["connected"] for m in json.loads(r.stdout)) == 1, 60, "the agent to connect")
    settle = ("--max-runs", "60", "--min-runs", "12")  # 12 pairs: compare's fixed-n test judges a 4x change too
    for a, b, expected in ((FAST, SLOW, EXIT_SLOWDOWN), (SLOW, FAST, EXIT_OK)):
        ab_code, path = _ab(tmp_path, f"ab-{expected}", a, b, *settle)
        submit_code, job_id = _submit(fleet, server, a, b, *settle)
        jobs = json.loads(fleet.client("jobs", "--json", job_id, server=server).stdout)
        assert jobs[0]["message"].startswith("settled after "), jobs
        selector = f"box-a@job={job_id}"
        fleet_compare = _compare(fleet, server, f"{selector},ab=A", f"{selector},ab=B")
        file_compare = _compare(fleet, None, f"{path}@ab=A", f"{path}@ab=B")
        waited = fleet.client("jobs", "--wait", "-q", job_id, server=server).returncode  # a wait resumed
        codes = {"ab": ab_code, "submit": submit_code, "jobs --wait": waited, "compare job": fleet_compare,
                 "compare ab": file_compare}
        assert codes == dict.fromkeys(codes, expected), jobs[0]["message"]
    # 3 rounds cannot settle a confidence sequence (it has two ends from 6 rounds): no verdict, in both
    ab_code, _ = _ab(tmp_path, "ab-unsettled", FAST, SLOW, "--max-runs", "3", "--min-runs", "3")
    submit_code, job_id = _submit(fleet, server, FAST, SLOW, "--max-runs", "3", "--min-runs", "3")
    jobs = json.loads(fleet.client("jobs", "--json", job_id, server=server).stdout)
    assert jobs[0]["message"].startswith("not settled after 3 rounds"), jobs
    waited = fleet.client("jobs", "--wait", "-q", job_id, server=server).returncode
    assert {"ab": ab_code, "submit": submit_code, "jobs --wait": waited} == dict.fromkeys(("ab", "submit",
                                                                                        "jobs --wait"), EXIT_NO_VERDICT)


def test_every_command_states_the_one_meaning_in_help():
    from perfctl.exit_codes import MEANINGS

    for command in ("compare", "ab", "submit"):
        text = " ".join(subprocess.run(perfctl_command(command, "--help"), capture_output=True, text=True,
                                       env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"}).stdout.split())
        for code in (EXIT_OK, EXIT_SLOWDOWN, EXIT_NO_VERDICT):
            assert f"{code} {MEANINGS[code]}" in text, (command, code)
