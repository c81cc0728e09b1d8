"""``perf stat -x,`` CSV. One run per block of lines: a run ends when an event repeats, so a file built
with ``perf stat -x, -o FILE --append -- CMD`` run N times holds N runs. The file is one benchmark, named
after the file. msec values (task-clock, cpu-clock) are converted to ns; ``<not supported>`` and
``<not counted>`` are noted, never read as 0. Lines of ``perf stat -r`` (means, not runs) are refused."""

from __future__ import annotations

from perfctl.formats.dataset import Dataset, DatasetError, finite, read_lines, stem

_SCALE = {"msec": ("ns", 1e6)}


def read_dataset(path: str) -> Dataset:
    lines = read_lines(path)
    dataset = Dataset(path, "perf-stat")
    bench = dataset.benchmark(stem(path))
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3 or not fields[2]:
            raise DatasetError(f"{path}:{number}: not a perf stat -x, line: {line[:80]!r}")
        value, unit, event = fields[0], fields[1], fields[2]
        if event in seen:
            seen.clear()
        seen.add(event)
        if value.startswith("<not supported>"):
            bench.note(event, "unsupported: perf stat printed <not supported>")
            continue
        if value.startswith("<not counted>"):
            bench.note(event, "perf stat printed <not counted> in some runs")
            continue
        if len(fields) > 3 and fields[3].endswith("%"):
            raise DatasetError(f"{path}:{number}: this is perf stat -r output (a mean with its spread), not "
                               "per-run values; record runs with perf stat -x, -o FILE --append")
        out_unit, scale = _SCALE.get(unit, (unit or "count", 1.0))
        bench.add(event, finite(path, f"line {number}", value, text=True) * scale, out_unit, "perf-stat")
        if len(fields) > 4 and fields[4] not in ("", "100.00"):
            bench.note(event, f"multiplexed: counted {fields[4]}% of the time in some runs (scaled by perf)")
    return dataset
