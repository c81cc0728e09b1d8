"""The gRPC services (grpc.aio): AgentService for agents, QueryService for clients, and ``serve``, which runs
them. Each call's token is checked here; the sample batches are taken in by server/ingest.py (decoded in the
worker pool of server/decoders.py), the address bound by server/binding.py, the listings answered by
server/listings.py.

Database work runs in threads (storage is synchronous SQLAlchemy) so the event loop keeps serving streams.
A batch is acked only after its transaction committed; a shutdown stops accepting calls and lets batches in
flight finish (``grace``), so an agent either gets the ack or re-sends the batch, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import time

import grpc

from perfctl import results
from perfctl.analysis.audits import audit_warning
from perfctl.analysis.compare import Parameters
from perfctl.dataset import DatasetError
from perfctl.model import DEFAULT_INTERFERENCE_LIMIT, InterferencePolicy
from perfctl.output import STOP_SIGNALS, take_stop_held_at_start
from perfctl.pairing import PairingError, compared
from perfctl.server.auth import Principal, Tokens
from perfctl.server.binding import listen_on
from perfctl.server.decoders import Decoders
from perfctl.server.history import HistoryKeeper
from perfctl.server.history_service import HistoryQueries
from perfctl.server.history_store import DEFAULT_LINE
from perfctl.server.ingest import Ingest
from perfctl.server.jobs import DEFAULT_LEASE_S, JobHub, JobKeeper
from perfctl.server.listings import Listings, job_status
from perfctl.server.machine_queries import MachineQueries
from perfctl.server.metrics import AGENTS_CONNECTED, INGEST_ERRORS
from perfctl.server.nul_refusal import NulRefusal
from perfctl.server.outage import DatabaseOutage
from perfctl.server.retention import retain
from perfctl.server.selection import MAX_COMPARE_RUNS, Selector, TooManyRuns, describe
from perfctl.server.storage import DatabaseUnavailable, JobReportError, NoSuchJob, Storage, StorageError
from perfctl.server.submissions import submitted_job
from perfctl.server.validation import (
    MAX_BATCH_SAMPLES,
    MAX_MESSAGE_BYTES,
    job_message,
    validate_audit,
    validate_compare,
    validate_heartbeat,
    validate_job,
    validate_job_id,
    validate_job_report,
    validate_machine_info,
)
from perfctl.supervise import supervised
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

log = logging.getLogger("perfctl.server")

TOKEN_RECHECK_SECONDS = 1.0


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



async def _next_job(queue: asyncio.Queue):
    """The next job for a watch, or TimeoutError after TOKEN_RECHECK_SECONDS (its token is checked again).
    asyncio.timeout, never wait_for, whose lost cancellation would take a job off the queue for a call that
    has ended (perfctl/supervise.py)."""
    async with asyncio.timeout(TOKEN_RECHECK_SECONDS):
        return await queue.get()

class _Base:
    def __init__(self, storage: Storage, tokens: Tokens, keeper: JobKeeper):
        self.storage = storage
        self.tokens = tokens
        self.keeper = keeper
        self.hub = keeper.hub

    async def _principal(self, context, role: str, refused=None) -> Principal:
        """The caller's principal, or the call aborted; ``refused`` (a counter) counts the refusals."""
        principal = self.tokens.identify(_bearer(context))
        if refused is not None and (principal is None or principal.role != role):
            refused.inc()
        if principal is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown token")
        if principal.role != role:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{principal.token_kind} cannot call this")
        return principal

    async def _still_authorized(self, context, principal: Principal, revoked=None) -> None:
        """Long calls (a sample stream, a job watch) check their token again: revoking it in the tokens file
        ends them within a second or so, not at the agent's next reconnect. ``revoked``: a counter of it."""
        if self.tokens.identify(_bearer(context)) != principal:
            if revoked is not None:
                revoked.inc()
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "the token was revoked")

    async def _db(self, context, function, *args):
        try:
            return await asyncio.to_thread(function, *args)
        except StorageError as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))


