"""Issue 29, point 4: the server's clock is the reference. An agent whose clock is 30 days fast (libfaketime
preloaded into the agent's process alone: its time.time_ns() is 30 days ahead, the server's and the tests'
are not) must not make its job the machine's "most recent" for 30 days, nor its audit the "latest" in front
of one received after it; the server flags its runs and `perfctl machines` shows the skew.

Before the fix (6831c44): `compare box@job=J1 box` refused "A and B select the same 5 runs" (the default
selection of box took the skewed J1, not J2 received after it), the trusted audit stamped ahead stayed the
latest in front of an untrusted one received later, and `machines` said nothing of the clock."""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import needs_root
from fleet import Fleet, free_port, perfctl_command, wait_for

pytestmark = needs_root  # agents run benchmarks as nobody

DAY_NS = 86400 * 10**9
FAKETIME_LIBRARY = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                     "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                     "/usr/lib/faketime/libfaketime.so.1") if os.path.exists(p)), None)
needs_faketime = pytest.mark.skipif(FAKETIME_LIBRARY is None,
                                    reason="probe: libfaketime.so.1 not found (deploy/setup.sh installs faketime)")


def _skewed(days: int) -> dict:
    """The environment of a process whose wall clock is ``days`` ahead (behind, if negative: -30 is 30 days
    slow, as tests/test_i29_prune_clock.py uses): CLOCK_REALTIME only (the monotonic clock stays true, so its
    timeouts and gRPC's keepalives are not disturbed)."""
    return dict(os.environ, LD_PRELOAD=FAKETIME_LIBRARY, FAKETIME=f"{days:+d}d", FAKETIME_DONT_FAKE_MONOTONIC="1")


def _start_skewed_agent(fleet: Fleet, name: str, server: str, days: int) -> None:
    """fleet.start_agent's command, under a clock ``days`` fast."""
    args = ["agent", "--server", server, "--name", name, "--token-file", fleet.agent_token(name), "--spool",
            str(fleet.dir / f"spool-{name}"), "--allow", "/bin/*", "--allow", "/usr/bin/*", "--user", "nobody",
            "--audit-every", "0"]
    log = open(fleet.dir / f"{name}.log", "ab")
    fleet.processes[name] = subprocess.Popen(perfctl_command(*args), stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, env=_skewed(days))



def _machines(fleet, server) -> dict:
    result = fleet.client("machines", "--json", server=server)
    assert result.returncode == 0, result.stderr
    return {m["name"]: m for m in json.loads(result.stdout)}


def _job(fleet, server, *args) -> str:
    result = fleet.client("submit", "--machines", "box", "--wait", *args, server=server, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = json.loads(fleet.client("jobs", "--json", server=server).stdout)
    return jobs[-1]["job_id"]


@needs_faketime
def test_the_faked_clock_is_the_agents_alone():
    """The probe the other tests stand on: a process under _skewed reads a clock 30 days fast, this one not."""
    read = subprocess.run([sys.executable, "-c", "import time; print(time.time_ns())"], env=_skewed(30),
                          capture_output=True, text=True, check=True)
    ahead = int(read.stdout) - time.time_ns()
    assert 30 * DAY_NS - 60 * 10**9 < ahead < 30 * DAY_NS + 60 * 10**9


@needs_faketime
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_clock_30_days_fast_neither_makes_the_latest_job_nor_hides_it(fleet, backend, request):
    db_args = ["--data-dir", str(fleet.dir / "data")] if backend == "sqlite" else \
        ["--db", request.getfixturevalue("postgres").new_database()]
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, db_args)
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server")
    _start_skewed_agent(fleet, "box", server, days=30)
    wait_for(lambda: _machines(fleet, server).get("box", {}).get("clock_skew_ns"), 60, "a skewed heartbeat")
    skew = _machines(fleet, server)["box"]["clock_skew_ns"]
    assert 30 * DAY_NS - 60 * 10**9 < skew < 30 * DAY_NS + 60 * 10**9  # the agent's own clock, as it sent it
    first = _job(fleet, server, "-r", "5", "--", "/bin/true")
    box = wait_for(lambda: (m := _machines(fleet, server)["box"])["clock_ahead_runs"] == 5 and m, 30, "flagged runs")
    table = fleet.client("machines", "--width", "250", server=server).stdout  # the clock cell whole
    assert "30.0 d ahead, 5 runs stamped ahead" in table, table

    fleet.kill("box", 15)  # the same machine, its clock set right
    fleet.start_agent("box", server)
    wait_for(lambda: abs(_machines(fleet, server)["box"]["clock_skew_ns"]) < 10 * 10**9, 60, "the clock set right")
    second = _job(fleet, server, "-r", "7", "--", "/bin/true")
    box = _machines(fleet, server)["box"]
    assert box["clock_ahead_runs"] == 5 and box["samples"] == 12  # the new runs are not flagged; none refused
    assert "clock" in fleet.client("machines", "box", "--width", "250", server=server).stdout

    # box alone is its most recent job: J2, received after J1, though J1's runs claim to start 30 days later
    compare = fleet.client("compare", f"box@job={first}", "box", "--format", "json", server=server)
    assert compare.returncode in (0, 3, 4), compare.stdout + compare.stderr
    (row,) = json.loads(compare.stdout)["benchmarks"]
    assert (row["n_a"], row["n_b"]) == (5, 7)
    said = fleet.client("compare", f"box@job={first}", "box", server=server)
    assert "5 runs of machine box were stamped by its agent's clock up to 30.0 d after" in said.stdout, said.stdout
    assert said.stdout.count("stamped by its agent's clock") == 1  # J2's side: none
    same = fleet.client("compare", f"box@job={second}", "box", server=server)
    assert same.returncode == 2 and "select the same 7 runs" in same.stderr, same.stdout + same.stderr


