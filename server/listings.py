"""The QueryService's listings, each answer bounded (docs/operations.md, "Bounded answers").

One pattern for every listing: a page per call (page_size, page_token, next_page_token), keyset-paged on an
index, each page closed at PAGE_BYTES. Pages rather than a server stream because a page is one short query
and one message: no cursor or transaction stays open on a replica between pages, a client that fails over
(`--server A,B`) goes on from its token at the other replica, and an old client that knows nothing of
pages still gets a bounded first page instead of a message over its limit. Runs (GetSamples) are the one
stream: they are read in SAMPLE_CHUNK rows in one thread and sent as read (gRPC's flow control holds the
reading back), and a request for more runs than `--max-compare-runs` is refused before the first is sent.

Jobs are looked up by id or id prefix without reading the history; audits are listed as summaries (their
small fields, latest per machine on request) and a report document is fetched by its id.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from array import array
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
from sqlalchemy import and_, func, or_, select

from perfctl.dataset import DatasetError
from perfctl.server.schema import audits, jobs, machines, samples
from perfctl.server.selection import Selector, TooManyRuns, describe
from perfctl.server.storage import Storage, StorageError
from perfctl.server.validation import validate_get_jobs, validate_selection
from perfctl.v1 import fleet_pb2 as pb

PAGE_BYTES = 1 << 20  # a page of summaries closes here (at least one item: a job spec is at most MAX_JOB_BYTES)
DOCUMENT_PAGE_BYTES = 3 << 20  # GetAudits' pages of full reports (1 MiB each at most): under gRPC's 4 MiB default
DEFAULT_PAGE, MAX_PAGE = 100, 1000
DEFAULT_DOCUMENT_PAGE, MAX_DOCUMENT_PAGE = 4, 16
PREFIX_MATCHES = 2  # per job id prefix: one names the job, two say that it is ambiguous
_JOB_PREFIX = re.compile(r"[0-9a-f-]{1,36}\Z")  # what the first characters of a job id (a UUID) can be
SAMPLE_CHUNK = 100  # runs read and held at a time by one GetSamples (a stored run: tens of kB at most)
DIGEST_REASONS, DIGEST_TEXT = 32, 512  # an audit summary's reasons, and the characters of each of its texts


class BadPageToken(ValueError):
    pass


def page_token(*key) -> str:
    """An opaque token for the page after the item whose sort key is ``key``."""
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def page_key(token: str, types: tuple) -> tuple | None:
    """The sort key ``token`` (from page_token) carries, checked against ``types``; None for ""."""
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode())) if len(token) <= 1024 else None
    except (ValueError, UnicodeError):
        key = None
    # what the database can compare: 64-bit integers, names as long as the columns' and without NUL (which
    # PostgreSQL's text cannot hold: server/nul_refusal.py)
    if not isinstance(key, list) or len(key) != len(types) or not all(
            isinstance(value, kind) and not isinstance(value, bool)
            and (-1 << 63 <= value < 1 << 63 if kind is int else len(value) <= 256 and "\x00" not in value)
            for value, kind in zip(key, types)):
        raise BadPageToken("page_token: not one this server gave (start again without it)")
    return tuple(key)


def page_size(requested: int, default: int, largest: int) -> int:
    return min(requested or default, largest)


def _filled(rows, message, budget: int, limit: int) -> tuple[list, object | None]:
    """(the messages of ``rows`` that fit a page, the row after which the next page starts or None): at
    most ``limit`` items and ``budget`` bytes, and at least one. ``rows`` is read lazily, so a page stops
    reading where it closes."""
    page, size, last = [], 0, None
    for row in rows:
        item = message(row)
        if len(page) == limit or (page and size + item.ByteSize() > budget):
            return page, last
        page.append(item)
        size += item.ByteSize() + 8  # the field's tag and length
        last = row
    return page, None


def job_status(row) -> pb.JobStatus:
    return pb.JobStatus(job_id=row["id"], machine=row["machine"], state=row["state"], message=row["message"],
                        samples=row["samples"], submitted_ns=row["submitted_ns"], updated_ns=row["updated_ns"],
                        job=pb.Job.FromString(bytes(row["spec"])), failed_runs=row["failed_runs"])


# --- the database's side: each a keyset query along an index, read lazily ---

@contextlib.contextmanager
def _streamed(storage: Storage, query):
    """The rows of ``query`` as they are read (a page stops reading where it closes)."""
    with storage.engine.connect() as conn:
        yield conn.execution_options(stream_results=True, yield_per=16).execute(query).mappings()


def jobs_page(storage: Storage, machine: str, size: int, after: tuple | None) -> tuple[list, str]:
    """A page of jobs, newest first (ix_jobs_submitted, ix_jobs_machine_submitted), and the next token."""
    query = select(jobs).order_by(jobs.c.submitted_ns.desc(), jobs.c.id.desc()).limit(size + 1)
    if machine:
        query = query.where(jobs.c.machine == machine)
    if after is not None:
        query = query.where(or_(jobs.c.submitted_ns < after[0],
                                and_(jobs.c.submitted_ns == after[0], jobs.c.id < after[1])))
    with _streamed(storage, query) as rows:
        page, last = _filled(rows, job_status, PAGE_BYTES, size)
    return page, page_token(last["submitted_ns"], last["id"]) if last is not None else ""


def jobs_named(storage: Storage, job_ids: list[str], prefixes: list[str]) -> list[pb.JobStatus]:
    """The jobs of these whole ids, and per prefix at most PREFIX_MATCHES jobs whose id starts with it: along
    ix_jobs_id_pattern (text_pattern_ops on PostgreSQL serves LIKE 'abc%' in any collation; SQLite, whose
    LIKE ignores case, uses it through the range)."""
    found = []
    # ids are lower-case UUIDs (server/validation.py): a prefix typed in capitals names them all the same
    job_ids, prefixes = [job_id.lower() for job_id in job_ids], [prefix.lower() for prefix in prefixes]
    with storage.engine.connect() as conn:
        if job_ids:
            found += conn.execute(select(jobs).where(jobs.c.id.in_(job_ids))).mappings().all()
        for prefix in prefixes:
            if not _JOB_PREFIX.match(prefix):  # no job id starts with it (and LIKE needs nothing escaped)
                continue
            query = select(jobs).where(jobs.c.id.like(prefix + "%")).order_by(jobs.c.id).limit(PREFIX_MATCHES)
            if storage.is_sqlite:  # its LIKE ignores case and so no index; ids sort by bytes, 'g' after them
                query = query.where(jobs.c.id >= prefix, jobs.c.id < prefix + "g")
            found += conn.execute(query).mappings().all()
    return [job_status(row) for row in {row["id"]: row for row in found}.values()]


def _latest_audits_query(machine: str):
    """Each machine's latest audit (received last by the server's clock, then id: never by what its agent
    stamped, server/clock.py), as a subquery of the audits' columns."""
    rank = func.row_number().over(partition_by=audits.c.machine,
                                  order_by=(audits.c.received_ns.desc(), audits.c.id.desc())).label("rank")
    query = select(*audits.c, rank)
    if machine:
        query = query.where(audits.c.machine == machine)
    ranked = query.subquery()
    return select(*(ranked.c[c.name] for c in audits.c)).where(ranked.c.rank == 1).subquery()


