"""Google Benchmark JSON (``--benchmark_out=FILE --benchmark_out_format=json``): ``benchmarks[]`` entries
with ``run_type`` "iteration" are read as runs, ``real_time`` as wall time and ``cpu_time`` as cpu-time,
in their ``time_unit`` (ns, us, ms, s) converted to ns. Aggregates (``run_type`` "aggregate": mean, median,
stddev, cv) are left out: they summarise the repetitions, they are not runs.

Unlike perfctl's runs, the unit here is a repetition, not a process: with ``--benchmark_repetitions=N`` one
process runs each benchmark N times and each repetition's time is the mean over its iterations, so the
repetitions share one process (its heap layout, its ASLR, its warm caches). A file without repetitions
holds one run per benchmark. Entries that report ``error_occurred`` are left out and counted in a note.

User counters (``state.counters["name"]``, ``SetItemsProcessed``, ``SetBytesProcessed``) are further metrics
of the benchmark, one value per repetition: the JSON reporter writes each counter as a numeric key of the
run beside the standard fields (``_STANDARD_FIELDS``, from the library's json_reporter.cc), and so does the
memory manager (``allocs_per_iter``, ``max_bytes_used``, ...); every other numeric key is read as a metric
named after it. The file does not say which counters are rates (``Counter::kIsRate``): a name ending in
``_per_second`` (as ``items_per_second`` and ``bytes_per_second`` do) has the unit "per second", any other
"count". For a rate higher is better, while compare reads lower as better for every metric: a rate that
compare calls slower in B went up."""

from __future__ import annotations

from perfctl.formats.dataset import (
    WALL_TIME,
    Dataset,
    DatasetError,
    finite,
    json_field,
    json_kind,
    json_list,
    type_problem,
)

CPU_TIME = "cpu-time"
_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
# Keys of a run that are not counters: PrintRunData in the library's json_reporter.cc (1.7.1; skipped and
# skip_message from 1.8).
_STANDARD_FIELDS = frozenset((
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "aggregate_name", "aggregate_unit", "error_occurred", "error_message",
    "skipped", "skip_message", "iterations", "real_time", "cpu_time", "time_unit", "cpu_coefficient",
    "real_coefficient", "big_o", "rms", "label"))
_NOTE = "Google Benchmark repetitions within one process: each run is one repetition's mean over its iterations"


def read_dataset(path: str) -> Dataset:
    benchmarks = json_list(path, "Google Benchmark JSON", "benchmarks")
    dataset = Dataset(path, "google-benchmark")
    aggregates = 0
    errors: dict[str, int] = {}
    for index, entry in enumerate(benchmarks):
        where = f"benchmarks[{index}]"
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: {where}: expected an object, got {json_kind(entry)}")
        run_type = json_field(path, f"{where}.run_type", entry, "run_type", str, "a string")
        if run_type == "aggregate":
            aggregates += 1
            continue
        if run_type != "iteration":
            raise DatasetError(f"{path}: {where}.run_type: expected 'iteration' or 'aggregate', got {run_type!r}")
        name = json_field(path, f"{where}.name", entry, "name", str, "a string")
        name = json_field(path, f"{where}.run_name", entry, "run_name", str, "a string", default=name) or name
        if json_field(path, f"{where}.error_occurred", entry, "error_occurred", bool, "a boolean", default=False):
            errors[name] = errors.get(name, 0) + 1
            continue
        unit = json_field(path, f"{where}.time_unit", entry, "time_unit", str, "a string")
        if unit not in _TO_NS:
            raise DatasetError(f"{path}: {where}.time_unit: unknown unit {unit!r} (one of ns, us, ms, s)")
        bench = dataset.benchmark(name)
        for key, metric in (("real_time", WALL_TIME), ("cpu_time", CPU_TIME)):
            field_where = f"{where}.{key}"
            value = finite(path, field_where, json_field(path, field_where, entry, key, (int, float), "a number"))
            if value < 0:
                raise DatasetError(f"{path}: {field_where}: negative time {value!r}")
            # a finite time can overflow once scaled to ns
            bench.add(metric, finite(path, field_where, value * _TO_NS[unit]), "ns", "google-benchmark")
            bench.note(metric, _NOTE)
        for key, value in entry.items():
            if key in _STANDARD_FIELDS or type_problem(value, (int, float), "a number"):
                continue  # a field of the reporter's, or one of a later version that is not a number
            if key in (WALL_TIME, CPU_TIME):
                raise DatasetError(f"{path}: {where}.{key}: a counter named as perfctl's {key} metric; rename it")
            unit = "per second" if key.endswith("_per_second") else "count"
            bench.add(key, finite(path, f"{where}.{key}", value), unit, "google-benchmark")
            bench.note(key, _NOTE)
    for name, count in errors.items():
        dataset.notes.append(f"{name}: left out {count} repetitions that reported error_occurred")
    if aggregates and not dataset.benchmarks:
        dataset.notes.append(f"only {aggregates} aggregate entries (mean, median, stddev, cv), no repetitions: "
                             "rerun without --benchmark_report_aggregates_only")
    return dataset
