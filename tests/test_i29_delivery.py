"""Issue 29, point 2: a job is dispatched when its agent has it, not when a replica sent it (server/delivery.py).

The partition is real: two `perfctl server` replicas on one PostgreSQL in the server namespace, the agent in its
own; the agent's packets to replica A and A's to the agent are dropped by blackhole policy rules in both
namespaces (iproute2), while B stays reachable. A keeps the agent's job watch open (no packet says it is gone),
so a job submitted through A is claimed and written into a connection nobody reads. Before acknowledged
delivery it stayed `dispatched` with 0 runs for as long as anyone looked, because the agent's heartbeats
through B renewed the lease of every dispatched job of the machine."""

import json
import re
import subprocess
import time
import uuid

import pytest
from conftest import fleet_in
from fleet import NetworkLab, make_certs, netns_reason, wait_for

from perfctl.server.storage import Storage
from perfctl.v1 import fleet_pb2 as pb
from perfctl.wire import job_run_uuid

A, B = f"{NetworkLab.SERVER_IP}:7433", f"{NetworkLab.SECOND_SERVER_IP}:7433"
AGENT_IP = "10.77.0.10"  # NetworkLab's host 0
LEASE_S = 9  # --job-lease 9s: heartbeats every 3 s, so the delivery deadline is 3 heartbeats = 9 s


def _job() -> pb.Job:
    return pb.Job(commands=[pb.Command(argv=["/bin/true"])], repetitions=1)


def _machine(storage: Storage, name: str) -> None:
    storage.register(pb.MachineInfo(name=name, machine_id=name, inventory_json="{}"), time.time_ns())


def _state(storage: Storage, job_id: str) -> dict:
    return next(row for row in storage.list_jobs() if row["id"] == job_id)


def test_a_job_its_agent_does_not_confirm_is_offered_again_through_the_replica_it_watches(database_url):
    """The transition itself, on the database: sent through A's watch, never confirmed, the heartbeats (now
    through B) do not keep it; at the delivery deadline it is queued again, and only the replica holding the
    agent's newest watch (B) may claim it."""
    from perfctl.server.delivery import Deliveries

    storage = Storage(database_url)
    _machine(storage, "box")
    at_a, at_b = Deliveries(storage, "A", lease_s=30, deadline_s=3), Deliveries(storage, "B", lease_s=30, deadline_s=3)
    job_id, confirmed = storage.create_job("box", _job()), storage.create_job("box", _job())
    now = time.time_ns()
    assert not at_a.claim(job_id, "box", now)  # no watch of box is open at A: A must not send it
    storage.watching("box", "A", True)
    assert at_a.claim(job_id, "box", now) and at_a.claim(confirmed, "box", now)
    assert not at_a.claim(job_id, "box", now) and _state(storage, job_id)["state"] == "dispatched"  # claimed once
    storage.watching("box", "B", True)  # the agent moved to B; A still holds its old watch
    at_b.heard("box", now + 1 * 10**9, [confirmed])  # the agent has `confirmed` (A's copy got through), not job_id
    at_b.heard("box", now + 2 * 10**9, [confirmed])
    assert at_b.expire(now + 2 * 10**9) == ([], [])  # within the deadline: nothing yet
    requeued, lost = at_a.expire(now + 3 * 10**9 + 1)
    assert requeued == [(job_id, "box")] and lost == []
    row = _state(storage, job_id)
    assert row["state"] == "queued" and row["lease_ns"] is None and "not confirmed by its agent" in row["message"]
    assert _state(storage, confirmed)["state"] == "dispatched"  # renewed: its lease runs to now + 32 s
    assert at_a.expire(now + 3 * 10**9 + 1) == ([], [])  # requeued once
    assert not at_a.claim(job_id, "box", now + 4 * 10**9)  # A's watch is stale: A is not where the agent is
    assert at_b.claim(job_id, "box", now + 4 * 10**9)
    at_b.heard("box", now + 5 * 10**9, [job_id, confirmed])
    assert at_b.expire(now + 20 * 10**9) == ([], [])  # confirmed: it holds the whole lease, not the deadline
    # a confirmed job whose agent goes silent is lost at the end of its lease, as before (never requeued
    # silently: its agent may be measuring it)
    requeued, lost = at_b.expire(now + 36 * 10**9)
    assert requeued == [] and sorted(lost) == sorted([(job_id, "box"), (confirmed, "box")])
    storage.close()


