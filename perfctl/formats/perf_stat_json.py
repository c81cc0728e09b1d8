"""``perf stat -j`` JSON (perf >= 6.x): one JSON object per event and run, on its own line. This module
parses that syntax; what the lines mean (runs, ``<not supported>``, msec to ns, multiplexing, what is
refused) is perf_stat's, shared with the ``perf stat -x,`` reader: a file built with ``perf stat -j -o FILE
--append -- CMD`` run N times holds N runs of one benchmark named after the file. ``perf stat -r N`` (a
``variance``), ``-I`` (an ``interval``) and per-CPU or per-core aggregation (a ``cpu``, ``core``, ... key)
are refused."""

from __future__ import annotations

import json

from perfctl.dataset import Dataset, DatasetError
from perfctl.formats.dataset import NumberTooLong, finite, json_field, json_int, read_lines
from perfctl.formats.perf_stat import (
    STARTED_ON,
    PerfStatRuns,
    refuse_aggregation,
    refuse_cut,
    refuse_intervals,
    refuse_repeat,
)

SYNTAX = "-j"
# Keys perf adds when one event has several values per run (-A, --per-core, --per-socket, ...).
_AGGREGATION_KEYS = ("cpu", "core", "socket", "die", "node", "thread", "cgroup")


def read_dataset(path: str) -> Dataset:
    runs = PerfStatRuns(path, "perf-stat-json")
    for number, line in enumerate(read_lines(path), 1):
        refuse_cut(f"{path}:{number}", line)
        if line.startswith(STARTED_ON):
            runs.start_run(number)
        if not line.strip() or line.startswith("#"):
            continue
        at = f"{path}:{number}"  # messages name the line as perf_stat_csv's do: FILE:LINE: field
        try:
            record = json.loads(line, parse_int=json_int)
        except NumberTooLong as err:
            raise DatasetError(f"{at}: {err}") from None
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            raise DatasetError(f"{at}: not a perf stat -j line: {line[:80]!r}")
        if "variance" in record:
            raise refuse_repeat(at, SYNTAX, "variance")
        if "interval" in record:
            raise refuse_intervals(at, SYNTAX)
        for key in _AGGREGATION_KEYS:
            if key in record:
                raise refuse_aggregation(at, f"{key}: per-{key}")
        event = json_field(at, "event", record, "event", str, "a string")
        value = json_field(at, "counter-value", record, "counter-value", (str, int, float), "a number or a string")
        unit = json_field(at, "unit", record, "unit", str, "a string", default="")
        running = record.get("pcnt-running")
        runs.count(at, number, event, value, unit, None if running is None else finite(at, "pcnt-running", running))
    return runs.finish()
