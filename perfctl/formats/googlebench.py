"""Google Benchmark JSON (``--benchmark_out=FILE --benchmark_out_format=json``): ``benchmarks[]`` entries
with ``run_type`` "iteration" are read as runs, ``real_time`` as wall time and ``cpu_time`` as cpu-time,
in their ``time_unit`` (ns, us, ms, s) converted to ns. Aggregates (``run_type`` "aggregate": mean, median,
stddev, cv) are left out: they summarise the repetitions, they are not runs.

Unlike perfctl's runs, the unit here is a repetition, not a process: with ``--benchmark_repetitions=N`` one
process runs each benchmark N times and each repetition's time is the mean over its iterations, so the
repetitions share one process (its heap layout, its ASLR, its warm caches). A file without repetitions
holds one run per benchmark. Entries that report ``error_occurred`` are left out and counted in a note.

A run is identified in its file by (``name``, ``family_index``, ``per_family_instance_index``,
``repetition_index``), which the library numbers from 0 in one process (``repetition_index`` below
``repetitions``): an entry met again (a file written twice into one, entries copied) is that run read twice,
left out with a note (RunIdentity). Two families under one name are two registered benchmarks (two
programs' files merged): ``from_entry`` keeps them apart, so compare leaves the name out unless --pool.
Files from before 1.6 write no indexes: their entries cannot be told apart and are all read.

User counters (``state.counters["name"]``, ``SetItemsProcessed``, ``SetBytesProcessed``) and the memory
manager's fields (``allocs_per_iter``, ``max_bytes_used``, ...) are not read, and a note names them. The JSON
reporter writes a counter as a bare number beside the standard fields (``_STANDARD_FIELDS``, from the
library's json_reporter.cc), after ``Counter::Finish`` has applied its flags: ``kIsRate`` divided it by the
CPU time, ``kInvert`` took its reciprocal (counter.cc), and neither flag is written. So the file does not say
whether a higher or a lower value is better (``items_per_second`` up is faster, ``kInvert`` seconds per item
up is slower, a plain count of hits or of misses either way), while compare reads every metric as a cost,
lower is better: a rate read as a cost turns "B 20% faster" into "B slower, 0.80x". The times carry the
same information with a known direction: a rate of items per iteration is that count over ``cpu_time``."""

from __future__ import annotations

from perfctl.dataset import Dataset, DatasetError, RunIdentity
from perfctl.formats.dataset import finite, from_entry, json_field, json_kind, json_list, to_ns, type_problem
from perfctl.model import WALL_TIME

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
    counters: dict[str, None] = {}  # the counters' names, in the file's order
    identity = RunIdentity(identified_by="name, family_index, per_family_instance_index and repetition_index")
    families: dict[tuple[str, int | None], int] = {}  # (benchmark, family_index) -> runs kept
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
        run = _run(path, where, entry)
        if identity.seen(run):
            continue
        identity.read(run)
        unit = json_field(path, f"{where}.time_unit", entry, "time_unit", str, "a string")
        if unit not in _TO_NS:
            raise DatasetError(f"{path}: {where}.time_unit: unknown unit {unit!r} (one of ns, us, ms, s)")
        bench = dataset.benchmark(name)
        for key, metric in (("real_time", WALL_TIME), ("cpu_time", CPU_TIME)):
            field_where = f"{where}.{key}"
            value = finite(path, field_where, json_field(path, field_where, entry, key, (int, float), "a number"))
            if value < 0:
                raise DatasetError(f"{path}: {field_where}: negative time {value!r}")
            bench.add(metric, to_ns(path, field_where, value, unit, _TO_NS[unit]), "ns", "google-benchmark")
            bench.note(metric, _NOTE)
        family = (name, entry.get("family_index"))
        families[family] = families.get(family, 0) + 1
        for key, value in entry.items():
            if key not in _STANDARD_FIELDS and not type_problem(value, (int, float), "a number"):
                counters[key] = None  # a counter: named in a note, not read
    for (name, family_index), runs in families.items():
        from_entry(dataset.benchmark(name), f"google-benchmark family_index {family_index}", runs)
    identity.anonymous = 0  # a file without indexes is a file of an older library, not a defect to note
    identity.note(dataset)
    if counters:
        names = ", ".join(list(counters)[:8]) + (f", {len(counters) - 8} more" if len(counters) > 8 else "")
        dataset.notes.append(f"user counters not read ({names}): the file does not say which are rates or "
                             "inverted, so not whether higher or lower is better; real_time and cpu_time are read")
    for name, count in errors.items():
        dataset.notes.append(f"{name}: left out {count} repetitions that reported error_occurred")
    if aggregates and not dataset.benchmarks:
        dataset.notes.append(f"only {aggregates} aggregate entries (mean, median, stddev, cv), no repetitions: "
                             "rerun without --benchmark_report_aggregates_only")
    return dataset


def _run(path: str, where: str, entry: dict) -> int | None:
    """The run's identity (RunIdentity.entry of its name and indexes), None when the file (before 1.6)
    writes no indexes; DatasetError naming the entry when an index is not one the library writes."""
    indexes = {}
    for key in ("family_index", "per_family_instance_index", "repetition_index", "repetitions"):
        value = entry.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 0:
            raise DatasetError(f"{path}: {where}.{key}: expected a non-negative integer, got {value!r:.40}")
        indexes[key] = value
    repetitions = indexes.get("repetitions")
    repetition = indexes.get("repetition_index")
    if repetitions is not None and repetition is not None and repetition >= max(repetitions, 1):
        raise DatasetError(f"{path}: {where}.repetition_index: {repetition} is not below repetitions "
                           f"{repetitions} (the library numbers repetitions from 0)")
    if len(indexes.keys() - {"repetitions"}) < 3:
        return None
    return RunIdentity.entry("google-benchmark", entry.get("name"), indexes["family_index"],
                             indexes["per_family_instance_index"], repetition)
