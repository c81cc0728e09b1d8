"""Several `perfctl server` replicas on one PostgreSQL (server/jobs.py), and job leases.

Replicas run in the server host's network namespace on two addresses (tests/fleet.py NetworkLab), agents in
their own namespaces, as in tests/test_multihost.py; every fault test ends with the stored uuid set exactly
{uuid5(job, k)}. The 20-agent test runs on loopback (twenty namespaces would test the namespaces)."""

import json
import re
import time

import pytest
from conftest import fleet_in
from fleet import Fleet, NetworkLab, free_port, make_certs, netns_reason, wait_for

from perfctl.server.storage import Storage
from perfctl.wire import job_run_uuid

pytestmark = pytest.mark.skipif(netns_reason() is not None, reason=str(netns_reason()))

A, B = f"{NetworkLab.SERVER_IP}:7433", f"{NetworkLab.SECOND_SERVER_IP}:7433"


def _stored(url: str) -> list[str]:
    storage = Storage(url)
    try:
        return storage.sample_uuids()
    finally:
        storage.close()


def _expect_exactly_once(url: str, fleet: Fleet, job_ids: list[str], runs: int, timeout: float = 180) -> None:
    expected = {job_run_uuid(job, k) for job in job_ids for k in range(runs)}
    try:
        wait_for(lambda: len(_stored(url)) >= len(expected), timeout, f"{len(expected)} samples stored")
    except AssertionError as err:
        logs = "\n".join(f"--- {key}:\n" + "\n".join(fleet.log(key).splitlines()[-15:]) for key in fleet.processes)
        raise AssertionError(f"{err}: {len(_stored(url))} stored\n{logs}") from None
    time.sleep(1.5)  # a duplicate re-send would land now
    stored = _stored(url)
    assert len(stored) == len(expected) == len(set(stored)) and set(stored) == expected


def _jobs(fleet: Fleet, server: str, extra=(), netns=None) -> dict[str, dict]:
    result = fleet.client("jobs", "--json", server=server, extra=list(extra), netns=netns)
    assert result.returncode == 0, result.stderr
    return {job["job_id"]: job for job in json.loads(result.stdout)}


def _submit(fleet: Fleet, server: str, machines: list[str], runs: int, extra=(), netns=None) -> list[str]:
    result = fleet.client("submit", "--machines", ",".join(machines), "-r", str(runs), "-e", "page-faults", "--",
                          "/bin/true", server=server, extra=list(extra), netns=netns)
    assert result.returncode == 0, result.stderr
    return [line.split()[1] for line in result.stdout.splitlines()]


@pytest.fixture
def replicas(tmp_path, postgres):
    """Two replicas A and B on one new PostgreSQL database, TLS, in the server namespace; two agent hosts."""
    with fleet_in(tmp_path, hosts=2) as fleet:
        network = fleet.network
        certs = make_certs(tmp_path, [NetworkLab.SERVER_IP, NetworkLab.SECOND_SERVER_IP])
        url = postgres.new_database()
        tls = ["--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"], "--grace", "5"]

        def start(key: str) -> None:
            started = fleet.log(key).count("listening on")
            fleet.start_server(A if key == "server-a" else B, ["--db", url], tls, netns=network.server_ns, key=key)
            wait_for(lambda: fleet.log(key).count("listening on") > started, 60, f"{key} to listen")

        start("server-a")  # one at a time: the first migrates the new database
        start("server-b")
        yield network, fleet, certs, url, start


def _agent(fleet, network, certs, index: int, servers: str) -> None:
    fleet.start_agent(f"host{index}", servers, extra=["--tls-ca", certs["ca.pem"]], netns=network.hosts[index])


def _connected(fleet, network, certs, server: str, count: int) -> None:
    def ready():
        result = fleet.client("machines", "--json", server=server, extra=["--tls-ca", certs["ca.pem"]],
                              netns=network.server_ns)
        return result.returncode == 0 and sum(m["connected"] for m in json.loads(result.stdout)) == count
    wait_for(ready, 60, f"{count} agents connected to {server}")


def test_a_job_submitted_through_one_replica_reaches_an_agent_at_the_other(replicas):
    network, fleet, certs, url, _ = replicas
    _agent(fleet, network, certs, 0, A)
    _agent(fleet, network, certs, 1, B)
    _connected(fleet, network, certs, A, 2)  # either replica sees the agent connected to the other
    _connected(fleet, network, certs, B, 2)
    tls = ["--tls-ca", certs["ca.pem"]]
    # host1 streams to B only; its job is submitted through A
    jobs = _submit(fleet, A, ["host1", "host0"], 40, tls, network.server_ns)
    _expect_exactly_once(url, fleet, jobs, 40)
    wait_for(lambda: {j["state"] for j in _jobs(fleet, B, tls, network.server_ns).values()} == {"done"}, 60,
             "both jobs done, as B sees them")
    assert "job" in fleet.log("server-b") and f"{jobs[0]} sent to host1" in fleet.log("server-b")


