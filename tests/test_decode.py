"""Batch decoding (server/decode.py): the raw bytes the server receives become rows and payloads (Decoded),
and every malformed batch is refused with the reason (Refused)."""

import math

from conftest import measure

from perfctl import wire
from perfctl.server.decode import Decoded, Refused, decode_batch, row_fields
from perfctl.server.validation import validate_sample
from perfctl.v1 import fleet_pb2 as pb


def _batch(count: int = 3) -> tuple[pb.SampleBatch, list[pb.Sample]]:
    samples = [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["page-faults"], runs=count)]
    return pb.SampleBatch(sequence=42, samples=samples), samples


def test_payloads_are_the_samples_as_sent():
    batch, samples = _batch()
    data = batch.SerializeToString()
    decoded = decode_batch(data)
    assert decoded.sequence == 42
    assert [pb.Sample.FromString(p) for p in decoded.payloads(data)] == samples
    assert decoded.rows == [row_fields(s) for s in samples]
    assert decoded.rows[0].identity[0] == "true" and decoded.rows[0].uuid == samples[0].uuid


def test_malformed_batches_are_refused_with_the_reason():
    batch, samples = _batch(2)
    data = batch.SerializeToString()
    assert "truncated" in decode_batch(data[:-5]).reason
    assert decode_batch(b"\x1a\x00" + data) == Refused(None, "malformed batch: unexpected field tag 26")
    assert decode_batch(b"\x08\x01\x12\x03\xff\xff\xff") == Refused(1, "batch 1 sample 0: not a Sample message")
    broken = pb.SampleBatch(sequence=5, samples=samples)
    broken.samples[1].outcome = "exploded"
    assert decode_batch(broken.SerializeToString()) == Refused(
        5, f"batch 5 sample 1 ({samples[1].uuid}): outcome 'exploded' unknown")
    assert decode_batch(b"") == Decoded(0, [], [])


def test_a_known_layout_still_has_its_runs_checked():
    """The second and later samples of a layout are checked by the fast pass (server/decode.py): a run's
    own field or number out of bounds is refused with validate_sample's message, a good one gives the rows
    row_fields gives."""
    batch, samples = _batch(3)
    assert decode_batch(batch.SerializeToString()).rows == [row_fields(s) for s in samples]  # layout now known
    for field, value, message in (("run_index", -1, "run_index must be 0-"), ("wall_ns", -5, "wall_ns is negative"),
                                  ("reading.time_running", -1, "readings[0].time_running is negative"),
                                  ("reading.corrected", math.nan, "readings[0].corrected must be finite")):
        broken = pb.SampleBatch(sequence=9, samples=samples)
        target = broken.samples[2].readings[0] if field.startswith("reading.") else broken.samples[2]
        setattr(target, field.removeprefix("reading."), value)
        refusal = decode_batch(broken.SerializeToString())
        assert refusal == Refused(9, f"batch 9 sample 2 ({samples[2].uuid}): {validate_sample(broken.samples[2])}")
        assert message in refusal.reason


def test_a_worker_sends_where_each_sample_lies_not_its_bytes():
    batch, samples = _batch(3)
    data = batch.SerializeToString()
    spans = decode_batch(data).spans
    assert len(spans) == 6
    assert [pb.Sample.FromString(data[spans[2 * k]:spans[2 * k + 1]]) for k in range(3)] == samples


class _Refusal:
    """The part of a grpc.RpcError that the agent reads to find the batch a server refused."""

    def __init__(self, metadata):
        self.metadata = metadata

    def trailing_metadata(self):
        return self.metadata


def test_the_agent_finds_the_refused_batch_in_the_trailing_metadata_not_in_the_words():
    assert wire.refused_batch(_Refusal(wire.refused_batch_metadata(7))) == 7
    assert wire.refused_batch_metadata(None) == ()  # a batch not readable as far as its sequence names none
    assert wire.refused_batch(_Refusal(())) is None and wire.refused_batch(_Refusal(None)) is None
    assert wire.refused_batch(_Refusal(((wire.REFUSED_BATCH_KEY, b"\xff"),))) is None  # not a RefusedBatch