def test_a_late_confirmation_takes_the_requeued_job_back(database_url):
    """The first delivery arrives after the deadline requeued the job: the agent's heartbeat naming it makes it
    dispatched again (the agent has it), so no replica sends it a second time; were one to, the agent keeps
    the job by its id and runs each run once (uuid5(job, k))."""
    from perfctl.server.delivery import Deliveries

    storage = Storage(database_url)
    _machine(storage, "box")
    storage.watching("box", "A", True)
    deliveries = Deliveries(storage, "A", lease_s=30, deadline_s=3)
    job_id = storage.create_job("box", _job())
    now = time.time_ns()
    assert deliveries.claim(job_id, "box", now)
    assert deliveries.expire(now + 4 * 10**9)[0] == [(job_id, "box")]
    deliveries.heard("box", now + 5 * 10**9, [job_id])
    row = _state(storage, job_id)
    assert row["state"] == "dispatched" and row["lease_ns"] == now + 35 * 10**9
    assert not deliveries.claim(job_id, "box", now + 5 * 10**9)
    deliveries.heard("box", now + 6 * 10**9, [str(uuid.uuid4())])  # a job of no one: changes nothing
    assert storage.update_job(job_id, "box", "done", "1 runs", 0)
    deliveries.heard("box", now + 7 * 10**9, [job_id])  # a final job never moves back
    assert _state(storage, job_id)["state"] == "done"
    storage.close()


