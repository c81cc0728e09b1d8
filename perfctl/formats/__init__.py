"""Sample file formats: one module per format, each a reader (and, for perfctl's own, a writer).

Every reader turns a file into a :class:`Dataset`: per benchmark, per metric, one value per run (one
process execution: pyperf's values inside a run are averaged into one, never treated as independent).
Times are in nanoseconds whatever the tool wrote. ``read_dataset`` detects the format from the content
unless it is named.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

FORMATS = ("perfctl", "hyperfine", "pyperf", "perf-stat")
WALL_TIME = "wall-time"


class DatasetError(ValueError):
    """A file that cannot be read as samples; the message is one line naming the file."""


@dataclass
class BenchmarkData:
    name: str
    metrics: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    backends: dict[str, set[str]] = field(default_factory=dict)

    def add(self, metric: str, value: float, unit: str, backend: str | None = None) -> None:
        self.metrics.setdefault(metric, []).append(float(value))
        self.units.setdefault(metric, unit)
        if backend:
            self.backends.setdefault(metric, set()).add(backend)

    def note(self, metric: str, text: str) -> None:
        entries = self.notes.setdefault(metric, [])
        if text not in entries:
            entries.append(text)


@dataclass
class Dataset:
    path: str
    format: str
    benchmarks: dict[str, BenchmarkData] = field(default_factory=dict)
    machine: dict | None = None
    notes: list[str] = field(default_factory=list)

    def benchmark(self, name: str) -> BenchmarkData:
        return self.benchmarks.setdefault(name, BenchmarkData(name))


def detect(path: str) -> str:
    """The format of a file, from its content."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    text = head.decode("utf-8", errors="replace").lstrip()
    if not text:
        raise DatasetError(f"{path}: empty file")
    if text.startswith("{"):
        first_line = text.splitlines()[0]
        try:
            if json.loads(first_line).get("type") in ("machine", "sample"):
                return "perfctl"
        except (ValueError, AttributeError, RecursionError):  # not a JSON object line: another format
            pass
        if '"results"' in text:
            return "hyperfine"
        if '"benchmarks"' in text:
            return "pyperf"
        raise DatasetError(f"{path}: JSON, but neither perfctl JSON Lines, a hyperfine export nor pyperf JSON")
    if text.startswith("#") or "," in text.splitlines()[0]:
        return "perf-stat"
    raise DatasetError(f"{path}: unknown format (expected perfctl JSON Lines, hyperfine JSON, pyperf JSON or "
                       "perf stat -x, CSV)")


def read_dataset(path: str, input_format: str | None = None, interference=None) -> Dataset:
    """Read a sample file; ``input_format`` overrides detection; ``interference`` (model.InterferencePolicy)
    flags or leaves out perfctl runs that other tasks interfered with (other formats carry no such data)."""
    fmt = input_format or detect(path)
    if fmt == "perfctl":
        from functools import partial

        from perfctl.formats.jsonl import read_dataset as read_perfctl
        from perfctl.model import InterferencePolicy

        reader = partial(read_perfctl, interference=interference or InterferencePolicy())
    elif fmt == "hyperfine":
        from perfctl.formats.hyperfine import read_dataset as reader
    elif fmt == "pyperf":
        from perfctl.formats.pyperf import read_dataset as reader
    elif fmt == "perf-stat":
        from perfctl.formats.perf_stat_csv import read_dataset as reader
    else:
        raise DatasetError(f"unknown input format {fmt!r} (one of {', '.join(FORMATS)})")
    dataset = reader(path)
    if not any(b.metrics for b in dataset.benchmarks.values()):
        why = f" ({'; '.join(dataset.notes)})" if dataset.notes else ""
        raise DatasetError(f"{path}: no measured runs in this {fmt} file{why}")
    return dataset


def load_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    except ValueError as err:
        raise DatasetError(f"{path}: not valid JSON ({what}): {err}") from None
    except RecursionError:
        raise DatasetError(f"{path}: not valid JSON ({what}): lists or objects nested too deeply to read") from None


def stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def finite(path: str, where: str, value, text: bool = False) -> float:
    """A finite number from a file, or a DatasetError naming where the bad value is. A JSON value must be
    a number (not a string, not a boolean); ``text`` accepts the digits of a text format such as CSV."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str) if text else (int, float)):
        raise DatasetError(f"{path}: {where}: expected a number, got {json_kind(value)}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise DatasetError(f"{path}: {where}: not a number: {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise DatasetError(f"{path}: {where}: non-finite value {value!r}")
    return number


def json_kind(value) -> str:
    """The JSON name of a value's type, for messages that say what was found where a number or a string
    belongs."""
    for types, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"),
                        (dict, "an object"), (type(None), "null")):
        if isinstance(value, types):
            return name
    return type(value).__name__


def json_field(path: str, where: str, container: dict, key: str, types, wanted: str, default=None):
    """``container[key]`` when it has one of ``types``; ``default`` when it is absent or null (a None
    ``default`` makes it required); else a DatasetError naming the field."""
    value = container.get(key)
    if value is None:
        if default is not None:
            return default
        raise DatasetError(f"{path}: {where}: missing")
    problem = type_problem(value, types, wanted)
    if problem:
        raise DatasetError(f"{path}: {where}: {problem}")
    return value


def type_problem(value, types: type | tuple[type, ...], wanted: str) -> str | None:
    """None when ``value`` has one of ``types``, else what is wrong. A boolean is never a number here,
    although Python counts bool as an int."""
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
        return None
    return f"expected {wanted}, got {json_kind(value)}"
