"""Issue 29, point 4's class: retention goes by the server's clock too. `perfctl server --retain` and `perfctl
prune` deleted runs by their agent-stamped start alone, so an agent whose clock is days slow stamped the runs
it measured a minute ago old enough to go at the next prune: measured, stored, and lost. A run is now deleted
only when the server also received it before the cutoff (samples.received_ns, the server's own clock).

Before the fix (c66998c), with an agent under libfaketime 30 days slow and `--retain 7d`: `perfctl prune
--older-than 7d --dry-run` said "would delete 5 runs", and a server restarted with --retain 7d deleted the
job's 5 runs at once ("retention: deleted 6 runs", the 5 and the canary stored long ago)."""

import json
import subprocess
import time
import uuid

from conftest import measure, needs_root, stored_long_ago
from fleet import free_port, perfctl_command, wait_for
from test_i29_clock import _start_skewed_agent, needs_faketime

from perfctl import wire
from perfctl.server.storage import Storage, database_url
from perfctl.v1 import fleet_pb2 as pb

DAY_NS = 86400 * 10**9


def _runs(count: int, days_ago: float) -> list[pb.Sample]:
    """``count`` real runs of /bin/true, each under a uuid of its own, started (by their clock) ``days_ago``."""
    base = wire.sample_to_proto(measure(["/bin/true"], ["task-clock"], runs=1)[0])
    runs = []
    for _ in range(count):
        run = pb.Sample()
        run.CopyFrom(base)
        run.uuid, run.start_time_ns = str(uuid.uuid4()), time.time_ns() - int(days_ago * DAY_NS)
        runs.append(run)
    return runs


def test_a_run_goes_when_both_its_start_and_its_receipt_are_old(database_url):
    """Storage.prune, on SQLite and PostgreSQL: the receipt (the server's clock) as well as the start."""
    storage = Storage(database_url)
    try:
        for name in ("slow", "fast"):
            storage.register(pb.MachineInfo(name=name, machine_id=name * 4, inventory_json="{}", agent_version="t"), 1)
        storage.ingest("slow", _runs(3, 30))  # a clock 30 days slow: stamped 30 days old, received now
        cutoff = time.time_ns() - 7 * DAY_NS
        assert storage.prune(cutoff, dry_run=True) == {}
        assert storage.prune(cutoff) == {} and storage.count_samples() == 3
        storage.ingest("fast", _runs(2, 0))  # started now by their clock, as stored long ago below
        stored_long_ago(database_url, 30)
        # the slow machine's runs are now old by both clocks; the fast one's start is fresh: kept
        assert storage.prune(cutoff, dry_run=True) == {"slow": 3}
        assert storage.prune(cutoff) == {"slow": 3} and storage.count_samples() == 2
    finally:
        storage.close()


def _samples(fleet, server) -> dict:
    listed = fleet.client("machines", "--json", server=server)
    assert listed.returncode == 0, listed.stderr
    return {m["name"]: m["samples"] for m in json.loads(listed.stdout)}


@needs_root  # the agent runs benchmarks as nobody
@needs_faketime
def test_an_agent_30_days_slow_keeps_its_fresh_runs_under_retain_7d(fleet):
    data = fleet.dir / "data"
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(data)], ["--retain", "7d", "-v"])
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server")
    _start_skewed_agent(fleet, "box", server, days=-30)
    wait_for(lambda: "box" in _samples(fleet, server), 60, "the slow agent")
    submitted = fleet.client("submit", "--machines", "box", "--wait", "-r", "5", "--", "/bin/true", server=server,
                             timeout=120)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    wait_for(lambda: _samples(fleet, server)["box"] == 5, 30, "the job's runs")

    # `perfctl prune` against the server's database, while it serves
    prune = [*perfctl_command("prune", "--older-than", "7d", "--data-dir", str(data))]
    dry = subprocess.run([*prune, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and dry.stdout.startswith("would delete 0 runs received and started before"), dry.stdout

    # the server's own retention runs at its start: a canary stored long ago shows that it ran
    fleet.kill("server", 15)
    url = database_url(str(data), None)
    storage = Storage(url)
    try:
        storage.register(pb.MachineInfo(name="old", machine_id="o" * 16, inventory_json="{}", agent_version="t"), 1)
        storage.ingest("old", _runs(1, 40))
    finally:
        storage.close()
    stored_long_ago(url, 40, machine="old")
    fleet.start_server(server, ["--data-dir", str(data)], ["--retain", "7d", "-v"])
    wait_for(lambda: "retention: deleted" in fleet.log("server"), 60, "the retention pass at start")
    assert "retention: deleted 1 runs" in fleet.log("server"), fleet.log("server")
    assert _samples(fleet, server) == {"box": 5, "old": 0}
    done = subprocess.run(prune, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("deleted 0 runs"), done.stdout
    assert _samples(fleet, server)["box"] == 5
