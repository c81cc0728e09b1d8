"""``perf stat -j`` JSON (perf >= 6.x): one JSON object per line per event, with the semantics of the
``perf stat -x,`` CSV reader (perf_stat_csv): one run per block of lines, so a file built with
``perf stat -j -o FILE --append -- CMD`` run N times holds N runs; the file is one benchmark, named after
the file; msec values (task-clock, cpu-clock) are converted to ns; ``<not supported>`` and
``<not counted>`` are noted, never read as 0. Output of ``perf stat -r N`` (a mean with its ``variance``,
no per-run values), of ``-I`` (intervals of one run) and of per-CPU or per-core aggregation (several values
per event and run) is refused."""

from __future__ import annotations

import json

from perfctl.formats.dataset import Dataset, DatasetError, finite, json_field, read_lines, stem

_SCALE = {"msec": ("ns", 1e6)}
# Keys perf adds when one event has several values per run (-A, --per-core, --per-socket, ...).
_AGGREGATION_KEYS = ("cpu", "core", "socket", "die", "node", "thread", "cgroup")


def read_dataset(path: str) -> Dataset:
    lines = read_lines(path)
    dataset = Dataset(path, "perf-stat-json")
    bench = dataset.benchmark(stem(path))
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            raise DatasetError(f"{path}:{number}: not a perf stat -j line: {line[:80]!r}")
        if "variance" in record:
            raise DatasetError(f"{path}:{number}: this is perf stat -r output (a mean with its variance), not "
                               "per-run values; record runs with perf stat -j -o FILE --append")
        if "interval" in record:
            raise DatasetError(f"{path}:{number}: this is perf stat -I output (intervals of one run), not "
                               "per-run values; record runs with perf stat -j -o FILE --append")
        at = f"{path}:{number}"  # messages name the line as perf_stat_csv's do: FILE:LINE: field
        for key in _AGGREGATION_KEYS:
            if key in record:
                raise DatasetError(f"{path}:{number}: {key}: per-{key} output has several values per event "
                                   "and run; record without -A/--per-* options")
        event = json_field(at, "event", record, "event", str, "a string")
        if not event:
            raise DatasetError(f"{at}: event: empty")
        value = json_field(at, "counter-value", record, "counter-value", (str, int, float),
                           "a number or a string")
        if isinstance(value, str) and value.startswith("<not supported>"):
            bench.note(event, "unsupported: perf stat printed <not supported>")
            continue
        if isinstance(value, str) and value.startswith("<not counted>"):
            bench.note(event, "perf stat printed <not counted> in some runs")
            continue
        unit = json_field(at, "unit", record, "unit", str, "a string", default="")
        out_unit, scale = _SCALE.get(unit, (unit or "count", 1.0))
        number_value = finite(at, "counter-value", value, text=isinstance(value, str))
        bench.add(event, finite(at, "counter-value", number_value * scale), out_unit,
                  "perf-stat")
        running = record.get("pcnt-running")
        if running is not None:
            running = finite(at, "pcnt-running", running)
            if running != 100:
                bench.note(event, f"multiplexed: counted {running:.2f}% of the time in some runs (scaled by "
                                  "perf)")
    return dataset
