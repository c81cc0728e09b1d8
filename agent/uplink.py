"""The agent's uplink: its connection to a server. It registers the machine, streams the spooled samples in
batches (at most WINDOW in flight; a batch leaves the spool only when the server acks it, after its commit),
reports jobs and audits, and takes the jobs the server sends (agent/jobs.py); after a lost connection it
connects again, to the next server of several, with exponential backoff and jitter. Everything not acked is
sent again: the spool keeps it (agent/spool.py), the server stores a uuid once. The measuring is the daemon's
(agent/daemon.py); this side only reads and acks the spool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

import grpc
from prometheus_client import Counter, Gauge

from perfctl import security, wire
from perfctl.agent.jobs import Delivery
from perfctl.agent.spool import SpoolError, SpoolFull
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

log = logging.getLogger("perfctl.agent")

ACKED = Counter("perfctl_agent_samples_acked_total", "Samples acked by the server")
BATCHES_PENDING = Gauge("perfctl_agent_batches_pending", "Batches sent and not yet acked")
CONNECTED = Gauge("perfctl_agent_connected", "1 while registered with the server")
WINDOW = 4  # batches in flight
SPOOL_RETRY_MAX = 8.0  # seconds between tries of a spool write while its disk is full
LINGER = 0.05  # seconds to let a batch fill once samples arrive: fewer, larger commits on the server
# A server that cannot be reached yet (an agent started before it, as in README's quickstart, or a restart)
# is waited for quietly: one info line at the first refusal, a warning only once it lasted UNREACHABLE_WARN_S,
# and again every UNREACHABLE_REPEAT_S; a connection lost after registering is still a warning at once.
UNREACHABLE_WARN_S = 30.0
UNREACHABLE_REPEAT_S = 600.0


class Uplink:
    """One agent's network side, on the event loop it is made in. ``agent`` (agent/daemon.py Agent) gives the
    machine's description, the job it measures now, and the spool's full-disk state both sides share."""

    def __init__(self, agent) -> None:
        self.agent, self.config, self.spool, self.stopping = agent, agent.config, agent.spool, agent.stopping
        self._loop = asyncio.get_running_loop()
        self.new_samples = asyncio.Event()
        self.backoff, self.heartbeat_s = 0.5, float(self.config.backoff_max)
        self._unreachable_since: float | None = None  # monotonic time of the first refused connection in a row
        self._unreachable_said = 0.0  # how long it had lasted when last said

    def samples_spooled(self) -> None:
        """From any thread: new samples are in the spool (the sender wakes)."""
        self._loop.call_soon_threadsafe(self.new_samples.set)

    async def connect_until_stopped(self) -> None:
        """Connected to a server until the agent stops; of several (--server A,B), the next in turn after each
        lost connection; the spool holds what was not acked meanwhile. A reconnect waits at most heartbeat_s, the
        interval the server last gave (3 per lease): a live agent's lease holds once any server answers again."""
        metadata = (("authorization", f"Bearer {self.config.token}"),)
        info = self.agent.machine_info()
        servers = security.split_servers(self.config.server)
        turn = 0
        while not self.stopping.is_set():
            server = servers[turn % len(servers)]
            turn += 1
            channel = security.channel(server, self.config.tls, self.config.insecure,
                                       options=[("grpc.keepalive_time_ms", 10000), ("grpc.keepalive_timeout_ms", 5000),
                                                ("grpc.keepalive_permit_without_calls", 1),
                                                ("grpc.http2.max_pings_without_data", 0)])
            registered = False
            try:
                stub = rpc.AgentServiceStub(channel)
                response = await stub.Register(pb.RegisterRequest(machine=info), metadata=metadata, timeout=5)
                waited = time.monotonic() - self._unreachable_since if self._unreachable_since else 0
                registered, self._unreachable_since = True, None
                log.info("registered with %s as %s%s", server, self.config.name,
                         f" after waiting {waited:.0f} s" if waited >= 1 else "")
                CONNECTED.set(1)
                self.backoff, self.heartbeat_s = 0.5, response.heartbeat_seconds or 10
                delivery = Delivery(self.spool, lambda: self.agent.current_job, self.spool_write, self.agent.job_wakeup)
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._send(stub, metadata, min(response.max_batch_samples or 500,
                                                                     self.config.batch_max)))
                    group.create_task(delivery.heartbeat(stub, metadata, self.heartbeat_s))
                    group.create_task(delivery.watch(stub, metadata))
                    group.create_task(self._report(stub, metadata))
                    group.create_task(self._until_stopped())
            except* grpc.aio.AioRpcError as group_error:
                for err in group_error.exceptions:
                    if not registered and err.code() == grpc.StatusCode.UNAVAILABLE:
                        self._unreachable(server, err)
                    else:
                        log.warning("server %s: %s: %s", server, err.code().name, err.details())
            except* _Stopped:
                pass
            except* _StreamEnded as group_error:
                log.warning("server %s: %s", server, group_error.exceptions[0])
            except* SpoolError as group_error:
                self.agent.spool_damaged(group_error.exceptions[0])
            finally:
                CONNECTED.set(0)
                BATCHES_PENDING.set(0)
                await channel.close()
            if not self.stopping.is_set():
                delay = min(self.backoff * (0.5 + random.random()), self.heartbeat_s)
                # while a server is waited for, each try is said only under -v
                log.log(logging.DEBUG if self._unreachable_since else logging.INFO, "reconnecting in %.1f s", delay)
                await self._sleep(delay)
                self.backoff = min(self.backoff * 2, self.config.backoff_max, self.heartbeat_s)

    def _unreachable(self, server: str, err: grpc.aio.AioRpcError) -> None:
        """A server that refused or did not answer the connection (UNAVAILABLE before registering): said once
        calmly, then as a warning only when it lasted (UNREACHABLE_WARN_S), never once per try."""
        details = err.details() or ""
        reason = ("connection refused" if "Connection refused" in details
                  else details.rsplit("last error: ", 1)[-1] or "unavailable")
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since, self._unreachable_said = now, 0.0
            log.info("waiting for server %s (%s); retrying", server, reason)
            return
        lasted = now - self._unreachable_since
        due = UNREACHABLE_WARN_S if not self._unreachable_said else self._unreachable_said + UNREACHABLE_REPEAT_S
        if lasted >= due:
            self._unreachable_said = lasted
            log.warning("server %s unreachable for %.0f s (%s); still retrying", server, lasted, reason)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the agent is asked to stop."""
        deadline = time.monotonic() + seconds
        while not self.stopping.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, deadline - time.monotonic()))

    async def spool_write(self, write, *args):
        """Agent._spool_write for the network side: waits without blocking the event loop, so heartbeats go on
        while the disk is full. The write's result; _Stopped if the agent stopped meanwhile."""
        delay = 1.0
        while True:
            try:
                result = await asyncio.to_thread(write, *args)
            except SpoolFull as err:
                self.agent.spool_is_full(err)
                await self._sleep(delay)
                if self.stopping.is_set():
                    raise _Stopped from None
                delay = min(delay * 2, SPOOL_RETRY_MAX)
                await asyncio.to_thread(self.agent.release_wal)
                continue
            self.agent.spool_has_space()
            return result

    async def _until_stopped(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(0.2)
        raise _Stopped

    async def _send(self, stub, metadata, max_batch: int) -> None:
        call = stub.StreamSamples(metadata=metadata)
        in_flight: dict[int, list[int]] = {}
        window = asyncio.Semaphore(WINDOW)

        async def read_acks() -> None:
            try:
                async for ack in call:
                    seqs = in_flight.pop(ack.sequence, [])
                    await self.spool_write(self.spool.acked, seqs)
                    ACKED.inc(len(seqs))
                    BATCHES_PENDING.set(len(in_flight))
                    window.release()
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    seqs = in_flight.get(wire.refused_batch(err), [])
                    await self.spool_write(self.spool.reject, seqs, err.details() or "invalid")
                    log.error("server refused %d samples as invalid (kept in the spool's rejected table): %s",
                              len(seqs), err.details())
                raise
            finally:
                # a sender waiting for room in a full window would wait forever once no ack can come
                # (the heartbeats and job watch may well go on): every slot freed, it wakes and sees the end
                for _ in range(WINDOW):
                    window.release()

        def ended() -> _StreamEnded:
            """The call's error, if it ended with one (AioRpcError, raised); else that it ended."""
            reader.result()
            return _StreamEnded("the server closed the sample stream")

        reader = asyncio.create_task(read_acks())
        last_seq, sequence = 0, 0
        try:
            while not self.stopping.is_set():  # as well as its cancellation: a stop never waits on this loop
                if reader.done():
                    raise ended()
                rows = await asyncio.to_thread(self.spool.pending, last_seq, max_batch)
                if not rows:
                    self.new_samples.clear()
                    # asyncio.timeout, never wait_for: a stop's cancellation that met the commit of the runs
                    # held (which wakes this) was lost in wait_for, and the stop hung (perfctl/supervise.py)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(1.0):
                            await self.new_samples.wait()
                        await asyncio.sleep(LINGER)
                    continue
                await window.acquire()
                if reader.done() or call.done():
                    # the stream ended while this waited (the server went away): the reader has, or is about
                    # to have, the call's error; writing would raise InvalidStateError, which killed the agent
                    await asyncio.wait([reader])
                    raise ended()
                sequence += 1
                in_flight[sequence] = [seq for seq, _ in rows]
                last_seq = rows[-1][0]
                BATCHES_PENDING.set(len(in_flight))
                await call.write(pb.SampleBatch(sequence=sequence,
                                                samples=[pb.Sample.FromString(payload) for _, payload in rows]))
        finally:
            reader.cancel()
            call.cancel()

    async def _report(self, stub, metadata) -> None:
        while True:
            for job_id, state, message, runs in await asyncio.to_thread(self.spool.unreported):
                if state in ("done", "failed") and await asyncio.to_thread(self.spool.runs_unsent, job_id):
                    # a job ends on the server once its runs are stored there: whoever waits for it
                    # (perfctl submit --wait) then compares every run, not those acked so far
                    continue
                try:
                    await stub.ReportJob(pb.JobReport(job_id=job_id, state=state, message=message, samples=runs),
                                         metadata=metadata, timeout=10)
                except grpc.aio.AioRpcError as err:
                    if err.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                        raise
                    log.warning("server refused the report of job %s (%s); not sent again", job_id, err.details())
                await self.spool_write(self.spool.mark_reported, job_id, state)
            for audit_id, report in await asyncio.to_thread(self.spool.unreported_audits):
                if report:
                    await stub.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report), metadata=metadata,
                                           timeout=10)
                await self.spool_write(self.spool.mark_audit_reported, audit_id)
            await asyncio.sleep(0.5)


class _Stopped(Exception):
    pass


class _StreamEnded(Exception):
    """The sample stream ended without an error while the connection stood: reconnect, and every batch not
    acked is sent again."""
