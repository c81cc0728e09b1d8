"""The server against a hostile or broken peer (issue 11): a real `perfctl server` on loopback, real SQLite,
RPCs made directly with grpc stubs and tokens. Each test reproduces one finding of the review."""

import asyncio
import json
import math
import sqlite3
import subprocess
import threading
import time
import uuid

import grpc
import pytest
from conftest import measure
from fleet import Fleet, free_port, perfctl_command, wait_for
from google.protobuf.descriptor import FieldDescriptor

from perfctl import results, wire
from perfctl.pairing import Compared
from perfctl.server.auth import Tokens
from perfctl.server.decode import Decoded, decode_batch
from perfctl.server.storage import Storage, database_url
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

# --- a server shared by the tests that only make calls ---

class Server:
    def __init__(self, fleet: Fleet, address: str):
        self.fleet, self.address = fleet, address
        self.channel = grpc.insecure_channel(address)
        self.query, self.agent = rpc.QueryServiceStub(self.channel), rpc.AgentServiceStub(self.channel)
        self.client_md = self.metadata(fleet.client_token)

    @staticmethod
    def metadata(token_file: str) -> tuple:
        return (("authorization", f"Bearer {open(token_file).read().strip()}"),)

    def agent_md(self, name: str) -> tuple:
        return self.metadata(self.fleet.agent_token(name))

    def register(self, name: str) -> None:
        self.agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(name=name, machine_id="m" * 32,
                                                                      inventory_json="{}")),
                            metadata=self.agent_md(name))

    def send(self, name: str, *samples: pb.Sample, sequence: int = 1) -> list[pb.Ack]:
        return list(self.agent.StreamSamples(iter([pb.SampleBatch(sequence=sequence, samples=samples)]),
                                             metadata=self.agent_md(name)))

    def db(self) -> str:
        return database_url(str(self.fleet.dir / "data"), None)


def start_server(fleet: Fleet, extra: list[str] = ()) -> Server:
    address = f"127.0.0.1:{free_port()}"
    for name in ("box-a", "box-b", "box-c"):
        fleet.agent_token(name)  # tokens before the server reads the file
    fleet.start_server(address, ["--data-dir", str(fleet.dir / "data")], list(extra))
    server = Server(fleet, address)
    wait_for(lambda: _ok(lambda: server.query.ListMachines(pb.ListMachinesRequest(), metadata=server.client_md,
                                                           timeout=5)), 60, "the server to answer")
    return server


def _ok(call) -> bool:
    try:
        call()
        return True
    except grpc.RpcError:
        return False


def _error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    fleet = Fleet(tmp_path_factory.mktemp("hardening"))
    try:
        running = start_server(fleet)
        running.register("box-a")
        running.register("box-b")
        yield running
    finally:
        fleet.stop_all()


@pytest.fixture(scope="module")
def measured():
    """Real samples of /bin/true (page-faults, task-clock)."""
    return [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["page-faults", "task-clock"], runs=6)]


def fresh(sample: pb.Sample) -> pb.Sample:
    """A copy with a new uuid, so it is stored as a new run."""
    copy = pb.Sample()
    copy.CopyFrom(sample)
    copy.uuid = str(uuid.uuid4())
    return copy


# --- finding 1: a stored sample compare cannot use ---

def test_an_ok_reading_without_a_value_is_refused_at_ingest(server, measured):
    broken = fresh(measured[0])
    assert broken.readings[0].status == "ok"
    broken.readings[0].ClearField("value")
    error = _error(lambda: server.send("box-a", broken))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "readings[0].value is missing (status ok)" in error.details()


def test_compare_skips_a_stored_sample_it_cannot_use_and_says_so(server, measured):
    for name in ("box-a", "box-b"):
        acks = server.send(name, *(fresh(s) for s in measured))
        assert acks[0].stored == len(measured)
    # As an older server would have stored it: straight into the database, past validation.
    bad = fresh(measured[0])
    bad.readings[0].ClearField("value")
    garbled = fresh(measured[1])
    storage = Storage(server.db())
    try:
        storage.ingest("box-a", [bad, garbled])
    finally:
        storage.close()
    with sqlite3.connect(str(server.fleet.dir / "data" / "perfctl.db")) as conn:
        # compare reads the values stored beside the payload (migration 0004): garble those
        conn.execute("UPDATE samples SET vals = ? WHERE uuid = ?", (b"\xff\xff\xff", garbled.uuid))
    response = server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a", all_history=True),
                                                      b=pb.Selection(machine="box-b", all_history=True),
                                                      metrics=["page-faults"]), metadata=server.client_md)
    result = results.loads(response.comparison_json, Compared)
    assert any("2 stored samples of machine box-a could not be used and were skipped" in n for n in result.notes), \
        result.notes
    assert result.comparison.benchmarks[0].benchmark == "true"  # the comparison itself went ahead