def _audits_query(machine: str, latest_only: bool, size: int, after: tuple | None):
    table = _latest_audits_query(machine) if latest_only else audits
    # by the server's receipt (migration 0009 filled it for the audits stored before)
    query = select(*table.c).order_by(table.c.machine, table.c.received_ns, table.c.id).limit(size + 1)
    if machine and not latest_only:
        query = query.where(table.c.machine == machine)
    if after is not None:
        query = query.where(or_(table.c.machine > after[0],
                                and_(table.c.machine == after[0], table.c.received_ns > after[1]),
                                and_(table.c.machine == after[0], table.c.received_ns == after[1],
                                     table.c.id > after[2])))
    return query


def _audit_key(row) -> str:
    return page_token(row["machine"], row["received_ns"], row["id"])


def audit_digest(report_json: str) -> dict:
    """What history and drift read of a report (analysis/audits.py drift, the fleet page), its texts cut
    short, or {"problem": why} when it cannot be read."""
    from perfctl.analysis.audits import audit_problem

    try:
        report = json.loads(report_json)
    except (ValueError, RecursionError):
        return {"problem": "not JSON"}
    problem = audit_problem(report)
    if problem:
        return {"problem": problem}
    # only the keys the report has: a key added as None reads as "kernel is not a string" (audit_problem)
    digest = {key: report[key][:DIGEST_TEXT] if isinstance(report[key], str) else report[key]
              for key in ("audit_id", "time_ns", "verdict", "kernel", "microcode") if key in report}
    reasons = report.get("reasons")
    digest["reasons"] = [str(r)[:DIGEST_TEXT] for r in reasons[:DIGEST_REASONS]] if isinstance(reasons, list) else []
    fit = report.get("fit")
    digest["fit"] = {key: fit[key] for key in ("a", "b", "a_interval", "b_interval")} if fit else None
    return digest


