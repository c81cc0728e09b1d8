"""Issue 29, point 3: every answer is bounded. A real `perfctl server` (SQLite) holding 100,000 jobs, five
jobs with long argv (~0.9 MB each) and five audit reports of ~1 MB, and runs over its --max-compare-runs: the
client commands that used to fail for good with "Received message larger than max" work, a job is found by
its id prefix without listing the rest, and GetSamples is refused past the limit and otherwise streamed
without the server holding the runs (its VmHWM, read from /proc, stays put). The paging and prefix
queries also run on a real PostgreSQL."""

import json
import sqlite3
import time
import uuid

import grpc
import pytest
from fleet import Fleet, Postgres, free_port, postgres_reason, wait_for
from sqlalchemy import text

from perfctl.server import listings
from perfctl.server.storage import Storage, database_url
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

JOBS = 100_000
LIMIT = 3000  # the server's --max-compare-runs
BASE_NS = 1_780_000_000 * 10**9


def _job_rows(count: int, machine: str = "box-a") -> list[tuple]:
    """``count`` ended jobs as the jobs table holds them, one per second of submission, oldest first."""
    common = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=10).SerializeToString()
    rows = []
    for k in range(count):
        job_id = str(uuid.uuid4())
        spec = pb.Job(job_id=job_id).SerializeToString() + common  # serialized messages concatenated merge
        rows.append((job_id, machine, spec, "done", "", 10, BASE_NS + k * 10**9, BASE_NS + k * 10**9, None, 0))
    return rows


INSERT_JOB = "INSERT INTO jobs (id, machine, spec, state, message, samples, submitted_ns, updated_ns, lease_ns, " \
             "failed_runs) VALUES ({})"


class Served:
    def __init__(self, fleet: Fleet, address: str):
        self.fleet, self.address = fleet, address
        self.channel = grpc.insecure_channel(address)
        self.query, self.agent = rpc.QueryServiceStub(self.channel), rpc.AgentServiceStub(self.channel)
        self.client_md = (("authorization", f"Bearer {open(fleet.client_token).read().strip()}"),)

    def agent_md(self, name: str) -> tuple:
        return (("authorization", f"Bearer {open(self.fleet.agent_token(name)).read().strip()}"),)

    def cli(self, *args: str, timeout: float = 120):
        return self.fleet.client(*args, server=self.address, timeout=timeout)

    def db(self) -> str:
        return str(self.fleet.dir / "data" / "perfctl.db")

    def high_water_kib(self) -> int:
        """The server process's peak resident set (VmHWM), from /proc."""
        with open(f"/proc/{self.fleet.processes['server'].pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.fixture(scope="module")
def served(module_fleet):
    fleet = module_fleet
    address = f"127.0.0.1:{free_port()}"
    for name in ("box-a", "box-b", "box-c"):
        fleet.agent_token(name)
    fleet.start_server(address, ["--data-dir", str(fleet.dir / "data")], ["--max-compare-runs", str(LIMIT)])
    server = Served(fleet, address)
    def answers():
        try:
            return server.query.ListMachines(pb.ListMachinesRequest(), metadata=server.client_md, timeout=5)
        except grpc.RpcError:
            return None
    wait_for(answers, 60, "the server to answer")
    for name in ("box-a", "box-b", "box-c"):
        server.agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(name=name, machine_id="m" * 32,
                                                                        inventory_json="{}")),
                              metadata=server.agent_md(name))
    # 100,000 ended jobs, straight into the server's database (a fleet's 5 months of CI), then one lost
    rows = _job_rows(JOBS)
    lost = list(rows[JOBS // 2])
    lost[3] = "lost"
    rows[JOBS // 2] = tuple(lost)
    with sqlite3.connect(server.db()) as conn:
        conn.executemany(INSERT_JOB.format(", ".join("?" * 10)), rows)
    server.rows = rows
    # five jobs with long argv, within the limits, submitted as a client does: the newest jobs
    long_argv = ["/bin/true", *(f"{k:04d}" + "x" * 4091 for k in range(215))]
    server.long_jobs = [server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-b"], job=pb.Job(
        commands=[pb.Command(name="long", argv=long_argv)], repetitions=1)), metadata=server.client_md,
        timeout=30).job_ids[0] for _ in range(5)]
    yield server


