"""``perf stat -x,`` CSV: a line is ``value,unit,event,run time,running %,...``. This module parses that
syntax; what the lines mean (runs, ``<not supported>``, msec to ns, multiplexing, what is refused) is
perf_stat's, shared with the ``perf stat -j`` reader: a file built with ``perf stat -x, -o FILE --append --
CMD`` run N times holds N runs of one benchmark named after the file. ``perf stat -r`` (a variance after
the event), ``-I`` (a time before the value) and ``-A``/``--per-*`` (a CPU, core or thread before the
value) are refused."""

from __future__ import annotations

from perfctl.dataset import Dataset, DatasetError
from perfctl.formats.dataset import finite, read_lines
from perfctl.formats.perf_stat import (
    STARTED_ON,
    PerfStatRuns,
    refuse_aggregation,
    refuse_cut,
    refuse_intervals,
    refuse_repeat,
)

SYNTAX = "-x,"


def read_dataset(path: str) -> Dataset:
    runs = PerfStatRuns(path, "perf-stat")
    for number, line in enumerate(read_lines(path), 1):
        refuse_cut(f"{path}:{number}", line)
        if line.startswith(STARTED_ON):
            runs.start_run(number)
        if not line.strip() or line.startswith("#"):
            continue
        at = f"{path}:{number}"
        fields = line.split(",")
        column = _value_column(fields)
        if column is None and len(fields) > 2 and fields[2].strip() and not _is_value(fields[1]):
            column = 0  # value, unit, event, with a value that is not a number: finite() says so below
        if column is None:
            raise DatasetError(f"{at}: not a perf stat -x, line: {line[:80]!r}")
        if column:  # columns before the value
            if _is_value(fields[0]):
                raise refuse_intervals(at, SYNTAX)
            raise refuse_aggregation(at, f"{fields[0][:40]!r}: per-CPU, per-core or per-thread")
        if any(c.isspace() or c == "#" for c in fields[2]):  # perf's event names hold neither
            raise DatasetError(f"{at}: not a perf stat -x, line: event {fields[2][:60]!r}")
        if len(fields) > 3 and fields[3].endswith("%"):
            raise refuse_repeat(at, SYNTAX, "spread")
        running = finite(at, "pcnt-running", fields[4], text=True) if len(fields) > 4 and fields[4] else None
        runs.count(at, number, fields[2], fields[0], fields[1], running)
    return runs.finish()


def is_perf_stat_line(line: str) -> bool:
    """Whether a line has the field layout of perf stat -x, (format detection). A comma alone is not
    enough: a hyperfine CSV export, an HTML page or UTF-16 text have commas too."""
    return _value_column(line.split(",")) is not None


def _value_column(fields: list[str]) -> int | None:
    """Where a line's counter value is: 0 as perf writes a run's counts; 1 to 3 after the columns -I (a
    time), -A (a CPU) or --per-core/--per-socket (the core and its CPU count), alone or together, put
    before it, which the reader refuses by name. The value is followed by a unit (perhaps empty) and an
    event name, neither of them a value; None when no column fits."""
    for column in range(4):
        if (len(fields) > column + 2 and _is_value(fields[column]) and not _is_value(fields[column + 1])
                and fields[column + 2].strip() and not _is_value(fields[column + 2])):
            return column
    return None


def _is_value(field: str) -> bool:
    """Whether a field holds a counter value (or -I's time): digits, or perf's <not counted>/<not supported>."""
    if field.startswith("<not "):
        return True
    try:
        float(field)
    except ValueError:
        return False
    return True
