"""Decoding and validating incoming sample batches, in worker processes.

Parsing and validating a sample costs tens of µs of Python; done in the gRPC process it capped ingest at one
core. Batches arrive as raw bytes and are decoded here, in a pool of spawned worker processes (spawned, not
forked: the server process holds gRPC threads; server/decoders.py), which return each sample's row and where
its encoding as received lies (stored as its payload, never re-serialized): a Decoded batch, or a Refused one
that says why. The server process only inserts and acks (server/ingest.py).

Most of a sample is the same in every run of a job: the benchmark, the environment, the labels and each
reading's names (event, backend, status, unit, reason...). Validating those and working out what they
become in a row (identity, labels JSON, shape) was ~90 of the ~140 µs a sample took. So a sample is also
parsed as its *layout* (``SampleLayout``: the Sample without its per-run fields, each Reading without its
numbers), whose encoding keys a bounded cache of layouts already validated in full by validate_sample;
for a known layout only the per-run fields and the numbers are checked, in the same pass that reads the
values. Anything that pass does not accept is judged by validate_sample and row_fields, the reference,
so a refused sample is refused with the same message either way.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from dataclasses import dataclass
from typing import NamedTuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from perfctl.model import MAX_VALUE, OUTCOMES, counter_labels
from perfctl.server.validation import (
    _UUID,
    MAX_BATCH_SAMPLES,
    MAX_EXIT_STATUS,
    MAX_RUN_INDEX,
    MAX_SIGNAL,
    MAX_TASKS,
    MAX_TEXT,
    validate_sample,
)
from perfctl.v1 import fleet_pb2 as pb


class BatchRefused(ValueError):
    """The batch, or one of its samples, breaks a bound: in one line, which decode_batch turns into a
    Refused naming the batch and the sample."""


class SampleRow(NamedTuple):
    """What the samples table needs of one sample besides machine, receipt time and payload (server/schema.py)."""

    uuid: str
    identity: tuple  # the benchmark's: (name, executable sha256, input digest, argv, executable)
    job_id: str | None
    run_index: int
    warmup: bool
    outcome: str
    start_time_ns: int
    labels: str  # the run's labels, a JSON object with sorted keys
    shape: str  # what each of ``values`` is: see ``values``
    values: bytes | None


@dataclass(frozen=True)
class Decoded:
    """A batch accepted: its sequence and each sample's row. ``spans`` says where each sample's encoding lies
    in the batch (split_batch's), which is stored as received: its payload."""

    sequence: int
    rows: list[SampleRow]
    spans: list[int]

    def payloads(self, data: bytes) -> list[bytes]:
        """Each sample's encoding as received, from ``data``, the batch this decoded."""
        return payloads_of(data, self.spans)

    def __reduce__(self):
        # A worker's Decoded is pickled back to the server process: its rows travel as plain tuples and are
        # named there in C (_named), not one by one through SampleRow's Python __new__, which cost the
        # server's GIL ~1 µs a sample more
        return _unpickled, (self.sequence, [tuple(row) for row in self.rows], self.spans)


_named = functools.partial(tuple.__new__, SampleRow)


def _unpickled(sequence: int, rows: list[tuple], spans: list[int]) -> Decoded:
    return Decoded(sequence, list(map(_named, rows)), spans)


@dataclass(frozen=True)
class Refused:
    """A batch refused: why, in one line naming the batch, the sample and the field, and the batch's sequence
    (None when the batch could not be read as far as that), which the agent is told apart from the words."""

    sequence: int | None
    reason: str


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """A base-128 varint of at most 64 bits. Ten bytes carry 70 bits: the tenth may only hold the top bit,
    else the value overflows uint64 (and the Ack that echoes the sequence could not be encoded)."""
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64:
                raise BatchRefused("malformed batch: varint exceeds 64 bits")
            return value, i
        shift += 7
        if shift > 63:
            raise BatchRefused("malformed batch: varint longer than 10 bytes")


def split_batch(data: bytes) -> tuple[int, list[int]]:
    """Walk SampleBatch's wire format: field 1 sequence (varint), field 2 samples (length-delimited).
    (sequence, spans): sample k is data[spans[2k]:spans[2k + 1]]."""
    i, end, sequence, spans = 0, len(data), 0, []
    try:
        while i < end:
            tag = data[i]
            i += 1
            if tag == 0x08:
                sequence, i = _varint(data, i)
            elif tag == 0x12:
                length, i = _varint(data, i)
                if i + length > end:
                    raise BatchRefused("malformed batch: truncated sample")
                spans += (i, i + length)
                i += length
            else:
                raise BatchRefused(f"malformed batch: unexpected field tag {tag}")
    except IndexError:
        raise BatchRefused("malformed batch: truncated") from None
    return sequence, spans


def payloads_of(data: bytes, spans: list[int]) -> list[bytes]:
    """Each sample's encoding as received, from split_batch's spans."""
    return [data[start:end] for start, end in zip(spans[::2], spans[1::2])]


def row_fields(sample: pb.Sample) -> SampleRow:
    """The sample's SampleRow, worked out from the whole sample: the reference ``_known_row`` is held to."""
    bench = sample.benchmark
    labels = json.dumps(dict(sorted(sample.labels.items())), separators=(",", ":")) if sample.labels else "{}"
    shape, vals = values(sample)
    return SampleRow(sample.uuid,
                     (bench.name, bench.executable_sha256, bench.input_digest, tuple(bench.argv), bench.executable),
                     sample.job_id or None, sample.run_index, sample.warmup, sample.outcome, sample.start_time_ns,
                     labels, shape, vals)


# shapes by the readings' layout: the runs of a job share one, and working it out (labels, JSON) cost
# most of the 100 µs a sample took to decode; bounded, as a hostile agent could send a new layout each time
_SHAPES: dict[tuple, str] = {}
MAX_SHAPES = 4096
_FIELD = {"ok": "value", "multiplexed": "scaled"}


def values(sample: pb.Sample) -> tuple[str, bytes | None]:
    """What compare reads of a sample, without its payload (server/schema.py): the shape, a JSON list of
    [label, event, backend, unit, status, reason] per reading, and the values, float64 little-endian: the
    wall time, then per reading its value (ok), its scaled estimate (multiplexed) or NaN (no value).
    The labels are those of the JSON Lines reader (perfctl/formats/jsonl.py), so that a comparison of
    stored runs equals the comparison of the same runs in a file; values None when that reader would
    refuse the sample (an ok reading without a value). Samples are validated first (server/validation.py:
    no negative or non-finite number reaches here)."""
    numbers, layout = [float(sample.wall_ns)], []
    ok_value = True
    for r in sample.readings:  # one pass: each protobuf attribute read costs, and there are a dozen readings
        status = r.status
        reason = r.reason if r.HasField("reason") else None
        layout.append((r.event, r.scope, r.backend, r.unit, status, reason))
        field = _FIELD.get(status)
        if field is None:
            numbers.append(math.nan)
        elif r.HasField(field):
            numbers.append(float(r.value if field == "value" else r.scaled))
        else:
            ok_value = False
    layout = tuple(layout)
    shape = _SHAPES.get(layout)
    if shape is None:
        # as perfctl/wire.py proto_to_dict gives them to the reader
        labels = counter_labels(tuple((event, scope, backend) for event, scope, backend, *_ in layout))
        shape = json.dumps([[label, event, backend, unit or "count", status, reason]
                            for label, (event, _, backend, unit, status, reason) in zip(labels, layout)],
                           separators=(",", ":"))
        if len(_SHAPES) >= MAX_SHAPES:
            _SHAPES.clear()
        _SHAPES[layout] = shape
    if not ok_value:
        return shape, None
    if not all(v <= MAX_VALUE for v in numbers if v == v):
        return shape, None
    return shape, struct.pack(f"<{len(numbers)}d", *numbers)


# What differs from run to run: every other field of Sample and Reading, one added to the proto later
# included, belongs to the layout, so that it is validated (validate_sample) before its layout is cached.
RUN_FIELDS = frozenset({"uuid", "job_id", "run_index", "warmup", "start_time_ns", "wall_ns", "outcome",
                        "exit_status", "signal", "stderr_tail", "max_rss_kib", "outlived"})
READING_NUMBERS = frozenset({"value", "time_enabled", "time_running", "scaled", "corrected"})


def _without(descriptor, name: str, dropped: frozenset, retyped: dict[str, str]) -> descriptor_pb2.DescriptorProto:
    """``descriptor``'s message renamed ``name``, without the ``dropped`` fields (their proto3-optional
    oneofs too), the message types of fields renamed as ``retyped`` says (old full name -> new)."""
    message = descriptor_pb2.DescriptorProto()
    descriptor.CopyToProto(message)
    message.name = name
    kept = [field for field in message.field if field.name not in dropped]
    oneofs = [message.oneof_decl[field.oneof_index].name for field in kept if field.HasField("oneof_index")]
    del message.field[:], message.oneof_decl[:]
    for oneof in oneofs:
        message.oneof_decl.add(name=oneof)
    for field in kept:
        if field.HasField("oneof_index"):
            field.oneof_index = oneofs.index(descriptor.fields_by_name[field.name].containing_oneof.name)
        for old, new in retyped.items():
            if field.type_name == old or field.type_name.startswith(old + "."):
                field.type_name = new + field.type_name[len(old):]
        message.field.add().CopyFrom(field)
    return message


def _layout_type():
    package = "perfctl.server.decode"
    file = descriptor_pb2.FileDescriptorProto(name="perfctl/server/decode_layout.proto", package=package,
                                              syntax="proto3", dependency=[pb.DESCRIPTOR.name])
    file.message_type.add().CopyFrom(_without(pb.Reading.DESCRIPTOR, "ReadingLayout", READING_NUMBERS, {}))
    file.message_type.add().CopyFrom(_without(
        pb.Sample.DESCRIPTOR, "SampleLayout", RUN_FIELDS,
        {".perfctl.v1.Reading": f".{package}.ReadingLayout", ".perfctl.v1.Sample": f".{package}.SampleLayout"}))
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(file.name)
    except KeyError:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.SampleLayout"))


SampleLayout = _layout_type()

# layout encoding -> (benchmark identity, labels JSON, shape, per reading what its value is): only layouts
# validate_sample accepted; bounded, as a hostile agent could send a new layout each time (each then costs
# a full validation, as every sample did before)
_LAYOUTS: dict[bytes, tuple] = {}
MAX_LAYOUTS = 4096
_NAN, _OK, _MULTIPLEXED = 0, 1, 2
_INF, _NAN_VALUE = math.inf, math.nan
_KINDS = {"ok": _OK, "multiplexed": _MULTIPLEXED}


def _layout_key(payload: bytes) -> bytes:
    layout = SampleLayout.FromString(payload)
    layout.DiscardUnknownFields()  # the per-run fields and the numbers
    return layout.SerializeToString()


def _known_row(sample: pb.Sample, layout: tuple) -> SampleRow | None:
    """``sample``'s SampleRow (as row_fields gives it), given its layout already validated, in one pass
    over its readings that checks the per-run fields and the numbers as validate_sample does; None when
    anything is out of bounds (validate_sample then says what)."""
    identity, labels, shape, kinds = layout
    uuid = sample.uuid
    job_id = sample.job_id if sample.HasField("job_id") else None
    run_index, start_time_ns, wall_ns, outcome = sample.run_index, sample.start_time_ns, sample.wall_ns, sample.outcome
    # an absent optional number reads 0: in bounds for exit_status and max_rss_kib, not for signal and outlived
    if not (_UUID.match(uuid) and (job_id is None or _UUID.match(job_id)) and 0 <= run_index <= MAX_RUN_INDEX
            and start_time_ns >= 0 and wall_ns >= 0 and outcome in OUTCOMES
            and 0 <= sample.exit_status <= MAX_EXIT_STATUS and sample.max_rss_kib >= 0
            and len(sample.stderr_tail) <= MAX_TEXT):
        return None
    if (sample.HasField("signal") and not 1 <= sample.signal <= MAX_SIGNAL) or (
            sample.HasField("outlived") and not 1 <= sample.outlived <= MAX_TASKS):
        return None
    numbers, complete = [float(wall_ns)], True
    append = numbers.append
    for r, kind in zip(sample.readings, kinds):
        value, scaled, corrected = r.value, r.scaled, r.corrected  # absent: 0, in bounds
        if value < 0 or r.time_enabled < 0 or r.time_running < 0 or not (
                0 <= scaled < _INF and -_INF < corrected < _INF):
            return None
        if kind == _OK:
            if value == 0 and not r.HasField("value"):  # a value other than 0 was sent
                return None
            append(value)  # an int64: never beyond MAX_VALUE; packed as float64 below
        elif kind == _MULTIPLEXED:
            if r.HasField("scaled") and scaled <= MAX_VALUE:
                append(scaled)
            else:
                complete = False
        else:
            append(_NAN_VALUE)
    vals = struct.pack(f"<{len(numbers)}d", *numbers) if complete else None
    return SampleRow(uuid, identity, job_id, run_index, sample.warmup, outcome, start_time_ns, labels, shape, vals)


def _row(sample: pb.Sample, payload: bytes) -> SampleRow:
    """``sample``'s row: by its layout's single pass when the layout was validated before (_known_row), else
    validated in full, and a new layout remembered once accepted. BatchRefused with what validate_sample
    refused it for (the caller names the batch and the sample)."""
    key = _layout_key(payload)
    layout = _LAYOUTS.get(key)
    row = None if layout is None else _known_row(sample, layout)
    if row is not None:
        return row
    problem = validate_sample(sample)
    if problem:
        raise BatchRefused(problem)
    row = row_fields(sample)
    if layout is None:
        if len(_LAYOUTS) >= MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[key] = (row.identity, row.labels, row.shape,
                         tuple(_KINDS.get(r.status, _NAN) for r in sample.readings))
    return row


def decode_batch(data: bytes) -> Decoded | Refused:
    """A SampleBatch's encoding decoded and validated, in a decode worker (server/decoders.py). Decoded holds
    where each payload lies in ``data``, not the payloads: the server process holds ``data`` already, and
    copying each payload back through the pool's pipe (pickled, sent, read, unpickled) cost it ~2 µs a sample
    of its GIL."""
    try:
        sequence, spans = split_batch(data)
    except BatchRefused as err:
        return Refused(None, str(err))
    if len(spans) > 2 * MAX_BATCH_SAMPLES:
        return Refused(sequence, f"batch {sequence}: more than {MAX_BATCH_SAMPLES} samples")
    rows = []
    for index, payload in enumerate(payloads_of(data, spans)):
        try:
            sample = pb.Sample.FromString(payload)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError; the sender needs to know which sample
            return Refused(sequence, f"batch {sequence} sample {index}: not a Sample message")
        try:
            rows.append(_row(sample, payload))
        except BatchRefused as err:
            return Refused(sequence, f"batch {sequence} sample {index} ({sample.uuid[:36]}): {err}")
    return Decoded(sequence, rows, spans)
