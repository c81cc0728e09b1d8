"""Labels on every sample (issue 15): `perfctl stat --label`, the JSON Lines and wire forms, the server's
bounds on samples, jobs and compare selections, and a job's labels carried by the agent into its samples.
Real runs of /bin/true throughout; one real server and agent at the end."""

import dataclasses
import json
import uuid

import grpc
import pytest
from conftest import measure, needs_root, one_line, perfctl, read_records, sample_of
from fleet import free_port, wait_for

from perfctl import wire
from perfctl.formats.jsonl import read_dataset
from perfctl.formats.jsonl_writer import JsonlWriter
from perfctl.model import (
    MAX_LABELS,
    Benchmark,
    Environment,
    Reading,
    Sample,
    labels_problem,
    parse_label,
    parse_labels,
)
from perfctl.server.decode import Decoded, decode_batch
from perfctl.server.validation import validate_compare, validate_job, validate_sample
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

LABELS = {"commit": "3f2a9c1", "branch": "release/2.1", "build.id": "ci-42_x86-64", "note": "tuned = yes, twice"}
KEY_RULE = "key must be 1-64 characters of A-Z a-z 0-9 _ . -"


# --- perfctl stat --label ---

def test_stat_label_writes_the_labels_into_every_sample(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-q", "--no-progress", "-r", "3", "--warmup", "1", "-e", "task-clock",
                     *(f"--label={k}={v}" for k, v in LABELS.items()), "--label", "empty=", "-o", str(out),
                     "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    machine, *records = read_records(out)
    samples = [sample_of(record) for record in records]
    assert machine["type"] == "machine"
    assert [s.warmup for s in samples] == [True, False, False, False]
    assert all(s.labels == {**LABELS, "empty": ""} for s in samples)
    lines = out.read_text().splitlines()[1:]
    assert all(json.loads(line)["labels"] == {**LABELS, "empty": ""} for line in lines)


def test_stat_without_label_writes_no_labels_key(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-q", "--no-progress", "-r", "2", "-e", "task-clock", "-o", str(out), "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert len(records) == 2 and all("labels" not in r and list(r)[-1] == "extra" for r in records)
    assert all(sample_of(r).labels == {} for r in records)


BAD_LABELS = [
    (["a b=c"], f"--label 'a b=c': {KEY_RULE}"),
    (["=c"], f"--label '=c': {KEY_RULE}"),
    (["k/1=c"], f"--label 'k/1=c': {KEY_RULE}"),
    ([f"{'k' * 65}=v"], f"--label '{'k' * 65}=v': {KEY_RULE}"),
    ([f"k={'v' * 257}"], f"--label 'k={'v' * 78}'...: value longer than 256 characters"),
    (["k=a\x1b[31mb"], "--label 'k=a\\x1b[31mb': value has control or non-printable characters"),
    (["k=line\nforged"], "--label 'k=line\\nforged': value has control or non-printable characters"),
    (["k=tab\there"], "--label 'k=tab\\there': value has control or non-printable characters"),
    (["commit"], "--label 'commit': expected KEY=VALUE"),
    (["k=1", "k=2"], "--label 'k=2': key 'k' given twice"),
    ([f"k{i}=v" for i in range(MAX_LABELS + 1)], "--label: at most 32 labels, got 33"),
]


@pytest.mark.parametrize("labels, message", BAD_LABELS, ids=[m[:40] for _, m in BAD_LABELS])
def test_stat_refuses_a_bad_label_in_one_line_before_anything_runs(tmp_path, labels, message):
    out = tmp_path / "never.jsonl"
    marker = tmp_path / "ran"
    result = perfctl("stat", "--no-progress", "-r", "1", *(f"--label={text}" for text in labels), "-o", str(out),
                     "--", "/bin/touch", str(marker))
    assert (result.returncode, one_line(result)) == (2, f"perfctl stat: {message}")
    assert result.stdout == ""
    assert not out.exists() and not marker.exists()  # nothing ran, no file was created


def test_32_labels_are_the_limit():
    texts = [f"k{i}=v" for i in range(MAX_LABELS)]
    assert len(parse_labels(texts)) == MAX_LABELS
    assert parse_label("k=" + "v" * 256) == ("k", "v" * 256)
    assert parse_label("a.b-c_D9=x=y") == ("a.b-c_D9", "x=y")  # split at the first '='


# --- JSON Lines and wire forms ---

def _sample(**fields) -> Sample:
    """A sample built by hand, every value fixed, so its JSON can be compared byte for byte."""
    return Sample(uuid="0f8fad5b-d9cb-469f-a165-70867728950e", machine_id="a1b2c3d4e5f60718",
                  benchmark=Benchmark("true", ("/bin/true",), "/usr/bin/true", "0" * 64, "1" * 64), run_index=0,
                  warmup=False, start_time_ns=1700000000000000000, wall_ns=812345, outcome="ok", exit_status=0,
                  signal=None, environment=Environment(True, 4096, None, "root", "/"),
                  readings=(Reading("task-clock", "perf_event", "all", "ok", "ns", value=512000,
                                    time_enabled=512000, time_running=512000),),
                  backends=("perf_event",), **fields)


# What JsonlWriter wrote for _sample() before labels existed (the model at the commit before labels).
UNLABELLED_LINE = (
    '{"type":"sample","uuid":"0f8fad5b-d9cb-469f-a165-70867728950e","machine_id":"a1b2c3d4e5f60718","run_index":0,'
    '"warmup":false,"start_time_ns":1700000000000000000,"wall_ns":812345,"outcome":"ok","exit_status":0,'
    '"signal":null,"job_id":null,"stderr_tail":null,"max_rss_kib":null,"schema_version":1,"benchmark":{"name":'
    '"true","argv":["/bin/true"],"executable":"/usr/bin/true","executable_sha256":"' + "0" * 64 + '",'
    '"input_digest":"' + "1" * 64 + '"},"environment":{"aslr_off":true,"env_bytes":4096,"pinned_cpu":null,'
    '"user":"root","cwd":"/"},"readings":[{"event":"task-clock","backend":"perf_event","scope":"all","status":'
    '"ok","unit":"ns","value":512000,"time_enabled":512000,"time_running":512000}],"backends":["perf_event"],'
    '"extra":{}}')


def _line(sample: Sample, tmp_path) -> str:
    path = tmp_path / "one.jsonl"
    with open(path, "wb") as stream:
        JsonlWriter([(str(path), stream)]).write_sample(sample)
    return path.read_text().rstrip("\n")


def test_a_sample_without_labels_is_written_byte_for_byte_as_before(tmp_path):
    assert _line(_sample(), tmp_path) == UNLABELLED_LINE
    assert _line(_sample(labels={}), tmp_path) == UNLABELLED_LINE
    # the wire's dict has its own key order (and always had); same keys and values, no "labels"
    assert wire.proto_to_dict(wire.sample_to_proto(_sample())) == json.loads(UNLABELLED_LINE)


def test_a_line_written_before_labels_reads_as_no_labels(tmp_path):
    path = tmp_path / "old.jsonl"
    second_run = UNLABELLED_LINE.replace("0f8fad5b", "1f8fad5b").replace('"extra":{}', '"extra":{},"labels":{}')
    path.write_text(UNLABELLED_LINE + "\n" + second_run + "\n")
    second = dataclasses.replace(_sample(), uuid=_sample().uuid.replace("0f8fad5b", "1f8fad5b"))
    assert [sample_of(record) for record in read_records(path)] == [_sample(), second]
    assert read_dataset(str(path)).benchmarks["true"].metrics["task-clock"] == [512000, 512000]
    assert read_dataset(str(path), labels={"commit": "3f2a9c1"}).benchmarks == {}  # neither carries it


def test_labels_round_trip_through_json_lines(tmp_path):
    samples = [dataclasses.replace(s, labels=dict(LABELS)) for s in measure(["/bin/true"], ["task-clock"], runs=2)]
    path = tmp_path / "s.jsonl"
    with open(path, "wb") as stream:
        writer = JsonlWriter([(str(path), stream)])
        for sample in samples:
            writer.write_sample(sample)
    assert [sample_of(record) for record in read_records(path)] == samples
    assert len(read_dataset(str(path), labels=LABELS).benchmarks["true"].metrics["task-clock"]) == 2
    line = path.read_text().splitlines()[0]
    assert line.endswith(',"extra":{},"labels":' + json.dumps(LABELS, separators=(",", ":")) + "}")


@pytest.mark.parametrize("labels, message", [
    ({"a b": "c"}, f"labels key 'a b': {KEY_RULE}"),
    ({"k": "a\nb"}, "labels['k']: value has control or non-printable characters"),
    ({"k": 3}, "labels['k']: value must be a string"),
    (["k", "v"], "labels must be an object of key to value"),
    ({f"k{i}": "v" for i in range(33)}, "labels: more than 32 labels (33)"),
])
def test_bad_labels_are_named_by_the_one_rule(labels, message):
    assert labels_problem(labels) == message


def test_labels_round_trip_through_the_wire():
    for sample in measure(["/bin/true"], ["task-clock"], runs=2):
        labelled = dataclasses.replace(sample, labels=dict(LABELS))
        message = pb.Sample.FromString(wire.sample_to_proto(labelled).SerializeToString())
        assert dict(message.labels) == LABELS
        assert wire.proto_to_dict(message)["labels"] == LABELS
        assert sample_of(wire.proto_to_dict(message)) == labelled
        assert validate_sample(message) is None
        plain = pb.Sample.FromString(wire.sample_to_proto(sample).SerializeToString())
        assert len(plain.labels) == 0 and "labels" not in wire.proto_to_dict(plain)
        assert sample_of(wire.proto_to_dict(plain)) == sample


# --- the server's bounds ---

MEGABYTE = "x" * (1 << 20)
HOSTILE_LABELS = [
    ({"": "v"}, f"labels key '': {KEY_RULE}"),
    ({MEGABYTE: "v"}, f"labels key '{'x' * 80}'...: {KEY_RULE}"),
    ({"commit\n": "v"}, f"labels key 'commit\\n': {KEY_RULE}"),
    ({"k": MEGABYTE}, "labels['k']: value longer than 256 characters"),
    ({"k": "\x1b]0;owned\x07"}, "labels['k']: value has control or non-printable characters"),
    ({"k": "a\u202eb"}, "labels['k']: value has control or non-printable characters"),  # bidi override
    ({f"k{i}": "v" for i in range(33)}, "labels: more than 32 labels (33)"),
]


@pytest.fixture(scope="module")
def measured():
    return [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["task-clock"])]


def test_the_server_stores_a_sample_with_good_labels(measured):
    sample = pb.Sample()
    sample.CopyFrom(measured[0])
    sample.labels.update({**LABELS, "empty": "", **{f"k{i}": "v" * 256 for i in range(26)}, "x" * 64: "y"})
    assert len(sample.labels) == 32
    assert validate_sample(sample) is None
    assert isinstance(decode_batch(pb.SampleBatch(sequence=1, samples=[sample]).SerializeToString()), Decoded)


@pytest.mark.parametrize("labels, message", HOSTILE_LABELS, ids=[m[:40] for _, m in HOSTILE_LABELS])
def test_the_server_refuses_a_sample_with_hostile_labels_naming_them(measured, labels, message):
    sample = pb.Sample()
    sample.CopyFrom(measured[0])
    sample.labels.update(labels)
    assert validate_sample(sample) == message
    assert decode_batch(pb.SampleBatch(sequence=7, samples=[sample]).SerializeToString()).reason.endswith(message)


def _job(**labels) -> pb.Job:
    return pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=3, labels=labels)


