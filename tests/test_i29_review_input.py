"""Issue 29 review: a NUL character in any text a client sends is refused in one line on every database (it
reached PostgreSQL, which answered UNKNOWN with the SQL and logged a traceback per call), and job id prefixes
are bounded in what errors echo and taken in capitals."""

from __future__ import annotations

import base64
import json

import grpc
import pytest
from fleet import free_port, fresh, server_database_args, wait_for
from sqlalchemy import select
from test_server_ingest import _fields, _parent, _repeated, _set

from perfctl.server.decode import Decoded, decode_batch
from perfctl.server.schema import jobs
from perfctl.server.storage import Storage
from perfctl.server.storage_errors import refused_value
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

NUL = "a\x00b"


def _token(*key) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


@pytest.fixture
def served(database_url, fleet):
    address = f"127.0.0.1:{free_port()}"
    fleet.agent_token("box")
    fleet.start_server(address, server_database_args(database_url))
    channel = grpc.insecure_channel(address)
    query, agent = rpc.QueryServiceStub(channel), rpc.AgentServiceStub(channel)
    md = (("authorization", f"Bearer {open(fleet.client_token).read().strip()}"),)

    def answers():
        try:
            return query.ListMachines(pb.ListMachinesRequest(), metadata=md, timeout=5)
        except grpc.RpcError:
            return None
    try:
        wait_for(answers, 60, "the server to answer")
        agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(name="box", machine_id="m" * 32,
                                                                 inventory_json="{}")),
                       metadata=(("authorization", f"Bearer {open(fleet.agent_token('box')).read().strip()}"),))
        yield fleet, address, query, md
    finally:
        channel.close()


NUL_CALLS = [
    ("GetJobs", pb.GetJobsRequest(machine=NUL), "machine: holds a NUL character"),
    ("GetJobs", pb.GetJobsRequest(id_prefixes=["ab", "ab\x00"]), "id_prefixes[1]: holds a NUL character"),
    ("ListBenchmarks", pb.ListBenchmarksRequest(machine=NUL), "machine: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(machine=NUL), "machine: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(machine="box", benchmark=NUL), "benchmark: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(selection=pb.Selection(machine="box", labels={"k": NUL})),
     "selection.labels['k']: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(selection=pb.Selection(machine="box", labels={NUL: "v"})),
     "selection.labels (a key): holds a NUL character"),
    ("GetAudits", pb.GetAuditsRequest(machine=NUL), "machine: holds a NUL character"),
    ("ListAudits", pb.ListAuditsRequest(machine=NUL), "machine: holds a NUL character"),
    ("RetireMachine", pb.RetireMachineRequest(name=NUL), "name: holds a NUL character"),
    ("SubmitJob", pb.SubmitJobRequest(machines=["box"], job=pb.Job(commands=[pb.Command(name="t", argv=[
        "/bin/true", NUL])], repetitions=1)), "job.commands[0].argv[1]: holds a NUL character"),
    ("GetJobs", pb.GetJobsRequest(page_token=_token(0, "\x00")), "page_token: not one this server gave"),
    ("ListMachines", pb.ListMachinesRequest(page_token=_token("\x00")), "page_token: not one this server gave"),
]


def test_a_nul_in_any_text_of_a_request_is_refused_in_one_line(served):
    """Before: PostgreSQL answered UNKNOWN "Unexpected <class 'sqlalchemy.exc.DataError'> ... [SQL: SELECT"
    and logged a traceback per call; SQLite took the value."""
    fleet, _, query, md = served
    for name, request, details in NUL_CALLS:
        with pytest.raises(grpc.RpcError) as refused:
            answer = getattr(query, name)(request, metadata=md, timeout=30)
            if name == "GetSamples":
                list(answer)
        assert (refused.value.code(), refused.value.details().split(" (")[0] if "page_token" in details
                else refused.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, details), name
    log = fleet.log("server")
    assert "Traceback" not in log and "SELECT" not in log and "DataError" not in log, log[-3000:]


def test_a_value_the_database_refuses_is_one_line_without_the_sql(postgres):
    """The net under the checks (server/outage.py): the driver's DataError told apart, its first line kept."""
    storage = Storage(postgres.new_database())
    try:
        with pytest.raises(Exception) as raised, storage.engine.connect() as conn:
            conn.execute(select(jobs).where(jobs.c.machine == NUL)).all()
        line = refused_value(raised.value)
        assert line is not None and "\n" not in line and "SELECT" not in line and "NUL" in line, line
        assert refused_value(ValueError("x")) is None
    finally:
        storage.engine.dispose()


def test_a_streamed_sample_with_a_nul_in_any_text_is_refused(measured):  # noqa: F811 -- the fixture
    """Every string field of a Sample (maps' keys and values too), as StreamSamples decodes it, but
    stderr_tail: the benchmark's own last line of stderr, which may hold NUL; it is kept only inside the
    run's stored message (no text column holds it), and refusing it would lose the run."""
    good = fresh(measured[0])
    assert isinstance(decode_batch(pb.SampleBatch(sequence=1, samples=[good]).SerializeToString()), Decoded)
    accepted, checked = [], 0
    for path, field in _fields(pb.Sample.DESCRIPTOR):
        if path == "stderr_tail":
            continue
        if path.endswith("{}"):
            entries = ({NUL: "v"}, {"k": NUL})
        elif field.type == field.TYPE_STRING:
            entries = (None,)
        else:
            continue
        for entry in entries:
            sample = fresh(good)
            if entry is not None:
                getattr(sample, path[:-2]).update(entry)
            elif _repeated(field) and not path.endswith("]"):
                getattr(_parent(sample, path), path.rsplit(".", 1)[-1]).append(NUL)
            else:
                _set(sample, path, NUL)
            checked += 1
            if isinstance(decode_batch(pb.SampleBatch(sequence=1, samples=[sample]).SerializeToString()), Decoded):
                accepted.append(path)
    assert checked > 10 and accepted == [], accepted


def test_job_prefixes_in_capitals_find_the_job_and_errors_echo_a_bounded_prefix(served):
    """Before: `perfctl jobs C71619BE` found nothing, and a 10 KB prefix came back whole in the error line."""
    fleet, address, query, md = served
    job_id = query.SubmitJob(pb.SubmitJobRequest(machines=["box"], job=pb.Job(commands=[pb.Command(
        name="t", argv=["/bin/true"])], repetitions=1)), metadata=md, timeout=30).job_ids[0]
    for wanted in (job_id[:8].upper(), job_id.upper()):
        done = fleet.client("jobs", wanted, "--json", server=address)
        assert done.returncode == 0, done.stderr
        assert [j["job_id"] for j in json.loads(done.stdout)] == [job_id]
    long = fleet.client("jobs", "f" * 10_000, server=address)
    assert long.returncode == 2 and long.stderr.count("\n") == 1, long.stderr[:300]
    assert long.stderr.strip() == f"perfctl jobs: no job on the server has an id starting with {'f' * 64!r}..."
