"""A series' changes brought up to date when a job ends (issue 32; docs/history.md "On a fleet"): the stored
changes passed back to analysis.changepoints.update, each change's id, triage, note and link kept when it is
found again near where it was, a regression marked fixed by the later change that brings the level back. The
job's points are history_store.py's; who does this, in which transaction, server/history.py's.

Bounded: ``update`` resumes at the last settled change (nothing before it is computed again), so only the
points from LOOKBACK_POINTS before that change on are read (what its windows, its despiking and its sides need),
at most MAX_UPDATE_POINTS of them after it, and only the series' latest MAX_CHANGES_READ changes. A series
whose last settled change lies further back than MAX_UPDATE_POINTS (or none, or one a late job moved) is
analysed on its latest MAX_UPDATE_POINTS points, as if it began there.
"""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
from sqlalchemy import and_, delete, func, or_, select, update

from perfctl.analysis import changepoints
from perfctl.analysis.verdicts import Verdict, beyond
from perfctl.history_rows import is_regression, side_row
from perfctl.server.history_store import FIX_POINTS, ID_CHARS, SAME_CHANGE_POINTS, state_of
from perfctl.server.schema import history_changes, history_points, history_series

log = logging.getLogger("perfctl.server")

# the points read before the last settled change: its side before (CONFIRM_POINTS), the despiking of the
# points after it (SCALE_REACH + SPIKE_REACH), the level before it (FIX_POINTS); one window covers them all
LOOKBACK_POINTS = changepoints.SETTLE_POINTS
# the points read after it: a stretch this long with no settled change (a series that never changed) is
# analysed on its latest ones (about 20 ms of update at 2,000 points)
MAX_UPDATE_POINTS = 2000
# the series' latest changes read: its changes since the last settled one (at most one per MIN_POINTS of the
# last SETTLE_POINTS points) and the regressions before it that a new change may fix
MAX_CHANGES_READ = 200
_POINT_COLUMNS = (history_points.c.job_id, history_points.c.commit, history_points.c.time_ns,
                  history_points.c.median, history_points.c.run_values)
_SAID: set = set()  # what _once logged


def _once(key, message: str, *args) -> None:
    """Log a warning about stored data once per key and process (each ended job would repeat it)."""
    if key in _SAID:
        return
    if len(_SAID) > 10_000:
        _SAID.clear()
    _SAID.add(key)
    log.warning(message, *args)


