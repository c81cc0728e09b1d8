"""One meaning for every exit code, with a real server (SQLite) and agent on loopback: a side whose runs fail
gives 1 (a run failed) alike in ab, `submit --until-settled --wait` and `jobs --wait`. The wait's code came from
replaying the settlement, whose Compare found no measured run on the failing side: 2 (NOT_FOUND); and the agent
went on measuring every round where ab stops at the first failed run."""

import json
import subprocess

from conftest import needs_root
from fleet import free_port, perfctl_command, wait_for

from perfctl.exit_codes import EXIT_RUN_FAILED

RULE = ("--metric", "wall-time", "-e", "task-clock", "--max-runs", "8", "--min-runs", "4")


@needs_root
def test_a_side_whose_runs_fail_exits_1_everywhere(fleet, tmp_path):
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    fleet.start_agent("box-a", server)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=server)).returncode == 0 and
             sum(m["connected"] for m in json.loads(r.stdout)) == 1, 60, "the agent to connect")
    for a, b, side in ((["/bin/false"], ["/bin/true"], "A"), (["/bin/true"], ["/bin/false"], "B")):
        ab = subprocess.run(perfctl_command("ab", *RULE, "-o", str(tmp_path / f"{side}.jsonl"), "-q", "--", *a,
                                            ":::", *b), capture_output=True, text=True, timeout=120)
        submit = fleet.client("submit", "--machines", "box-a", "--until-settled", *RULE, "--wait", "--", *a, ":::",
                              *b, server=server, timeout=180)
        job_id = submit.stdout.split()[-1]
        waited = fleet.client("jobs", "--wait", "-q", job_id, server=server)
        codes = {"ab": ab.returncode, "submit": submit.returncode, "jobs --wait": waited.returncode}
        assert codes == dict.fromkeys(codes, EXIT_RUN_FAILED), (submit.stderr, waited.stderr)
        assert "NOT_FOUND" not in submit.stderr + waited.stderr
        # one line says which side failed, and the agent stopped the rounds there, as ab does
        said = waited.stderr.splitlines()[-1]
        assert said.startswith("perfctl jobs: 0 of 1 job done; box-a failed") and \
            f"{side}'s run 0 failed, so the rounds stopped" in said, waited.stderr
        assert f"{side}'s run 0 failed, so the rounds stopped" in ab.stderr + ab.stdout, ab.stderr
        job = json.loads(fleet.client("jobs", "--json", job_id, server=server).stdout)[0]
        assert job["state"] == "failed" and job["samples"] <= 2, job
