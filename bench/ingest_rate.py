#!/usr/bin/env python3
"""Samples stored per second through the full gRPC path (TLS-less loopback, token auth, validation, one
transaction per batch, ack after commit) against a real `perfctl server`, with SQLite and with PostgreSQL,
beside the raw insert rate of the same rows into the same kind of database measured in the same run.
Prints both rates, their ratio and the p99 batch ack latency.

Targets (issues 4 and 15): >= half the raw insert rate of the same database, and on SQLite >= 20,000
samples/s, on a 2-core machine. On PostgreSQL the same streams also go to two server replicas on the one
database (issue 17; the streams alternate between them), printed beside one: on these 2 cores the two
replicas and PostgreSQL share the same CPUs, so this shows what a second replica costs or gains here, not
what it gains on its own machine. The raw rows carry the same columns the server writes (payload, values,
shape and context: server/schema.py).

    python bench/ingest_rate.py [--samples 100000] [--batch 500] [--streams 4] [--no-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fleet import Fleet, bench_databases, free_port, server_database_args, wait_for  # noqa: E402

from perfctl import wire  # noqa: E402
from perfctl.agent import inventory, session  # noqa: E402
from perfctl.agent.events import DEFAULT_EVENTS, parse_events  # noqa: E402
from perfctl.agent.measurement import Measurement  # noqa: E402
from perfctl.agent.runner import make_control  # noqa: E402
from perfctl.server.decode import row_fields  # noqa: E402
from perfctl.server.schema import SampleRecord, contexts, shapes  # noqa: E402
from perfctl.server.storage import Storage  # noqa: E402
from perfctl.v1 import fleet_pb2 as pb  # noqa: E402
from perfctl.v1 import fleet_pb2_grpc as rpc  # noqa: E402


def template() -> pb.Sample:
    """One real sample of /bin/true with the default event set, as the agent would send it."""
    inv = inventory.collect()
    backend = session.make_backend("perf_event", parse_events(list(DEFAULT_EVENTS)), inv)
    measurement = Measurement(backend, make_control(), inv.machine_id)
    try:
        which = measurement.add(session.identify(["/bin/true"], measurement.control, None))
        return wire.sample_to_proto(measurement.measure(which, run_index=0, warmup=False))
    finally:
        measurement.close()
        backend.close()


def batches(base: pb.Sample, total: int, size: int) -> list[pb.SampleBatch]:
    out = []
    for start in range(0, total, size):
        batch = pb.SampleBatch(sequence=start // size + 1)
        for index in range(start, min(total, start + size)):
            sample = batch.samples.add()
            sample.CopyFrom(base)
            sample.uuid = str(uuid.uuid4())
            sample.run_index = index
        out.append(batch)
    return out


async def stream(address: str, token: str, work: list[pb.SampleBatch], latencies: list[float],
                 ready: asyncio.Event) -> None:
    """One agent's stream. Batches are serialized before the clock starts: on this one machine the sending
    agents' CPU would otherwise be taken from the server being measured (real agents run elsewhere)."""
    encoded = [(batch.sequence, batch.SerializeToString()) for batch in work]
    async with grpc.aio.insecure_channel(address, options=[("grpc.max_send_message_length", 16 << 20)]) as channel:
        method = channel.stream_stream("/perfctl.v1.AgentService/StreamSamples", request_serializer=bytes,
                                       response_deserializer=pb.Ack.FromString)
        await ready.wait()
        call = method(metadata=(("authorization", f"Bearer {token}"),))
        sent: dict[int, float] = {}
        window = asyncio.Semaphore(4)

        async def acks():
            async for ack in call:
                latencies.append(time.perf_counter() - sent.pop(ack.sequence))
                window.release()

        reader = asyncio.create_task(acks())
        for sequence, data in encoded:
            await window.acquire()
            sent[sequence] = time.perf_counter()
            await call.write(data)
        await call.done_writing()
        await reader