def test_validate_job_accepts_good_labels_and_refuses_hostile_ones():
    assert validate_job(_job()) is None
    assert validate_job(_job(**LABELS)) is None
    for labels, message in HOSTILE_LABELS:
        job = _job()
        job.labels.update(labels)
        assert validate_job(job) == message


def _selection(machine="box-a", **fields) -> pb.Selection:
    return pb.Selection(machine=machine, **fields)


def _compare(**fields) -> pb.CompareRequest:
    return pb.CompareRequest(**{"a": _selection(), "b": _selection("box-b"), **fields})


def test_validate_compare_accepts_full_selections():
    assert validate_compare(_compare()) is None
    full = _selection(job_id=str(uuid.uuid4()), labels=LABELS, since_ns=1, until_ns=2, all_history=True)
    other = _selection("box-b", job_id=full.job_id, labels=LABELS, since_ns=1, until_ns=2, all_history=True)
    assert validate_compare(_compare(a=full, b=other, family="sparc", benchmarks=["true"], metrics=["task-clock"],
                                     correction="holm", pool=True)) is None
    # one selection on both sides is the same runs twice (docs/samples.md, "The identity of a run")
    assert validate_compare(_compare(a=full, b=full)) == \
        "A and B select the same runs: a run compared with itself says nothing"
    assert validate_compare(_compare(family="simultaneous", a=_selection(since_ns=5))) is None
    assert validate_compare(_compare(a=_selection(until_ns=5))) is None


