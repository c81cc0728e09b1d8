"""perfctl JSON Lines: one JSON object per line, ``"type": "machine"`` (the inventory) then ``"sample"``.

Each line is written and flushed as its run ends, so an interrupted measurement keeps every finished run;
a torn last line (the writer was killed mid-write) is reported by the reader with its line number.
Schema: docs/samples.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO

from perfctl.model import Sample


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