def _json(done) -> list:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_jobs_lists_the_most_recent_of_100000_and_pages_to_more(served):
    shown = _json(served.cli("jobs", "--json"))
    assert len(shown) == 50  # the default: the 50 most recent, oldest of them first
    assert [j["job_id"] for j in shown[-5:]] == served.long_jobs
    assert [j["job_id"] for j in shown[:45]] == [row[0] for row in served.rows[-45:]]
    table = served.cli("jobs")
    assert table.returncode == 0 and served.long_jobs[-1][:8] in table.stdout, table.stderr
    more = _json(served.cli("jobs", "--last", "2500", "--json"))
    assert [j["job_id"] for j in more] == [row[0] for row in served.rows[-2495:]] + served.long_jobs


def test_a_job_is_found_by_its_id_or_prefix_among_100000(served):
    done_id = served.rows[1234][0]
    prefix = done_id[:13]
    assert sum(row[0].startswith(prefix) for row in served.rows) == 1
    for wanted in (done_id, prefix):
        assert [j["job_id"] for j in _json(served.cli("jobs", wanted, "--json"))] == [done_id]
    assert [j["job_id"] for j in _json(served.cli("jobs", served.long_jobs[2][:13], "--json"))] == [
        served.long_jobs[2]]
    started = time.monotonic()
    waited = served.cli("jobs", "--wait", prefix)
    assert waited.returncode == 0 and time.monotonic() - started < 30, waited.stderr
    ambiguous = served.cli("jobs", "a")
    assert ambiguous.returncode == 2 and ambiguous.stderr.strip() == (
        "perfctl jobs: several jobs on the server have ids starting with 'a' (give more of it)")
    lost_id = served.rows[JOBS // 2][0]
    retried = _json(served.cli("jobs", "--retry", lost_id[:13], "--json"))
    assert [(j["job_id"], j["state"]) for j in retried] == [(lost_id, "queued")]


def test_every_page_is_bounded_and_a_job_too_large_is_refused(served):
    first = served.query.GetJobs(pb.GetJobsRequest(), metadata=served.client_md, timeout=30)
    assert first.ByteSize() <= 2 << 20 and first.next_page_token  # an old client's call: one bounded page
    asked = served.query.GetJobs(pb.GetJobsRequest(page_size=5000), metadata=served.client_md, timeout=30)
    assert len(asked.jobs) <= 1000 and asked.ByteSize() <= 2 << 20
    with pytest.raises(grpc.RpcError) as bad:
        served.query.GetJobs(pb.GetJobsRequest(page_token="not-a-token"), metadata=served.client_md, timeout=30)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in bad.value.details()
    huge = pb.Job(commands=[pb.Command(name="long", argv=["/bin/true", *("x" * 4096 for _ in range(250))])
                            for _ in range(2)], repetitions=1)
    with pytest.raises(grpc.RpcError) as refused:
        served.query.SubmitJob(pb.SubmitJobRequest(machines=["box-b"], job=huge), metadata=served.client_md,
                               timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 1,048,576" in refused.value.details()


def test_machines_lists_a_fleet_whose_inventories_pass_any_one_message(served):
    inventory = json.dumps({"kernel": {"release": "6.1.0"}, "notes": "n" * 60_000})  # the 64 KiB an agent may send
    with sqlite3.connect(served.db()) as conn:  # 100 machines as Register stores them
        conn.executemany("INSERT INTO machines (name, machine_id, inventory, backends, events, agent_version, "
                         "first_seen_ns, last_heard_ns) VALUES (?, ?, ?, '[]', '[]', '1', ?, ?)",
                         [(f"lab-{k:03d}", "m" * 32, inventory, BASE_NS, BASE_NS) for k in range(100)])
    listed = _json(served.cli("machines", "--json"))
    assert [m["name"] for m in listed] == ["box-a", "box-b", "box-c", *(f"lab-{k:03d}" for k in range(100))]
    one = served.cli("machines", "lab-050", "--json")
    assert one.returncode == 0 and [m["name"] for m in json.loads(one.stdout)] == ["lab-050"], one.stderr
    unknown = served.cli("machines", "nope")
    assert unknown.returncode == 2 and unknown.stderr.strip().startswith(
        "perfctl machines: no machine 'nope' on the server (known: box-a, box-b, box-c, lab-000"), unknown.stderr
    page = served.query.ListMachines(pb.ListMachinesRequest(), metadata=served.client_md, timeout=30)
    assert page.ByteSize() <= 2 << 20 and page.next_page_token  # what an older client gets: a bounded page


def test_benchmarks_lists_long_argv_and_a_label_per_commit(served):
    def run(k: int, name: str, argv: list[str], commit: str) -> pb.Sample:
        return pb.Sample(uuid=str(uuid.uuid4()), machine_id="m" * 32, run_index=0, start_time_ns=BASE_NS + k,
                         wall_ns=1000, outcome="ok", schema_version=1, labels={"commit": commit},
                         benchmark=pb.Benchmark(name=name, argv=argv, executable="/bin/true",
                                                executable_sha256="0" * 64, input_digest=f"{min(k, 99):064d}"))
    storage = Storage(database_url(str(served.fleet.dir / "data"), None))
    try:  # ten benchmarks of ~0.5 MB of argv each, and one run on 1,500 commits
        storage.ingest("box-b", [run(k, f"long-{k}", ["/bin/true", *(f"{a:03d}" + "y" * 4093 for a in range(120))],
                                     "c0") for k in range(10)])
        storage.ingest("box-b", [run(100 + k, "many", ["/bin/true"], f"c{k}") for k in range(1500)])
    finally:
        storage.close()
    listed = _json(served.cli("benchmarks", "box-b", "--json"))
    assert [b["benchmark"] for b in listed] == [*(f"long-{k}" for k in range(10)), "many"]
    assert [len(b["argv"]) for b in listed[:10]] == [121] * 10
    assert len(listed[-1]["labels"]) == 1000 and listed[-1]["labels_left_out"] == 500
    table = served.cli("benchmarks", "box-b")
    assert table.returncode == 0 and "more" in table.stdout, table.stderr


def _audit(index: int, kernel: str) -> tuple[str, str]:
    """A valid audit report of ~1 MB (its reasons), as an agent sends it."""
    audit_id = str(uuid.uuid4())
    report = {"audit_id": audit_id, "verdict": "trusted", "time_ns": BASE_NS + index * 86400 * 10**9,
              "kernel": kernel, "microcode": "0x1", "fit": None, "reasons": [f"{index}: " + "r" * 1000] * 1000,
              "kernels": [{"kernel": "loop N=1000000", "backend": "dbi", "expected": 2000004, "runs": 1,
                           "exact": True}]}
    return audit_id, json.dumps(report)


def test_audit_report_and_the_fleet_page_with_five_audits_of_1_mb(served, tmp_path):
    for index in range(5):
        audit_id, report = _audit(index, f"6.1.0-{index // 3}")
        assert len(report) > 1_000_000
        served.agent.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report),
                                 metadata=served.agent_md("box-c"), timeout=30)
    document = _json(served.cli("audit", "report", "--json"))
    assert document["machines"]["box-c"]["audits"] == 5
    assert document["machines"]["box-c"]["drift"] == [f"audit {_latest_ids(served)[3][:8]}: kernel 6.1.0-0 -> "
                                                      "6.1.0-1"]
    assert [row["machines"] for row in document["spread"]] == [1]
    page = tmp_path / "fleet.html"
    done = served.cli("report", "--machines", "-o", str(page))
    assert done.returncode == 0 and "5 audits" in page.read_text(), done.stderr
    latest = served.query.ListAudits(pb.ListAuditsRequest(latest_only=True), metadata=served.client_md, timeout=30)
    assert [(a.machine, a.audit_id) for a in latest.audits] == [("box-c", _latest_ids(served)[-1])]
    old_client = served.query.GetAudits(pb.GetAuditsRequest(), metadata=served.client_md, timeout=30)
    assert old_client.ByteSize() < 4 << 20 and old_client.next_page_token


