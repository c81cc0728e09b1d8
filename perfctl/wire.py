"""Conversions between the common model (perfctl/model.py, JSON Lines dicts) and the wire messages
(protos/perfctl/v1/fleet.proto). The one place that knows both shapes; agent, server and client use it."""

from __future__ import annotations

import json
import uuid

from google.protobuf.message import DecodeError

from perfctl.model import Sample
from perfctl.v1 import fleet_pb2 as pb

# Run k of a job (k: its position in the job's run order, warmups included) is stored under uuid5(job, k):
# an agent that measures it again after a restart, and the server that stores it again, agree it is one run.
JOB_UUID_NAMESPACE = uuid.UUID("2d6f3c1e-6a8e-4f3b-9a4b-7f1f0c2f7e11")

# How far an agent's clock may be ahead of the server's before the server flags its runs and `perfctl
# machines` says so (server/clock.py): NTP keeps clocks within milliseconds; a second of network delay and a
# batch sent the moment a run started fit well inside. Beyond this, the agent's clock is off.
CLOCK_TOLERANCE_NS = 10 * 1_000_000_000


# HeartbeatRequest.held_job_ids: an agent names its newest unfinished jobs, at most these (server/delivery.py)
MAX_HELD_JOBS = 1000

# Where StreamSamples' refusal names the batch (fleet.proto RefusedBatch): a trailing metadata entry, whose
# value gRPC carries as bytes for a key ending in -bin
REFUSED_BATCH_KEY = "perfctl-refused-batch-bin"


def job_run_uuid(job_id: str, k: int) -> str:
    return str(uuid.uuid5(JOB_UUID_NAMESPACE, f"{job_id}/{k}"))


_READING_OPTIONAL = ("value", "time_enabled", "time_running", "scaled", "reason", "source", "corrected",
                     "correction_model", "audit_id")


def sample_to_proto(sample: Sample) -> pb.Sample:
    message = pb.Sample(
        uuid=sample.uuid, machine_id=sample.machine_id, run_index=sample.run_index, warmup=sample.warmup,
        start_time_ns=sample.start_time_ns, wall_ns=sample.wall_ns, outcome=sample.outcome,
        backends=list(sample.backends), schema_version=sample.schema_version,
        benchmark=_benchmark(sample.benchmark), environment=_environment(sample.environment))
    _set_varying(message, sample)
    return message


def _benchmark(benchmark) -> pb.Benchmark:
    return pb.Benchmark(name=benchmark.name, argv=list(benchmark.argv), executable=benchmark.executable,
                        executable_sha256=benchmark.executable_sha256, input_digest=benchmark.input_digest)


def _environment(environment) -> pb.Environment:
    message = pb.Environment(aslr_off=environment.aslr_off, env_bytes=environment.env_bytes,
                             user=environment.user, cwd=environment.cwd)
    if environment.pinned_cpu is not None:
        message.pinned_cpu = environment.pinned_cpu
    return message


def _set_varying(message: pb.Sample, sample: Sample) -> None:
    """The optional fields, labels and readings of ``sample``, set on ``message`` (sample_to_proto's and
    SampleEncoder's: one mapping of a reading to the wire)."""
    for name in ("job_id", "exit_status", "signal", "stderr_tail", "max_rss_kib"):
        value = getattr(sample, name)
        if value is not None:
            setattr(message, name, value)
    if sample.extra.get("outlived"):
        message.outlived = sample.extra["outlived"]
    message.labels.update(sample.labels)
    for reading in sample.readings:
        out = message.readings.add(event=reading.event, backend=reading.backend, scope=reading.scope,
                                   status=reading.status, unit=reading.unit)
        for name in _READING_OPTIONAL:
            value = getattr(reading, name)
            if value is not None:
                setattr(out, name, value)


