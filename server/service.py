"""The gRPC services (grpc.aio): AgentService for agents, QueryService for clients.

Database work runs in threads (storage is synchronous SQLAlchemy) so the event loop keeps serving streams.
A batch is acked only after its transaction committed; a shutdown stops accepting calls and lets batches in
flight finish (``grace``), so an agent either gets the ack or re-sends the batch, never loses it.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import multiprocessing
import signal
import time
from concurrent.futures import Executor, ProcessPoolExecutor

import grpc
from prometheus_client import Counter, Gauge, Histogram
from rich.console import Console

from perfctl.model import DEFAULT_INTERFERENCE_LIMIT, InterferencePolicy
from perfctl.server.auth import Principal, Tokens
from perfctl.server.decode import decode_batch
from perfctl.server.storage import Storage, StorageError
from perfctl.server.validation import (
    MAX_BATCH_SAMPLES,
    MAX_MESSAGE_BYTES,
    validate_audit,
    validate_job,
    validate_machine_name,
)
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

log = logging.getLogger("perfctl.server")

SAMPLES_INGESTED = Counter("perfctl_samples_ingested_total", "Samples stored (new)")
SAMPLES_DUPLICATE = Counter("perfctl_samples_duplicate_total", "Samples received again and not stored twice")
BATCHES = Counter("perfctl_batches_total", "Sample batches acked")
INGEST_LATENCY = Histogram("perfctl_ingest_latency_seconds", "Batch receipt to ack (commit included)",
                           buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5))
AGENTS_CONNECTED = Gauge("perfctl_agents_connected", "Agents with an open job watch")
JOBS = Gauge("perfctl_jobs", "Jobs by state", ["state"])

HEARTBEAT_SECONDS = 10


def _add_agent_service(servicer, server) -> None:
    """The generated registration, except that StreamSamples receives each batch as raw bytes (decoded in
    worker processes, server/decode.py)."""
    handlers = {
        "Register": grpc.unary_unary_rpc_method_handler(
            servicer.Register, request_deserializer=pb.RegisterRequest.FromString,
            response_serializer=pb.RegisterResponse.SerializeToString),
        "StreamSamples": grpc.stream_stream_rpc_method_handler(
            servicer.StreamSamples, request_deserializer=None, response_serializer=pb.Ack.SerializeToString),
        "Heartbeat": grpc.unary_unary_rpc_method_handler(
            servicer.Heartbeat, request_deserializer=pb.HeartbeatRequest.FromString,
            response_serializer=pb.HeartbeatResponse.SerializeToString),
        "WatchJobs": grpc.unary_stream_rpc_method_handler(
            servicer.WatchJobs, request_deserializer=pb.WatchJobsRequest.FromString,
            response_serializer=pb.Job.SerializeToString),
        "ReportJob": grpc.unary_unary_rpc_method_handler(
            servicer.ReportJob, request_deserializer=pb.JobReport.FromString,
            response_serializer=pb.ReportJobResponse.SerializeToString),
        "ReportAudit": grpc.unary_unary_rpc_method_handler(
            servicer.ReportAudit, request_deserializer=pb.AuditReport.FromString,
            response_serializer=pb.ReportAuditResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("perfctl.v1.AgentService", handlers),))
    server.add_registered_method_handlers("perfctl.v1.AgentService", handlers)


def _bearer(context) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and value.startswith("Bearer "):
            return value[len("Bearer "):]
    return None


class _Base:
    def __init__(self, storage: Storage, tokens: Tokens, hub: JobHub):
        self.storage = storage
        self.tokens = tokens
        self.hub = hub

    async def _principal(self, context, role: str) -> Principal:
        principal = self.tokens.identify(_bearer(context))
        if principal is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown token")
        if principal.role != role:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"a {principal.role} token cannot call this")
        return principal

    async def _db(self, context, function, *args):
        try:
            return await asyncio.to_thread(function, *args)
        except StorageError as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))


class JobHub:
    """Jobs waiting for connected agents: one queue per agent watching."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue] = {}

    def offer(self, machine: str, job: pb.Job) -> bool:
        queue = self.queues.get(machine)
        if queue is None:
            return False
        queue.put_nowait(job)
        return True