class AgentService(_Base, rpc.AgentServiceServicer):
    def __init__(self, storage: Storage, tokens: Tokens, keeper: JobKeeper, decoders: Decoders | None = None):
        super().__init__(storage, tokens, keeper)
        self.ingest = Ingest(storage, decoders or Decoders(0))
        # set as the server starts to stop: the endless calls (a sample stream between batches, a job watch)
        # end then, instead of holding the stop for its whole grace period
        self.stopping = asyncio.Event()

    async def _unless_stopping(self, context, awaitable):
        """``awaitable``'s result; if the server starts to stop first, the call ends UNAVAILABLE, which the agent
        hears as "reconnect" (to another replica, when it has several). A batch already read is stored and
        acked first: only the wait for the next one is cut short."""
        waiting = asyncio.ensure_future(awaitable)
        stopping = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # the call itself cancelled (its agent went away): what it waited for goes too, or it would wait
            # on, and a job watch's wait (_next_job) end in a TimeoutError logged as never retrieved
            waiting.cancel()
            raise
        finally:
            stopping.cancel()
        if not waiting.done():
            waiting.cancel()
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is stopping")
        return waiting.result()

    async def Register(self, request, context):
        principal = await self._principal(context, "agent")
        info = request.machine
        if info.name != principal.name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"token belongs to {principal.name!r}, not {info.name!r}")
        problem = validate_machine_info(info)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        now_ns = time.time_ns()
        await self._db(context, self.storage.register, info, now_ns)
        # an agent back (here, or at another replica) renews its jobs' leases at once, not at its first heartbeat
        await self._db(context, self.keeper.deliveries.heard, info.name, now_ns)
        log.info("agent %s registered", info.name)
        return pb.RegisterResponse(heartbeat_seconds=self.keeper.heartbeat_s, max_batch_samples=MAX_BATCH_SAMPLES)

    async def StreamSamples(self, request_iterator, context):
        try:
            principal = await self._principal(context, "agent", refused=INGEST_ERRORS.labels("unauthorized"))
            async for ack in self._acks(principal, request_iterator, context):
                yield ack
        except asyncio.CancelledError:
            # The agent went away, or the server is stopping, while this stream waited (for its token's check
            # too: a stream opened as the server stops): nothing is left to acknowledge (a batch not acked is
            # sent again and stored once). Raised out of the handler, grpc's aio server logged it as an
            # unhandled exception with a traceback on every such shutdown.
            return

    async def _acks(self, principal, request_iterator, context):
        batches = aiter(request_iterator)
        while (data := await self._unless_stopping(context, anext(batches, None))) is not None:
            received = time.perf_counter()
            batch = await self.ingest.decoded(data, context)
            # a token revoked mid-stream stores nothing more
            await self._still_authorized(context, principal, revoked=INGEST_ERRORS.labels("unauthorized"))
            yield await self.ingest.stored(principal.name, batch, data, received, context)

    async def Heartbeat(self, request, context):
        principal = await self._principal(context, "agent")
        problem = validate_heartbeat(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        await self._db(context, self.keeper.deliveries.heard, principal.name, time.time_ns(), request.held_job_ids,
                       request.agent_time_ns)
        return pb.HeartbeatResponse()

    async def WatchJobs(self, request, context):
        principal = await self._principal(context, "agent")
        queue = self.hub.watch(principal.name)
        AGENTS_CONNECTED.set(self.hub.machines())
        try:
            await self._db(context, self.storage.watching, principal.name, self.keeper.replica, True)
            for state, job in await self._db(context, self.storage.open_jobs, principal.name):
                # queued: submitted while no agent of this name was connected; claimed first, as JobKeeper
                # does, for another replica may be offering it too. Dispatched or running: sent again (the
                # agent knows a job it has by its id), so a restarted agent with an empty spool gets it.
                if state != "queued" or await self._db(context, self.keeper.deliveries.claim, job.job_id,
                                                       principal.name):
                    queue.put_nowait(job)
            while True:
                try:
                    job = await self._unless_stopping(context, _next_job(queue))
                except TimeoutError:
                    await self._still_authorized(context, principal)
                    continue
                # a job taken here but never confirmed by the agent is queued again at its delivery deadline
                # and offered through whichever replica the agent is at (server/delivery.py)
                await self._still_authorized(context, principal)
                yield job
        finally:
            self.hub.unwatch(principal.name, queue)
            AGENTS_CONNECTED.set(self.hub.machines())
            if not self.hub.connected(principal.name):
                # a database gone meanwhile: the heartbeats' age says it
                with contextlib.suppress(StorageError, DatabaseUnavailable):
                    await asyncio.to_thread(self.storage.watching, principal.name, self.keeper.replica, False)

    async def ReportJob(self, request, context):
        principal = await self._principal(context, "agent")
        problem = validate_job_report(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            updated = await self._db(context, self.storage.update_job, request.job_id, principal.name,
                                     request.state, job_message(request.message), request.samples, None,
                                     self.keeper.lease_s)
        except JobReportError as err:  # INVALID_ARGUMENT: the agent gives the report up, never re-sends it
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        if not updated:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id!r} for {principal.name}")
        return pb.ReportJobResponse()

    async def ReportAudit(self, request, context):
        principal = await self._principal(context, "agent")
        problem, report, report_json = validate_audit(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        await self._db(context, self.storage.add_audit, principal.name, request.audit_id, int(report["time_ns"]),
                       report["verdict"], report_json)
        log.info("agent %s audited: %s", principal.name, report["verdict"])
        return pb.ReportAuditResponse()


class QueryService(MachineQueries, HistoryQueries, _Base, Listings, rpc.QueryServiceServicer):
    """Compare, jobs and the machines' own calls; the listings' calls are server/listings.py's."""

    def __init__(self, storage: Storage, tokens: Tokens, keeper: JobKeeper, compare_limit: int = MAX_COMPARE_RUNS):
        super().__init__(storage, tokens, keeper)
        self.compare_limit = compare_limit

    async def Compare(self, request, context):
        await self._principal(context, "client")
        problem = validate_compare(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            return await asyncio.to_thread(self._compare, request)
        except TooManyRuns as err:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        except DatasetError as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        except (PairingError, ValueError, StorageError) as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except DatabaseUnavailable:
            raise  # UNAVAILABLE (server/outage.py), not a bug
        except Exception as err:  # noqa: BLE001 - a bug: the client gets one line, the log the traceback
            log.exception("compare %s %s failed", describe(request.a), describe(request.b))
            first = str(err).splitlines()[0] if str(err) else ""
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error on the server: {type(err).__name__}: "
                                                          f"{first} (the server log has the details)")

    def _compare(self, request) -> pb.CompareResponse:
        """Select both sides' runs (server/selection.py), compare them (perfctl/pairing.py) and return the
        comparison as data (perfctl/results.py): the client renders it."""
        parameters = Parameters.given(alpha=request.alpha, confidence=request.confidence,
                                      proportion=request.proportion, margin=request.margin, paired=request.paired,
                                      correction=request.correction, precision=request.precision,
                                      seed=request.seed, family=request.family)
        parameters.validate()
        limit = request.interference_limit or DEFAULT_INTERFERENCE_LIMIT
        if not (0 < limit < 1e6 and math.isfinite(limit)):
            raise ValueError(f"interference limit must be a positive share, got {limit}")
        selector = Selector(self.storage, InterferencePolicy(limit, request.exclude_interfered), request.pool,
                            self.compare_limit, paired=request.paired)
        benchmarks = list(request.benchmarks) or None
        datasets = selector.datasets(request.a, request.b, benchmarks)  # at once, without a run on both sides
        latest = self.storage.latest_audits()
        for dataset, side in zip(datasets, (request.a, request.b)):
            warning = audit_warning(side.machine, latest.get(side.machine), time.time_ns())
            if warning:
                dataset.notes.append(warning)
        result = compared(datasets[0], datasets[1], list(request.metrics) or None, parameters,
                          (f"machine {describe(request.a)}", f"machine {describe(request.b)}"))
        replayed = self._sequential(request, datasets)
        return pb.CompareResponse(comparison_json=results.dumps(result),
                                  sequential_json=results.dumps(replayed) if replayed else "")

    def _sequential(self, request, datasets):
        """When A and B are two commands of one --until-settled job (MACHINE@job=ID,ab=A and ...,ab=B), the
        job's rounds replayed under its rule (analysis/ab.py replay): the agent's own decision. None for any
        other comparison, or when the rounds cannot be paired (a run failed or was left out on one side)."""
        from perfctl.analysis.ab import replay
        from perfctl.model import SIDE_LABEL, compared_metric, side_letter

        a, b = request.a, request.b
        baseline, side = side_letter(0), b.labels.get(SIDE_LABEL)
        if not a.job_id or (a.job_id, a.machine) != (b.job_id, b.machine) or a.labels.get(SIDE_LABEL) != baseline \
                or side in (None, baseline):
            return None
        spec = self.storage.job_spec(a.job_id, a.machine)
        names = set(datasets[0].benchmarks) & set(datasets[1].benchmarks)
        if spec is None or not spec.HasField("sequential") or len(names) != 1:
            return None
        name = names.pop()
        metrics_a, metrics_b = datasets[0].benchmarks[name].metrics, datasets[1].benchmarks[name].metrics
        # the agent's choice among what both sides counted (model.py: instructions is instructions:u)
        counted = {m for m, values in metrics_a.items() if values} & {m for m, values in metrics_b.items() if values}
        try:
            metric = compared_metric(spec.sequential.metric or None, dict.fromkeys(counted))
        except ValueError:  # not counted on both sides: no verdict to replay
            return None
        values_a, values_b = metrics_a.get(metric, []), metrics_b.get(metric, [])
        if not values_a or len(values_a) != len(values_b):
            return None
        try:
            return replay(values_a, values_b, label=side, metric=metric, margin=spec.sequential.margin,
                          confidence=spec.sequential.confidence, commands=len(spec.commands),
                          min_rounds=spec.sequential.min_rounds)
        except ValueError:  # a value at 0: an older agent left that round out (this one ends the job there)
            return None

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
        for machine in request.machines:  # once per submit_id, however often it is sent
            job = await self._db(context, submitted_job, self.storage, machine, request)
            await self._offer(context, machine, job)
            ids.append(job.job_id)
        await self._db(context, self.keeper.job_gauge)
        return pb.SubmitJobResponse(job_ids=ids)

    async def _offer(self, context, machine: str, job: pb.Job) -> None:
        """To an agent connected here at once; to one at another replica within its DISPATCH_POLL_S."""
        try:
            await self.keeper.claim_and_offer(machine, job)
        except StorageError as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))

    async def RetryJob(self, request, context):
        await self._principal(context, "client")
        problem = validate_job_id(request.job_id)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            row = await asyncio.to_thread(self.storage.retry_job, request.job_id)
        except NoSuchJob as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        except (JobReportError, StorageError) as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        job = pb.Job.FromString(bytes(row["spec"]))
        await self._offer(context, row["machine"], job)
        await self._db(context, self.keeper.job_gauge)
        log.info("job %s on %s retried: %d runs stored are kept", job.job_id, row["machine"], len(job.stored_runs))
        return pb.RetryJobResponse(job=job_status(row))


