"""A performance history read from perfctl JSON Lines files (`perfctl history FILE...`, `perfctl report
--history FILE...`): the runs grouped into points and series, the changes found on them, and both put in
the history dict that the fleet server answers too (the contract of issue 32; docs/history.md,
"Commands"), so that one renderer (perfctl/report/history.py) serves files and server.

A *point* is one job (the samples' ``job_id``), else one value of the ``commit`` label, else one file. A
*series* is one machine x benchmark (its name and argv, as the server's) x metric x line of development
(the values of the ``--line`` labels, ``branch`` by default), its points in the order the runs were made
(each point's first start time) or by a numeric label (``--order-by build``). A point's runs are its
measured runs that ended ok (the one rule of which runs count: model.InterferencePolicy.judge, applied by
formats/jsonl.py's DatasetBuilder, through which every point's samples are read); its value is their
median. The metric is compare's (model.default_metric) unless named. Changes come from
analysis/changepoints.py ``detect``; the dicts are perfctl/history_rows.py's.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from perfctl.dataset import DatasetError
from perfctl.formats.jsonl import DatasetBuilder, records
from perfctl.history_rows import change_row as contract_row
from perfctl.history_rows import point_summary, side_row
from perfctl.model import default_metric, metric_label

DEFAULT_LINE = ("branch",)


class HistoryError(ValueError):
    """Files that give no history (no such file, no samples, a bad --order-by); the message is one line."""


@dataclass
class _Point:
    """The samples of one benchmark (name and argv) at one point of one machine's line, as they are read."""

    name: str  # what tells it apart: its job, its commit label, or its file
    builder: DatasetBuilder
    first_ns: int | None = None
    commits: set = field(default_factory=set)
    orders: set = field(default_factory=set)  # the --order-by label's values among its samples


def read_history(paths: Sequence[str], *, benchmark: str | None = None, metric: str | None = None,
                 line: Sequence[str] = DEFAULT_LINE, order_by: str | None = None, margin: float | None = None,
                 every_difference: bool = False, interference=None) -> dict:
    """The history dict of the samples in ``paths`` (perfctl JSON Lines): every series with its points and
    changes. HistoryError in one line when the files give none."""
    from perfctl.analysis.changepoints import HISTORY_MARGIN

    groups = _read_points(paths, tuple(line), order_by, interference)
    series = []
    for (machine, line_values), benchmarks in sorted(groups.items()):
        for (name, argv), points in sorted(benchmarks.items()):
            if benchmark is not None and name != benchmark:
                continue
            found = _series(machine, dict(line_values), name, list(argv), list(points.values()), metric, order_by)
            if found is not None:
                series.append(found)
    if not series:
        raise HistoryError(_nothing_found(groups, benchmark, metric))
    for one in series:
        one["changes"] = changes(one, margin=HISTORY_MARGIN if margin is None else margin,
                                 every_difference=every_difference)
        del one["_runs"]
    return {"series": series}


