"""Issue 29, point 5: monitoring says what it claims, with a real server and real agents.

- perfctl_agent_samples_pending follows the spool whether or not a server is there: it was set by the
  sender alone, so with the server gone it froze (9 while the backlog grew to 4,934) and
  PerfctlSpoolBacklogGrowing could not fire in the case it was written for.
- `perfctl machines --retire NAME` takes a decommissioned machine out of the heartbeat and audit gauges, so
  its alert stops, keeps its runs, and is undone by its agent registering again.
(The alert rules' wording and the retired machine's alert ending: deploy/prometheus/perfctl-alerts.test.yml,
run by tests/test_alert_rules.py.)"""

import json

import pytest
from conftest import needs_root
from fleet import free_port, metric, scrape, wait_for

pytestmark = needs_root  # agents run benchmarks as nobody


def _machines(fleet, server) -> dict:
    result = fleet.client("machines", "--json", server=server)
    return {m["name"]: m for m in json.loads(result.stdout)} if result.returncode == 0 else {}


def _jobs(fleet, server) -> list:
    result = fleet.client("jobs", "--json", server=server)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_pending_samples_grow_on_the_agents_metrics_while_the_server_is_gone(fleet):
    server, port = f"127.0.0.1:{free_port()}", free_port()
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    fleet.start_agent("box", server, extra=["--metrics", f"127.0.0.1:{port}"])
    wait_for(lambda: _machines(fleet, server).get("box", {}).get("connected"), 60, "the agent to connect")
    assert fleet.client("submit", "--machines", "box", "-r", "1000", "--", "/bin/true",
                        server=server).returncode == 0
    wait_for(lambda: _machines(fleet, server)["box"]["samples"] >= 20, 60, "runs stored")
    fleet.kill("server", 9)
    wait_for(lambda: metric(port, "perfctl_agent_connected") == 0, 30, "the agent to see the server gone")
    gone = metric(port, "perfctl_agent_samples_pending")
    # measured on meanwhile, nothing acked: the gauge follows (before: frozen at its value when the stream
    # ended, whatever the spool held)
    grown = wait_for(lambda: (v := metric(port, "perfctl_agent_samples_pending")) >= gone + 30 and v, 60,
                     "the pending gauge to grow")
    assert grown > gone
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    wait_for(lambda: metric(port, "perfctl_agent_samples_pending") == 0 and
             all(j["state"] == "done" for j in _jobs(fleet, server)), 120, "the backlog sent and the job done")
    assert _machines(fleet, server)["box"]["samples"] == 1000


def test_a_retired_machine_leaves_the_gauges_keeps_its_runs_and_comes_back_with_its_agent(fleet):
    server, metrics = f"127.0.0.1:{free_port()}", free_port()
    fleet.agent_token("old-box")
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")], ["--metrics", f"127.0.0.1:{metrics}"])
    fleet.start_agent("old-box", server)
    fleet.start_agent("box", server)
    wait_for(lambda: all(m.get("connected") for m in _machines(fleet, server).values())
             and len(_machines(fleet, server)) == 2, 60, "the agents to connect")
    submitted = fleet.client("submit", "--machines", "old-box", "--wait", "-r", "5", "--", "/bin/true",
                             server=server, timeout=120)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    heartbeat = 'perfctl_machine_last_heartbeat_timestamp_seconds{machine="old-box"}'
    wait_for(lambda: heartbeat in scrape(metrics), 60, "the heartbeat gauge")

    refused = fleet.client("machines", "--retire", "old-box", server=server)  # its agent still runs
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "stop the agent first" in refused.stderr
    unknown = fleet.client("machines", "--retire", "no-such-box", server=server)
    assert unknown.returncode == 2 and "no machine named 'no-such-box'" in unknown.stderr
    assert unknown.stderr.count("\n") == 1 and "Traceback" not in unknown.stderr

    import grpc

    from perfctl.v1 import fleet_pb2 as pb
    from perfctl.v1 import fleet_pb2_grpc as rpc

    agent_md = (("authorization", f"Bearer {open(fleet.agent_token('box')).read().strip()}"),)
    with pytest.raises(grpc.RpcError) as refused_to_agent:  # an agent's token may not retire machines
        rpc.QueryServiceStub(grpc.insecure_channel(server)).RetireMachine(
            pb.RetireMachineRequest(name="old-box"), metadata=agent_md, timeout=30)
    assert refused_to_agent.value.code() == grpc.StatusCode.PERMISSION_DENIED

    fleet.kill("old-box", 15)  # decommissioned
    wait_for(lambda: not _machines(fleet, server)["old-box"]["connected"], 60, "the agent to be gone")
    retired = fleet.client("machines", "--retire", "old-box", server=server)
    assert retired.returncode == 0, retired.stderr
    assert "retired" in retired.stdout
    scraped = scrape(metrics)
    assert heartbeat not in scraped  # PerfctlAgentHeartbeatMissing has nothing left to fire on
    assert 'perfctl_machine_last_heartbeat_timestamp_seconds{machine="box"}' in scraped  # the others stay
    listed = _machines(fleet, server)["old-box"]
    assert listed["retired_ns"] and listed["samples"] == 5  # its runs are kept
    assert "old-box" not in fleet.client("machines", "-q", server=server).stdout  # not a machine to worry about
    kept = json.loads(fleet.client("benchmarks", "old-box", "--json", server=server).stdout)
    assert [b["runs"] for b in kept] == [5]

    fleet.start_agent("old-box", server)  # back in service: its agent registers again
    wait_for(lambda: _machines(fleet, server)["old-box"]["retired_ns"] is None, 60, "the machine back in service")
    # its heartbeat gauge is back at every replica's next refresh (30 s): computed here at once, from the
    # server's database
    from prometheus_client import generate_latest

    from perfctl.server.jobs import JobHub, JobKeeper
    from perfctl.server.storage import Storage, database_url

    storage = Storage(database_url(str(fleet.dir / "data"), None))
    try:
        JobKeeper(storage, JobHub()).fleet_gauges()
    finally:
        storage.close()
    assert heartbeat in generate_latest().decode()


def test_retiring_a_retired_machine_keeps_when_it_was_first_retired(database_url):
    """`machines --retire` twice says since when the machine is out of service, not since the second call."""
    from perfctl.server.machine_records import NoSuchMachine
    from perfctl.server.storage import Storage
    from perfctl.v1 import fleet_pb2 as pb

    storage = Storage(database_url)
    try:
        storage.register(pb.MachineInfo(name="old", machine_id="m" * 16, inventory_json="{}", agent_version="t"), 1)
        storage.retire_machine("old", now_ns=1_000)
        storage.retire_machine("old", now_ns=2_000)
        (row,) = [r for r in storage.list_machines() if r["name"] == "old"]
        assert row["retired_ns"] == 1_000
        with pytest.raises(NoSuchMachine):
            storage.retire_machine("ghost")
    finally:
        storage.close()
