"""A 5 s PostgreSQL outage under two replicas (issue 29, points 1 and 7): the fleet's background work
resumes, clients hear one UNAVAILABLE line, and a wait rides the outage out.

Before: JobKeeper.run caught only StorageError, the outage raised sqlalchemy's OperationalError, and the
keeper ended on every replica without a log line: a job submitted through replica B stayed queued for an
agent on A, a job whose agent was killed stayed running, perfctl_machine_last_heartbeat_timestamp_seconds
froze; clients got "UNKNOWN: Unexpected <class 'sqlalchemy.exc.OperationalError'> ... socket
"/tmp/.../.s.PGSQL.N"", and `submit --wait` died on its first failed poll. PostgreSQL is stopped for real
(pg_ctl stop -m fast) and started again on the same data directory."""

import json
import os
import re
import subprocess
import time
import urllib.request

import pytest
from fleet import Fleet, free_port, perfctl_command, wait_for

OUTAGE_S = 5.0
LEASE = "12s"  # longer than the outage plus an agent's reconnect backoff; the lease of a killed agent lapses


def _pg_ctl(postgres, *args: str) -> None:
    subprocess.run([postgres._pg_ctl, "-D", postgres.data, *args], user="postgres", check=True,
                   capture_output=True, cwd=postgres.base)


def _start_postgres(postgres) -> None:
    _pg_ctl(postgres, "-l", os.path.join(postgres.base, "log"), "-w", "-o",
            f"-k {postgres.base} -p {postgres.port} -c listen_addresses='' -c fsync=on", "start")


def _metric(port: int, name: str, **labels) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{re.escape(name)}{{{re.escape(wanted)}}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def _jobs(fleet: Fleet, server: str) -> dict[str, dict]:
    result = fleet.client("jobs", "--json", server=server)
    assert result.returncode == 0, result.stderr
    return {job["job_id"]: job for job in json.loads(result.stdout)}


def _submit(fleet: Fleet, server: str, machine: str, *command: str, runs: int = 1) -> str:
    result = fleet.client("submit", "--machines", machine, "-r", str(runs), "-e", "task-clock", "--", *command,
                          server=server)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[1]


@pytest.fixture
def replicas(fleet, postgres):
    url = postgres.new_database()
    a, b, metrics_a = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", free_port()
    for key, address, extra in (("server-a", a, ["--metrics", f"127.0.0.1:{metrics_a}"]), ("server-b", b, [])):
        fleet.start_server(address, ["--db", url], ["--job-lease", LEASE, "--grace", "2", *extra], key=key)
        wait_for(lambda key=key: "listening on" in fleet.log(key), 60, f"{key} to listen")
    for name in ("host1", "host2"):
        fleet.start_agent(name, a)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=a)).returncode == 0 and
             len(json.loads(r.stdout)) == 2, 60, "both agents registered")
    yield fleet, a, b, metrics_a


