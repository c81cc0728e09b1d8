"""hyperfine ``--export-json``: ``results[]`` with ``command`` and per-run ``times`` in seconds (and
``exit_codes``); runs whose exit code is not 0 are left out, as perfctl leaves out failed runs.

Each entry of ``results`` is one command (with its ``parameters`` under --parameter-scan): two entries under
one name (``-n`` given twice, or a scan with a fixed ``-n``) are two programs, recorded as two variants of
the benchmark, which perfctl.dataset.unmix leaves out unless pooled (--pool), as it does for perfctl files.
A run's place in its command's ``times`` is its run index, kept as its pairing key (block 0, perfctl/dataset.py
RunIdentity): with --paired, a run left out for its exit code leaves its partner out instead of shifting every
later pair (perfctl/pairing.py)."""

from __future__ import annotations

from perfctl.dataset import Dataset, DatasetError
from perfctl.formats.dataset import finite, from_entry, json_field, json_kind, json_list, to_ns
from perfctl.model import WALL_TIME


def read_dataset(path: str) -> Dataset:
    results = json_list(path, "a hyperfine export", "results")
    dataset = Dataset(path, "hyperfine")
    for index, result in enumerate(results):
        if not isinstance(result, dict) or not isinstance(result.get("times"), list):
            raise DatasetError(f"{path}: results[{index}]: no 'times' list")
        times = result["times"]
        name = json_field(path, f"results[{index}].command", result, "command", str, "a string",
                          default=f"command {index}") or f"command {index}"
        codes = json_field(path, f"results[{index}].exit_codes", result, "exit_codes", list, "a list",
                           default=[0] * len(times))
        if len(codes) != len(times):
            # zip would pair the first runs only and drop the rest without a word
            raise DatasetError(f"{path}: results[{index}]: {len(times)} times but {len(codes)} exit codes")
        bench = dataset.benchmark(name)
        parameters = result.get("parameters")
        scanned = [f"{key}={value}" for key, value in parameters.items()] if isinstance(parameters, dict) else []
        entry = " ".join([f"hyperfine results[{index}]", *scanned])
        failed = 0
        for run, (seconds, code) in enumerate(zip(times, codes)):
            where = f"results[{index}].times[{run}]"
            value = to_ns(path, where, finite(path, where, seconds), "s", 1e9)
            if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
                raise DatasetError(f"{path}: results[{index}].exit_codes[{run}]: expected an integer, got "
                                   f"{json_kind(code)}")
            if code not in (0, None):
                failed += 1
                continue
            bench.add(WALL_TIME, value, "ns", "hyperfine", key=run)  # block 0 (RunIdentity's packing)
        from_entry(bench, entry, len(times) - failed)
        if failed:
            dataset.notes.append(f"{name}: left out {failed} runs with a non-zero exit code")
    return dataset
