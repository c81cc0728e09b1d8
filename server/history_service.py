"""The QueryService's history calls (issue 32): ListChanges, UpdateChange, GetHistory, each validated
(server/validation.py) and answered in bounded pages like the other listings (server/listings.py; docs/
operations.md "Bounded answers"). Mixed into server/service.py QueryService, which provides ``storage``,
``_principal``, ``_db`` and ``_page_key``.
"""

from __future__ import annotations

import contextlib
import json

import grpc
from sqlalchemy import func, select

from perfctl.server import history_ordered
from perfctl.server import history_store as store
from perfctl.server.history import open_regressions_gauge
from perfctl.server.listings import PAGE_BYTES, page_size, page_token
from perfctl.server.schema import history_changes, history_points
from perfctl.server.validation import validate_get_history, validate_list_changes, validate_update_change
from perfctl.v1 import fleet_pb2 as pb

DEFAULT_CHANGES, MAX_CHANGES = 100, 1000
DEFAULT_POINTS, MAX_POINTS = 5000, 20000


def change_message(row, head: dict) -> pb.Change:
    """The wire form of a history_changes row of the series ``head`` (the contract's change row: perfctl/client.py
    turns it into the dict `perfctl changes --format json` prints)."""
    analysis = json.loads(row["analysis"])
    before, after = analysis["before_side"], analysis["after_side"]
    return pb.Change(
        id=row["id"], machine=row["machine"], benchmark=row["benchmark"], argv=head["argv"], metric=head["metric"],
        line=head["line"], state=row["state"],
        before=pb.ChangeSide(job_id=before["job"], commit=before["commit"], time_ns=before["time_ns"],
                             points=before["points"], runs=before["runs"], median=before["median"]),
        after=pb.ChangeSide(job_id=after["job"], commit=after["commit"], time_ns=after["time_ns"],
                            points=after["points"], runs=after["runs"], median=after["median"]),
        ratio=analysis["ratio"], low=analysis["low"], high=analysis["high"], confidence=analysis["confidence"],
        margin=analysis["margin"], verdict=analysis["verdict"], finding=analysis["finding"],
        p_value=analysis["p_value"], regression=row["regression"], note=row["note"], link=row["link"],
        fixed_by=row["fixed_by"], detected_ns=row["detected_ns"], updated_ns=row["updated_ns"])


_HEADS: dict[int, dict] = {}  # series id -> its identity: a series' row is never changed once written
MAX_CACHED_HEADS = 100_000
# the stored changes a series' first part carries, the newest (HistorySeries.changes_capped counts the others):
# a series that changed every few jobs for years is not read whole into one answer; ListChanges pages them all
MAX_SERIES_CHANGES = 1000


def heads_of(conn, pks: set) -> dict[int, dict]:
    """The identities of series ``pks``, a dict of its own (the cache may be cleared by another thread's
    call while the caller reads the answer)."""
    cached = {pk: _HEADS[pk] for pk in pks if pk in _HEADS}
    missing = pks - cached.keys()
    if missing:
        fetched = store.series_heads(conn, missing)
        if len(_HEADS) + len(fetched) > MAX_CACHED_HEADS:
            _HEADS.clear()
        _HEADS.update(fetched)
        cached.update(fetched)
    return cached


def changes_page(storage, request, size: int, after: tuple | None) -> tuple[list, str]:
    """A page of changes, newest first, closed at ``size`` or PAGE_BYTES; the next page's token."""
    query = store.changes_query(request.machine, request.benchmark, request.since_ns, list(request.states), after,
                                size + 1)
    page, total, last = [], 0, None
    with storage.engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
        heads = heads_of(conn, {row["series"] for row in rows})
    for row in rows:
        message = change_message(row, heads[row["series"]])
        bytes_of = message.ByteSize() + 8  # the field's tag and length
        if len(page) == size or (page and total + bytes_of > PAGE_BYTES):
            return page, page_token(last["time_ns"], last["id"])
        page.append(message)
        total += bytes_of
        last = row
    return page, ""


def history_page(storage, request, size: int, after: tuple | None) -> tuple[list, str]:
    """A page of series parts (HistorySeries): from the series and point ``after`` names on, at most ``size``
    points and about PAGE_BYTES; the next page's token (series id, first point). With ``order_by``, each
    series' points in that label's order and its changes computed on request (server/history_ordered.py)."""
    with storage.engine.connect() as conn:
        found = store.matching_series(conn, request.machine, dict(request.labels), request.benchmark,
                                      request.metric, start=after[0] if after is not None else None)
        if after is not None and after[1] < 0:  # forged
            return [], ""
        parts, budget, total = [], size, 0
        for number, head in enumerate(found):
            if isinstance(head, store.ScanCut):  # read as many series as a page may: the rest on the next
                return parts, page_token(head.resume, 0)
            if budget <= 0:
                return parts, page_token(head["id"], 0)
            first = after[1] if after is not None and number == 0 else 0
            part = pb.HistorySeries(series_id=head["id"], machine=head["machine"], benchmark=head["benchmark"],
                                    argv=head["argv"], metric=head["metric"], line=head["line"], unit=head["unit"],
                                    first_point=first)
            if request.order_by:
                points, changes = _ordered_part(conn, head, request.order_by, first, budget, part)
            else:
                points = conn.execute(select(history_points).where(history_points.c.series == head["id"])
                                      .order_by(history_points.c.time_ns, history_points.c.job_id)
                                      .offset(first).limit(budget + 1)).mappings().all()
                changes = _stored_changes(conn, head["id"], part) if first == 0 else []
            part.changes.extend(change_message(row, head) for row in changes)
            for change in part.changes:
                change.on_request = bool(request.order_by)
            total += part.ByteSize()
            for taken, point in enumerate(points):
                item = _point(point, request.order_by)
                if taken == budget or (parts or part.points) and total + item.ByteSize() > PAGE_BYTES:
                    if part.points:  # else the series starts the next page, its changes with it (once)
                        parts.append(part)
                    return parts, page_token(head["id"], first + taken)
                part.points.append(item)
                total += item.ByteSize() + 8
            parts.append(part)
            budget -= len(points)
    return parts, ""


