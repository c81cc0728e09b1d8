"""hyperfine ``--export-json``: ``results[]`` with ``command`` and per-run ``times`` in seconds (and
``exit_codes``); runs whose exit code is not 0 are left out, as perfctl leaves out failed runs."""

from __future__ import annotations

from perfctl.formats import WALL_TIME, Dataset, DatasetError, finite, load_json


def read_dataset(path: str) -> Dataset:
    data = load_json(path, "hyperfine export")
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise DatasetError(f"{path}: not a hyperfine export: no 'results' list")
    dataset = Dataset(path, "hyperfine")
    for index, result in enumerate(results):
        if not isinstance(result, dict) or not isinstance(result.get("times"), list):
            raise DatasetError(f"{path}: results[{index}]: no 'times' list")
        name = str(result.get("command") or f"command {index}")
        codes = result.get("exit_codes") or [0] * len(result["times"])
        bench = dataset.benchmark(name)
        failed = 0
        for run, (seconds, code) in enumerate(zip(result["times"], codes)):
            value = finite(path, f"results[{index}].times[{run}]", seconds)
            if code not in (0, None):
                failed += 1
                continue
            bench.add(WALL_TIME, value * 1e9, "ns", "hyperfine")
        if failed:
            dataset.notes.append(f"{name}: left out {failed} runs with a non-zero exit code")
    return dataset