HOSTILE_COMPARES = [
    ({"a": None}, "a: no selection (name the machine to compare)"),
    ({"b": None}, "b: no selection (name the machine to compare)"),
    ({"a": _selection("")}, "a: machine name must be 1-128 printable characters without spaces"),
    ({"b": _selection("box b")}, "b: machine name must be 1-128 printable characters without spaces"),
    ({"a": _selection("x" * 129)}, "a: machine name must be 1-128 printable characters without spaces"),
    ({"a": _selection("box\x1b[2J")}, "a: machine name must be 1-128 printable characters without spaces"),
    ({"a": _selection(job_id="42")}, "a.job_id is not a UUID"),
    ({"b": _selection(job_id=str(uuid.uuid4()) + "\n")}, "b.job_id is not a UUID"),
    ({"b": _selection(labels={"a b": "c"})}, f"b.labels key 'a b': {KEY_RULE}"),
    ({"a": _selection(labels={"k": "v\n"})}, "a.labels['k']: value has control or non-printable characters"),
    ({"a": _selection(labels={f"k{i}": "v" for i in range(33)})}, "a.labels: more than 32 labels (33)"),
    ({"a": _selection(since_ns=-1)}, "a.since_ns and a.until_ns must be >= 0 (0: no bound)"),
    ({"b": _selection(until_ns=-5)}, "b.since_ns and b.until_ns must be >= 0 (0: no bound)"),
    ({"a": _selection(since_ns=10, until_ns=10)}, "a.since_ns must be before a.until_ns"),
    ({"b": _selection(since_ns=11, until_ns=10)}, "b.since_ns must be before b.until_ns"),
    ({"family": "bayes"}, "family 'bayes' unknown: one of simultaneous, sparc"),
    ({"benchmarks": ["b"] * 1001}, "at most 1000 benchmarks and 100 metrics"),
    ({"metrics": ["m"] * 101}, "at most 1000 benchmarks and 100 metrics"),
    ({"benchmarks": ["  "]}, "benchmarks[0] has no character other than spaces"),
    ({"metrics": ["cycles\n"]}, "metrics[0] has control or non-printable characters"),
    ({"correction": "x" * 17}, "correction longer than 16 characters"),
]


