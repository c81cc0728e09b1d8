"""pyperf JSON (``pyperf ... -o FILE``): ``benchmarks[].runs[]``, each run one process with ``warmups``
and ``values``. A run is the unit of replication: its values (loops inside one process) are averaged into
one sample, never counted as independent runs. Warmups and calibration runs (no values) are left out."""

from __future__ import annotations

from perfctl.formats import WALL_TIME, Dataset, DatasetError, finite, load_json, stem

_SCALE = {"second": 1e9}


def read_dataset(path: str) -> Dataset:
    data = load_json(path, "pyperf")
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list):
        raise DatasetError(f"{path}: not pyperf JSON: no 'benchmarks' list")
    common = data.get("metadata") or {}
    dataset = Dataset(path, "pyperf")
    for index, benchmark in enumerate(benchmarks):
        if not isinstance(benchmark, dict) or not isinstance(benchmark.get("runs"), list):
            raise DatasetError(f"{path}: benchmarks[{index}]: no 'runs' list")
        metadata = {**common, **(benchmark.get("metadata") or {})}
        name = str(metadata.get("name") or stem(path))
        unit = str(metadata.get("unit", "second"))
        metric, scale, out_unit = (WALL_TIME, _SCALE[unit], "ns") if unit in _SCALE else (unit, 1.0, unit)
        bench = dataset.benchmark(name)
        for run_index, run in enumerate(benchmark["runs"]):
            values = run.get("values") if isinstance(run, dict) else None
            if not values:
                continue
            numbers = [finite(path, f"benchmarks[{index}].runs[{run_index}].values", v) for v in values]
            bench.add(metric, sum(numbers) / len(numbers) * scale, out_unit, "pyperf")
            if len(numbers) > 1:
                bench.note(metric, "pyperf values within a run averaged into one sample per process")
    return dataset