# --- finding 8: every field an agent or client sends is bounded ---

MEGABYTE = "x" * (1 << 20)


def _set(sample: pb.Sample, path: str, value) -> None:
    """Set a field by dotted path (readings[0].value); a repeated string field gets ``value`` appended."""
    target = sample
    *parents, last = path.split(".")
    for part in parents:
        name, _, index = part.partition("[")
        target = getattr(target, name)
        if index:
            target = target[int(index[:-1])]
    if last.endswith("]"):
        name, _, index = last.partition("[")
        getattr(target, name)[int(index[:-1])] = value
    else:
        setattr(target, last, value)


BROKEN_SAMPLE_FIELDS = [
    ("readings[0].corrected", math.nan, "readings[0].corrected must be finite"),
    ("readings[0].corrected", -math.inf, "readings[0].corrected must be finite"),
    ("readings[0].scaled", math.inf, "readings[0].scaled must be finite"),
    ("readings[0].scaled", -1.0, "readings[0].scaled must be >= 0"),
    ("readings[0].time_enabled", -1, "readings[0].time_enabled is negative"),
    ("readings[0].time_running", -1, "readings[0].time_running is negative"),
    ("readings[0].value", -1, "readings[0].value is negative"),
    ("readings[0].source", MEGABYTE, "readings[0].source longer than"),
    ("readings[0].correction_model", MEGABYTE, "readings[0].correction_model longer than"),
    ("readings[0].audit_id", MEGABYTE, "readings[0].audit_id is not a UUID"),
    ("readings[0].reason", MEGABYTE, "readings[0].reason longer than"),
    ("readings[0].backend", "perf_event\x1b[2J", "readings[0].backend has control"),
    ("readings[0].unit", "count\n", "readings[0].unit has control"),
    ("readings[0].source", "a\x00b", "readings[0].source has control"),
    ("readings[0].event", "cycles\n", "readings[0].event is not an event name"),
    ("max_rss_kib", -1, "max_rss_kib is negative"),
    ("exit_status", -1, "exit_status must be 0-255"),
    ("signal", -9, "signal must be 1-64"),
    ("wall_ns", -1, "wall_ns is negative"),
    ("start_time_ns", -1, "start_time_ns is negative"),
    ("benchmark.name", "true\x1b]0;owned\x07", "benchmark.name has control"),
    ("benchmark.name", "a\nb", "benchmark.name has control"),
    ("benchmark.executable", "/bin/true\x00", "benchmark.executable has control"),
    ("benchmark.argv[0]", "/bin/true\x1b[31m", "benchmark.argv[0] has control"),
    ("environment.user", "nobody\r", "environment.user has control"),
    ("environment.cwd", MEGABYTE, "environment.cwd longer than"),
    ("environment.pinned_cpu", -1, "environment.pinned_cpu must be"),
    ("machine_id", "m\x1b", "machine_id has control"),
    ("job_id", "not-a-uuid", "job_id is not a UUID"),
]


@pytest.mark.parametrize("path, value, message", BROKEN_SAMPLE_FIELDS,
                         ids=[f"{p}={v!r:.12}" for p, v, _ in BROKEN_SAMPLE_FIELDS])
def test_a_sample_with_one_broken_field_is_refused_naming_it(server, measured, path, value, message):
    broken = fresh(measured[0])
    _set(broken, path, value)
    error = _error(lambda: server.send("box-b", broken, sequence=11))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.details() and "batch 11 sample 0" in error.details()


def _fields(descriptor, prefix=""):
    """(dotted path, field descriptor) of every scalar field of a message, nested messages walked."""
    for field in descriptor.fields:
        path = f"{prefix}{field.name}"
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            yield f"{path}{{}}", field  # a map: its key and its value are each checked (the test's loop)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            yield from _fields(field.message_type, f"{path}[0]." if _repeated(field) else f"{path}.")
        else:
            yield path, field


def _repeated(field) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 6 drops .label
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