def audits_page(storage: Storage, machine: str, latest_only: bool, size: int,
                after: tuple | None) -> tuple[list, str]:
    """A page of audit summaries, by machine then receipt; each report is read, digested and let go."""
    def summary(row) -> pb.AuditSummary:
        return pb.AuditSummary(machine=row["machine"], audit_id=row["id"], time_ns=row["time_ns"],
                               verdict=row["verdict"], digest_json=json.dumps(audit_digest(row["report"])))

    with _streamed(storage, _audits_query(machine, latest_only, size, after)) as rows:
        page, last = _filled(rows, summary, PAGE_BYTES, size)
    return page, _audit_key(last) if last is not None else ""


def audit_documents_page(storage: Storage, machine: str, size: int, after: tuple | None) -> tuple[list, str]:
    """GetAudits: a page of full reports, by machine then receipt."""
    def record(row) -> pb.AuditRecord:
        return pb.AuditRecord(machine=row["machine"], audit_id=row["id"], time_ns=row["time_ns"],
                              verdict=row["verdict"], report_json=row["report"])

    with _streamed(storage, _audits_query(machine, False, size, after)) as rows:
        page, last = _filled(rows, record, DOCUMENT_PAGE_BYTES, size)
    return page, _audit_key(last) if last is not None else ""


def audit_document(storage: Storage, audit_id: str) -> pb.AuditRecord | None:
    with storage.engine.connect() as conn:
        row = conn.execute(select(audits).where(audits.c.id == audit_id)).mappings().one_or_none()
    return None if row is None else pb.AuditRecord(machine=row["machine"], audit_id=row["id"], time_ns=row["time_ns"],
                                                   verdict=row["verdict"], report_json=row["report"])


def sample_chunks(storage: Storage, request, limit: int) -> Iterator[list[bytes]]:
    """GetSamples' runs (payloads) in chunks of SAMPLE_CHUNK, or TooManyRuns when more than ``limit`` are asked
    for, counted from the index before any is read; DatasetError when a selection selects none. Returns a
    generator not yet started: sample_stream reads it in one thread. Without a selection the runs come in the
    order they were stored, as they always did; a selection's come in its index order."""
    benchmarks = [request.benchmark] if request.benchmark else None
    if request.HasField("selection"):
        what = describe(request.selection)
        where = Selector(storage, limit=limit).where(request.selection, benchmarks)
    else:
        what = request.machine
        machine_pk = storage.machine_pk(request.machine)
        benchmark_pks = sorted(storage.benchmark_rows(benchmarks)) if benchmarks else None
        where = None if machine_pk is None or benchmark_pks == [] else {"machine_pk": machine_pk,
                                                                         "benchmark_pks": benchmark_pks}
    runs = sum(count for *_, count in storage.run_counts(**where)) if where else 0
    if runs > limit:
        raise TooManyRuns(f"{what} holds {runs:,} runs, more than the {limit:,} this server sends in one answer "
                          "(perfctl server --max-compare-runs): select fewer (a job, labels or a time range)")
    if not runs and request.HasField("selection"):
        raise DatasetError(f"machine {what!r} has no stored runs selected")
    if request.HasField("selection"):
        return ([payload for *_, payload in rows]
                for rows in storage.stored_values(payloads=True, chunk=SAMPLE_CHUNK, **where))
    return _stored_order(storage, where) if runs else (chunk for chunk in ())


def _stored_order(storage: Storage, where: dict) -> Iterator[list[bytes]]:
    """The runs of ``where`` (a machine, and benchmarks) in the order they were stored, SAMPLE_CHUNK at a time.
    Their ids first (from the index, 8 bytes each: at most the limit of them), then the payloads by id: asked
    to sort the payloads themselves, the database sorts them in memory (SQLite's temporary B-tree held 140 MB
    for 300 MB of runs)."""
    query = select(samples.c.id).where(samples.c.machine == where["machine_pk"]).order_by(samples.c.id)
    if where["benchmark_pks"] is not None:
        query = query.where(samples.c.benchmark.in_(where["benchmark_pks"]))
    with storage.engine.connect() as conn:
        ids = array("q", conn.execute(query).scalars())
    for start in range(0, len(ids), SAMPLE_CHUNK):
        with storage.engine.connect() as conn:
            yield list(conn.execute(select(samples.c.payload).where(samples.c.id.in_(ids[start:start + SAMPLE_CHUNK]))
                                    .order_by(samples.c.id)).scalars())