def test_the_replica_an_agent_streams_to_is_killed_mid_job(replicas):
    network, fleet, certs, url, _ = replicas
    tls = ["--tls-ca", certs["ca.pem"]]
    _agent(fleet, network, certs, 0, f"{A},{B}")  # A first
    _agent(fleet, network, certs, 1, f"{B},{A}")
    _connected(fleet, network, certs, A, 2)
    assert f"registered with {A}" in fleet.log("host0") and f"registered with {B}" in fleet.log("host1")
    jobs = _submit(fleet, B, ["host0", "host1"], 400, tls, network.server_ns)
    wait_for(lambda: len(_stored(url)) >= 100, 60, "streaming to start")
    killed = time.monotonic()
    fleet.kill("server-a", 9)
    wait_for(lambda: f"registered with {B}" in fleet.log("host0"), 60, "host0 to move to replica B")
    failover = time.monotonic() - killed
    _expect_exactly_once(url, fleet, jobs, 400)
    wait_for(lambda: {j["state"] for j in _jobs(fleet, B, tls, network.server_ns).values()} == {"done"}, 60,
             "both jobs done")
    print(f"failover: host0 registered with replica B {failover:.2f} s after replica A was killed")
    assert failover < 30


def test_twenty_agents_over_two_replicas_one_killed_and_restarted_twice(fleet, postgres):
    url = postgres.new_database()
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"

    def start(key: str, address: str) -> None:
        started = fleet.log(key).count("listening on")
        fleet.start_server(address, ["--db", url], ["--grace", "5"], key=key)
        wait_for(lambda: fleet.log(key).count("listening on") > started, 60, f"{key} to listen")

    start("server-a", a)
    start("server-b", b)
    names = [f"load{i:02d}" for i in range(20)]
    for index, name in enumerate(names):  # half prefer a, half b
        fleet.start_agent(name, f"{a},{b}" if index % 2 == 0 else f"{b},{a}")
    wait_for(lambda: (r := fleet.client("machines", "--json", server=b)).returncode == 0 and
             sum(m["connected"] for m in json.loads(r.stdout)) == 20, 180, "20 agents to connect")
    jobs = _submit(fleet, f"{a},{b}", names, 80)
    for kill in range(2):
        wait_for(lambda kill=kill: len(_stored(url)) >= 200 * (kill + 1), 120, "streaming")
        fleet.kill("server-a", 9)
        time.sleep(2)
        start("server-a", a)
    _expect_exactly_once(url, fleet, jobs, 80, timeout=300)
    states = _jobs(fleet, f"{b},{a}")
    assert {states[job]["state"] for job in jobs} == {"done"}, states
    for name, job in zip(names, jobs):  # each job reached its agent once: never run twice
        assert len(re.findall(rf"job {job}: 1 commands", fleet.log(name))) == 1, fleet.log(name)[-2000:]


def test_a_lost_job_is_retried_without_measuring_its_stored_runs_again(fleet, tmp_path):
    """The agent vanishes mid-job (kill -9, and its spool is gone with its disk): within the lease the job is
    lost, with the reason; `jobs --retry` queues it again and a new agent of that name measures only the runs
    the server does not have."""
    address = f"127.0.0.1:{free_port()}"
    data = str(tmp_path / "data")
    fleet.start_server(address, ["--data-dir", data], ["--job-lease", "3s"])
    fleet.start_agent("box", address)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=address)).returncode == 0 and
             json.loads(r.stdout), 60, "the agent")
    (job,) = _submit(fleet, address, ["box"], 300)
    url = f"sqlite:///{data}/perfctl.db"
    wait_for(lambda: len(_stored(url)) >= 60, 60, "streaming to start")
    fleet.kill("box", 9)
    lost = wait_for(lambda: (j := _jobs(fleet, address)[job])["state"] == "lost" and j, 20, "the job lost")
    assert "no heartbeat from its agent for 3 s" in lost["message"], lost
    before = len(_stored(url))
    result = fleet.client("jobs", "--retry", job[:8], server=address)
    assert result.returncode == 0 and "queued" in result.stdout, result.stdout + result.stderr
    again = fleet.client("jobs", "--retry", job, server=address)  # queued now, not lost
    assert again.returncode == 2 and "only a lost job can be retried" in again.stderr, again.stderr
    (tmp_path / "spool-box").rename(tmp_path / "spool-box-gone")
    fleet.start_agent("box", address)
    _expect_exactly_once(url, fleet, [job], 300)
    done = wait_for(lambda: (j := _jobs(fleet, address)[job])["state"] == "done" and j, 60, "the job done")
    assert f"{300 - before} runs ({before} stored before the retry)" in done["message"], done
