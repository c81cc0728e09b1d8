"""pyperf JSON (``pyperf ... -o FILE``): ``benchmarks[].runs[]``, each run one process with ``warmups``
and ``values``. A run is the unit of replication: its values (loops inside one process) are averaged into
one sample, never counted as independent runs. Warmups and calibration runs (no values) are left out.
A run's metadata "date" (when its process started, local time, as ``datetime.isoformat(' ')`` writes it)
gives the benchmark's first and last start on the clock of its "hostname", when every kept run has one.

A run is identified by its benchmark's name, its host, its "date" (the worker process's start, to the
microsecond) and its values and warmups: no two processes of one host start in the same microsecond, and a
run held twice (`pyperf convert A.json --add A.json`, two files' runs merged) repeats all of them. The repeat
is left out with a note (RunIdentity). A run without a date cannot be told apart and is read."""

from __future__ import annotations

import math
from datetime import datetime

from perfctl.dataset import Dataset, DatasetError, RunIdentity
from perfctl.formats.dataset import finite, from_entry, json_field, json_kind, load_json, stem, to_ns
from perfctl.model import WALL_TIME

_SCALE = {"second": 1e9}


def read_dataset(path: str) -> Dataset:
    data = load_json(path, "pyperf")
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list):
        raise DatasetError(f"{path}: not pyperf JSON: no 'benchmarks' list")
    common = json_field(path, "metadata", data, "metadata", dict, "an object", default={})
    dataset = Dataset(path, "pyperf")
    identity = RunIdentity(identified_by="benchmark, host, date and values")
    for index, benchmark in enumerate(benchmarks):
        if not isinstance(benchmark, dict) or not isinstance(benchmark.get("runs"), list):
            raise DatasetError(f"{path}: benchmarks[{index}]: no 'runs' list")
        where = f"benchmarks[{index}]"
        metadata = {**common, **json_field(path, f"{where}.metadata", benchmark, "metadata", dict, "an object",
                                           default={})}
        name = json_field(path, f"{where}.metadata.name", metadata, "name", str, "a string",
                          default=stem(path)) or stem(path)
        unit = json_field(path, f"{where}.metadata.unit", metadata, "unit", str, "a string", default="second")
        metric, scale, out_unit = (WALL_TIME, _SCALE[unit], "ns") if unit in _SCALE else (unit, 1.0, unit)
        bench = dataset.benchmark(name)
        kept = 0
        for run_index, run in enumerate(benchmark["runs"]):
            if not isinstance(run, dict):
                raise DatasetError(f"{path}: {where}.runs[{run_index}]: expected an object, got {json_kind(run)}")
            # a calibration or warmup-only run has no values: not a sample
            values = json_field(path, f"{where}.runs[{run_index}].values", run, "values", list, "a list", default=[])
            if not values:
                continue
            numbers = [finite(path, f"{where}.runs[{run_index}].values", v) for v in values]
            run_id = _run(name, run, metadata)
            if identity.seen(run_id):
                continue
            identity.read(run_id)
            mean = sum(numbers) / len(numbers)
            if not math.isfinite(mean):  # finite values summed past the largest float: their mean is not
                mean = sum(number / len(numbers) for number in numbers)
            if scale != 1.0:
                mean = to_ns(path, f"{where}.runs[{run_index}].values", mean, unit, scale)
            bench.add(metric, mean, out_unit, "pyperf")
            kept += 1
            bench.started(*_start(run, metadata))
            if len(numbers) > 1:
                bench.note(metric, "pyperf values within a run averaged into one sample per process")
        # two entries under one name (no metadata.name, a merged file) are two programs: unmix says so
        from_entry(bench, f"pyperf {where}", kept)
    identity.anonymous = 0  # a run without a date is one pyperf did not write; not a repeat to warn of
    identity.note(dataset)
    return dataset


def _run(name: str, run: dict, metadata: dict) -> int | None:
    """The run's identity (RunIdentity.entry), None when it has no date to tell it by."""
    run_metadata = run.get("metadata") if isinstance(run.get("metadata"), dict) else {}
    date = run_metadata.get("date")
    if not isinstance(date, str):
        return None
    host = {**metadata, **run_metadata}.get("hostname")
    return RunIdentity.entry("pyperf", name, host, date, run.get("values"), run.get("warmups"))


def _start(run: dict, metadata: dict) -> tuple[int | None, str | None]:
    """When the run's process started, ns on its host's local clock (pyperf writes a naive local date),
    and that host: comparable between two files of one host, which is all the blocks check needs. None for
    what the run does not say, or says in a form pyperf does not write: the check then says nothing rather
    than guess."""
    run_metadata = run.get("metadata") if isinstance(run.get("metadata"), dict) else {}
    merged = {**metadata, **run_metadata}
    date, host = merged.get("date"), merged.get("hostname")
    host = host if isinstance(host, str) and host else None
    if not isinstance(date, str):
        return None, host
    try:
        moment = datetime.fromisoformat(date)
    except ValueError:
        return None, host
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000, host