def grpc_rate(db_args: list[str], url: str, work: list[list[pb.SampleBatch]], names: list[str], tmp: Path,
              replicas: int = 1):
    fleet = Fleet(tmp)
    tokens = [Path(fleet.agent_token(name)).read_text() for name in names]
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(replicas)]
    for index, address in enumerate(addresses):  # one at a time: the first migrates the database
        fleet.start_server(address, db_args, key=f"server{index}")
        wait_for(lambda address=address: fleet.client("machines", server=address).returncode == 0, 60, "the server")
    streams_to = [addresses[i % replicas] for i in range(len(names))]
    try:
        for name, token, address in zip(names, tokens, streams_to):
            with grpc.insecure_channel(address) as channel:
                rpc.AgentServiceStub(channel).Register(
                    pb.RegisterRequest(machine=pb.MachineInfo(name=name, machine_id="bench")),
                    metadata=(("authorization", f"Bearer {token}"),))
        latencies: list[float] = []
        total = sum(len(b.samples) for w in work for b in w)

        timing = {}

        async def run_all():
            ready = asyncio.Event()
            tasks = [asyncio.create_task(stream(address, token, batches_, latencies, ready))
                     for address, token, batches_ in zip(streams_to, tokens, work)]
            await asyncio.sleep(1.0)  # let every stream encode its batches
            timing["start"] = time.perf_counter()
            ready.set()
            await asyncio.gather(*tasks)
            timing["end"] = time.perf_counter()

        asyncio.run(run_all())
        elapsed = timing["end"] - timing["start"]
    finally:
        fleet.stop_all()
    storage = Storage(url)
    stored = storage.count_samples()
    storage.close()
    if stored != total:
        sys.exit(f"bench: {stored} samples stored, {total} sent")
    latencies.sort()
    return total / elapsed, latencies[int(0.99 * (len(latencies) - 1))]


def raw_rate(url: str, work: list[list[pb.SampleBatch]]) -> float:
    """The same rows, inserted straight into the same kind of database with the same driver call the server
    uses (Storage.insert_rows: executemany, duplicates skipped by the database), one commit per batch; no
    gRPC, no validation, no group commit."""
    storage = Storage(url)
    storage.register(pb.MachineInfo(name="raw", machine_id="bench"), 1)
    machine = storage.machine_pk("raw")
    fields = row_fields(work[0][0].samples[0])
    with storage.engine.begin() as conn:
        bench_pk = storage._benchmark_pk(conn, fields.identity, {})
        context_pk = storage._dictionary_pk(conn, contexts, {"labels": fields.labels, "kernel": "unknown"}, {})
        shape_pk = storage._dictionary_pk(conn, shapes, {"spec": fields.shape}, {})
    # the same columns the server writes (payload, and the values compare reads: server/schema.py)
    rows_per_batch = [[SampleRecord(str(uuid.uuid4()), machine, bench_pk, None, s.run_index, s.warmup, s.outcome,
                                    s.start_time_ns, 0, s.SerializeToString(), context_pk, shape_pk, fields.values)
                       for s in batch.samples]
                      for w in work for batch in w]
    total = sum(len(rows) for rows in rows_per_batch)
    start = time.perf_counter()
    for rows in rows_per_batch:
        with storage.engine.begin() as conn:
            storage.insert_rows(conn, rows)
    elapsed = time.perf_counter() - start
    stored = storage.count_samples()
    storage.close()
    if stored != total:
        sys.exit(f"bench: raw insert stored {stored} of {total}")
    return total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    base = template()
    print(f"{args.samples} samples ({len(base.readings)} readings, {base.ByteSize()} bytes each), batches of "
          f"{args.batch}, {args.streams} concurrent agent streams")
    names = [f"bench{i}" for i in range(args.streams)]
    per_stream = args.samples // args.streams
    with bench_databases(args.no_postgres) as kinds:
        for kind, new_database in kinds:
            with tempfile.TemporaryDirectory() as tmp:
                work = [batches(base, per_stream, args.batch) for _ in names]
                url, raw_url = new_database(tmp), new_database(tmp)
                rate, p99 = grpc_rate(server_database_args(url), url, work, names, Path(tmp))
                raw = raw_rate(raw_url, [batches(base, per_stream, args.batch) for _ in names])
                # an absolute rate on PostgreSQL would measure the database (its own raw rate here is below
                # 20,000 rows/s): there the target is the ratio alone (issue 15)
                floor = 20_000 if kind == "sqlite" else 0
                verdict = "PASS" if rate >= floor and rate >= raw / 2 else "FAIL"
                targets = "targets >= 20000/s and >= 0.5" if floor else "target >= 0.5"
                print(f"{kind:>10}: gRPC path {rate:9.0f} samples/s, raw insert {raw:9.0f} rows/s, ratio "
                      f"{rate / raw:.2f}, p99 batch ack {p99 * 1000:.1f} ms  ({targets}) {verdict}")
                if kind == "postgresql":
                    with tempfile.TemporaryDirectory() as second:
                        url_two = new_database(second)
                        two, p99_two = grpc_rate(["--db", url_two], url_two,
                                                 [batches(base, per_stream, args.batch) for _ in names], names,
                                                 Path(second), replicas=2)
                    print(f"{kind:>10}: 2 replicas {two:9.0f} samples/s beside 1 replica {rate:9.0f} "
                          f"({two / rate:.2f}x), p99 batch ack {p99_two * 1000:.1f} ms")


if __name__ == "__main__":
    main()
