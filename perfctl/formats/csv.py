"""Per-run CSV: one row per (run, reading), written as each run ends. Columns: docs/samples.md."""

from __future__ import annotations

import csv
from typing import IO

from perfctl.model import Sample

COLUMNS = ("run_index", "warmup", "outcome", "exit_status", "signal", "wall_ns", "event", "backend", "scope",
           "status", "value", "time_enabled", "time_running", "scaled", "source", "reason")


class CsvWriter:
    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._writer = csv.writer(stream)
        self._writer.writerow(COLUMNS)

    def write_machine(self, inventory: dict) -> None:
        """The inventory does not fit a per-reading table; use --json or -o to keep it."""

    def write_sample(self, sample: Sample) -> None:
        head = (sample.run_index, int(sample.warmup), sample.outcome, sample.exit_status, sample.signal,
                sample.wall_ns)
        for r in sample.readings:
            self._writer.writerow((*head, r.event, r.backend, r.scope, r.status, r.value, r.time_enabled,
                                   r.time_running, r.scaled, r.source, r.reason))
        self._stream.flush()