NUMBER_TYPES = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
                FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def test_every_field_of_a_sample_is_bounded(measured):
    """Walks the Sample descriptor: a field added to the proto without a bound in server/validation.py
    fails here. Each string takes a 1 MB value, each signed number -1 (no number of a run is negative; a
    corrected count may be, so doubles take NaN as well), each unsigned one 2^32 - 1, each must be refused.
    Booleans have nothing to bound."""
    good = fresh(measured[0])
    assert isinstance(decode_batch(pb.SampleBatch(samples=[good]).SerializeToString()), Decoded)  # the base is accepted
    accepted, checked = [], 0
    for path, field in _fields(pb.Sample.DESCRIPTOR):
        if field.type == FieldDescriptor.TYPE_BOOL:
            continue
        if path.endswith("{}"):  # a map of strings (labels): a 1 MB key, then a 1 MB value
            for entry in ({MEGABYTE: "v"}, {"k": MEGABYTE}):
                sample = fresh(good)
                getattr(sample, path[:-2]).update(entry)
                checked += 1
                if isinstance(decode_batch(pb.SampleBatch(sequence=1, samples=[sample]).SerializeToString()), Decoded):
                    accepted.append(f"{path}={str(entry)[:12]}")
            continue
        if field.type == FieldDescriptor.TYPE_STRING:
            values = [MEGABYTE]
        elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            values = [math.nan, math.inf]
        elif field.type in NUMBER_TYPES and field.type not in (FieldDescriptor.TYPE_UINT32,
                                                               FieldDescriptor.TYPE_UINT64):
            values = [-1]
        elif field.type == FieldDescriptor.TYPE_UINT32:  # no count of one run comes near 2^32
            values = [(1 << 32) - 1]
        else:
            raise AssertionError(f"{path}: field type {field.type} has no test value; add one")
        for value in values:
            sample = fresh(good)
            if _repeated(field) and not path.endswith("]"):
                getattr(_parent(sample, path), path.rsplit(".", 1)[-1]).append(value)
            else:
                _set(sample, path, value)
            result = decode_batch(pb.SampleBatch(sequence=1, samples=[sample]).SerializeToString())
            checked += 1
            if isinstance(result, Decoded):
                accepted.append(f"{path}={value!r:.12}")
    assert checked > 30
    assert accepted == [], f"accepted without a bound: {accepted}"


def _parent(sample, path):
    target = sample
    for part in path.split(".")[:-1]:
        name, _, index = part.partition("[")
        target = getattr(target, name)
        if index:
            target = target[int(index[:-1])]
    return target


BROKEN_MACHINES = [
    ({"machine_id": MEGABYTE}, "machine_id longer than"),
    ({"agent_version": "1.0\x1b[1m"}, "agent_version has control"),
    ({"inventory_json": "[1, 2]"}, "inventory_json is not a JSON object"),
    ({"inventory_json": "{"}, "inventory_json is not JSON"),
    ({"backends": ["perf_event", "x" * 100]}, "backends[1] longer than"),
    ({"backends": ["perf\nevent"]}, "backends[0] has control"),
]