@pytest.mark.parametrize("fields, message", HOSTILE_COMPARES, ids=[m[:40] for _, m in HOSTILE_COMPARES])
def test_validate_compare_refuses_hostile_selections_naming_the_field(fields, message):
    request = _compare(**{k: v for k, v in fields.items() if v is not None})
    for side in (k for k, v in fields.items() if v is None):
        request.ClearField(side)
    assert validate_compare(request) == message


# --- the agent: a job's labels go into its samples ---

def _agent(tmp_path):
    from perfctl.agent.daemon import Agent, AgentConfig

    return Agent(AgentConfig(server="127.0.0.1:1", name="box-a", spool_dir=str(tmp_path / "spool"), token="t" * 20,
                             allow=["/bin/*", "/usr/bin/*"], user=None, audit_every_hours=0))


def _spooled(agent) -> list[pb.Sample]:
    return [pb.Sample.FromString(payload) for _, payload in agent.spool.pending(0, 1000)]


def test_the_agent_copies_a_jobs_labels_into_every_sample(tmp_path):
    agent = _agent(tmp_path)
    job_id = str(uuid.uuid4())
    job = pb.Job(job_id=job_id, commands=[pb.Command(name="true", argv=["/bin/true"]),
                                          pb.Command(name="sleep", argv=["/bin/sleep", "0.001"])],
                 repetitions=2, warmups=1, events=["task-clock"], labels=LABELS)
    try:
        assert agent.spool.add_job(job_id, job.SerializeToString())
        agent._run_job(job_id)
        assert agent.spool.job(job_id)[2] == "done"
        samples = _spooled(agent)
    finally:
        agent.spool.close()
        # the runs were spawned from this thread: its personality (ASLR off) goes back, as the agent's
        # worker thread's does when it stops (tests/test_runner.py checks the test process keeps ASLR)
        agent._runner.close()
    assert [s.benchmark.name for s in samples] == ["true", "sleep"] * 3
    assert all(dict(s.labels) == LABELS and s.job_id == job_id for s in samples)
    assert all(validate_sample(s) is None for s in samples)
    assert all(sample_of(wire.proto_to_dict(s)).labels == LABELS for s in samples)


