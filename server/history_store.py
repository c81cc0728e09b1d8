"""The performance history's storage (issue 32; tables in server/schema.py, migration 0011): an ended job's
points, computed from its runs, and its series; the triage of changes; and the reads of ListChanges,
UpdateChange and GetHistory. A series' changes brought up to date are server/history_update.py's; who
analyses which job, and when, server/history.py's.

Everything one ended job changes is written in ONE transaction, the one that deletes its queue entry: a
replica killed in the middle leaves the entry, no point and no change, and another replica does it all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable

import numpy as np
from sqlalchemy import and_, func, or_, select, tuple_, update

from perfctl.history_rows import point_summary
from perfctl.model import WALL_TIME, default_metric, metric_label
from perfctl.server.schema import (
    benchmarks,
    contexts,
    history_changes,
    history_points,
    history_queue,
    history_series,
    jobs,
    machines,
    samples,
    series,
    shapes,
)

log = logging.getLogger("perfctl.server")

DEFAULT_LINE = ("branch",)  # `perfctl server --history-line`: the labels that name a line of development
CHANGE_STATES = ("new", "acknowledged", "false positive", "fixed")
TRIAGE_STATES = ("new", "acknowledged", "false positive")  # what a user may set (UpdateChange)
# a regression in one of these is open: perfctl_open_regressions, its alert and `perfctl changes -q` (CLI,
# report/history.py) all count it so; acknowledging one (someone owns it) closes it
OPEN_STATES = ("new",)
FIX_POINTS = 10  # a fix is judged on the medians of this many points on each side (_fixers)
SAME_CHANGE_POINTS = 2  # a change found again this many points from where it was is the same change (same id)
ID_CHARS = 12
MAX_NOTE, MAX_LINK = 4096, 2048
_COUNTED = ("ok", "multiplexed")  # reading statuses whose values are measurements (server/selection.py)


class ChangeError(ValueError):
    """UpdateChange's refusals: no such change, an ambiguous prefix, a state a user cannot set."""