@pytest.mark.parametrize("fields, message", BROKEN_MACHINES, ids=[m for _, m in BROKEN_MACHINES])
def test_register_refuses_a_broken_machine_info(server, fields, message):
    info = pb.MachineInfo(**{"name": "box-c", "machine_id": "m" * 32, "inventory_json": "{}", **fields})
    error = _error(lambda: server.agent.Register(pb.RegisterRequest(machine=info), metadata=server.agent_md("box-c")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


def test_register_refuses_broken_event_support(server):
    for entry, message in ((pb.EventSupport(event="x" * 300), "events[0].event longer than 256"),
                           (pb.EventSupport(event="cycles\n"), "events[0].event has control"),
                           (pb.EventSupport(event="cycles", reason="no\x1b[2J"), "events[0].reason has control")):
        info = pb.MachineInfo(name="box-c", events=[entry])
        error = _error(lambda info=info: server.agent.Register(pb.RegisterRequest(machine=info),
                                                               metadata=server.agent_md("box-c")))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


def test_heartbeat_job_reports_and_audits_are_bounded(server):
    md = server.agent_md("box-a")
    for request, message in ((pb.HeartbeatRequest(state=MEGABYTE), "state"),
                             (pb.HeartbeatRequest(state="idle", job_id="x"), "job_id is not a UUID")):
        error = _error(lambda request=request: server.agent.Heartbeat(request, metadata=md))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()
    server.agent.Heartbeat(pb.HeartbeatRequest(state="running", job_id=str(uuid.uuid4())), metadata=md)
    error = _error(lambda: server.agent.ReportJob(pb.JobReport(job_id="x" * 36, state="done"), metadata=md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "job_id is not a UUID" in error.details()
    audit_id = str(uuid.uuid4())
    report = f'{{"verdict": "trusted", "time_ns": {1 << 64}, "audit_id": "{audit_id}"}}'
    error = _error(lambda: server.agent.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report),
                                                    metadata=md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "time_ns" in error.details()


def test_a_job_message_is_stored_without_control_characters(server):
    job = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=1)
    job_id = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                    metadata=server.client_md).job_ids[0]
    server.agent.ReportJob(pb.JobReport(job_id=job_id, state="failed", message="exit 1: \x1b[31mred\x1b[0m\nnext"
                                        + "y" * 2000), metadata=server.agent_md("box-a"))
    stored = next(j for j in server.query.GetJobs(pb.GetJobsRequest(machine="box-a"), metadata=server.client_md).jobs
                  if j.job_id == job_id)
    assert stored.message.startswith("exit 1: \ufffd[31mred\ufffd[0m\nnext") and len(stored.message) == 1000


def test_a_submitted_job_with_control_characters_is_refused(server):
    for command, message in ((pb.Command(name="t\x1b[2J", argv=["/bin/true"]), "commands[0].name has control"),
                             (pb.Command(name="t", argv=["/bin/true", "\x00"]), "argv[1]: holds a NUL character")):
        job = pb.Job(commands=[command], repetitions=1)
        error = _error(lambda job=job: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                              metadata=server.client_md))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


# --- finding 10: a sequence number beyond 64 bits ---

def _raw_stream(server, name: str, *batches: bytes) -> list[pb.Ack]:
    """StreamSamples with hand-made bytes: the handler takes each batch as raw bytes (server/service.py)."""
    call = server.channel.stream_stream("/perfctl.v1.AgentService/StreamSamples", request_serializer=None,
                                        response_deserializer=pb.Ack.FromString)
    return list(call(iter(batches), metadata=server.agent_md(name), timeout=30))


def test_a_sequence_number_beyond_64_bits_is_refused(server):
    largest = b"\x08" + b"\xff" * 9 + b"\x01"  # 2**64 - 1: ten bytes, the tenth holds bit 63
    assert [a.sequence for a in _raw_stream(server, "box-a", largest)] == [2**64 - 1]
    for too_big in (b"\x08" + b"\xff" * 9 + b"\x7f", b"\x08" + b"\xff" * 9 + b"\x02"):
        error = _error(lambda too_big=too_big: _raw_stream(server, "box-a", too_big))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "malformed batch: varint exceeds 64 bits"
    error = _error(lambda: _raw_stream(server, "box-a", b"\x08" + b"\xff" * 10 + b"\x01"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed batch" in error.details()


# --- finding 5: one agent's unknown machine must not fail other agents' batches (the group commit's own
# case is in tests/test_server_ingest.py) ---

def test_an_unregistered_agent_does_not_fail_another_agent_s_streams(server, measured):
    """box-c has a token but never registered; its streams fail while box-a streams 60 batches."""
    failures, stop = [], threading.Event()

    def unregistered():
        while not stop.is_set():
            try:
                server.send("box-c", fresh(measured[0]))
                failures.append("accepted")
            except grpc.RpcError as err:
                failures.append((err.code(), err.details()))

    threads = [threading.Thread(target=unregistered) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        batches = [pb.SampleBatch(sequence=n, samples=[fresh(measured[n % len(measured)])]) for n in range(60)]
        acks = list(server.agent.StreamSamples(iter(batches), metadata=server.agent_md("box-a"), timeout=60))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert [(a.sequence, a.stored) for a in acks] == [(n, 1) for n in range(60)]
    assert failures and all(f == (grpc.StatusCode.FAILED_PRECONDITION,
                                  "unknown machine 'box-c': it must register first") for f in failures)


def test_a_compare_that_hits_a_bug_ends_in_one_line_not_unknown(tmp_path, measured, monkeypatch, caplog):
    """Whatever breaks inside Compare, the client gets exit code 2 and one line, the server log the
    traceback. The bug is injected (a renderer that divides by zero stands in for one nobody knows yet):
    the real ones found so far are fixed, and each has its own test."""
    from perfctl.server import service as service_module
    from perfctl.server.jobs import JobHub, JobKeeper
    from perfctl.server.service import QueryService

    storage = Storage(database_url(str(tmp_path), None))
    try:
        for name in ("box-a", "box-b"):
            storage.register(pb.MachineInfo(name=name, machine_id="m" * 16, inventory_json="{}"), time.time_ns())
            storage.ingest(name, [fresh(s) for s in measured])
        service = QueryService(storage, Tokens({}), JobKeeper(storage, JobHub()))
        service._principal = _anyone
        request = pb.CompareRequest(a=pb.Selection(machine="box-a"), b=pb.Selection(machine="box-b"))
        assert asyncio.run(service.Compare(request, _Context())).comparison_json  # works without the bug

        def broken(*args, **kwargs):
            return 1 / 0

        monkeypatch.setattr(service_module, "compared", broken)
        context = _Context()
        with caplog.at_level("ERROR", logger="perfctl.server"), pytest.raises(_Aborted):
            asyncio.run(service.Compare(request, context))
    finally:
        storage.close()
    code, details = context.aborted
    assert code == grpc.StatusCode.INTERNAL and len(details.splitlines()) == 1, details
    assert details.startswith("internal error on the server: ZeroDivisionError")
    assert "compare box-a box-b failed" in caplog.text and "ZeroDivisionError" in caplog.text


class _Aborted(Exception):
    pass


class _Context:
    """The part of grpc.aio's ServicerContext that Compare uses: abort raises, as gRPC's does."""

    aborted = None

    async def abort(self, code, details):
        self.aborted = (code, details)
        raise _Aborted(details)


async def _anyone(context, role):
    return None


# --- second review, finding 1: one machine cannot suppress another's samples ---

def _register_new_agent(server, name: str) -> None:
    """An agent whose token is added while the server runs (it re-reads the tokens file within a second)."""
    server.fleet.agent_token(name)
    wait_for(lambda: _ok(lambda: server.register(name)), 10, f"the token of {name}")


def test_an_agent_cannot_suppress_another_machine_s_samples_by_storing_their_uuids_first(server, measured):
    from perfctl.wire import JOB_UUID_NAMESPACE

    _register_new_agent(server, "evil")
    job = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=len(measured))
    job_id = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                    metadata=server.client_md).job_ids[0]
    predicted = [str(uuid.uuid5(JOB_UUID_NAMESPACE, f"{job_id}/{k}")) for k in range(len(measured))]

    def run(k: int, with_job: bool) -> pb.Sample:
        sample = fresh(measured[k])
        sample.uuid = predicted[k]
        if with_job:
            sample.job_id = job_id
        return sample

    # naming box-a's job is refused outright; without it, evil's samples are evil's own
    error = _error(lambda: server.send("evil", *(run(k, True) for k in range(len(measured))), sequence=7))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and wire.refused_batch(error) == 7  # the agent's reading
    assert error.details() == f"batch 7 sample 0 ({predicted[0]}): job_id {job_id} is not a job of machine evil"
    assert server.send("evil", *(run(k, False) for k in range(len(measured))))[0].stored == len(measured)
    # box-a's real runs are stored all the same, and box-a's own re-send is a duplicate
    acks = server.send("box-a", *(run(k, True) for k in range(len(measured))))
    assert (acks[0].stored, acks[0].duplicates) == (len(measured), 0)
    acks = server.send("box-a", *(run(k, True) for k in range(len(measured))))
    assert (acks[0].stored, acks[0].duplicates) == (0, len(measured))
    with sqlite3.connect(str(server.fleet.dir / "data" / "perfctl.db")) as conn:
        rows = conn.execute("SELECT machines.name, samples.uuid FROM samples JOIN machines ON machines.id = "
                            "samples.machine ORDER BY samples.id").fetchall()
    assert [row for row in rows if row[1] in predicted] == [("evil", u) for u in predicted] + \
        [("box-a", u) for u in predicted]


def test_a_sample_naming_an_unknown_job_is_refused(server, measured):
    sample = fresh(measured[0])
    sample.job_id = str(uuid.uuid4())
    error = _error(lambda: server.send("box-b", fresh(measured[1]), sample, sequence=3))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and wire.refused_batch(error) == 3
    assert error.details() == f"batch 3 sample 1 ({sample.uuid}): job_id {sample.job_id} is not a job of machine box-b"


# --- second review, findings 2 and 3: the JSON documents agents send (inventory, audit report) ---

def _audit(**changes) -> str:
    """An audit report shaped as agent/audit.py run_audit writes it (json.dumps: a kernel without runs has
    the CV NaN), with ``changes`` applied."""
    report = {
        "audit_id": str(uuid.uuid4()), "machine_id": "0035969ec53f6e7f", "hostname": "box-a", "time_ns": time.time_ns(),
        "seconds": 12.5, "kernel": "6.1.0-13-amd64", "microcode": "0x1000065",
        "aslr": "system randomize_va_space=2; perfctl turns it off for every run (personality)",
        "verdict": "trusted", "reasons": [], "complete": True, "not_checked": [], "backends": ["perf_event", "dbi"],
        "fit": {"a": 1.02, "b": 7.5, "intercept": 0.1, "a_interval": [0.9, 1.1], "b_interval": [6.0, 9.0],
                "intercept_interval": [-0.3, 0.4], "residual_scale": 0.2, "n": 10, "confidence": 0.95,
                "set_aside": 0, "method": "least squares"},
        "erratum": {"vendor": "AuthenticAMD", "family": 25, "models": None, "k_fldcw": 0.0, "note": "none known",
                    "source": "-"},
        "kernels": [{"kernel": "loop N=1000000", "backend": "perf_event", "expected": 2000004, "runs": 5,
                     "cv": 1e-6, "median_excess": 40, "page_faults": 1, "interrupts": 0},
                    {"kernel": "loop N=1000000", "backend": "dbi", "expected": 2000004, "runs": 1, "cv": math.nan,
                     "exact": True}],
        "checks": [{"item": "governor", "value": "performance", "meaning": "steady clock", "fix": None, "ok": True}],
        "runs": 5,
    }
    report.update(changes)
    return json.dumps(report)


def _report_audit(server, name: str, report_json: str):
    audit_id = report_json.split('"audit_id": "', 1)[1][:36]  # not parsed: some of these break json.loads
    return server.agent.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report_json),
                                    metadata=server.agent_md(name))


