"""Job leases under a database that HANGS (SIGSTOP, not down) longer than the lease: no live job is marked lost.
A hung query raises nothing, so the job keeper never restarted and never took its "no job lost for one lease after
a restart" grace; and the agent's reconnect backoff had grown longer than the lease. Now any gap between the
keeper's answered ticks starts the grace as a restart does (server/jobs.py JobKeeper._judge_gap), and an agent's
reconnect waits at most the heartbeat interval the server gave it (agent/daemon.py). A real PostgreSQL (its
postmaster and every backend) is stopped for STALL_S (the reviewer: 55 s under a 6 s lease), with a real server,
agent and job."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from fleet import free_port, metric, perfctl_command, wait_for

STALL_S = 40.0  # many leases: the agent's old reconnect backoff grew far past the lease meanwhile


LEASE = "3s"  # the shortest (MIN_LEASE_S): agents heartbeat every second


def _cluster_pids(postgres) -> list[int]:
    """The postmaster (postmaster.pid's first line) and its children, the backends and workers."""
    postmaster = int(Path(postgres.data, "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def test_a_hung_database_longer_than_the_lease_loses_no_live_job(fleet, postgres):
    url = postgres.new_database()
    server, metrics = f"127.0.0.1:{free_port()}", free_port()
    fleet.start_server(server, ["--db", url], ["--job-lease", LEASE, "--metrics", f"127.0.0.1:{metrics}"])
    wait_for(lambda: "listening on" in fleet.log("server"), 60, "the server to listen")
    fleet.start_agent("box", server)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=server)).returncode == 0 and
             len(json.loads(r.stdout)) == 1, 60, "the agent registered")
    submitted = fleet.client("submit", "--machines", "box", "-r", "4", "-e", "task-clock", "--", "/bin/sleep", "3",
                             server=server)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.split()[1]
    waiter = subprocess.Popen(perfctl_command("jobs", "--server", server, "--token-file", fleet.client_token,
                                              "--wait", job), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        wait_for(lambda: json.loads(fleet.client("jobs", "--json", server=server).stdout)[0]["state"] == "running",
                 30, "the job running")
        lost_before = metric(metrics, "perfctl_jobs_lost_total")
        pids = _cluster_pids(postgres)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(STALL_S)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, (out, err, fleet.log("server"))
        (final,) = json.loads(fleet.client("jobs", "--json", server=server).stdout)
        assert final["state"] == "done", final
        assert "lost: no heartbeat" not in fleet.log("server"), fleet.log("server")
        assert metric(metrics, "perfctl_jobs_lost_total") == lost_before == 0.0
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