class Points:
    """A series' points in order, by column (row objects cost more than the analysis on 1,000 points)."""

    def __init__(self, rows):
        self.job_ids, self.commits, self.times, self.medians, blobs = (list(column) for column in zip(*rows))
        self.values = np.frombuffer(b"".join(blobs), dtype="<f8")
        self.ends = np.cumsum([0] + [len(blob) // 8 for blob in blobs])

    def runs_of(self, start: int, stop: int) -> np.ndarray:
        """runs_of for analysis.changepoints: the metric's values of the runs of points [start, stop)."""
        return self.values[self.ends[start]:self.ends[stop]]


def _side(points: Points, span: tuple[int, int], at: int, runs: int, median: float) -> dict:
    return side_row(points.job_ids[at], points.commits[at], int(points.times[at]), span[1] - span[0], int(runs),
                    float(median))


def _levels(medians, change: changepoints.Change) -> list[float]:
    """The level (median of the log medians of at most FIX_POINTS points) before the change and after it:
    what _fixers compares. Stored with the change, so that a change before the points read can be fixed."""
    logs = np.log(np.asarray(medians, dtype=float))
    return [float(np.median(logs[max(change.before[0], change.before[1] - FIX_POINTS):change.before[1]])),
            float(np.median(logs[change.after[0]:min(change.after[1], change.after[0] + FIX_POINTS)]))]


def analysis_of(points: Points, change: changepoints.Change, base: int = 0) -> dict:
    """What a change row keeps of ``change`` (its ``analysis`` column): the Change's fields, its index and sides
    in the whole series (``points`` being the series' points from ``base`` on, ``change`` found on them), the
    points either side of it (``before_side``, ``after_side``: what ChangeSide says) and its ``levels``."""
    analysis = {name: getattr(change, name) for name in changepoints.Change.__dataclass_fields__}
    analysis["verdict"] = str(change.verdict)
    analysis["index"] = change.index + base
    analysis["before"] = [change.before[0] + base, change.before[1] + base]
    analysis["after"] = [change.after[0] + base, change.after[1] + base]
    analysis["before_side"] = _side(points, change.before, change.index - 1, change.runs_before, change.median_before)
    analysis["after_side"] = _side(points, change.after, change.index, change.runs_after, change.median_after)
    analysis["levels"] = _levels(points.medians, change)
    return analysis


def _change_of(analysis: dict, base: int) -> changepoints.Change:
    """The stored change as update's ``previous``, its indices counted from ``base``."""
    fields = {name: analysis[name] for name in changepoints.Change.__dataclass_fields__ if name in analysis}
    fields.update(before=tuple(fields["before"]), after=tuple(fields["after"]), verdict=Verdict(fields["verdict"]))
    return _shifted(changepoints.Change(**fields), -base)


def _shifted(change: changepoints.Change, base: int) -> changepoints.Change:
    return changepoints.Change(**{**change.__dict__, "index": change.index + base,
                                  "before": (change.before[0] + base, change.before[1] + base),
                                  "after": (change.after[0] + base, change.after[1] + base)})


def _anchor(conn, series_pk: int, stored: list[dict]) -> tuple[dict | None, int]:
    """The last settled stored change that still sits where it was found (no job ended earlier was analysed
    later and landed before it) and at most MAX_UPDATE_POINTS points back, and the series' number of points."""
    total = conn.execute(select(func.count()).select_from(history_points)
                         .where(history_points.c.series == series_pk)).scalar_one()
    settled = [row for row in stored if row["analysis"].get("settled") and not row["analysis"].get("not_found")]
    if not settled:
        return None, total
    row = max(settled, key=lambda r: r["analysis"]["index"])
    if total - row["analysis"]["index"] > MAX_UPDATE_POINTS:
        # too far back to resume at: the latest MAX_UPDATE_POINTS points are analysed as a series of their own
        # (changes before them stay as stored). Passed on as ``previous`` beside them, the change would sit
        # before the points read and every other update would find it again as a new change, then drop it
        return None, total
    before = conn.execute(select(func.count()).select_from(history_points).where(
        history_points.c.series == series_pk,
        or_(history_points.c.time_ns < row["time_ns"],
            and_(history_points.c.time_ns == row["time_ns"], history_points.c.job_id < row["after_job"])))
    ).scalar_one()
    return (row, total) if before == row["analysis"]["index"] else (None, total)


def _read_points(conn, series_pk: int, anchor: dict | None, total: int) -> tuple[Points, int]:
    """The points the update reads, and the index of the first of them in the series: from LOOKBACK_POINTS
    before the anchor on, or the latest MAX_UPDATE_POINTS; along ix_history_points_order, never more than
    LOOKBACK_POINTS + MAX_UPDATE_POINTS rows."""
    order = (history_points.c.time_ns, history_points.c.job_id)
    where = history_points.c.series == series_pk
    if anchor is not None:
        at = (anchor["time_ns"], anchor["after_job"])
        from_anchor = or_(order[0] > at[0], and_(order[0] == at[0], order[1] >= at[1]))
        before = conn.execute(select(*_POINT_COLUMNS).where(where, ~from_anchor)
                              .order_by(order[0].desc(), order[1].desc()).limit(LOOKBACK_POINTS)).all()
        after = conn.execute(select(*_POINT_COLUMNS).where(where, from_anchor).order_by(*order)
                             .limit(MAX_UPDATE_POINTS)).all()
        return Points(before[::-1] + after), anchor["analysis"]["index"] - len(before)
    rows = conn.execute(select(*_POINT_COLUMNS).where(where).order_by(order[0].desc(), order[1].desc())
                        .limit(MAX_UPDATE_POINTS)).all()
    return Points(rows[::-1]), total - len(rows)


def reanalyse(conn, series_pk: int, now_ns: int) -> None:
    """Bring the series' changes up to date with its points (changepoints.update, resuming at the last settled
    change stored), keeping each change's id, triage, note and link when it is found again at the same point or
    within SAME_CHANGE_POINTS of it; a regression is "fixed" by the first later change that brings the level
    back nearer its level before it (``_fixers``)."""
    head = conn.execute(select(history_series).where(history_series.c.id == series_pk)).mappings().one()
    stored = [dict(row) for row in conn.execute(
        select(history_changes).where(history_changes.c.series == series_pk)
        .order_by(history_changes.c.time_ns.desc(), history_changes.c.id.desc()).limit(MAX_CHANGES_READ)).mappings()]
    for row in stored:
        row["analysis"] = json.loads(row["analysis"])
    try:
        anchor, total = _anchor(conn, series_pk, stored)
        previous_of = (lambda base: [_change_of(anchor["analysis"], base)]) if anchor else (lambda base: [])
        points, base = _read_points(conn, series_pk, anchor, total)
        previous = previous_of(base)
    except (KeyError, TypeError, ValueError) as err:  # a change stored by a perfctl whose Change had other fields
        _once(("stored", series_pk), "history: series %s (%s on %s): its stored changes cannot be resumed from "
              "(%s: %s); its latest %d points are analysed again", series_pk, head["benchmark"], head["machine"],
              type(err).__name__, err, MAX_UPDATE_POINTS)
        anchor, total = None, conn.execute(select(func.count()).select_from(history_points)
                                           .where(history_points.c.series == series_pk)).scalar_one()
        points, base = _read_points(conn, series_pk, None, total)
        previous = []
    found = [_shifted(change, base) for change in changepoints.update(points.medians, points.runs_of, previous)]
    position = {job: base + i for i, job in enumerate(points.job_ids)}
    # the stored changes the answer speaks for: from the anchor on (those before it are settled, or lie
    # before the points read); the others are only judged for a fix
    scope = anchor["analysis"]["index"] if anchor else base
    in_scope = [row for row in stored if position.get(row["after_job"], -1) >= scope]
    earlier = sorted((row for row in stored if row not in in_scope and not row["analysis"].get("not_found")),
                     key=lambda row: row["time_ns"])
    kept: dict[int, dict] = {}  # index in found -> the stored row it continues
    for i, change in enumerate(found):
        near = [row for row in in_scope if row not in kept.values()
                and abs(position[row["after_job"]] - change.index) <= SAME_CHANGE_POINTS]
        if near:
            kept[i] = min(near, key=lambda row: abs(position[row["after_job"]] - change.index))
    ids = [kept[i]["id"] if i in kept else _new_id(conn, head["digest"], points.job_ids[change.index - base])
           for i, change in enumerate(found)]
    analyses = [analysis_of(points, _shifted(change, -base), base) for change in found]
    fixed_by = _fixers([(row["id"], beyond(row["analysis"].get("low"), row["analysis"].get("high"),
                                           row["analysis"]["margin"]), row["analysis"].get("levels"))
                        for row in earlier] +
                       [(ids[i], change.shown_beyond, analyses[i]["levels"]) for i, change in enumerate(found)],
                       {row["id"]: row["fixed_by"] for row in earlier + list(kept.values())})
    for row, fixer in zip(earlier, fixed_by):  # a regression before the points read, fixed (or no longer)
        if fixer != row["fixed_by"]:
            conn.execute(update(history_changes).where(history_changes.c.id == row["id"]).values(
                fixed_by=fixer, state=state_of(row["triage"], fixer), updated_ns=now_ns))
    fixed_by = fixed_by[len(earlier):]
    for row in in_scope:  # a change not found again is gone (the runs confirm it no longer) unless a user
        if row in kept.values():  # triaged it: then it stays, its note with it, marked as not found again
            continue
        if row["triage"] == "new" and not row["note"] and not row["link"]:
            conn.execute(delete(history_changes).where(history_changes.c.id == row["id"]))
        elif not row["analysis"].get("not_found"):  # no longer an open regression: the runs do not confirm it
            conn.execute(update(history_changes).where(history_changes.c.id == row["id"]).values(
                analysis=json.dumps({**row["analysis"], "not_found": True}), regression=False, updated_ns=now_ns))
    for i, change in enumerate(found):
        previous_row = kept.get(i)
        triage = previous_row["triage"] if previous_row else "new"
        values = dict(series=series_pk, machine=head["machine"], benchmark=head["benchmark"],
                      after_job=points.job_ids[change.index - base],
                      time_ns=int(points.times[change.index - base]), triage=triage,
                      state=state_of(triage, fixed_by[i]), fixed_by=fixed_by[i],
                      regression=is_regression(change.low, change.high, change.margin),
                      analysis=json.dumps(analyses[i]), updated_ns=now_ns)
        if previous_row:
            if _changed(previous_row, values):
                conn.execute(update(history_changes).where(history_changes.c.id == ids[i]).values(**values))
        else:
            conn.execute(history_changes.insert().values(id=ids[i], note="", link="", detected_ns=now_ns, **values))


def _changed(row: dict, values: dict) -> bool:
    return any(row[key] != value for key, value in values.items() if key not in ("analysis", "updated_ns")) or \
        json.loads(values["analysis"]) != row["analysis"]


def _fixers(changes: list[tuple], known: dict) -> list[str | None]:
    """Per change (id, shown_beyond, levels: the level before it and after it), in order, the id of the first
    later improvement that brings the series back from a regression: after it the level is nearer the level
    before the regression than the regression's own level, in ratio: more than half of the slowdown undone. Not
    "within the margin of before": a machine's level wanders by more than the ±1% margin over a history
    (docs/history.md's example: job medians over ±3%), and a build that undoes its regression must read as
    fixed on such a machine too. None: not fixed, or not a regression. ``known``: the fixer already found of a
    stored change (its id -> fixed_by), which stands while both are found again (not judged again at every
    job)."""
    fixers: list[str | None] = []
    for i, (change_id, shown, levels) in enumerate(changes):
        later = changes[i + 1:]
        fixer = known.get(change_id)
        if fixer in [other_id for other_id, _, _ in later]:
            fixers.append(fixer)
            continue
        fixer = None
        if shown == "slower" and levels is None:
            _once(("levels", change_id), "history: change %s was stored without its levels (an earlier perfctl): "
                  "a later change cannot mark it fixed", change_id)
        elif shown == "slower":
            before, regressed = levels
            for other_id, other_shown, other_levels in later:
                if other_shown == "faster" and abs(other_levels[1] - before) < abs(other_levels[1] - regressed):
                    fixer = other_id
                    break
        fixers.append(fixer)
    return fixers


def _new_id(conn, digest: str, job_id: str) -> str:
    """A change's id: where it was first found (series and first point after), hashed; lengthened in the
    unlikely case that its first ID_CHARS are another change's."""
    full = hashlib.sha256(f"{digest}:{job_id}".encode()).hexdigest()
    for length in range(ID_CHARS, 17):
        if conn.execute(select(history_changes.c.id).where(history_changes.c.id == full[:length])).first() is None:
            return full[:length]
    return full[:16]