def _latest_ids(served) -> list[str]:
    listed = served.query.ListAudits(pb.ListAuditsRequest(machine="box-c"), metadata=served.client_md, timeout=30)
    assert all(a.ByteSize() < 20_000 for a in listed.audits)  # summaries: no report document
    return [a.audit_id for a in listed.audits]


def _store_runs(served, machine: str, count: int, tail_bytes: int) -> None:
    """``count`` runs of one benchmark with a stderr tail of ``tail_bytes`` each, stored as ingest does."""
    storage = Storage(database_url(str(served.fleet.dir / "data"), None))
    try:
        for start in range(0, count, 500):
            storage.ingest(machine, [pb.Sample(
                uuid=str(uuid.uuid4()), machine_id="m" * 32, run_index=k, start_time_ns=BASE_NS + k, wall_ns=1000,
                outcome="ok", schema_version=1, stderr_tail="e" * tail_bytes,
                benchmark=pb.Benchmark(name="big", argv=["/bin/true"], executable="/bin/true",
                                       executable_sha256="0" * 64, input_digest="0" * 64))
                for k in range(start, min(count, start + 500))])
    finally:
        storage.close()


def test_get_samples_without_a_selection_is_refused_past_the_limit(served):
    _store_runs(served, "box-a", LIMIT + 5, 100)
    with pytest.raises(grpc.RpcError) as refused:
        list(served.query.GetSamples(pb.GetSamplesRequest(machine="box-a"), metadata=served.client_md, timeout=60))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == (f"box-a holds {LIMIT + 5:,} runs, more than the {LIMIT:,} this server sends in "
                                       "one answer (perfctl server --max-compare-runs): select fewer (a job, labels "
                                       "or a time range)")
    selected = pb.GetSamplesRequest(selection=pb.Selection(machine="box-a", all_history=True))
    with pytest.raises(grpc.RpcError) as also:
        list(served.query.GetSamples(selected, metadata=served.client_md, timeout=60))
    assert also.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_get_samples_streams_without_holding_the_runs(served):
    tail = 100_000
    _store_runs(served, "box-c", LIMIT, tail)  # 300 MB of payloads, within the limit
    before = served.high_water_kib()
    received = 0
    for sample in served.query.GetSamples(pb.GetSamplesRequest(machine="box-c"), metadata=served.client_md,
                                          timeout=120):
        received += len(sample.stderr_tail) == tail
    grown_mib = (served.high_water_kib() - before) / 1024
    assert received == LIMIT
    # the old server read every payload into a list first: its peak grew by 415 MiB here, twice that for twice the
    # runs. Now by ~150 MiB for 300 MB as for 600 MB: the reading connection's SQLite page cache (64 MiB,
    # storage.py), a chunk of runs and gRPC's send buffers
    assert grown_mib < 200, f"the server's peak resident set grew by {grown_mib:.0f} MiB"