class GroupCommit:
    """Batches from all streams that arrive while a transaction commits are stored together in the next
    one: a commit (an fsync on SQLite) per round instead of per batch. Each caller still gets its own
    (stored, duplicates) only after the commit that covers its batch."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None

    async def ingest(self, machine: str, rows: list[tuple], payloads: list[bytes]) -> tuple[int, int]:
        if self.task is None:
            self.task = asyncio.create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((machine, (rows, payloads), future))
        return await future

    async def _run(self) -> None:
        while True:
            pending = [await self.queue.get()]
            while not self.queue.empty():
                pending.append(self.queue.get_nowait())
            try:
                results = await asyncio.to_thread(self.storage.ingest_many,
                                                  [(m, rows, payloads) for m, (rows, payloads), _ in pending])
            except Exception as err:  # noqa: BLE001 - every waiting stream must hear the failure
                for _, _, future in pending:
                    if not future.done():
                        future.set_exception(err)
                continue
            for (_, _, future), result in zip(pending, results):
                if not future.done():
                    future.set_result(result)


class AgentService(_Base, rpc.AgentServiceServicer):
    def __init__(self, storage: Storage, tokens: Tokens, hub: JobHub, decoders: Executor | None = None):
        super().__init__(storage, tokens, hub)
        self.writer = GroupCommit(storage)
        self.decoders = decoders

    async def Register(self, request, context):
        principal = await self._principal(context, "agent")
        info = request.machine
        if info.name != principal.name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"token belongs to {principal.name!r}, not {info.name!r}")
        problem = validate_machine_name(info.name) or (
            "inventory too large" if len(info.inventory_json) > 64 << 10 else None) or (
            "too many events" if len(info.events) > 256 else None)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        await self._db(context, self.storage.register, info, time.time_ns())
        log.info("agent %s registered", info.name)
        return pb.RegisterResponse(agent_id=info.name, heartbeat_seconds=HEARTBEAT_SECONDS,
                                   max_batch_samples=MAX_BATCH_SAMPLES)

    async def StreamSamples(self, request_iterator, context):
        principal = await self._principal(context, "agent")
        loop = asyncio.get_running_loop()
        async for data in request_iterator:
            received = time.perf_counter()
            if self.decoders is None:
                decoded = decode_batch(data)
            else:
                decoded = await loop.run_in_executor(self.decoders, decode_batch, data)
            if len(decoded) == 2:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, decoded[1])
            sequence, rows, payloads = decoded
            try:
                stored, duplicates = await self.writer.ingest(principal.name, rows, payloads)
            except StorageError as err:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
            SAMPLES_INGESTED.inc(stored)
            SAMPLES_DUPLICATE.inc(duplicates)
            BATCHES.inc()
            INGEST_LATENCY.observe(time.perf_counter() - received)
            yield pb.Ack(sequence=sequence, stored=stored, duplicates=duplicates)

    async def Heartbeat(self, request, context):
        principal = await self._principal(context, "agent")
        await self._db(context, self.storage.heard, principal.name, time.time_ns())
        return pb.HeartbeatResponse()

    async def WatchJobs(self, request, context):
        principal = await self._principal(context, "agent")
        queue: asyncio.Queue = asyncio.Queue()
        self.hub.queues[principal.name] = queue
        AGENTS_CONNECTED.set(len(self.hub.queues))
        try:
            for job in await self._db(context, self.storage.open_jobs, principal.name):
                queue.put_nowait(job)
            while True:
                job = await queue.get()
                await self._db(context, self.storage.mark_dispatched, job.job_id, principal.name)
                yield job
        finally:
            if self.hub.queues.get(principal.name) is queue:
                del self.hub.queues[principal.name]
            AGENTS_CONNECTED.set(len(self.hub.queues))

    async def ReportJob(self, request, context):
        principal = await self._principal(context, "agent")
        if request.state not in ("running", "done", "failed", "refused"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown job state {request.state!r}")
        updated = await self._db(context, self.storage.update_job, request.job_id[:36], principal.name,
                                 request.state, request.message[:1000], request.samples)
        if not updated:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id[:36]!r} for {principal.name}")
        return pb.ReportJobResponse()


    async def ReportAudit(self, request, context):
        principal = await self._principal(context, "agent")
        problem, report = validate_audit(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        await self._db(context, self.storage.add_audit, principal.name, request.audit_id, int(report["time_ns"]),
                       report["verdict"], request.report_json)
        log.info("agent %s audited: %s", principal.name, report["verdict"])
        return pb.ReportAuditResponse()


AUDIT_STALE_NS = 7 * 24 * 3600 * 10**9


def audit_warning(machine: str, latest: dict | None, now_ns: int) -> str | None:
    """Why a compared machine's counters should not be taken on trust, or None."""
    if latest is None:
        return f"machine {machine} has never been audited (perfctl audit)"
    if latest["verdict"] in ("untrusted", "degraded"):
        return f"machine {machine}'s latest audit is {latest['verdict']}"
    if now_ns - latest["time_ns"] > AUDIT_STALE_NS:
        return f"machine {machine}'s latest audit is {(now_ns - latest['time_ns']) / 86400e9:.0f} days old"
    return None


