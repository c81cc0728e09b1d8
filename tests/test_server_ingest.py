"""Samples into the server (server/ingest.py, server/decode.py): one batch's error stays its own in a group commit,
a call cancelled while it waits cancels what it waited for, and every sample an agent streams that is broken (a
field out of bounds, a reading repeated or without its value, a name of only spaces, an unknown job, a sequence
number past 64 bits, uuids of another machine's runs) is refused naming what is wrong, without failing another
agent's batches. A real `perfctl server` (SQLite) called with grpc stubs (conftest's ``server``)."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
import uuid

import grpc
import pytest
from fleet import MEGABYTE, NUL, answered, fresh, raised, wait_for
from google.protobuf.descriptor import FieldDescriptor

from perfctl import wire
from perfctl.server.auth import Tokens
from perfctl.server.decode import Decoded, decode_batch, row_fields
from perfctl.server.ingest import GroupCommit
from perfctl.server.storage import Storage, StorageError, database_url
from perfctl.v1 import fleet_pb2 as pb


def test_group_commit_keeps_each_batch_s_error_its_own(tmp_path, measured):
    """Three batches in one round of the group commit: one from a machine that never registered, one from a
    machine whose row was deleted after its id was cached. Only those two fail."""
    storage = Storage(database_url(str(tmp_path / "data"), None))
    for name in ("box-a", "box-b", "box-d"):
        storage.register(pb.MachineInfo(name=name, machine_id="m" * 32), 1)
    storage.machine_pk("box-d")  # cached, then deleted behind the server's back
    with storage.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM machines WHERE name = 'box-d'")
    def batch(name):
        samples = [fresh(s) for s in measured[:2]]
        return name, [row_fields(s) for s in samples], [s.SerializeToString() for s in samples]

    async def round_of(*batches):
        writer = GroupCommit(storage)
        # gather queues all four before the writer task first runs: they share one round
        return await asyncio.gather(*(writer.ingest(*b) for b in batches), return_exceptions=True)

    results = asyncio.run(round_of(batch("box-a"), batch("ghost"), batch("box-d"), batch("box-b")))
    assert results[0] == (2, 0) and results[3] == (2, 0)
    assert isinstance(results[1], StorageError) and "unknown machine 'ghost'" in str(results[1])
    assert isinstance(results[2], StorageError) and "box-d" in str(results[2])
    assert storage.count_samples() == 4
    # the stale cached id is forgotten: the next batch of box-d hears that it must register
    later = asyncio.run(round_of(batch("box-d")))
    assert isinstance(later[0], StorageError) and "must register first" in str(later[0])
    storage.close()



def test_a_call_cancelled_while_it_waits_cancels_what_it_waited_for():
    """An agent gone while its job watch waited for a job: the call is cancelled, and the wait for the queue
    must go with it. Left running, it went on waiting on a queue no one reads (taking whatever came), and
    its wait_for's TimeoutError was logged as "Task exception was never retrieved"."""
    from perfctl.server.decoders import Decoders
    from perfctl.server.jobs import JobHub, JobKeeper
    from perfctl.server.service import AgentService

    async def scenario():
        service = AgentService(None, Tokens({}), JobKeeper(None, JobHub()), Decoders(0))
        queue: asyncio.Queue = asyncio.Queue()
        waited = asyncio.ensure_future(queue.get())
        call = asyncio.create_task(service._unless_stopping(None, waited))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        queue.put_nowait("a job for a watch that is gone")
        await asyncio.sleep(0.05)
        return waited.cancelled(), queue.qsize()

    assert asyncio.run(scenario()) == (True, 1)


def test_an_ok_reading_without_a_value_is_refused_at_ingest(server, measured):
    broken = fresh(measured[0])
    assert broken.readings[0].status == "ok"
    broken.readings[0].ClearField("value")
    error = raised(lambda: server.send("box-a", broken))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "readings[0].value is missing (status ok)" in error.details()


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
    error = raised(lambda: server.send("box-b", broken, sequence=11))
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


def _raw_stream(server, name: str, *batches: bytes) -> list[pb.Ack]:
    """StreamSamples with hand-made bytes: the handler takes each batch as raw bytes (server/service.py)."""
    call = server.channel.stream_stream("/perfctl.v1.AgentService/StreamSamples", request_serializer=None,
                                        response_deserializer=pb.Ack.FromString)
    return list(call(iter(batches), metadata=server.agent_md(name), timeout=30))


def test_a_sequence_number_beyond_64_bits_is_refused(server):
    largest = b"\x08" + b"\xff" * 9 + b"\x01"  # 2**64 - 1: ten bytes, the tenth holds bit 63
    assert [a.sequence for a in _raw_stream(server, "box-a", largest)] == [2**64 - 1]
    for too_big in (b"\x08" + b"\xff" * 9 + b"\x7f", b"\x08" + b"\xff" * 9 + b"\x02"):
        error = raised(lambda too_big=too_big: _raw_stream(server, "box-a", too_big))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "malformed batch: varint exceeds 64 bits"
    error = raised(lambda: _raw_stream(server, "box-a", b"\x08" + b"\xff" * 10 + b"\x01"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed batch" in error.details()


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


def _register_new_agent(server, name: str) -> None:
    """An agent whose token is added while the server runs (it re-reads the tokens file within a second)."""
    server.fleet.agent_token(name)
    wait_for(lambda: answered(lambda: server.register(name)), 10, f"the token of {name}")


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
    error = raised(lambda: server.send("evil", *(run(k, True) for k in range(len(measured))), sequence=7))
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
    error = raised(lambda: server.send("box-b", fresh(measured[1]), sample, sequence=3))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and wire.refused_batch(error) == 3
    assert error.details() == f"batch 3 sample 1 ({sample.uuid}): job_id {sample.job_id} is not a job of machine box-b"


def test_a_sample_that_repeats_a_reading_is_refused(server, measured):
    sample = fresh(measured[0])
    sample.readings.add().CopyFrom(sample.readings[0])
    error = raised(lambda: server.send("box-b", sample, sequence=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    last = len(sample.readings) - 1
    assert error.details() == f"batch 5 sample 0 ({sample.uuid}): readings[{last}] repeats event/backend/scope " \
                              "of readings[0]"
    other_scope = fresh(measured[0])
    other_scope.readings.add().CopyFrom(other_scope.readings[0])
    other_scope.readings[-1].scope = "kernel" if other_scope.readings[0].scope != "kernel" else "user"
    assert server.send("box-b", other_scope)[0].stored == 1  # the same event in another scope is another count


@pytest.mark.parametrize("path", ["benchmark.name", "readings[0].source", "environment.user"])
def test_a_name_of_only_spaces_is_refused(server, measured, path):
    sample = fresh(measured[0])
    _set(sample, path, "   ")
    error = raised(lambda: server.send("box-b", sample, sequence=2))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().endswith(f"{path} has no character other than spaces")


def test_a_streamed_sample_with_a_nul_in_any_text_is_refused(measured):
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