AUDIT_SENDER = """
import json, sys, time
import grpc
from perfctl.v1 import fleet_pb2 as pb, fleet_pb2_grpc as rpc
server, token, audit_id, verdict = sys.argv[1:]
stub = rpc.AgentServiceStub(grpc.insecure_channel(server))
md = (("authorization", f"Bearer {token}"),)
stub.Register(pb.RegisterRequest(machine=pb.MachineInfo(name="auditor")), metadata=md, timeout=30)
report = {"audit_id": audit_id, "verdict": verdict, "time_ns": time.time_ns(), "kernels": []}
stub.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=json.dumps(report)), metadata=md, timeout=30)
print(report["time_ns"])
"""


def _report_audit(fleet, server, verdict: str, env=None) -> int:
    """An audit sent by a process whose clock (``env``) stamps its time, as an agent's does; that time."""
    token = Path(fleet.agent_token("auditor")).read_text().strip()
    sent = subprocess.run([sys.executable, "-c", AUDIT_SENDER, server, token, str(uuid.uuid4()), verdict],
                          env=env, capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    return int(sent.stdout)


@needs_faketime
def test_an_audit_stamped_ahead_does_not_hide_a_later_untrusted_one(fleet):
    server = f"127.0.0.1:{free_port()}"
    fleet.agent_token("auditor")  # in the tokens file before the server reads it
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server")
    stamped = _report_audit(fleet, server, "trusted", env=_skewed(30))
    assert stamped > time.time_ns() + 29 * DAY_NS  # the audit's own time is its clock's
    before = time.time_ns()
    _report_audit(fleet, server, "untrusted")
    box = _machines(fleet, server)["auditor"]
    assert box["audit_verdict"] == "untrusted"
    assert before <= box["audit_time_ns"] <= time.time_ns()  # dated by the server, not 30 days ahead
    report = json.loads(fleet.client("audit", "report", "--json", server=server).stdout)
    assert report["machines"]["auditor"]["latest"] == "untrusted"
    # what PerfctlAuditNotTrusted and PerfctlAuditStale read, as every replica computes it (every 30 s; here
    # at once, from the server's database)
    from prometheus_client import generate_latest

    from perfctl.server.jobs import JobHub, JobKeeper
    from perfctl.server.storage import Storage, database_url

    storage = Storage(database_url(str(fleet.dir / "data"), None))
    try:
        JobKeeper(storage, JobHub()).fleet_gauges()
    finally:
        storage.close()
    gauges = generate_latest().decode()
    assert 'perfctl_machine_audit_verdict{machine="auditor",verdict="untrusted"} 1.0' in gauges
    assert 'verdict="trusted"' not in gauges
    (audited,) = [float(line.split()[-1]) for line in gauges.splitlines()
                  if line.startswith('perfctl_machine_audit_timestamp_seconds{machine="auditor"}')]
    assert before / 1e9 <= audited <= time.time()


def test_migration_0009_dates_stored_series_by_their_receipt_both_ways(database_url):
    """A database of runs stored before 0009 (here: stored at head, then taken down to 0008 and up again):
    each series is dated by its runs' receipt (samples.received_ns, kept since 0001), so the job an agent
    30 days fast stamped ahead is not the most recent after the upgrade either; audits keep their own time."""
    from alembic import command
    from alembic.config import Config
    from conftest import measure
    from sqlalchemy import create_engine

    from perfctl import wire
    from perfctl.server import migrations
    from perfctl.server.selection import Selector
    from perfctl.server.storage import Storage
    from perfctl.v1 import fleet_pb2 as pb

    runs = [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["task-clock"], runs=5)]
    now = time.time_ns()
    storage = Storage(database_url)
    storage.register(pb.MachineInfo(name="box", machine_id="m" * 16, inventory_json="{}", agent_version="t"), now)
    jobs = {"ahead": str(uuid.uuid4()), "right": str(uuid.uuid4())}
    # "ahead": received a minute ago from an agent 30 days fast; "right": received now, its clock right
    for job_id, count, stamp, received in ((jobs["ahead"], 2, now + 30 * DAY_NS, now - 60 * 10**9),
                                           (jobs["right"], 3, now, now)):
        batch = []
        for k in range(count):
            sample = pb.Sample()
            sample.CopyFrom(runs[k])
            sample.uuid, sample.job_id, sample.start_time_ns = str(uuid.uuid4()), job_id, stamp + k
            batch.append(sample)
        assert storage.ingest("box", batch, now_ns=received) == (count, 0)
    assert storage.list_machines()[0]["clock_ahead_runs"] == 2  # flagged at ingest, stored all the same
    storage.close()

    config = Config()
    config.set_main_option("script_location", migrations.__path__[0])
    engine = create_engine(database_url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0008")
    engine.dispose()
    storage = Storage(database_url)  # 0009 again, filled from what 0008 kept
    try:
        dataset = Selector(storage).dataset(pb.Selection(machine="box"))
        assert len(dataset.benchmarks["true"].metrics["wall-time"]) == 3  # the job received last: "right"
        ahead = Selector(storage).dataset(pb.Selection(machine="box", job_id=jobs["ahead"]))
        assert len(ahead.benchmarks["true"].metrics["wall-time"]) == 2
    finally:
        storage.close()


def test_a_batch_sent_again_does_not_make_its_job_the_most_recent(database_url):
    """An agent re-sends a batch whose ack it lost (after a reconnect, possibly much later): nothing is stored
    again, and the job it belongs to is not received anew."""
    from conftest import measure

    from perfctl import wire
    from perfctl.server.selection import Selector
    from perfctl.server.storage import Storage
    from perfctl.v1 import fleet_pb2 as pb

    runs = [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["task-clock"], runs=5)]
    now = time.time_ns()
    storage = Storage(database_url)
    try:
        storage.register(pb.MachineInfo(name="box", machine_id="m" * 16, inventory_json="{}", agent_version="t"),
                         now)
        batches = []
        for count, received in ((2, now - 60 * 10**9), (3, now - 30 * 10**9)):
            job_id, batch = str(uuid.uuid4()), []
            for k in range(count):
                sample = pb.Sample()
                sample.CopyFrom(runs[k])
                sample.uuid, sample.job_id, sample.start_time_ns = str(uuid.uuid4()), job_id, received - 10**9 + k
                batch.append(sample)
            assert storage.ingest("box", batch, now_ns=received) == (count, 0)
            batches.append(batch)
        assert storage.ingest("box", batches[0], now_ns=now) == (0, 2)  # the first job's batch, again
        dataset = Selector(storage).dataset(pb.Selection(machine="box"))
        assert len(dataset.benchmarks["true"].metrics["wall-time"]) == 3  # still the second job
    finally:
        storage.close()