def _register_inventory(server, name: str, inventory_json: str):
    return server.agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(name=name, machine_id="m" * 32,
                                                                           inventory_json=inventory_json)),
                                 metadata=server.agent_md(name))


DEEP = 30_000  # json.loads raises RecursionError, not ValueError, long before this


def test_deeply_nested_json_documents_are_invalid_argument_not_unknown(server):
    for nested in ('{"cpu": ' + "[" * DEEP + "]" * DEEP + "}", '{"x": ' + "[" * 40 + "]" * 40 + "}"):
        error = _error(lambda nested=nested: _register_inventory(server, "box-c", nested))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "inventory_json is nested deeper than 32 levels"
    report = json.loads(_audit())
    report["kernels"] = "KERNELS"
    for depth in (DEEP, 40):
        text = json.dumps(report).replace('"KERNELS"', "[" * depth + "]" * depth)
        error = _error(lambda text=text: _report_audit(server, "box-a", text))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "audit report is nested deeper than 32 levels"


def test_nan_and_infinity_in_json_documents_are_refused(server):
    for inventory, where in (('{"cpu": {"family": NaN}}', "NaN at cpu.family"), ('{"x": [1, -Infinity]}',
                                                                                  "-Infinity at x[1]")):
        error = _error(lambda inventory=inventory: _register_inventory(server, "box-c", inventory))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == f"inventory_json: {where} is not JSON"
    error = _error(lambda: _report_audit(server, "box-a", _audit(seconds=math.inf)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "audit report: Infinity at seconds is not JSON"
    # numbers JSON can write but floats cannot hold: 1e400 parses as inf, a 400-digit integer overflows
    error = _error(lambda: _register_inventory(server, "box-c", '{"x": 1, "cpu": {"flags": [1e400]}}'))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "inventory_json: a number at cpu.flags[0] is beyond +-2^64")
    huge = _audit().replace('"seconds": 12.5', '"seconds": ' + "9" * 400)
    error = _error(lambda: _report_audit(server, "box-a", huge))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "audit report: a number at seconds is beyond +-2^64")
    # the one NaN agent/audit.py writes (the CV of a kernel without 2 runs) is kept, as null
    report = _audit()
    _report_audit(server, "box-a", report)
    audit_id = json.loads(report, parse_constant=lambda c: None)["audit_id"]
    stored = next(a for a in server.query.GetAudits(pb.GetAuditsRequest(machine="box-a"),
                                                    metadata=server.client_md).audits if a.audit_id == audit_id)
    assert json.loads(stored.report_json, parse_constant=lambda c: pytest.fail(f"{c} stored"))["kernels"][1]["cv"] \
        is None