def test_a_job_its_agent_never_confirms_is_sent_again_after_the_deadline(fleet, tmp_path):
    """A real server and a real job watch whose agent drops the job it was sent (what a connection gone without
    a packet saying so amounts to) while it keeps heartbeating: the job is sent again once its delivery
    deadline passes, and only then; confirmed, it is kept for the whole lease, and lost after it."""
    import contextlib
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    import grpc
    from fleet import free_port

    from perfctl.v1 import fleet_pb2_grpc as rpc

    address = f"127.0.0.1:{free_port()}"
    metadata = (("authorization", f"Bearer {open(fleet.agent_token('box')).read().strip()}"),)
    fleet.start_server(address, ["--data-dir", str(tmp_path / "data")], ["--job-lease", "3s"])  # deadline 3 s
    channel = grpc.insecure_channel(address)
    agent = rpc.AgentServiceStub(channel)
    held: list[str] = []
    beating = True
    pool = ThreadPoolExecutor(2)

    def heartbeats() -> None:
        while beating:
            with contextlib.suppress(grpc.RpcError):  # one slow under load: the next names the same jobs
                agent.Heartbeat(pb.HeartbeatRequest(state="idle", held_job_ids=held), metadata=metadata, timeout=5)
            time.sleep(0.5)

    query = rpc.QueryServiceStub(channel)
    client_metadata = (("authorization", f"Bearer {open(fleet.client_token).read().strip()}"),)

    def state(job_id: str) -> pb.JobStatus:
        (job,) = query.GetJobs(pb.GetJobsRequest(job_ids=[job_id]), metadata=client_metadata, timeout=10).jobs
        return job

    try:
        info = pb.MachineInfo(name="box", machine_id="m" * 32, inventory_json="{}")
        wait_for(lambda: _answers(lambda: agent.Register(pb.RegisterRequest(machine=info), metadata=metadata,
                                                         timeout=5)), 60, "the server")
        for hostile, problem in ((["x"], "not a UUID"), ([str(uuid.uuid4()) for _ in range(1001)], "at most 1000")):
            with pytest.raises(grpc.RpcError) as refused:
                agent.Heartbeat(pb.HeartbeatRequest(state="idle", held_job_ids=hostile), metadata=metadata, timeout=5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and problem in refused.value.details()
        watch = agent.WatchJobs(pb.WatchJobsRequest(), metadata=metadata)
        beat = pool.submit(heartbeats)
        submitted = fleet.client("submit", "--machines", "box", "-r", "1", "--", "/bin/true", server=address)
        assert submitted.returncode == 0, submitted.stderr
        first = pool.submit(next, watch).result(timeout=30)  # sent; this agent drops it and names nothing
        sent = time.monotonic()
        again = pool.submit(next, watch).result(timeout=30)
        waited = time.monotonic() - sent
        # the deadline runs from the claim, a moment before this watch read the first copy; then a keeper tick
        assert again.job_id == first.job_id and 2 <= waited < 3 + 1 + 4, waited
        assert f"job {first.job_id} on box offered again" in fleet.log("server")
        held.append(first.job_id)  # now it keeps it: confirmed, it is not sent a third time
        third = pool.submit(next, watch)
        with pytest.raises(FutureTimeout):
            third.result(timeout=5)  # past a second deadline (3 s) and a keeper tick
        assert state(first.job_id).state == "dispatched"
        beating = False  # the agent falls silent: a job it has is lost at the end of its lease, not sent again
        beat.result(timeout=10)
        lost = wait_for(lambda: (job := state(first.job_id)).state == "lost" and job, 15, "the job lost")
        assert "no heartbeat from its agent for 3 s" in lost.message
        watch.cancel()
    finally:
        beating = False
        pool.shutdown(wait=False, cancel_futures=True)
        channel.close()


def _answers(call) -> bool:
    import grpc

    try:
        call()
        return True
    except grpc.RpcError:
        return False


# --- the partition, for real ---

def _partition(network: NetworkLab, on: bool) -> None:
    """Drop every packet between the agent host and replica A (not B): the agent's to A in its namespace, A's
    to the agent in the server's. Policy rules, so that B's address on the same bridge stays reachable."""
    verb = "add" if on else "del"
    for ns, rule in ((network.hosts[0], ["to", f"{NetworkLab.SERVER_IP}/32"]),
                     (network.server_ns, ["from", f"{NetworkLab.SERVER_IP}/32", "to", f"{AGENT_IP}/32"])):
        subprocess.run(["ip", "netns", "exec", ns, "ip", "rule", verb, *rule, "blackhole"], check=True,
                       capture_output=True)


def _jobs(fleet, server, tls, network) -> dict[str, dict]:
    result = fleet.client("jobs", "--json", server=server, extra=tls, netns=network.server_ns)
    assert result.returncode == 0, result.stderr
    return {job["job_id"]: job for job in json.loads(result.stdout)}


def _submit(fleet, server, tls, network) -> str:
    result = fleet.client("submit", "--machines", "host0", "-r", "3", "-e", "page-faults", "--", "/bin/true",
                          server=server, extra=tls, netns=network.server_ns)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[1]


@pytest.mark.skipif(netns_reason() is not None, reason=str(netns_reason()))
def test_a_job_sent_into_a_partitioned_watch_runs_through_the_other_replica(tmp_path, postgres):
    with fleet_in(tmp_path, hosts=1) as fleet:
        network = fleet.network
        certs = make_certs(tmp_path, [NetworkLab.SERVER_IP, NetworkLab.SECOND_SERVER_IP])
        url = postgres.new_database()
        tls = ["--tls-ca", certs["ca.pem"]]
        for key, address in (("server-a", A), ("server-b", B)):  # one at a time: the first migrates
            fleet.start_server(address, ["--db", url], ["--tls-cert", certs["server.pem"], "--tls-key",
                                                        certs["server.key"], "--grace", "5",
                                                        "--job-lease", f"{LEASE_S}s"],
                               netns=network.server_ns, key=key)
            wait_for(lambda key=key: "listening on" in fleet.log(key), 60, f"{key} to listen")
        fleet.start_agent("host0", f"{A},{B}", extra=tls, netns=network.hosts[0])
        wait_for(lambda: f"registered with {A}" in fleet.log("host0"), 60, "the agent at A")
        wait_for(lambda: (r := fleet.client("machines", "--json", server=A, extra=tls, netns=network.server_ns))
                 .returncode == 0 and any(m["connected"] for m in json.loads(r.stdout)), 60, "the agent's watch at A")

        _partition(network, True)
        partitioned = time.monotonic()
        # in the window: A still holds the agent's watch, and the agent is not yet at B
        early = _submit(fleet, A, tls, network)
        wait_for(lambda: f"registered with {B}" in fleet.log("host0"), 60, "the agent to move to B")
        moved = time.monotonic()
        # after the move: A still holds the old watch (no packet told it otherwise)
        late = _submit(fleet, A, tls, network)
        deadline_s = 3 * LEASE_S / 3  # server/delivery.py DELIVERY_HEARTBEATS
        try:
            wait_for(lambda: {_jobs(fleet, B, tls, network)[j]["state"] for j in (early, late)} == {"done"},
                     (moved - partitioned) + deadline_s + 15, "both jobs done through B")
        except AssertionError as err:
            states = {j: (s["state"], s["samples"]) for j, s in _jobs(fleet, B, tls, network).items()}
            raise AssertionError(f"{err}: {states}\n{fleet.log('host0')[-3000:]}") from None
        done = time.monotonic()
        # the partition heals: what A wrote into the old connection never reaches the agent, which has left it,
        # and nothing is measured or stored again
        _partition(network, False)
        time.sleep(3)
        storage = Storage(url)
        try:
            stored = storage.sample_uuids()
        finally:
            storage.close()
        assert sorted(stored) == sorted(job_run_uuid(j, k) for j in (early, late) for k in range(3))
        assert {_jobs(fleet, A, tls, network)[j]["state"] for j in (early, late)} == {"done"}
        for job in (early, late):  # the agent took each job once, however often it was offered
            assert len(re.findall(rf"job {job}: 1 commands", fleet.log("host0"))) == 1, fleet.log("host0")
        print(f"agent at B {moved - partitioned:.1f} s after the partition; both jobs done "
              f"{done - partitioned:.1f} s after it (delivery deadline {deadline_s:g} s)")