class QueryService(_Base, rpc.QueryServiceServicer):
    async def ListMachines(self, request, context):
        await self._principal(context, "client")
        rows = await self._db(context, self.storage.list_machines)
        latest = await self._db(context, self.storage.latest_audits)
        response = pb.ListMachinesResponse()
        for row in rows:
            audit = latest.get(row["name"])
            summary = response.machines.add(name=row["name"], machine_id=row["machine_id"],
                                            inventory_json=row["inventory"], backends=json.loads(row["backends"]),
                                            last_heard_ns=row["last_heard_ns"],
                                            connected=row["name"] in self.hub.queues, samples=row["samples"],
                                            audit_verdict=audit["verdict"] if audit else "",
                                            audit_time_ns=audit["time_ns"] if audit else 0)
            for entry in json.loads(row["events"]):
                summary.events.add(**entry)
        return response

    async def ListBenchmarks(self, request, context):
        await self._principal(context, "client")
        rows = await self._db(context, self.storage.list_benchmarks, request.machine or None)
        return pb.ListBenchmarksResponse(benchmarks=[pb.BenchmarkSummary(machine=m, name=n, runs=c)
                                                     for m, n, c in rows])

    async def GetSamples(self, request, context):
        await self._principal(context, "client")
        payloads = await self._db(context, lambda: list(self.storage.sample_payloads(
            request.machine, [request.benchmark] if request.benchmark else None)))
        for payload in payloads:
            yield pb.Sample.FromString(payload)

    async def Compare(self, request, context):
        await self._principal(context, "client")
        return await asyncio.to_thread(self._compare, request)

    def _compare(self, request) -> pb.CompareResponse:
        from perfctl import compare_report
        from perfctl.analysis.compare import Parameters
        from perfctl.formats import DatasetError
        from perfctl.pairing import PairingError

        try:
            parameters = Parameters(alpha=request.alpha or 0.05, confidence=request.confidence or 0.95,
                                    proportion=request.proportion or 0.5, margin=request.margin or 0.05,
                                    paired=request.paired, correction=request.correction or "holm",
                                    precision=request.precision or 0.05, seed=request.seed)
            parameters.validate()
            limit = request.interference_limit or DEFAULT_INTERFERENCE_LIMIT
            if not (0 < limit < 1e6 and math.isfinite(limit)):
                raise ValueError(f"interference limit must be a positive share, got {limit}")
            policy = InterferencePolicy(limit, request.exclude_interfered)
            datasets = [self.machine_dataset(name, list(request.benchmarks), policy) for name in
                        (request.machine_a, request.machine_b)]
            latest = self.storage.latest_audits()
            for dataset, name in zip(datasets, (request.machine_a, request.machine_b)):
                warning = audit_warning(name, latest.get(name), time.time_ns())
                if warning:
                    dataset.notes.append(warning)
            buffer = io.StringIO()
            console = Console(file=buffer, width=150, color_system=None, force_terminal=False)
            code = compare_report.compare_datasets(datasets[0], datasets[1], list(request.metrics) or None, parameters,
                                                   request.format or "table", console,
                                                   (f"machine {request.machine_a}", f"machine {request.machine_b}"))
            return pb.CompareResponse(output=buffer.getvalue(), exit_code=code)
        except (DatasetError, PairingError, ValueError, StorageError) as err:
            return pb.CompareResponse(output=f"perfctl compare: {err}", exit_code=2)

    def machine_dataset(self, machine: str, benchmarks: list[str], interference=None):
        from perfctl.formats import DatasetError
        from perfctl.formats.jsonl import DatasetBuilder
        from perfctl.wire import proto_to_dict

        if self.storage.machine_pk(machine) is None:
            raise DatasetError(f"no machine named {machine!r} on this server")
        builder = DatasetBuilder(f"machine {machine}", interference=interference or InterferencePolicy())
        for payload in self.storage.sample_payloads(machine, benchmarks or None):
            builder.add(proto_to_dict(pb.Sample.FromString(payload)))
        dataset = builder.finish()
        if not dataset.benchmarks:
            raise DatasetError(f"machine {machine!r} has no measured runs" +
                               (f" of {', '.join(benchmarks)}" if benchmarks else ""))
        return dataset

    async def SubmitJob(self, request, context):
        await self._principal(context, "client")
        problem = validate_job(request.job) or ("name 1 to 1000 machines" if not 0 < len(request.machines) <= 1000
                                                else None)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        ids = []
        for machine in request.machines:
            if await self._db(context, self.storage.machine_pk, machine) is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"no machine named {machine!r} has registered")
        for machine in request.machines:
            job_id = await self._db(context, self.storage.create_job, machine, request.job)
            job = pb.Job()
            job.CopyFrom(request.job)
            job.job_id = job_id
            self.hub.offer(machine, job)
            ids.append(job_id)
        await self._refresh_job_gauge()
        return pb.SubmitJobResponse(job_ids=ids)

    async def _refresh_job_gauge(self) -> None:
        counts = await asyncio.to_thread(self.storage.job_counts)
        for state in ("queued", "dispatched", "running", "done", "failed", "refused"):
            JOBS.labels(state).set(counts.get(state, 0))

    async def GetAudits(self, request, context):
        await self._principal(context, "client")
        rows = await self._db(context, self.storage.list_audits, request.machine or None)
        return pb.GetAuditsResponse(audits=[pb.AuditRecord(machine=r["machine"], audit_id=r["id"],
                                                           time_ns=r["time_ns"], verdict=r["verdict"],
                                                           report_json=r["report"]) for r in rows])

    async def GetJobs(self, request, context):
        await self._principal(context, "client")
        rows = await self._db(context, self.storage.list_jobs, request.machine or None)
        await self._refresh_job_gauge()
        return pb.GetJobsResponse(jobs=[pb.JobStatus(job_id=r["id"], machine=r["machine"], state=r["state"],
                                                     message=r["message"], samples=r["samples"],
                                                     submitted_ns=r["submitted_ns"], updated_ns=r["updated_ns"],
                                                     job=pb.Job.FromString(bytes(r["spec"]))) for r in rows])


