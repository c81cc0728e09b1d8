"""perfctl JSON Lines: one JSON object per line, ``"type": "machine"`` (the inventory) then ``"sample"``.

Each line is written and flushed as its run ends, so an interrupted measurement keeps every finished run;
a torn last line (the writer was killed mid-write) is reported by the reader with its line number.
Schema: docs/samples.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO

import orjson

from perfctl.model import OUTCOMES, SCHEMA_VERSION, InterferencePolicy, Sample, distinct_labels


class SampleFileError(ValueError):
    """A file that is not valid perfctl JSON Lines; the message names the file and line."""


class JsonlWriter:
    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write_machine(self, inventory: dict) -> None:
        self._line(inventory)

    def write_sample(self, sample: Sample) -> None:
        self._line(sample.to_dict())

    def _line(self, obj: dict) -> None:
        self._stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._stream.flush()


def read(path: str) -> Iterator[dict | Sample]:
    """Yield machine records (dicts) and Samples in file order."""
    try:
        stream = open(path, encoding="utf-8")
    except OSError as err:
        raise SampleFileError(f"{path}: {err.strerror}") from None
    with stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                kind = obj.get("type") if isinstance(obj, dict) else None
                if kind == "machine":
                    yield obj
                elif kind == "sample":
                    yield Sample.from_dict(obj)
                else:
                    raise ValueError(f"unknown record type {kind!r}")
            except (ValueError, TypeError, KeyError) as err:
                raise SampleFileError(f"{path}:{number}: not a perfctl sample line: {err}") from None


class DatasetBuilder:
    """Turns sample records (JSON Lines dicts) into a Dataset: measured runs that ended ok, one value per
    reading label, plus wall-time; warmups and failed runs are left out and counted in the notes. Used for
    files here and for samples stored on the server (server/service.py)."""

    def __init__(self, path: str, fmt: str = "perfctl", interference: InterferencePolicy | None = None):
        from perfctl.formats import Dataset

        self.dataset = Dataset(path, fmt)
        self._excluded: dict[str, dict[str, int]] = {}
        self._executables: dict[str, set[str]] = {}
        self._interference = interference or InterferencePolicy()
        self._interfered: dict[str, int] = {}

    def add(self, record: dict) -> None:
        """Add one sample record; raises ValueError/KeyError/TypeError on a malformed one."""
        from perfctl.formats import WALL_TIME

        if record.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {record.get('schema_version')!r}")
        bench_info = record["benchmark"]
        name = str(bench_info["name"])
        self._executables.setdefault(name, set()).add(bench_info.get("executable_sha256"))
        outcome = record["outcome"]
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        interfered = (not record["warmup"] and outcome == "ok"
                      and self._interference.flags(record["readings"], record["wall_ns"]))
        if interfered:
            self._interfered[name] = self._interfered.get(name, 0) + 1
        if record["warmup"] or outcome != "ok" or (interfered and self._interference.exclude):
            reason = "warmup" if record["warmup"] else outcome if outcome != "ok" else "interfered-with"
            counts = self._excluded.setdefault(name, {})
            counts[reason] = counts.get(reason, 0) + 1
            return
        bench = self.dataset.benchmark(name)
        bench.add(WALL_TIME, _number(record["wall_ns"]), "ns", "perfctl")
        readings = record["readings"]
        names = distinct_labels([(r["event"] + _SCOPE_SUFFIX.get(r.get("scope"), ""), r.get("backend"))
                                 for r in readings])
        for reading, label in zip(readings, names):
            _add_reading(bench, label, reading)

    def finish(self):
        dataset = self.dataset
        for name, counts in self._excluded.items():
            left_out = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
            dataset.notes.append(f"{name}: left out {left_out} runs")
        for name, count in self._interfered.items():
            if not self._interference.exclude:
                dataset.notes.append(f"{name}: {count} runs flagged: {self._interference.describe()} "
                                     "(kept; --exclude-interfered leaves them out)")
            else:
                dataset.notes.append(f"{name}: interfered-with runs are those in which "
                                     f"{self._interference.describe()}")
        for name, digests in self._executables.items():
            if len(digests) > 1 and name in dataset.benchmarks:
                dataset.notes.append(f"{name}: {len(digests)} different executables under one name")
        for bench in dataset.benchmarks.values():
            for metric, backends in bench.backends.items():
                if len(backends) > 1:
                    bench.note(metric, f"mixed backends: {', '.join(sorted(backends))}")
        return dataset


def read_dataset(path: str, interference: InterferencePolicy | None = None):
    """A perfctl JSON Lines file as a Dataset (see DatasetBuilder).

    Reads the JSON objects directly (orjson) rather than through Sample.from_dict: building 100,000 frozen
    dataclasses took longer than the whole comparison (bench/compare_speed.py). Malformed lines are
    reported with the file and line.
    """
    from perfctl.formats import DatasetError

    builder = DatasetBuilder(path, interference=interference)
    try:
        stream = open(path, "rb")
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    with stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
                kind = record.get("type")
                if kind == "machine":
                    builder.dataset.machine = builder.dataset.machine or record
                elif kind == "sample":
                    builder.add(record)
                else:
                    raise ValueError(f"unknown record type {kind!r}")
            except (ValueError, TypeError, KeyError, AttributeError, orjson.JSONDecodeError) as err:
                raise DatasetError(f"{path}:{number}: not a perfctl sample line: {err}") from None
    return builder.finish()


_SCOPE_SUFFIX = {"user": ":u", "kernel": ":k"}


def _number(value) -> float:
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"non-finite value {value!r}")
    return number


def _add_reading(bench, label: str, reading: dict) -> None:
    status = reading["status"]
    if status == "ok":
        bench.add(label, _number(reading["value"]), reading.get("unit", "count"), reading.get("backend"))
    elif status == "multiplexed" and reading.get("scaled") is not None:
        bench.add(label, _number(reading["scaled"]), reading.get("unit", "count"), reading.get("backend"))
        bench.note(label, "multiplexed counter: scaled estimates in some runs")
    elif status == "unsupported":
        bench.note(label, f"unsupported: {reading.get('reason')}")
    elif status == "error":
        bench.note(label, f"counter error in some runs: {reading.get('reason')}")
    else:
        raise ValueError(f"reading {label!r} has unknown status {status!r}")