BROKEN_INVENTORIES = [
    ({"cpu": 5, "kernel": "x", "pmu": [1]}, "cpu is not an object"),
    ({"kernel": "x"}, "kernel is not an object"),
    ({"pmu": [1]}, "pmu is not an object"),
    ({"pmu": {"present": "yes"}}, "pmu.present is not true or false"),
    ({"pmu": {"present": False, "reason": 3}}, "pmu.reason is not a string"),
    ({"cpu": {"vendor": ["x"]}}, "cpu.vendor is not a string"),
    ({"cpu": {"family": "6"}}, "cpu.family is not an integer"),
    ({"cpu": {"family": True}}, "cpu.family is not an integer"),
    ({"kernel": {"release": "6.1\x1b[2J"}}, "kernel.release has control"),
    ({"governors": "performance"}, "governors is not a list"),
    ({"hostname": "a\u202eb"}, "hostname has control or non-printable"),
]


@pytest.mark.parametrize("inventory, message", BROKEN_INVENTORIES, ids=[m for _, m in BROKEN_INVENTORIES])
def test_an_inventory_of_the_wrong_shape_is_refused_at_register(server, inventory, message):
    error = _error(lambda: _register_inventory(server, "box-c", json.dumps(inventory)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("inventory_json: ") and message in error.details()


BROKEN_AUDITS = [
    ({"kernels": 5}, "kernels is not a list"),
    ({"kernels": [5]}, "kernels[0] is not an object"),
    ({"kernels": [{"kernel": "k\x1b[31m", "backend": "dbi", "expected": 1}]}, "kernels[0].kernel has control"),
    ({"kernels": [{"kernel": "k", "backend": "dbi"}]}, "kernels[0] lacks a kernel name, a backend or an expected"),
    ({"kernels": [{"kernel": "k", "backend": "dbi", "expected": "many"}]}, "kernels[0].expected is not a finite"),
    ({"fit": {"a": 1}}, "fit.a or fit.a_interval"),
    ({"fit": 5}, "fit is not an object"),
    ({"fit": {"a": 1, "b": 1, "a_interval": [1], "b_interval": [1, 2]}}, "fit.a_interval is not a pair"),
    ({"fit": {"a": 1, "b": 1, "a_interval": [1, "2"], "b_interval": [1, 2]}}, "fit.a_interval[1] is not a finite"),
    ({"checks": 5}, "checks is not a list"),
    ({"checks": [{"item": "governor", "ok": "no"}]}, "checks[0].ok is not true or false"),
    ({"reasons": ["fine\x1b]0;owned\x07"]}, "reasons[0] has control"),
    ({"kernel": 6}, "kernel is not a string"),
]


@pytest.mark.parametrize("changes, message", BROKEN_AUDITS, ids=[m for _, m in BROKEN_AUDITS])
def test_an_audit_report_of_the_wrong_shape_is_refused(server, changes, message):
    error = _error(lambda: _report_audit(server, "box-b", _audit(**changes)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("audit report: ") and message in error.details()


def test_a_real_inventory_and_a_full_audit_are_accepted_and_render(server):
    from perfctl.agent import inventory

    _register_inventory(server, "box-a", json.dumps(inventory.collect().to_dict()))
    _report_audit(server, "box-a", _audit())
    for command in (("machines",), ("machines", "--json"), ("audit", "report"), ("audit", "report", "--json")):
        result = server.fleet.client(*command, server=server.address)
        assert result.returncode == 0, (command, result.stderr)
        assert "NaN" not in result.stdout and "Traceback" not in result.stderr


# --- second review, finding 7: a precision whose square underflows ---

@pytest.mark.parametrize("precision", [1e-160, 1e-300])
def test_compare_refuses_a_precision_out_of_range_in_one_line(server, measured, precision):
    for name in ("box-a", "box-b"):
        server.send(name, *(fresh(s) for s in measured))
    error = _error(lambda: server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a"),
                                                                  b=pb.Selection(machine="box-b"), precision=precision),
                                                metadata=server.client_md))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               f"precision: must be between 1e-06 and 1, got {precision}")


@pytest.mark.parametrize("option, value, message", [
    ("--precision", "1e-300", "precision: must be between 1e-06 and 1, got 1e-300"),
    ("--proportion", "1e-300", "proportion: must be between 1e-06 and 0.999999, got 1e-300"),
])
def test_local_compare_refuses_a_parameter_out_of_range_in_one_line(tmp_path, option, value, message):
    samples = tmp_path / "a.jsonl"
    measured = subprocess.run(perfctl_command("stat", "-r", "3", "-e", "task-clock", "-o", str(samples), "--",
                                              "/bin/true"), capture_output=True, text=True, timeout=60)
    assert measured.returncode == 0, measured.stderr
    result = subprocess.run(perfctl_command("compare", str(samples), str(samples), option, value),
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr.strip()) == (2, f"perfctl compare: {message}")


# --- second review, finding 8 ---

def test_a_sample_that_repeats_a_reading_is_refused(server, measured):
    sample = fresh(measured[0])
    sample.readings.add().CopyFrom(sample.readings[0])
    error = _error(lambda: server.send("box-b", sample, sequence=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    last = len(sample.readings) - 1
    assert error.details() == f"batch 5 sample 0 ({sample.uuid}): readings[{last}] repeats event/backend/scope " \
                              "of readings[0]"
    other_scope = fresh(measured[0])
    other_scope.readings.add().CopyFrom(other_scope.readings[0])
    other_scope.readings[-1].scope = "kernel" if other_scope.readings[0].scope != "kernel" else "user"
    assert server.send("box-b", other_scope)[0].stored == 1  # the same event in another scope is another count


def test_a_job_moves_only_forward_and_reports_at_most_its_runs(server):
    job = pb.Job(commands=[pb.Command(name="a", argv=["/bin/true"]), pb.Command(name="b", argv=["/bin/true"])],
                 repetitions=3, warmups=1)
    job_id = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                    metadata=server.client_md).job_ids[0]
    md = server.agent_md("box-a")

    def report(state: str, samples: int = 0):
        return server.agent.ReportJob(pb.JobReport(job_id=job_id, state=state, samples=samples), metadata=md)

    def stored():
        j = next(j for j in server.query.GetJobs(pb.GetJobsRequest(machine="box-a"), metadata=server.client_md).jobs
                 if j.job_id == job_id)
        return j.state, j.samples

    report("running", 2)
    error = _error(lambda: report("running", 4294967295))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == f"job {job_id}: 4294967295 samples reported, the job has 8 runs"
    report("failed", 8)
    assert stored() == ("failed", 8)
    report("failed", 8)  # an agent re-sending its last report after a reconnect: accepted, nothing changes
    for state in ("running", "done", "refused"):
        error = _error(lambda state=state: report(state, 1))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == f"job {job_id} is failed: it cannot become {state} (a job moves only forward: " \
                                  "queued, running, then done, failed or refused)"
    assert stored() == ("failed", 8)


@pytest.mark.parametrize("path", ["benchmark.name", "readings[0].source", "environment.user"])
def test_a_name_of_only_spaces_is_refused(server, measured, path):
    sample = fresh(measured[0])
    _set(sample, path, "   ")
    error = _error(lambda: server.send("box-b", sample, sequence=2))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().endswith(f"{path} has no character other than spaces")


def test_a_job_command_or_compare_selector_of_only_spaces_is_refused(server):
    job = pb.Job(commands=[pb.Command(name="   ", argv=["/bin/true"])], repetitions=1)
    error = _error(lambda: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                  metadata=server.client_md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "commands[0].name has no character other than spaces"
    error = _error(lambda: server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a"),
                                                                  b=pb.Selection(machine="box-b"), benchmarks=["  "]),
                                                metadata=server.client_md))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "benchmarks[0] has no character other than spaces")


