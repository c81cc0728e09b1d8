"""GetHistory's analysis on request in a label's order (issue 32; docs/history.md "On a fleet"): a series'
points ordered by the numeric value of the label the request's ``order_by`` names (`perfctl history MACHINE
--order-by build`), and its changes computed for that answer by analysis/changepoints.py ``detect`` over the
points in that order.

The stored, triaged changes (server/history_store.py) follow the server's time of each job's end: what a
fleet analyses as jobs end, with stable ids. A build order is another series' order, so its changes are not
those: they are computed on request and returned flagged (Change.on_request: no id, no state, no triage).
Bounded: at most MAX_ORDERED_POINTS points of a series are read and analysed (the latest ended; the answer
counts the others in HistorySeries.points_capped), and the points without the label are counted, not guessed
at (points_without_order), as are those whose value is not a number: one mislabelled job must not refuse
the machine's every series.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from sqlalchemy import func, select

from perfctl.analysis import changepoints
from perfctl.history_rows import is_regression
from perfctl.server.history_update import Points, analysis_of
from perfctl.server.schema import history_points
from perfctl.server.storage_errors import StorageError

# the points of one series read and analysed on request: detect() over 10,000 points is about 0.1 s, their
# run values (20 runs each) 1.6 MB; a longer series is answered on its latest ended points
MAX_ORDERED_POINTS = 10_000


class UnanalysableSeries(StorageError):
    """A stored series detect() refuses (a median of 0: a count that read 0); one line (FAILED_PRECONDITION)."""


@dataclass(frozen=True)
class Ordered:
    """A series' points in the label's order (history_points rows), and the points left out."""

    rows: list
    without: int  # points without the label, or whose value is not a number
    capped: int  # the earliest ended points beyond MAX_ORDERED_POINTS


def ordered_points(conn, head: dict, label: str, values: bool) -> Ordered:
    """The points of series ``head`` ordered by the numeric value of their ``label`` (ties: the job's end, then
    its id); with their runs' values when ``values``. Points without the label, or whose value is not a
    finite number, are left out and counted."""
    columns = [history_points.c.job_id, history_points.c.commit, history_points.c.time_ns,
               history_points.c.median, history_points.c.labels, history_points.c.runs, history_points.c.q1,
               history_points.c.q3, history_points.c.min, history_points.c.max]
    if values:
        columns.append(history_points.c.run_values)
    total = conn.execute(select(func.count()).select_from(history_points)
                         .where(history_points.c.series == head["id"])).scalar_one()
    rows = conn.execute(select(*columns).where(history_points.c.series == head["id"])
                        .order_by(history_points.c.time_ns.desc(), history_points.c.job_id.desc())
                        .limit(MAX_ORDERED_POINTS)).mappings().all()
    keyed, without = [], 0
    for row in rows:
        value = json.loads(row["labels"]).get(label)
        if not isinstance(value, str) or not value:
            without += 1
            continue
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            without += 1
            continue
        keyed.append(((number, row["time_ns"], row["job_id"]), row))
    keyed.sort(key=lambda pair: pair[0])
    return Ordered([row for _, row in keyed], without, max(0, total - MAX_ORDERED_POINTS))


def changes_on_request(ordered: Ordered, head: dict, now_ns: int) -> list[dict]:
    """The change rows (as history_changes' rows, for history_service.change_message) of the points in
    ``ordered`` (read with their values), found by changepoints.detect in that order: no id, no state."""
    if len(ordered.rows) < 2:
        return []
    points = Points([(row["job_id"], row["commit"], row["time_ns"], row["median"], row["run_values"])
                           for row in ordered.rows])
    try:
        found = changepoints.detect(points.medians, points.runs_of)
    except ValueError as err:
        raise UnanalysableSeries(f"{head['benchmark']}, {head['metric']}: cannot be analysed: {err}") from None
    return [{"id": "", "machine": head["machine"], "benchmark": head["benchmark"], "state": "",
             "analysis": json.dumps(analysis_of(points, change)),
             "regression": is_regression(change.low, change.high, change.margin), "note": "", "link": "",
             "fixed_by": None, "detected_ns": now_ns, "updated_ns": now_ns} for change in found]
