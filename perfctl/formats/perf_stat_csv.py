"""``perf stat -x,`` CSV: a line is ``value,unit,event,run time,running %,...``. This module parses that
syntax; what the lines mean (runs, ``<not supported>``, msec to ns, multiplexing, what is refused) is
perf_stat's, shared with the ``perf stat -j`` reader: a file built with ``perf stat -x, -o FILE --append --
CMD`` run N times holds N runs of one benchmark named after the file. ``perf stat -r`` (a variance after
the event), ``-I`` (a time before the value) and ``-A``/``--per-*`` (a CPU, core or thread before the
value) are refused."""

from __future__ import annotations

from perfctl.formats.dataset import Dataset, DatasetError, finite, read_lines
from perfctl.formats.perf_stat import STARTED_ON, PerfStatRuns, refuse_aggregation, refuse_intervals, refuse_repeat

SYNTAX = "-x,"


def read_dataset(path: str) -> Dataset:
    runs = PerfStatRuns(path, "perf-stat")
    for number, line in enumerate(read_lines(path), 1):
        if line.startswith(STARTED_ON):
            runs.start_run(number)
        if not line.strip() or line.startswith("#"):
            continue
        at = f"{path}:{number}"
        fields = line.split(",")
        if len(fields) < 3 or not fields[2]:
            raise DatasetError(f"{at}: not a perf stat -x, line: {line[:80]!r}")
        if _is_value(fields[1]):  # the unit's place holds a value: a column was put before it
            if _is_value(fields[0]):
                raise refuse_intervals(at, SYNTAX)
            raise refuse_aggregation(at, f"{fields[0][:40]!r}: per-CPU, per-core or per-thread")
        if len(fields) > 3 and fields[3].endswith("%"):
            raise refuse_repeat(at, SYNTAX, "spread")
        running = finite(at, "pcnt-running", fields[4], text=True) if len(fields) > 4 and fields[4] else None
        runs.count(at, number, fields[2], fields[0], fields[1], running)
    return runs.dataset


def is_perf_stat_line(line: str) -> bool:
    """Whether a line has the field layout of perf stat -x, (format detection): a counter value (or
    ``<not counted>``/``<not supported>``) and a unit, then an event name; or, as -I, -A and ``--per-*``
    write it, one column (a time, a CPU) before them, so that the reader can say which option made it.
    A comma alone is not enough: a hyperfine CSV export, an HTML page or UTF-16 text have commas too."""
    fields = line.split(",")
    return any(len(fields) > column + 2 and _is_value(fields[column]) and fields[column + 2].strip()
               and not _is_value(fields[column + 2]) for column in (0, 1))


def _is_value(field: str) -> bool:
    """Whether a field holds a counter value (or -I's time): digits, or perf's <not counted>/<not supported>."""
    if field.startswith("<not "):
        return True
    try:
        float(field)
    except ValueError:
        return False
    return True