def decoder_pool(workers: int) -> Executor | None:
    """Worker processes that decode batches; spawned, never forked (this process holds gRPC threads)."""
    if workers <= 0:
        return None
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


async def serve(storage: Storage, tokens: Tokens, listen: str, credentials, grace: float = 10.0,
                ready: asyncio.Event | None = None, decode_workers: int = 1) -> None:
    """Run the server until SIGTERM or SIGINT, then stop taking calls and let in-flight batches finish."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.keepalive_time_ms", 20000), ("grpc.keepalive_timeout_ms", 10000),
                                      ("grpc.http2.max_pings_without_data", 0),
                                      ("grpc.keepalive_permit_without_calls", 1)])
    hub = JobHub()
    decoders = decoder_pool(decode_workers)
    if decoders is not None:  # start the workers now, not on the first batch
        await asyncio.gather(*(asyncio.get_running_loop().run_in_executor(decoders, decode_batch, b"")
                               for _ in range(decode_workers)))
    _add_agent_service(AgentService(storage, tokens, hub, decoders), server)
    rpc.add_QueryServiceServicer_to_server(QueryService(storage, tokens, hub), server)
    if credentials is None:
        port = server.add_insecure_port(listen)
    else:
        port = server.add_secure_port(listen, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    log.info("listening on %s (%s)", listen, "TLS" if credentials else "plaintext")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("stopping: draining in-flight calls for up to %.0f s", grace)
    await server.stop(grace)
    if decoders is not None:
        decoders.shutdown(cancel_futures=True)