def _read_points(paths, line: tuple[str, ...], order_by: str | None, interference) -> dict:
    """{(machine, line's label values): {(benchmark name, argv): {point name: _Point}}} of every sample of
    ``paths``: a benchmark is its name and argv, as the server's series are (server/history_store.py), so
    two argvs under one name are two series."""
    groups: dict[tuple, dict[tuple, dict[str, _Point]]] = {}
    for path in paths:
        _regular(path)
        _refuse_other_formats(path)
        machine = None
        labelled = False
        try:
            for number, record in records(path):
                kind = record.get("type") if isinstance(record, dict) else None
                if kind == "machine":
                    machine = _text(record.get("hostname")) or _text(record.get("machine_id"))
                    continue
                if kind != "sample":
                    raise HistoryError(f"{path}:{number}: not a perfctl sample line (type {kind!r}): a history "
                                       "needs perfctl JSON Lines samples that carry labels")
                labels = record.get("labels") if isinstance(record.get("labels"), dict) else {}
                labelled = labelled or bool(labels) or isinstance(record.get("job_id"), str)
                host = machine or _text(record.get("machine_id")) or "unknown machine"
                values = tuple((key, labels[key]) for key in line if isinstance(labels.get(key), str))
                name = _text(record.get("job_id")) or _text(labels.get("commit")) or path
                points = groups.setdefault((host, values), {}).setdefault(_benchmark(record), {})
                point = points.get(name)
                if point is None:
                    point = points[name] = _Point(name, DatasetBuilder(path, interference=interference))
                point.builder.add(record, line=number)  # checked there: a bad field is refused with its line
                _note(point, record, labels, order_by)
        except DatasetError as err:
            raise HistoryError(str(err)) from None
        if not labelled and len(paths) == 1:
            raise HistoryError(f"{path}: its samples carry no labels and no job (perfctl stat --label commit=...): "
                               "nothing tells its runs apart as points of a history")
    for benchmarks in groups.values():
        for points in benchmarks.values():
            for point in points.values():
                point.builder.finish()
    return groups


def _benchmark(record: dict) -> tuple:
    """(name, argv) of a sample's benchmark; a malformed one is keyed as it is, and refused by the
    DatasetBuilder it is added to, with its line."""
    bench = record.get("benchmark") if isinstance(record.get("benchmark"), dict) else {}
    argv = bench.get("argv")
    return (bench.get("name") if isinstance(bench.get("name"), str) else "",
            tuple(str(arg) for arg in argv) if isinstance(argv, list) else ())


def _refuse_other_formats(path: str) -> None:
    """A file of another tool (hyperfine, pyperf...: formats/detection.py knows them) is refused saying what
    it is: `compare` reads them, but they carry no labels and no jobs, so no history."""
    from perfctl.formats import detect

    try:
        fmt = detect(path)
    except DatasetError:  # no format it knows: the lines are read, and the first that is not perfctl's named
        return
    if fmt != "perfctl":
        raise HistoryError(f"{path}: a {fmt} file, not perfctl JSON Lines: a history needs perfctl samples that "
                           "carry labels (perfctl stat --label commit=... -o FILE, once per commit)")