def _stored_changes(conn, series_pk: int, part: pb.HistorySeries) -> list:
    """The series' newest MAX_SERIES_CHANGES stored changes, oldest first (along ix_history_changes_series);
    ``part`` told how many earlier ones were left out."""
    where = history_changes.c.series == series_pk
    rows = conn.execute(select(history_changes).where(where)
                        .order_by(history_changes.c.time_ns.desc(), history_changes.c.id.desc())
                        .limit(MAX_SERIES_CHANGES + 1)).mappings().all()
    if len(rows) > MAX_SERIES_CHANGES:
        total = conn.execute(select(func.count()).select_from(history_changes).where(where)).scalar_one()
        part.changes_capped = total - MAX_SERIES_CHANGES
    return rows[:MAX_SERIES_CHANGES][::-1]


def _ordered_part(conn, head: dict, label: str, first: int, budget: int, part: pb.HistorySeries):
    """A part's points (at most ``budget`` + 1 from ``first``) in the label's order and, with the first part,
    the changes computed on request; ``part`` told what was left out."""
    ordered = history_ordered.ordered_points(conn, head, label, values=first == 0)
    part.ordered, part.points_without_order, part.points_capped = True, ordered.without, ordered.capped
    changes = history_ordered.changes_on_request(ordered, head, store.now()) if first == 0 else []
    return ordered.rows[first:first + budget + 1], changes


def _point(row, order_by: str) -> pb.HistoryPoint:
    order = json.loads(row["labels"]).get(order_by) if order_by else None
    return pb.HistoryPoint(job_id=row["job_id"], commit=row["commit"], time_ns=row["time_ns"],
                           order=order if isinstance(order, str) else None, runs=row["runs"], median=row["median"],
                           q1=row["q1"], q3=row["q3"], min=row["min"], max=row["max"])


def update_change(storage, request) -> pb.Change:
    # on SQLite, in turn with the history keeper and ingest (a read transaction cannot become a write one
    # after another writer committed)
    with storage._write_lock if storage.is_sqlite else contextlib.nullcontext(), storage.engine.begin() as conn:
        change_id = store.set_triage(conn, request.change_id.lower(),
                                     request.state if request.HasField("state") else None,
                                     request.note if request.HasField("note") else None,
                                     request.link if request.HasField("link") else None,
                                     store.now(), storage.is_sqlite)
        row = conn.execute(select(history_changes).where(history_changes.c.id == change_id)).mappings().one()
        head = heads_of(conn, {row["series"]})[row["series"]]
    open_regressions_gauge(storage)  # at once on this replica; the others read it within their GAUGE_S
    return change_message(row, head)


class HistoryQueries:
    async def _page(self, request, context, problem: str | None, key: tuple, read, default: int, most: int):
        """One page of a listing: the caller a client, the request valid (``problem``), the page token one of
        this server's (``key``: the types of its parts), then ``read`` of at most the page size asked."""
        await self._principal(context, "client")
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        after = await self._page_key(context, request.page_token, key)
        return await self._db(context, read, self.storage, request, page_size(request.page_size, default, most),
                              after)

    async def ListChanges(self, request, context):
        page, token = await self._page(request, context, validate_list_changes(request, store.CHANGE_STATES),
                                       (int, str), changes_page, DEFAULT_CHANGES, MAX_CHANGES)
        return pb.ListChangesResponse(changes=page, next_page_token=token)

    async def UpdateChange(self, request, context):
        await self._principal(context, "client")
        problem = validate_update_change(request, store.TRIAGE_STATES, store.MAX_NOTE, store.MAX_LINK)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            change = await self._db(context, update_change, self.storage, request)
        except store.ChangeError as err:
            code = grpc.StatusCode.NOT_FOUND if str(err).startswith("no change") else \
                grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, str(err))
        return pb.UpdateChangeResponse(change=change)

    async def GetHistory(self, request, context):
        page, token = await self._page(request, context, validate_get_history(request), (int, int),
                                       history_page, DEFAULT_POINTS, MAX_POINTS)
        return pb.GetHistoryResponse(series=page, next_page_token=token)
