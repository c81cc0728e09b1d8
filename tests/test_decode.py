"""Batch decoding (server/decode.py): the raw bytes the server receives become rows and payloads, and every
malformed batch is refused with the reason."""

import math

from conftest import measure

from perfctl import wire
from perfctl.server.decode import decode_batch, decode_spans, row_fields
from perfctl.server.validation import validate_sample
from perfctl.v1 import fleet_pb2 as pb


def _batch(count: int = 3) -> tuple[pb.SampleBatch, list[pb.Sample]]:
    samples = [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["page-faults"], runs=count)]
    return pb.SampleBatch(sequence=42, samples=samples), samples


def test_payloads_are_the_samples_as_sent():
    batch, samples = _batch()
    sequence, rows, payloads = decode_batch(batch.SerializeToString())
    assert sequence == 42
    assert [pb.Sample.FromString(p) for p in payloads] == samples
    assert rows == [row_fields(s) for s in samples]
    assert rows[0][1][0] == "true" and rows[0][0] == samples[0].uuid


def test_malformed_batches_are_refused_with_the_reason():
    batch, samples = _batch(2)
    data = batch.SerializeToString()
    assert "truncated" in decode_batch(data[:-5])[1]
    assert "unexpected field tag" in decode_batch(b"\x1a\x00" + data)[1]
    assert "not a Sample message" in decode_batch(b"\x08\x01\x12\x03\xff\xff\xff")[1]
    broken = pb.SampleBatch(sequence=5, samples=samples)
    broken.samples[1].outcome = "exploded"
    assert decode_batch(broken.SerializeToString()) == (
        5, f"batch 5 sample 1 ({samples[1].uuid}): outcome 'exploded' unknown")
    assert decode_batch(b"") == (0, [], [])


def test_a_known_layout_still_has_its_runs_checked():
    """The second and later samples of a layout are checked by the fast pass (server/decode.py): a run's
    own field or number out of bounds is refused with validate_sample's message, a good one gives the rows
    row_fields gives."""
    batch, samples = _batch(3)
    assert decode_batch(batch.SerializeToString())[1] == [row_fields(s) for s in samples]  # layout now known
    for field, value, message in (("run_index", -1, "run_index must be 0-"), ("wall_ns", -5, "wall_ns is negative"),
                                  ("reading.time_running", -1, "readings[0].time_running is negative"),
                                  ("reading.corrected", math.nan, "readings[0].corrected must be finite")):
        broken = pb.SampleBatch(sequence=9, samples=samples)
        target = broken.samples[2].readings[0] if field.startswith("reading.") else broken.samples[2]
        setattr(target, field.removeprefix("reading."), value)
        refusal = decode_batch(broken.SerializeToString())
        assert refusal == (9, f"batch 9 sample 2 ({samples[2].uuid}): {validate_sample(broken.samples[2])}")
        assert message in refusal[1]


def test_a_worker_sends_where_each_sample_lies_not_its_bytes():
    batch, samples = _batch(3)
    data = batch.SerializeToString()
    sequence, rows, spans = decode_spans(data)
    assert (sequence, rows) == decode_batch(data)[:2]
    assert len(spans) == 6
    assert [pb.Sample.FromString(data[spans[2 * k]:spans[2 * k + 1]]) for k in range(3)] == samples
    assert decode_spans(data[:-5]) == decode_batch(data[:-5])