class SampleEncoder:
    """Samples to their wire bytes (what ``sample_to_proto(s).SerializeToString()`` parses back as), as an
    agent spools them, run after run. A sample's benchmark and environment are the same objects in every run of
    a command: their bytes are made once and joined to the rest's (a message's bytes concatenated with another's
    parse as the two merged, and each field appears in one of them), a third of the encoding's time. Keyed by
    ``id()`` holding the object, as formats/jsonl_writer.py's cache is."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[object, object, bytes]] = {}

    def encode(self, sample: Sample) -> bytes:
        message = pb.Sample(uuid=sample.uuid, machine_id=sample.machine_id, run_index=sample.run_index,
                            warmup=sample.warmup, start_time_ns=sample.start_time_ns, wall_ns=sample.wall_ns,
                            outcome=sample.outcome, backends=sample.backends,
                            schema_version=sample.schema_version)
        _set_varying(message, sample)
        return self._recurring(sample) + message.SerializeToString()

    def _recurring(self, sample: Sample) -> bytes:
        bench, env = sample.benchmark, sample.environment
        kept = self._made.get(id(bench))
        if kept is None or kept[0] is not bench or kept[1] is not env:
            if len(self._made) >= 256:  # a job has a command or a few; an agent's life, many jobs
                self._made.clear()
            kept = self._made[id(bench)] = (bench, env, pb.Sample(benchmark=_benchmark(bench),
                                                                  environment=_environment(env)).SerializeToString())
        return kept[2]


def proto_to_dict(message: pb.Sample) -> dict:
    """The JSON Lines form of a wire sample (docs/samples.md)."""
    bench, env = message.benchmark, message.environment
    readings = []
    for r in message.readings:
        reading = {"event": r.event, "backend": r.backend, "scope": r.scope, "status": r.status, "unit": r.unit}
        for name in _READING_OPTIONAL:
            if r.HasField(name):
                reading[name] = getattr(r, name)
        readings.append(reading)
    return {
        "type": "sample", "schema_version": message.schema_version, "uuid": message.uuid,
        "machine_id": message.machine_id,
        "benchmark": {"name": bench.name, "argv": list(bench.argv), "executable": bench.executable,
                      "executable_sha256": bench.executable_sha256, "input_digest": bench.input_digest},
        "job_id": message.job_id if message.HasField("job_id") else None,
        "run_index": message.run_index, "warmup": message.warmup, "start_time_ns": message.start_time_ns,
        "wall_ns": message.wall_ns, "outcome": message.outcome,
        "exit_status": message.exit_status if message.HasField("exit_status") else None,
        "signal": message.signal if message.HasField("signal") else None,
        "environment": {"aslr_off": env.aslr_off, "env_bytes": env.env_bytes,
                        "pinned_cpu": env.pinned_cpu if env.HasField("pinned_cpu") else None,
                        "user": env.user, "cwd": env.cwd},
        "readings": readings, "backends": list(message.backends),
        "stderr_tail": message.stderr_tail if message.HasField("stderr_tail") else None,
        "max_rss_kib": message.max_rss_kib if message.HasField("max_rss_kib") else None,
        "extra": {"outlived": message.outlived} if message.HasField("outlived") else {},
        # absent when empty, as formats/jsonl_writer.py sample_record writes it
        **({"labels": dict(message.labels)} if message.labels else {}),
    }


def refused_batch_metadata(sequence: int | None) -> tuple:
    """The trailing metadata of the server's refusal of batch ``sequence`` (None: a batch not readable as far
    as its sequence, which names none)."""
    if sequence is None:
        return ()
    return ((REFUSED_BATCH_KEY, pb.RefusedBatch(sequence=sequence).SerializeToString()),)


def refused_batch(error) -> int | None:
    """The sequence of the batch a server refused, from the error StreamSamples ended with (grpc.RpcError,
    INVALID_ARGUMENT); None when the error names no batch."""
    for key, value in error.trailing_metadata() or ():
        if key == REFUSED_BATCH_KEY:
            try:
                return pb.RefusedBatch.FromString(value).sequence
            except DecodeError:
                return None
    return None


def inventory_of(text: str) -> dict:
    """An agent's inventory as the server stored it; anything but a JSON object (an older server checked
    less) reads as empty, so the listing shows '?' rather than failing for every machine."""
    try:
        inventory = json.loads(text or "{}", parse_constant=_not_json)
    except (ValueError, RecursionError):
        return {}
    return inventory if isinstance(inventory, dict) else {}


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")