def test_compare_refuses_a_machine_that_is_not_there_and_a_side_without_a_selection(server):
    error = _error(lambda: server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a")),
                                                metadata=server.client_md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith("b: ")
    error = _error(lambda: server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a"),
                                                                  b=pb.Selection(machine="nobody")),
                                                metadata=server.client_md))
    assert (error.code(), error.details()) == (grpc.StatusCode.NOT_FOUND, "no machine named 'nobody' on this server")


# --- issue 17: retries and the server's own job fields are the server's ---

def test_a_client_cannot_set_stored_runs_or_retry_what_is_not_lost(server):
    """stored_runs tells an agent to skip runs: only the server sets it, on a retried job. RetryJob takes a
    job id that is a UUID of a lost job, and says which of those it is not."""
    job = pb.Job(commands=[pb.Command(name="t", argv=["/bin/true"])], repetitions=3, stored_runs=[0, 1, 2])
    error = _error(lambda: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                  metadata=server.client_md, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "stored_runs is set by the server" in error.details()
    del job.stored_runs[:]
    (job_id,) = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job), metadata=server.client_md,
                                       timeout=10).job_ids
    for bad, code, said in (("x" * 10_000, grpc.StatusCode.INVALID_ARGUMENT, "job_id is not a UUID"),
                            ("'; DROP TABLE jobs; --", grpc.StatusCode.INVALID_ARGUMENT, "job_id is not a UUID"),
                            (str(uuid.uuid4()), grpc.StatusCode.NOT_FOUND, "no job"),
                            (job_id, grpc.StatusCode.FAILED_PRECONDITION, "only a lost job can be retried")):
        error = _error(lambda bad=bad: server.query.RetryJob(pb.RetryJobRequest(job_id=bad),
                                                             metadata=server.client_md, timeout=10))
        assert error.code() == code and said in error.details(), (bad[:40], error.details())
    agent_token = server.agent_md("box-a")  # an agent cannot retry jobs
    error = _error(lambda: server.query.RetryJob(pb.RetryJobRequest(job_id=job_id), metadata=agent_token, timeout=10))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