async def sample_stream(chunks: Iterator[list[bytes]]):
    """Each run's payload, the chunks read in one thread of their own (a database cursor stays in the
    thread that opened it), one chunk at a time: the caller's sending paces the reading."""
    loop = asyncio.get_running_loop()
    reader = ThreadPoolExecutor(1, thread_name_prefix="perfctl-samples")
    try:
        while (payloads := await loop.run_in_executor(reader, next, chunks, None)) is not None:
            for payload in payloads:
                yield bytes(payload)
    finally:
        reader.submit(chunks.close)  # the cursor closes in its own thread, also when the client went away
        reader.shutdown(wait=False)


def machines_page(storage: Storage, connected, name: str, size: int, after: tuple | None) -> tuple[list, str]:
    """A page of machines by name (or the one named), each with its latest audit (received last), its runs
    stored, those flagged with a clock ahead of the server's (server/clock.py), its clock skew and retirement;
    ``connected(name, watched_by, last_heard_ns)`` says whether its agent is connected."""
    latest = storage.latest_audits()
    query = select(machines).order_by(machines.c.name).limit(size + 1)
    if name:
        query = query.where(machines.c.name == name)
    if after is not None:
        query = query.where(machines.c.name > after[0])

    def summary(row) -> pb.MachineSummary:
        audit = latest.get(row["name"])
        made = pb.MachineSummary(name=row["name"], machine_id=row["machine_id"], inventory_json=row["inventory"],
                                 backends=json.loads(row["backends"]), last_heard_ns=row["last_heard_ns"],
                                 connected=connected(row["name"], row["watched_by"], row["last_heard_ns"]),
                                 audit_verdict=audit["verdict"] if audit else "",
                                 audit_time_ns=audit["time_ns"] if audit else 0,  # its receipt (latest_audits)
                                 retired_ns=row["retired_ns"] or 0)
        if row["clock_skew_ns"] is not None:
            made.clock_skew_ns = row["clock_skew_ns"]
        for entry in json.loads(row["events"]):
            made.events.add(**entry)
        made.samples = row["id"]  # the machine's key until its runs are counted below
        return made

    with _streamed(storage, query) as rows:
        page, last = _filled(rows, summary, PAGE_BYTES, size)
    keys = [m.samples for m in page]
    with storage.engine.connect() as conn:
        where = samples.c.machine.in_(keys)
        counts = dict(conn.execute(select(samples.c.machine, func.count()).where(where)
                                   .group_by(samples.c.machine)).all())
        # read from the partial index that holds only the runs flagged (ix_samples_clock_ahead)
        ahead = dict(conn.execute(select(samples.c.machine, func.count())
                                  .where(where, samples.c.clock_ahead_ns.isnot(None))
                                  .group_by(samples.c.machine)).all())
    for made, key in zip(page, keys):
        made.samples, made.clock_ahead_runs = counts.get(key, 0), ahead.get(key, 0)
    return page, page_token(last["name"]) if last is not None else ""


MAX_LABELS = 1000  # a benchmark's distinct labels listed (a label per commit: one per job, for years)