async def serve(storage: Storage, tokens: Tokens, listen: str, credentials, grace: float = 10.0,
                ready: asyncio.Event | None = None, decode_workers: int = 1,
                compare_limit: int = MAX_COMPARE_RUNS, lease_s: float = DEFAULT_LEASE_S,
                retain_s: float | None = None, history_line: tuple[str, ...] = DEFAULT_LINE) -> None:
    """Run the server until SIGTERM or SIGINT, then stop taking calls and let in-flight batches finish.

    OSError("cannot listen on ADDRESS: why") when the address, or one of those it resolves to, cannot be
    bound. SO_REUSEPORT is off (gRPC turns it on by default): a second server on a taken port must fail, not
    silently share the port and split the agents between two databases."""
    server = grpc.aio.server(interceptors=[NulRefusal(), DatabaseOutage()],
                             options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.keepalive_time_ms", 20000), ("grpc.keepalive_timeout_ms", 10000),
                                      ("grpc.http2.max_pings_without_data", 0),
                                      ("grpc.keepalive_permit_without_calls", 1),
                                      ("grpc.so_reuseport", 0)])
    keeper = JobKeeper(storage, JobHub(), lease_s)
    decoders = Decoders(decode_workers)
    keeping = None
    try:
        agents = AgentService(storage, tokens, keeper, decoders)
        _add_agent_service(agents, server)
        rpc.add_QueryServiceServicer_to_server(QueryService(storage, tokens, keeper, compare_limit), server)
        listen_on(server, listen, credentials)
        await decoders.start()
        await server.start()
        # compare's tests import scipy.stats on first use (perfctl/analysis): 1-3 s, paid here in a thread once
        # the server listens, rather than by the first compare a user asks for (which waits for this import
        # if it comes sooner) or by every start before it listens (a fleet's agents waited on it)
        keeping = [asyncio.create_task(asyncio.to_thread(importlib.import_module, "scipy.stats")),
                   asyncio.create_task(keeper.run()),
                   asyncio.create_task(supervised("history", HistoryKeeper(storage, history_line).run, logger=log))]
        if retain_s is not None:
            keeping.append(asyncio.create_task(supervised("retention", lambda: retain(storage, retain_s), logger=log)))
        log.info("listening on %s (%s)", listen, "TLS" if credentials else "plaintext")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:  # the signal policy of every command (perfctl/output.py)
            loop.add_signal_handler(sig, stop.set)
        if take_stop_held_at_start() is not None:  # a stop received while the server started: it stops now
            stop.set()
        if ready is not None:
            ready.set()
        await stop.wait()
        agents.stopping.set()
        log.info("stopping: draining in-flight calls for up to %.0f s", grace)
        await server.stop(grace)
        await _unwound([task for task in (*keeping, agents.ingest.writer.task) if task], grace)
    finally:
        for task in keeping or ():
            task.cancel()
        decoders.shutdown()


async def _unwound(endless: list[asyncio.Task], timeout: float) -> None:
    """Cancel the server's own endless tasks and wait for every other task to end, after ``server.stop``.

    The stop returns once gRPC's core holds no live call, but the task of a call the core has just cancelled
    (an agent stopping with the server, as SIGTERM to one process group does) may not have run its last step
    yet; asyncio.run would cancel it on return, and grpc logs each task cancelled that way as "Exception not
    handled" with a traceback (1 to 3 stops in 20 did, agent and server stopped together)."""
    for task in endless:
        task.cancel()
    pending = asyncio.all_tasks() - {asyncio.current_task()}
    if pending:
        await asyncio.wait(pending, timeout=timeout)