def test_a_postgresql_outage_stops_nothing_for_good(replicas, postgres):
    fleet, a, b, metrics_a = replicas
    doomed = _submit(fleet, a, "host2", "/bin/sleep", "120")
    wait_for(lambda: _jobs(fleet, a)[doomed]["state"] == "running", 30, "host2's job running")
    # a wait that spans the outage: through B, for a job of host1's (at A) that runs on through it
    waiter = subprocess.Popen(perfctl_command("submit", "--server", b, "--token-file", fleet.client_token,
                                              "--machines", "host1", "-r", "3", "-e", "task-clock", "--wait", "--",
                                              "/bin/sleep", "2"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: any(j["machine"] == "host1" and j["state"] == "running" for j in _jobs(fleet, b).values()),
             30, "the waited job running")

    _pg_ctl(postgres, "-m", "fast", "-w", "stop")
    stopped = time.time()
    try:
        # clients during the outage: one line, UNAVAILABLE, exit 2, no internal paths
        for args, server in ((("machines",), a), (("jobs",), b), (("compare", "host1", "host2"), a),
                             (("submit", "--machines", "host1", "--", "/bin/true"), b)):
            result = fleet.client(*args, server=server)
            assert result.returncode == 2, (args, result.returncode, result.stdout, result.stderr)
            assert result.stderr.strip().splitlines() == [
                f"perfctl {args[0]}: UNAVAILABLE: database unavailable; try again"], (args, result.stderr)
        fleet.kill("host2", 9)  # its job must become lost once the database is back
        time.sleep(max(0.0, stopped + OUTAGE_S - time.time()))
    finally:
        _start_postgres(postgres)
    back = time.time()

    # dispatch across replicas resumes: submitted through B, sent by A's keeper to host1
    after = _submit(fleet, b, "host1", "/bin/true", runs=2)
    wait_for(lambda: _jobs(fleet, b)[after]["state"] != "queued", 30, "the job submitted through B dispatched")
    # leases resume: the killed agent's job is lost, with the reason
    lost = wait_for(lambda: (j := _jobs(fleet, a)[doomed])["state"] == "lost" and j, 60, "host2's job lost")
    assert "no heartbeat from its agent" in lost["message"], lost
    # the wait rode the outage out and ends with its job done
    out, err = waiter.communicate(timeout=90)
    assert waiter.returncode == 0, (waiter.returncode, out, err)
    assert "still waiting" in err and "Traceback" not in err, err
    wait_for(lambda: _jobs(fleet, b)[after]["state"] == "done", 60, "the job submitted through B done")
    # the fleet gauges resume: host1's heartbeat after the outage shows
    wait_for(lambda: (_metric(metrics_a, "perfctl_machine_last_heartbeat_timestamp_seconds", machine="host1")
                      or 0) > back, 45, "host1's heartbeat gauge to advance past the outage")
    assert _metric(metrics_a, "perfctl_task_restarts_total", task="job keeper") >= 1
    # the server logs say it with a traceback per restarted task, never one per call
    for key in ("server-a", "server-b"):
        log = fleet.log(key)
        assert "job keeper failed; restarting it in" in log, log[-3000:]
        assert "Unexpected <class" not in log and "database unavailable" in log, log[-3000:]
        records = re.split(r"^(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ )", log, flags=re.M)
        with_traceback = [r for r in records if "Traceback" in r]
        assert all("failed; restarting it in" in r.splitlines()[0] for r in with_traceback), with_traceback
    assert time.time() - stopped < 150


def test_a_wait_rides_out_a_server_restart_and_says_the_jobs_go_on_when_it_gives_up(fleet, tmp_path, monkeypatch,
                                                                                      capsys):
    """`jobs --wait` across a restart of the one server (SIGTERM, started again on the same address) ends 0;
    with the server gone for longer than the wait rides out, it ends 2 with one line saying that the jobs
    go on and how to wait for them again (OUTAGE_RIDE_S shortened here from its 5 minutes)."""
    from perfctl.cli import listings, main

    address, data = f"127.0.0.1:{free_port()}", str(tmp_path / "data")

    def start_server() -> None:
        started = fleet.log("server").count("listening on")
        fleet.start_server(address, ["--data-dir", data], ["--grace", "1"])
        wait_for(lambda: fleet.log("server").count("listening on") > started, 60, "the server to listen")

    start_server()
    fleet.start_agent("box", address)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=address)).returncode == 0 and
             json.loads(r.stdout), 60, "the agent")
    job = _submit(fleet, address, "box", "/bin/sleep", "1", runs=5)
    waiter = subprocess.Popen(perfctl_command("jobs", "--server", address, "--token-file", fleet.client_token,
                                              "--wait", job), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    wait_for(lambda: _jobs(fleet, address)[job]["state"] == "running", 30, "the job running")
    fleet.kill("server", 15)
    time.sleep(2)
    start_server()
    out, err = waiter.communicate(timeout=90)
    assert waiter.returncode == 0, (out, err)
    assert "UNAVAILABLE" in err and "still waiting" in err and "Traceback" not in err, err

    endless = _submit(fleet, address, "box", "/bin/sleep", "60")
    fleet.kill("server", 15)
    monkeypatch.setattr(listings, "OUTAGE_RIDE_S", 2.0)
    capsys.readouterr()
    assert main(["jobs", "--server", address, "--token-file", fleet.client_token, "--wait", endless]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("perfctl jobs: UNAVAILABLE: ") and "Traceback" not in last, last
    assert last.endswith(f"; stopped waiting after 2 s; the jobs go on running on the server "
                         f"(perfctl jobs --wait {endless})"), last
    # replicas, all of them down: the same
    servers = f"{address},127.0.0.1:{free_port()}"
    assert main(["jobs", "--server", servers, "--token-file", fleet.client_token, "--wait", endless]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("perfctl jobs: none of the servers ") and last.endswith(
        f"the jobs go on running on the server (perfctl jobs --wait {endless})"), last
