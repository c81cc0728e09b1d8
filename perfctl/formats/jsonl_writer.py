"""perfctl JSON Lines, written: the one writer of samples, for `-o FILE` and stdout's ``--json`` alike.

Each record (the machine's inventory, then one sample per run) is serialized once, to the bytes of one
line, and those bytes go to every destination in turn, each written and flushed as the run ends, so an
interrupted measurement keeps every finished run. The reader is perfctl/formats/jsonl.py; the format,
docs/samples.md.

This module owns the speed-ups of a sample's way from its fields to its line, each measured as a share of
perfctl's own work per run of /bin/true (bench/stat_rate.py, the per-run cost it prints):

- orjson makes the line in a tenth of json's time (a third of the per-run work, when json made it). It is
  used where its bytes read back as json's would: json writes the rare sample orjson would write otherwise
  (non-ASCII text, a lone surrogate from argv bytes, an int beyond 64 bits) or differently (NaN and
  infinities, which orjson makes null), so every line is the ASCII that ``json.dumps`` of the sample's
  record reads back as.
- What recurs unchanged in every sample of a session, the same objects (the benchmark, the environment, an
  unsupported reading), is serialized once per writer and kept as an orjson Fragment (~10 us of a sample's
  ~25 us). The cache is keyed by ``id()``, the cheapest key there is (a frozen dataclass's hash is worked
  out anew from all its fields at every lookup), and keeps the object itself beside its fragment, so that
  while an entry lives no other object can have its id.
- A sample's record is built by hand, not by dataclasses.asdict (which deep-copies every value and cost
  more per run than the counters themselves), and a reading's fields are copied from its instance dict in
  one go (a third of a getattr per field). That dict is the fields in order: the dataclass's __init__ makes
  it so, and so does model.counted_reading, the backend's way of making an "ok" reading without that
  __init__ (the other speed-up of the hot path: it belongs to the model, which the agent's counter backends
  import without this package).
- The finite check fetches a reading's five numeric fields in one C call (operator.attrgetter): going
  through all fourteen fields of every reading was a tenth of the per-run work.
- Lines are bytes from orjson to the file descriptor: no decoding to str and encoding back.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import operator
from collections.abc import Callable, Sequence

import orjson

from perfctl.model import Benchmark, Reading, Sample
from perfctl.output_files import OutputError


class JsonlWriter:
    """Writes each record once, to every destination in order: ``(where, stream)`` pairs, ``where`` naming
    the output in the OutputError that a failed write raises (the path of -o FILE, or "stdout"); a stream is
    binary (output_files.SampleFile) or text (stdout)."""

    def __init__(self, destinations: Sequence[tuple[str, object]] = ()):
        self._destinations = [(where, _writer_of(stream)) for where, stream in destinations]
        # id(obj) -> (obj, orjson's Fragment of its dict); obj kept so that its id names nothing else
        self._fragments: dict[int, tuple[object, orjson.Fragment]] = {}

    def write_machine(self, inventory: dict) -> None:
        self._write(json.dumps(inventory, separators=(",", ":")).encode("ascii") + b"\n")

    def write_sample(self, sample: Sample) -> None:
        self._write(self.sample_line(sample) + b"\n")

    def _write(self, line: bytes) -> None:
        for where, write in self._destinations:
            try:
                write(line)
            except OSError as err:
                raise OutputError(where, err) from None

    def sample_line(self, sample: Sample) -> bytes:
        """The sample's line, without its newline: what ``json.dumps(sample_record(sample))`` makes, read back
        the same, in ASCII whatever the text holds (so any stdout encoding takes it)."""
        if _all_finite(sample):
            try:
                line = orjson.dumps(sample_record(sample, self._fragment))
            except orjson.JSONEncodeError:
                pass
            else:
                if line.isascii():
                    return line
        return json.dumps(sample_record(sample), separators=(",", ":")).encode("ascii")

    def _fragment(self, obj, make) -> orjson.Fragment:
        """sample_record's ``recurring``: orjson's bytes of ``make(obj)``, made once per object."""
        kept = self._fragments.get(id(obj))
        if kept is not None and kept[0] is obj:
            return kept[1]
        if len(self._fragments) >= _MAX_FRAGMENTS:  # a session has a few; a long-lived writer stays bounded
            self._fragments.clear()
        fragment = orjson.Fragment(orjson.dumps(make(obj)))
        self._fragments[id(obj)] = (obj, fragment)
        return fragment


_MAX_FRAGMENTS = 256


def _writer_of(stream) -> Callable[[bytes], None]:
    """The function that writes a line's bytes to ``stream`` and flushes it. A text stream (stdout) gets
    them on its binary buffer, after its pending text (printed before the line, it stays before it), where
    its encoding writes ASCII as ASCII; else, or without a buffer, as text."""
    if not isinstance(stream, io.TextIOBase):
        def write_binary(line: bytes) -> None:
            stream.write(line)
            stream.flush()

        return write_binary
    buffer = getattr(stream, "buffer", None)
    if buffer is None or "{}".encode(stream.encoding or "ascii", "replace") != b"{}":
        def write_text(line: bytes) -> None:
            stream.write(line.decode("ascii"))
            stream.flush()

        return write_text

    def write_buffered(line: bytes) -> None:
        stream.flush()
        buffer.write(line)
        buffer.flush()

    return write_buffered


def sample_record(sample: Sample, recurring=None) -> dict:
    """The sample as the JSON Lines format has it (docs/samples.md): its fields in order after ``"type":
    "sample"``, a reading's fields without those that are None (absence reads as 'not applicable'), and
    ``labels`` only when there are some (a sample without labels reads as it did before labels existed).
    ``recurring(obj, make)`` gives what stands for ``make(obj)`` where ``obj`` recurs unchanged from sample to
    sample (the benchmark, the environment, an unsupported reading): by default that dict itself."""
    put = recurring or _made
    out = {"type": "sample"}
    for name in _SAMPLE_FIELDS:
        out[name] = getattr(sample, name)
    out["benchmark"] = put(sample.benchmark, _benchmark_dict)
    out["environment"] = put(sample.environment, _shallow)
    out["readings"] = [put(r, _reading_dict) if r.status == "unsupported" else _reading_dict(r)
                       for r in sample.readings]
    out["backends"] = list(sample.backends)
    out["extra"] = dict(sample.extra)
    if sample.labels:
        out["labels"] = dict(sample.labels)
    return out


_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(Sample)
                       if f.name not in ("benchmark", "environment", "readings", "backends", "extra", "labels"))


def _made(obj, make):
    return make(obj)


@functools.cache
def _field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _shallow(obj) -> dict:
    """The dataclass's fields as a dict, in field order: its instance dict, copied, unless something else
    was stored on the instance."""
    names = _field_names(type(obj))
    fields = obj.__dict__
    if len(fields) == len(names):
        return dict(fields)
    return {name: getattr(obj, name) for name in names}


def _benchmark_dict(benchmark: Benchmark) -> dict:
    return {**_shallow(benchmark), "argv": list(benchmark.argv)}


def _reading_dict(reading: Reading) -> dict:
    fields = reading.__dict__
    if len(fields) != len(_field_names(Reading)):
        fields = _shallow(reading)
    return {k: v for k, v in fields.items() if v is not None}


# A reading's fields that hold numbers (Reading's types): the others hold text or None
_NUMBERS = operator.attrgetter("value", "time_enabled", "time_running", "scaled", "corrected")


def _all_finite(sample: Sample) -> bool:
    for reading in sample.readings:
        for value in _NUMBERS(reading):
            if value.__class__ is float and not math.isfinite(value):
                return False
    return _finite(sample.extra)


def _finite(value) -> bool:
    if value.__class__ is float:
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True