def _regular(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise HistoryError(f"{path}: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        raise HistoryError(f"{path}: not a regular file")


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _note(point: _Point, record: dict, labels: dict, order_by: str | None) -> None:
    start = record.get("start_time_ns")
    if type(start) is int and (point.first_ns is None or start < point.first_ns):
        point.first_ns = start
    point.commits.add(labels.get("commit") if isinstance(labels.get("commit"), str) else None)
    if order_by is not None:
        point.orders.add(labels.get(order_by) if isinstance(labels.get(order_by), str) else None)


def _series(machine: str, line: dict, name: str, argv: list[str], points: list[_Point], metric: str | None,
            order_by: str | None) -> dict | None:
    """One series' dict (the contract's, with its runs under ``_runs`` until its changes are found), or None
    when no point has a kept run of ``name`` counting the metric."""
    having = [(point, point.builder.dataset.benchmarks[name]) for point in points
              if name in point.builder.dataset.benchmarks]
    having = [(point, bench) for point, bench in having if any(bench.metrics.values())]
    if not having:
        return None
    if metric is None:  # compare's rule, among what every point counted: each point gives a value
        counted = set.intersection(*({m for m, values in bench.metrics.items() if values} for _, bench in having))
        label = default_metric(counted)
    else:
        label = metric_label(metric, {m for _, bench in having for m in bench.metrics})
        if label is None:
            return None
    rows = []
    for point, bench in having:
        values = bench.metrics.get(label)
        if values:
            rows.append((_order_key(point, order_by), point, bench, values))
    rows.sort(key=lambda row: row[0])
    unit = next(bench.units.get(label) for _, _, bench, _ in rows)
    return {"machine": machine, "benchmark": name, "argv": argv, "metric": label, "line": line, "unit": unit or "",
            "order_by": order_by, "points_without_order": 0, "points_capped": 0, "changes_capped": 0,
            "points": [_point_row(point, values, order_by) for _, point, _, values in rows],
            "_runs": [np.asarray(values, dtype=float) for _, _, _, values in rows]}


def _order_key(point: _Point, order_by: str | None) -> tuple:
    if order_by is None:
        return (point.first_ns if point.first_ns is not None else math.inf, point.name)
    if len(point.orders) != 1 or None in point.orders:
        said = "lacks it" if point.orders <= {None} else f"has {len(point.orders - {None})} values"
        raise HistoryError(f"--order-by {order_by}: point {point.name} {said} (each point needs one "
                           f"{order_by} label, a number)")
    value = next(iter(point.orders))
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise HistoryError(f"--order-by {order_by}: point {point.name} has {order_by}={value!r}, not a number")
    return (number, point.name)


def _point_row(point: _Point, values, order_by: str | None) -> dict:
    commits = point.commits - {None}
    return {"job": point.name, "commit": next(iter(commits)) if len(commits) == 1 and None not in point.commits
            else None, "time_ns": point.first_ns or 0,
            "order": next(iter(point.orders)) if order_by is not None else None, **point_summary(values)}


def changes(series: dict, *, margin: float, every_difference: bool = False) -> list[dict]:
    """The change rows of one series (its ``_runs``: each point's kept runs, in order), found by
    analysis/changepoints.py ``detect``; a file's change is "new", its id derived from what it is (the series
    and the first point after it), so that the same files give the same ids."""
    from perfctl.analysis.changepoints import detect

    runs = series["_runs"]
    if len(runs) < 2:
        return []
    medians = [point["median"] for point in series["points"]]

    def runs_of(start: int, stop: int):
        return np.concatenate(runs[start:stop])

    try:
        found = detect(medians, runs_of, margin=margin, every_difference=every_difference)
    except ValueError as err:  # a count of 0 (context-switches of a short run): no ratio of levels
        raise HistoryError(f"{series['benchmark']}, {series['metric']}: {err}") from None
    return [change_row(series, change) for change in found]


def change_row(series: dict, change) -> dict:
    """The contract's change row (perfctl/history_rows.py) of ``change`` (analysis.changepoints.Change) in
    ``series`` (a history's series dict, its points in order), as a file's history gives it: state new, an
    id derived from the series and its first point after the change."""
    points = series["points"]
    last, first = points[change.index - 1], points[change.index]
    identity = "\x1f".join([series["machine"], series["benchmark"], *series["argv"], series["metric"],
                            *(f"{k}={v}" for k, v in sorted(series["line"].items())), first["job"]])
    seen = points[change.after[1] - 1]["time_ns"]  # a file's change is seen when its files are read: dated by
    # the last point that shows it
    return contract_row(
        id=hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest(),
        machine=series["machine"], benchmark=series["benchmark"], argv=series["argv"], metric=series["metric"],
        line=series["line"], state="new",
        before=side_row(last["job"], last["commit"], last["time_ns"], change.before[1] - change.before[0],
                        change.runs_before, change.median_before),
        after=side_row(first["job"], first["commit"], first["time_ns"], change.after[1] - change.after[0],
                       change.runs_after, change.median_after),
        ratio=change.ratio, low=change.low, high=change.high, confidence=change.confidence, margin=change.margin,
        verdict=str(change.verdict), finding=change.finding, p_value=change.p_value, detected_ns=seen,
        updated_ns=seen)


def _nothing_found(groups: dict, benchmark: str | None, metric: str | None) -> str:
    names = sorted({name for benchmarks in groups.values() for points in benchmarks.values()
                    for point in points.values() for name in point.builder.dataset.benchmarks})
    if not names:
        return "no measured run that ended ok in the files"
    if benchmark is not None and benchmark not in names:
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        return f"no benchmark {benchmark!r} in the files (they hold {shown})"
    return f"no run counts {metric!r}" if metric else "no series in the files"
