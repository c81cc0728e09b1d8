"""Sample batches in: each batch of an agent's stream decoded and validated in the decode workers
(server/decoders.py), checked against the machine's jobs, stored with the batches of other streams in one
transaction (GroupCommit) and acked only once that transaction committed. A refused batch ends the stream
INVALID_ARGUMENT, naming the batch in words and in a RefusedBatch the agent reads (perfctl/wire.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures.process import BrokenProcessPool

import grpc

from perfctl.server.decode import Decoded, Refused, SampleRow
from perfctl.server.decoders import Decoders
from perfctl.server.metrics import (
    BATCHES,
    INGEST_ERRORS,
    INGEST_LATENCY,
    SAMPLES_DUPLICATE,
    SAMPLES_INGESTED,
)
from perfctl.server.storage import DatabaseUnavailable, Storage, StorageError
from perfctl.supervise import supervised
from perfctl.v1 import fleet_pb2 as pb
from perfctl.wire import refused_batch_metadata

log = logging.getLogger("perfctl.server")


class Ingest:
    """The sample batches of every agent's stream, in two steps with the token's check between them (the
    service's: a token revoked mid-stream stores nothing more): ``decoded``, then ``stored``."""

    def __init__(self, storage: Storage, decoders: Decoders):
        self.storage = storage
        self.decoders = decoders
        self.writer = GroupCommit(storage)

    async def decoded(self, data: bytes, context) -> Decoded:
        """The batch ``data`` decoded and validated; a refused batch ends the call INVALID_ARGUMENT."""
        try:
            decoded = await self.decoders.decode(data)
        except BrokenProcessPool:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server's decode workers keep dying; "
                                                             "send the batch again later")
        if isinstance(decoded, Refused):
            await _refuse(context, decoded)
        return decoded

    async def stored(self, machine: str, batch: Decoded, data: bytes, received: float, context) -> pb.Ack:
        """``batch`` (decoded from ``data``, read at perf_counter ``received``) stored for ``machine``, once
        committed: its Ack. Each sample naming a job must name one of the machine's."""
        rows = batch.rows
        job_ids = {row.job_id for row in rows if row.job_id is not None}
        if job_ids and not self.storage.knows_jobs(machine, job_ids):
            try:
                foreign = await asyncio.to_thread(self.storage.foreign_jobs, machine, job_ids)
            except StorageError as err:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
            if foreign:
                index, row = next((i, row) for i, row in enumerate(rows) if row.job_id in foreign)
                where = f"batch {batch.sequence} sample {index} ({row.uuid})"
                await _refuse(context, Refused(batch.sequence,
                                               f"{where}: job_id {row.job_id} is not a job of machine {machine}"))
        try:
            stored, duplicates = await self.writer.ingest(machine, rows, batch.payloads(data))
        except StorageError as err:
            INGEST_ERRORS.labels("storage").inc()
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        SAMPLES_INGESTED.inc(stored)
        SAMPLES_DUPLICATE.inc(duplicates)
        BATCHES.inc()
        INGEST_LATENCY.observe(time.perf_counter() - received)
        return pb.Ack(sequence=batch.sequence, stored=stored, duplicates=duplicates)


async def _refuse(context, refused: Refused) -> None:
    """End the call INVALID_ARGUMENT: the agent keeps the batch's samples apart and does not send them again."""
    INGEST_ERRORS.labels("invalid").inc()
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.reason,
                        trailing_metadata=refused_batch_metadata(refused.sequence))


class GroupCommit:
    """Batches from all streams that arrive while a transaction commits are stored together in the next
    one: a commit (an fsync on SQLite) per round instead of per batch. Each caller still gets its own
    (stored, duplicates) only after the commit that covers its batch."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None

    async def ingest(self, machine: str, rows: list[SampleRow], payloads: list[bytes]) -> tuple[int, int]:
        if self.task is None:
            self.task = asyncio.create_task(supervised("group commit", self._run, logger=log))
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((machine, (rows, payloads), future))
        return await future

    async def _run(self) -> None:
        while True:
            pending = [await self.queue.get()]
            while not self.queue.empty():
                pending.append(self.queue.get_nowait())
            requests = [(machine, rows, payloads) for machine, (rows, payloads), _ in pending]
            try:
                outcomes = await asyncio.to_thread(self._store, requests)
            except Exception:  # its streams hear it (they resend the batch); the supervisor logs it and restarts
                for _, _, future in pending:
                    future.done() or future.set_exception(StorageError("the server could not store the batch"))
                raise
            for (_, _, future), outcome in zip(pending, outcomes):
                if future.done():
                    continue
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _store(self, requests: list[tuple[str, list[SampleRow], list[bytes]]]) -> list:
        """Per request (stored, duplicates) or the StorageError that request alone caused: one stream's
        unknown machine or failing insert must not fail the other streams' batches of the same round."""
        outcomes: list = [None] * len(requests)
        ready = []
        for index, (machine, _, _) in enumerate(requests):
            try:
                known = self.storage.machine_pk(machine) is not None
            except Exception as err:  # noqa: BLE001 - a database error; the stream hears it as one line
                outcomes[index] = self._failure(machine, err)
                continue
            if known:
                ready.append(index)
            else:
                outcomes[index] = StorageError(f"unknown machine {machine!r}: it must register first")
        if len(ready) > 1:
            try:
                for index, result in zip(ready, self.storage.ingest_many([requests[i] for i in ready])):
                    outcomes[index] = result
                return outcomes
            except Exception as err:  # noqa: BLE001 - find the guilty batch below, one transaction each
                log.warning("a group commit of %d batches failed (%s); storing each in its own transaction",
                            len(ready), str(err).splitlines()[0] if str(err) else type(err).__name__)
        for index in ready:
            try:
                outcomes[index] = self.storage.ingest_many([requests[index]])[0]
            except Exception as err:  # noqa: BLE001 - this batch alone fails
                outcomes[index] = self._failure(requests[index][0], err)
        return outcomes

    def _failure(self, machine: str, err: Exception) -> Exception:
        if isinstance(err, (StorageError, DatabaseUnavailable)):  # the latter: UNAVAILABLE (server/outage.py)
            return err
        log.error("storing a batch of %s failed", machine, exc_info=err)
        # A cached machine id may be stale (its row deleted): look it up again on the next batch.
        self.storage.forget_machine(machine)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return StorageError(f"cannot store the batch of {machine!r}: {first}")