def benchmarks_page(storage: Storage, machine: str, size: int, after: tuple | None) -> tuple[list, str]:
    """Per machine and benchmark identity: runs, jobs, labels and the time range, from the series table (kept
    at ingest) alone; a page of them by machine, then benchmark name and id."""
    machine_pk = storage.machine_pk(machine) if machine else None
    if machine and machine_pk is None:
        return [], ""
    names, identities = storage.machine_names(), storage.benchmark_rows()
    contexts = storage.contexts()
    entries: dict[tuple, dict] = {}
    for machine_id, benchmark_pk, job_id, context_pk, runs, first, last in storage.series(machine_pk):
        key = (names[machine_id][0], identities[benchmark_pk]["name"], benchmark_pk)
        if after is not None and key <= after:
            continue
        entry = entries.setdefault(key, {"runs": 0, "jobs": set(), "labels": {}, "first": first, "last": last})
        entry["runs"] += runs
        entry["jobs"].add(job_id)
        labels = contexts.get(context_pk, {}).get("labels", {})
        entry["labels"].update(dict.fromkeys(f"{k}={v}" for k, v in sorted(labels.items())))
        entry["first"], entry["last"] = min(entry["first"], first), max(entry["last"], last)

    def summary(item) -> pb.BenchmarkSummary:
        (machine_name, _, benchmark_pk), entry = item
        identity, labels = identities[benchmark_pk], list(entry["labels"])
        return pb.BenchmarkSummary(machine=machine_name, name=identity["name"], runs=entry["runs"],
                                   executable_sha256=identity["executable_sha256"],
                                   input_digest=identity["input_digest"], argv=identity["argv"],
                                   jobs=len(entry["jobs"] - {None}), labels=labels[:MAX_LABELS],
                                   labels_left_out=max(0, len(labels) - MAX_LABELS),
                                   first_ns=entry["first"], last_ns=entry["last"])

    page, last = _filled(iter(sorted(entries.items())), summary, PAGE_BYTES, size)
    return page, page_token(*last[0]) if last is not None else ""


class Listings:
    """The QueryService's listing calls (mixed into server/service.py QueryService, which provides
    ``storage``, ``keeper``, ``compare_limit``, ``_principal`` and ``_db``)."""

    async def _page_key(self, context, token: str, types: tuple):
        try:
            return page_key(token, types)
        except BadPageToken as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    async def ListMachines(self, request, context):
        await self._principal(context, "client")
        if len(request.name) > 128:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name: at most 128 characters")
        after = await self._page_key(context, request.page_token, (str,))
        page, token = await self._db(context, machines_page, self.storage, self.keeper.connected, request.name,
                                     page_size(request.page_size, MAX_PAGE, MAX_PAGE), after)
        return pb.ListMachinesResponse(machines=page, next_page_token=token)

    async def ListBenchmarks(self, request, context):
        await self._principal(context, "client")
        if len(request.machine) > 128:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "machine: at most 128 characters")
        after = await self._page_key(context, request.page_token, (str, str, int))
        page, token = await self._db(context, benchmarks_page, self.storage, request.machine,
                                     page_size(request.page_size, MAX_PAGE, MAX_PAGE), after)
        return pb.ListBenchmarksResponse(benchmarks=page, next_page_token=token)

    async def GetJobs(self, request, context):
        await self._principal(context, "client")
        problem = validate_get_jobs(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if request.job_ids or request.id_prefixes:
            answer = pb.GetJobsResponse(jobs=await self._db(context, jobs_named, self.storage, list(request.job_ids),
                                                            list(request.id_prefixes)))
        else:
            after = await self._page_key(context, request.page_token, (int, str))
            page, token = await self._db(context, jobs_page, self.storage, request.machine,
                                         page_size(request.page_size, DEFAULT_PAGE, MAX_PAGE), after)
            answer = pb.GetJobsResponse(jobs=page, next_page_token=token)
        await self._db(context, self.keeper.job_gauge)
        return answer

    async def ListAudits(self, request, context):
        await self._principal(context, "client")
        after = await self._page_key(context, request.page_token, (str, int, str))
        page, token = await self._db(context, audits_page, self.storage, request.machine, request.latest_only,
                                     page_size(request.page_size, DEFAULT_PAGE, MAX_PAGE), after)
        return pb.ListAuditsResponse(audits=page, next_page_token=token)

    async def GetAuditReport(self, request, context):
        await self._principal(context, "client")
        record = await self._db(context, audit_document, self.storage, request.audit_id[:64])
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no audit {request.audit_id[:64]!r}")
        return record

    async def GetAudits(self, request, context):
        await self._principal(context, "client")
        after = await self._page_key(context, request.page_token, (str, int, str))
        page, token = await self._db(context, audit_documents_page, self.storage, request.machine,
                                     page_size(request.page_size, DEFAULT_DOCUMENT_PAGE, MAX_DOCUMENT_PAGE), after)
        return pb.GetAuditsResponse(audits=page, next_page_token=token)

    async def GetSamples(self, request, context):
        await self._principal(context, "client")
        if request.HasField("selection"):
            problem = validate_selection(request.selection, "selection")
            if problem:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            chunks = await asyncio.to_thread(sample_chunks, self.storage, request, self.compare_limit)
        except DatasetError as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        except TooManyRuns as err:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        except StorageError as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        async for payload in sample_stream(chunks):
            yield pb.Sample.FromString(payload)
