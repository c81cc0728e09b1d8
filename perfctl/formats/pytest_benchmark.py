"""pytest-benchmark JSON (``--benchmark-json=FILE``, or a file saved by ``--benchmark-save`` /
``--benchmark-autosave`` with ``--benchmark-save-data``): ``benchmarks[]``, each named by its ``fullname``,
with the raw round times in seconds in ``stats.data``, read as wall time in ns.

The unit is a round, not a process: all rounds of a test run in one pytest process, and each value is the
round's time divided by its ``stats.iterations`` calls. A benchmark without ``stats.data`` (saved without
``--benchmark-save-data``) is refused: its summary statistics (min, mean, stddev...) are not runs, and runs
are never invented from them."""

from __future__ import annotations

from perfctl.dataset import Dataset, DatasetError
from perfctl.formats.dataset import finite, from_entry, json_field, json_kind, json_list, to_ns
from perfctl.model import WALL_TIME

_NOTE = "pytest-benchmark rounds within one process: each run is one round's time per iteration"


def read_dataset(path: str) -> Dataset:
    benchmarks = json_list(path, "pytest-benchmark JSON", "benchmarks")
    dataset = Dataset(path, "pytest-benchmark")
    for index, entry in enumerate(benchmarks):
        where = f"benchmarks[{index}]"
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: {where}: expected an object, got {json_kind(entry)}")
        name = json_field(path, f"{where}.name", entry, "name", str, "a string")
        name = json_field(path, f"{where}.fullname", entry, "fullname", str, "a string", default=name) or name
        stats = json_field(path, f"{where}.stats", entry, "stats", dict, "an object")
        if stats.get("data") is None:
            raise DatasetError(f"{path}: {where}.stats.data: missing: no raw round times, only summary "
                               "statistics; rerun with --benchmark-json=FILE or add --benchmark-save-data")
        rounds = json_field(path, f"{where}.stats.data", stats, "data", list, "a list")
        if not rounds:
            raise DatasetError(f"{path}: {where}.stats.data: empty: no rounds")
        expected = stats.get("rounds")
        if expected is not None and expected != len(rounds):
            raise DatasetError(f"{path}: {where}.stats.data: {len(rounds)} round times but stats.rounds is "
                               f"{expected!r}")
        bench = dataset.benchmark(name)
        for round_index, seconds in enumerate(rounds):
            round_where = f"{where}.stats.data[{round_index}]"
            value = finite(path, round_where, seconds)
            if value < 0:
                raise DatasetError(f"{path}: {round_where}: negative time {value!r}")
            bench.add(WALL_TIME, to_ns(path, round_where, value, "s", 1e9), "ns", "pytest-benchmark")
        bench.note(WALL_TIME, _NOTE)
        from_entry(bench, f"pytest-benchmark {where}", len(rounds))  # one name twice: two tests (unmix)
    return dataset