def series_digest(machine: str, benchmark: str, argv: list[str], metric: str, line: dict) -> str:
    identity = json.dumps([machine, benchmark, argv, metric, line], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(identity.encode()).hexdigest()


def enqueue(conn, insert_ignore, job_id: str, machine: str, now_ns: int) -> None:
    """Queue an ended job for analysis, in the caller's transaction (the one that records it done)."""
    conn.execute(insert_ignore(history_queue).values(job_id=job_id, machine=machine, queued_ns=now_ns))


# --- an ended job's points ---

def _metric_values(rows, shape_specs: dict, left_out: dict) -> tuple[str, str, np.ndarray]:
    """(metric, unit, values) of runs given as (shape, vals) rows: the metric is model.default_metric of the
    labels counted in every run (instructions, else cycles, else task-clock, else wall-time). A run whose
    values are not stored, or do not match its shape, is left out and counted in ``left_out`` (why -> runs)."""
    counted_in_all: set | None = None
    for shape, _vals in rows:
        spec = shape_specs.get(shape, [])
        labels = {WALL_TIME} | {entry[0] for entry in spec if entry[4] in _COUNTED}
        counted_in_all = labels if counted_in_all is None else counted_in_all & labels
    metric = default_metric(counted_in_all or {WALL_TIME})
    values, unit = [], "ns"
    for shape, vals in rows:
        spec = shape_specs.get(shape)
        if spec is None or vals is None:
            why = "no stored values" if vals is None else "no stored shape"
            left_out[why] = left_out.get(why, 0) + 1
            continue
        matrix = np.frombuffer(bytes(vals), dtype="<f8")
        if len(matrix) != len(spec) + 1:
            why = f"{len(matrix)} values where the shape has {len(spec) + 1}"
            left_out[why] = left_out.get(why, 0) + 1
            continue
        column = 0 if metric == WALL_TIME else 1 + [entry[0] for entry in spec].index(metric)
        if metric != WALL_TIME:
            unit = spec[column - 1][3] or ""
        values.append(matrix[column])
    return metric, unit, np.array(values, dtype=float)


def job_points(conn, job_id: str, machine: str, line_labels: tuple[str, ...], shape_specs: dict) -> list[dict]:
    """The points of an ended job: one per (benchmark name and argv, line) among its measured runs that ended
    ok, each with its series' identity. Read along ix_samples_series (machine, benchmark, job)."""
    machine_pk = conn.execute(select(machines.c.id).where(machines.c.name == machine)).scalar()
    if machine_pk is None:
        return []
    builds = sorted(set(conn.execute(select(series.c.benchmark).where(
        series.c.machine == machine_pk, series.c.job_id == job_id)).scalars()))
    if not builds:
        return []
    identity = {pk: (name, json.loads(argv)) for pk, name, argv in conn.execute(
        select(benchmarks.c.id, benchmarks.c.name, benchmarks.c.argv).where(benchmarks.c.id.in_(builds)))}
    rows = conn.execute(select(samples.c.benchmark, samples.c.context, samples.c.shape, samples.c.vals).where(
        samples.c.machine == machine_pk, samples.c.benchmark.in_(builds), samples.c.job_id == job_id,
        samples.c.warmup.is_(False), samples.c.outcome == "ok")).all()
    labels_of = {pk: json.loads(text) for pk, text in conn.execute(select(contexts.c.id, contexts.c.labels).where(
        contexts.c.id.in_({row.context for row in rows if row.context is not None})))}
    missing = {row.shape for row in rows if row.shape is not None} - set(shape_specs)
    if missing:
        shape_specs.update({pk: json.loads(spec) for pk, spec in conn.execute(
            select(shapes.c.id, shapes.c.spec).where(shapes.c.id.in_(missing)))})
    groups: dict[tuple, list] = {}
    for row in rows:
        labels = labels_of.get(row.context, {})
        line = {label: labels[label] for label in line_labels if label in labels}
        key = (row.benchmark, json.dumps(line, sort_keys=True))
        groups.setdefault(key, [labels, []])[1].append((row.shape, row.vals))
    points = []
    for (build, line_text), (labels, runs) in groups.items():
        left_out: dict[str, int] = {}
        metric, unit, values = _metric_values(runs, shape_specs, left_out)
        name, argv = identity[build]
        if left_out:  # once: each job is analysed once (again only when its analysis failed)
            log.warning("history: job %s on %s, %s: %d of %d runs left out of its point (%s)", job_id, machine,
                        name, sum(left_out.values()), len(runs),
                        "; ".join(f"{count} {why}" for why, count in sorted(left_out.items())))
        if len(values) == 0:
            continue
        unusable = int(np.count_nonzero(~(np.isfinite(values) & (values > 0))))
        if unusable:
            # the change analysis takes ratios of levels (analysis/changepoints.py refuses such a point): kept,
            # it would fail the whole job's analysis, every other benchmark's point with it, at every attempt.
            # Logged here, once: each job is analysed once
            log.warning("history: job %s on %s, %s: no point (%d of %d runs read %s of %s, not a finite value "
                        "above 0: a ratio of levels is undefined)", job_id, machine, name, unusable, len(values),
                        _shown(values), metric)
            continue
        line = json.loads(line_text)
        points.append(dict(machine=machine, benchmark=name, argv=argv, metric=metric, unit=unit[:16], line=line,
                           build=build, labels=labels, commit=labels.get("commit"),
                           run_values=values.astype("<f8").tobytes(), **point_summary(values)))
    return points


def _shown(values: np.ndarray) -> str:
    return ", ".join(sorted({repr(float(v)) for v in values if not (np.isfinite(v) and v > 0)})[:3])


# --- a series brought up to date ---

def _series_pk(conn, point: dict, insert_ignore) -> int:
    """The series of ``point``, made if new, and locked (FOR UPDATE on PostgreSQL) until the transaction ends:
    two replicas analysing two jobs of one series take turns."""
    digest = series_digest(point["machine"], point["benchmark"], point["argv"], point["metric"], point["line"])
    conn.execute(insert_ignore(history_series).values(
        digest=digest, machine=point["machine"], benchmark=point["benchmark"], argv=json.dumps(point["argv"]),
        metric=point["metric"], line=json.dumps(point["line"], sort_keys=True), unit=point["unit"]))
    return conn.execute(select(history_series.c.id).where(history_series.c.digest == digest)
                        .with_for_update()).scalar_one()


def add_points(conn, job_id: str, time_ns: int, points: list[dict], insert_ignore) -> list[int]:
    """Store the job's points; the ids of their series (locked)."""
    touched = []
    # the series locked in one order (their identity's) whatever the job: two replicas analysing jobs of the
    # same two series cannot each hold one and wait for the other
    for point in sorted(points, key=lambda p: (p["machine"], p["benchmark"], p["argv"], p["metric"],
                                               sorted(p["line"].items()))):
        pk = _series_pk(conn, point, insert_ignore)
        conn.execute(insert_ignore(history_points).values(
            series=pk, job_id=job_id, build=point["build"], commit=_bounded(point["commit"], 256),
            labels=json.dumps(point["labels"], sort_keys=True), time_ns=time_ns,
            **{k: point[k] for k in ("runs", "median", "q1", "q3", "min", "max", "run_values")}))
        touched.append(pk)
    return touched


def _bounded(value, limit: int):
    return value[:limit] if isinstance(value, str) else None


def state_of(triage: str, fixed_by: str | None) -> str:
    """A change's state: its triage, or fixed when a later change fixed it (a false positive stays one)."""
    return "fixed" if fixed_by and triage != "false positive" else triage


def job_end_ns(conn, job_id: str, fallback: int) -> int:
    """The job's end by the server's clock (jobs.updated_ns when it was recorded done): what orders points."""
    return conn.execute(select(jobs.c.updated_ns).where(jobs.c.id == job_id)).scalar() or fallback


# --- reads for the RPCs ---

def series_heads(conn, pks: Iterable[int]) -> dict[int, dict]:
    """What a change row shows of its series, by series id: its identity (never changed once written)."""
    return {row.id: {"argv": json.loads(row.argv), "metric": row.metric, "line": json.loads(row.line),
                     "unit": row.unit, "machine": row.machine, "benchmark": row.benchmark}
            for row in conn.execute(select(history_series).where(history_series.c.id.in_(set(pks)))).all()}


def changes_query(machine: str, benchmark: str, since_ns: int, states: list[str], after: tuple | None, limit: int):
    """ListChanges' page: newest first by the time of the change's first point after, along
    ix_history_changes_time or ix_history_changes_machine_time."""
    query = select(history_changes).order_by(history_changes.c.time_ns.desc(), history_changes.c.id.desc())
    if machine:
        query = query.where(history_changes.c.machine == machine)
    if benchmark:
        query = query.where(history_changes.c.benchmark == benchmark)
    if since_ns:
        query = query.where(history_changes.c.time_ns >= since_ns)
    if states:
        query = query.where(history_changes.c.state.in_(states))
    if after is not None:
        query = query.where(or_(history_changes.c.time_ns < after[0],
                                and_(history_changes.c.time_ns == after[0], history_changes.c.id < after[1])))
    return query.limit(limit)


def set_triage(conn, change_id: str, state: str | None, note: str | None, link: str | None, now_ns: int,
               sqlite: bool) -> str:
    """UpdateChange's write: the change named by its id or a unique prefix; its id. ChangeError if none or
    several have it.

    Its series is locked first (FOR UPDATE on PostgreSQL), as the analysis of an ended job locks it before it
    reads the series' changes (history_update.reanalyse): a triage written between that read and the
    analysis' write-back would be undone by it (the change deleted as untriaged, or its triage written back)."""
    query = select(history_changes.c.id, history_changes.c.series).where(
        history_changes.c.id.like(change_id + "%")).order_by(history_changes.c.id).limit(2)
    if sqlite:  # its LIKE ignores case and so no index: the range serves (ids are lower-case hex)
        query = query.where(history_changes.c.id >= change_id, history_changes.c.id < change_id + "g")
    found = conn.execute(query).all()
    if not found:
        raise ChangeError(f"no change {change_id!r}")
    if len(found) > 1 and found[0].id != change_id:
        raise ChangeError(f"change id {change_id!r} is ambiguous ({found[0].id}, {found[1].id}, ...): give more "
                          "of it")
    conn.execute(select(history_series.c.id).where(history_series.c.id == found[0].series).with_for_update())
    # read again under the lock: an analysis that held it may have deleted the change or fixed it meanwhile
    row = conn.execute(select(history_changes.c.id, history_changes.c.fixed_by).where(
        history_changes.c.id == found[0].id).with_for_update()).first()
    if row is None:
        raise ChangeError(f"no change {change_id!r} (no longer found by the analysis of a job that just ended)")
    values: dict = {"updated_ns": now_ns}
    if state is not None:
        values["triage"], values["state"] = state, state_of(state, row.fixed_by)
    if note is not None:
        values["note"] = note
    if link is not None:
        values["link"] = link
    conn.execute(update(history_changes).where(history_changes.c.id == row.id).values(**values))
    return row.id


def open_regressions(conn) -> dict[tuple[str, str], int]:
    """(machine, benchmark) -> regressions open (state new or acknowledged: not fixed, not a false positive)."""
    return {(machine, benchmark): count for machine, benchmark, count in conn.execute(
        select(history_changes.c.machine, history_changes.c.benchmark, func.count())
        .where(history_changes.c.regression.is_(True), history_changes.c.state.in_(OPEN_STATES))
        .group_by(history_changes.c.machine, history_changes.c.benchmark))}


SERIES_CHUNK = 500  # matching_series reads a machine's series this many at a time
MAX_SERIES_SCANNED = 20_000  # and at most this many per call (a page), matching or not


class ScanCut:
    """What matching_series yields when it has read MAX_SERIES_SCANNED series: the page ends, and the next one
    starts at the series ``resume`` (its id)."""

    def __init__(self, resume: int):
        self.resume = resume


def matching_series(conn, machine: str, labels: dict, benchmark: str, metric: str, start: int | None = None):
    """The series of ``machine`` (and ``benchmark``) whose line holds ``labels`` and whose metric is ``metric``
    (compare's spelling: instructions names instructions:u), in order of benchmark, argv, metric, line (and
    id), from the series ``start`` (an id) on: a generator that reads them SERIES_CHUNK at a time along that
    order, at most MAX_SERIES_SCANNED, and then yields a ScanCut. Nothing when ``start`` is no series of the
    machine (a forged page token)."""
    c = history_series.c
    order = (c.benchmark, c.argv, c.metric, c.line, c.id)
    query = select(history_series).where(c.machine == machine)
    if benchmark:
        query = query.where(c.benchmark == benchmark)
    after = None
    if start is not None:
        row = conn.execute(select(*order).where(c.id == start, c.machine == machine)).first()
        if row is None:
            return
        after = (tuple(row), True)
    scanned = 0
    while True:
        chunk_query = query
        if after is not None:
            key, inclusive = after
            compared = tuple_(*order) >= tuple_(*key) if inclusive else tuple_(*order) > tuple_(*key)
            chunk_query = chunk_query.where(compared)
        rows = conn.execute(chunk_query.order_by(*order).limit(SERIES_CHUNK)).all()
        for row in rows:
            if scanned == MAX_SERIES_SCANNED:
                yield ScanCut(row.id)
                return
            scanned += 1
            line = json.loads(row.line)
            if any(line.get(key) != value for key, value in labels.items()):
                continue
            if metric and metric_label(metric, {row.metric}) is None:
                continue
            yield {"id": row.id, "machine": row.machine, "benchmark": row.benchmark, "argv": json.loads(row.argv),
                   "metric": row.metric, "line": line, "unit": row.unit}
        if len(rows) < SERIES_CHUNK:
            return
        last = rows[-1]
        after = ((last.benchmark, last.argv, last.metric, last.line, last.id), False)


def now() -> int:
    return time.time_ns()
