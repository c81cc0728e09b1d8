"""Batch decoding (server/decode.py): the raw bytes the server receives become rows and payloads, and every
malformed batch is refused with the reason."""

from conftest import measure

from perfctl import wire
from perfctl.server.decode import decode_batch, row_fields
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