@pytest.mark.skipif(postgres_reason() is not None, reason=str(postgres_reason()))
def test_paging_and_prefixes_on_postgresql():
    postgres = Postgres()
    try:
        storage = Storage(postgres.new_database())
        common = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=10).SerializeToString()
        with storage.engine.begin() as conn:  # 100,000 jobs made by the database itself: a spec as _job_rows'
            conn.execute(text(
                "INSERT INTO jobs (id, machine, spec, state, message, samples, submitted_ns, updated_ns, failed_runs) "
                "SELECT id, 'box-a', '\\x0a24'::bytea || convert_to(id, 'UTF8') || :common, 'done', '', 10, "
                ":base + k::bigint * 1000000000, :base + k::bigint * 1000000000, 0 "
                "FROM (SELECT k, md5(k::text)::uuid::text AS id FROM generate_series(0, :last) AS k) AS made"),
                {"common": common, "base": BASE_NS, "last": JOBS - 1})
            conn.execute(text("ANALYZE jobs"))
            newest = list(conn.execute(text("SELECT id FROM jobs ORDER BY submitted_ns DESC LIMIT 3000")).scalars())
            plan = "\n".join(conn.execute(text("EXPLAIN SELECT * FROM jobs WHERE id LIKE :p LIMIT 2"),
                                          {"p": "abcdef12%"}).scalars())
        assert "ix_jobs_id_pattern" in plan, plan
        seen, after = [], None
        for _ in range(3):
            page, token = listings.jobs_page(storage, "", 1000, after)
            seen += [j.job_id for j in page]
            after = listings.page_key(token, (int, str))
        assert seen == newest
        wanted = newest[777]
        assert [j.job_id for j in listings.jobs_named(storage, [], [wanted[:13]])] == [wanted]
        assert len(listings.jobs_named(storage, [], ["a"])) == listings.PREFIX_MATCHES
        storage.close()
    finally:
        postgres.stop()
