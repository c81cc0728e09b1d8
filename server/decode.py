"""Decoding and validating incoming sample batches, in worker processes.

Parsing and validating a sample costs ~15 µs of Python; done in the gRPC process it capped ingest at one
core. Batches arrive as raw bytes and are decoded here, in a pool of spawned worker processes (spawned, not
forked: the server process holds gRPC threads), which return plain row fields and each sample's encoding
as received (stored as its payload, never re-serialized). The server process only inserts and acks.
"""

from __future__ import annotations

import json
import math
import struct

from perfctl.formats.jsonl import MAX_VALUE, counter_labels
from perfctl.server.validation import MAX_BATCH_SAMPLES, validate_sample
from perfctl.v1 import fleet_pb2 as pb


class BatchRefused(ValueError):
    """The batch breaks a bound; the message names the batch, the sample and the field."""


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


def split_batch(data: bytes) -> tuple[int, list[bytes]]:
    """Walk SampleBatch's wire format: field 1 sequence (varint), field 2 samples (length-delimited)."""
    i, end, sequence, payloads = 0, len(data), 0, []
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
                payloads.append(data[i:i + length])
                i += length
            else:
                raise BatchRefused(f"malformed batch: unexpected field tag {tag}")
    except IndexError:
        raise BatchRefused("malformed batch: truncated") from None
    return sequence, payloads


def row_fields(sample: pb.Sample) -> tuple:
    """What the samples table needs besides machine, receipt time and payload: (uuid, benchmark identity,
    job_id, run_index, warmup, outcome, start_time_ns, labels, shape, values); see ``values``."""
    bench = sample.benchmark
    labels = json.dumps(dict(sorted(sample.labels.items())), separators=(",", ":")) if sample.labels else "{}"
    shape, vals = values(sample)
    return (sample.uuid, (bench.name, bench.executable_sha256, bench.input_digest, tuple(bench.argv), bench.executable),
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


def decode_batch(data: bytes) -> tuple[int, list[tuple], list[bytes]] | tuple[int, str]:
    """(sequence, row fields, payloads), or (sequence, why the batch is refused)."""
    try:
        sequence, payloads = split_batch(data)
    except BatchRefused as err:
        return 0, str(err)
    if len(payloads) > MAX_BATCH_SAMPLES:
        return sequence, f"batch {sequence}: more than {MAX_BATCH_SAMPLES} samples"
    rows = []
    for index, payload in enumerate(payloads):
        try:
            sample = pb.Sample.FromString(payload)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError; the sender needs to know which sample
            return sequence, f"batch {sequence} sample {index}: not a Sample message"
        problem = validate_sample(sample)
        if problem:
            return sequence, f"batch {sequence} sample {index} ({sample.uuid[:36]}): {problem}"
        rows.append(row_fields(sample))
    return sequence, rows, payloads