def test_get_jobs_takes_whole_job_ids_only_and_a_bounded_number(server):
    """GetJobsRequest.job_ids, what `--wait` polls with: each a UUID, at most MAX_JOB_IDS; one line each."""
    from perfctl.server.validation import MAX_JOB_IDS

    job = pb.Job(commands=[pb.Command(name="t", argv=["/bin/true"])], repetitions=1)
    (job_id,) = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job), metadata=server.client_md,
                                       timeout=10).job_ids
    for bad, said in (([job_id, job_id[:8]], "job_ids[1]: job_id is not a UUID"),
                      (["'; DROP TABLE jobs; --"], "job_ids[0]: job_id is not a UUID"),
                      ([str(uuid.uuid4())] * (MAX_JOB_IDS + 1), f"at most {MAX_JOB_IDS}")):
        error = _error(lambda bad=bad: server.query.GetJobs(pb.GetJobsRequest(job_ids=bad), metadata=server.client_md,
                                                            timeout=10))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and said in error.details(), error.details()
        assert "\n" not in error.details()
    found = server.query.GetJobs(pb.GetJobsRequest(job_ids=[job_id, str(uuid.uuid4())]), metadata=server.client_md,
                                 timeout=10).jobs
    assert [j.job_id for j in found] == [job_id] and not found[0].HasField("failed_runs")  # open: not counted