@pytest.mark.parametrize("labels, message", HOSTILE_LABELS[2:5], ids=[m[:40] for _, m in HOSTILE_LABELS[2:5]])
def test_the_agent_refuses_a_job_with_hostile_labels_before_running_it(tmp_path, labels, message):
    agent = _agent(tmp_path)
    marker = tmp_path / "ran"
    job_id = str(uuid.uuid4())
    job = pb.Job(job_id=job_id, commands=[pb.Command(name="touch", argv=["/bin/touch", str(marker)])],
                 repetitions=1, labels=labels)
    try:
        assert agent.spool.add_job(job_id, job.SerializeToString())
        agent._run_job(job_id)
        assert agent.spool.job(job_id)[2] == "refused"
        assert agent.spool.unreported() == [(job_id, "refused", message, 0)]
        assert _spooled(agent) == []
    finally:
        agent.spool.close()
        agent._runner.close()
    assert labels_problem(labels) == message and not marker.exists()



@needs_root  # the agent runs benchmarks as nobody
def test_a_submitted_job_with_labels_is_stored_with_them(fleet):
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    fleet.start_agent("box-a", server)
    token = open(fleet.client_token).read()
    metadata = (("authorization", f"Bearer {token}"),)
    channel = grpc.insecure_channel(server)
    try:
        query = rpc.QueryServiceStub(channel)

        def connected() -> bool:
            try:
                return any(m.connected for m in query.ListMachines(pb.ListMachinesRequest(), metadata=metadata,
                                                                   timeout=5).machines)
            except grpc.RpcError:  # the server is still starting
                return False

        wait_for(connected, 60, "the agent to connect")
        hostile = _job()
        hostile.labels["k"] = "a\nb"
        with pytest.raises(grpc.RpcError) as refused:
            query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=hostile), metadata=metadata, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == "labels['k']: value has control or non-printable characters"
        job = _job(**LABELS)
        job.events.append("task-clock")
        (job_id,) = query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job), metadata=metadata,
                                    timeout=10).job_ids
        wait_for(lambda: [j.state for j in query.GetJobs(pb.GetJobsRequest(), metadata=metadata, timeout=5).jobs
                          if j.job_id == job_id] == ["done"], 120, "the job to finish")
        wait_for(lambda: len(list(query.GetSamples(pb.GetSamplesRequest(machine="box-a"), metadata=metadata,
                                                   timeout=10))) == 3, 30, "every sample stored")
        samples = list(query.GetSamples(pb.GetSamplesRequest(machine="box-a"), metadata=metadata, timeout=10))
    finally:
        channel.close()
    assert all(dict(s.labels) == LABELS and s.job_id == job_id for s in samples)
