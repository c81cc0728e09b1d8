"""Which stored runs one side of a comparison takes, read as Datasets from the values stored at ingest.

A side is a machine with a selection (protos: Selection; `perfctl compare box-a@commit=abc`): a job, labels
that every run must carry, a time range, and by default, for each benchmark, only the runs of the most
recent job on that machine that ran it (its latest run started last), never all history silently.

The Dataset is built from each run's ``vals`` and ``shape`` (server/schema.py), never from its payload, and
holds what perfctl/formats/jsonl.py's DatasetBuilder would build from the same runs in a file: the same
metrics in the same order, values, units, backends, notes and start times (tests/test_fleet_compare.py
compares the two JSON outputs). Unlike a file, one benchmark name that covers runs of several executables,
inputs (argv or input digest) or kernels is not pooled unless ``pool``: it is left out and the note names
what was mixed.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from perfctl.formats.dataset import WALL_TIME, Dataset, DatasetError, unmix
from perfctl.model import INTERFERENCE_EVENT, InterferencePolicy
from perfctl.v1 import fleet_pb2 as pb

# The most runs one side of a comparison may select: beyond, the request is refused (RESOURCE_EXHAUSTED)
# before the server's memory grows with it. About 100 bytes per run while reading (docs/operations.md).
MAX_COMPARE_RUNS = 2_000_000


class TooManyRuns(Exception):
    """A selection holding more runs than the server compares; one line naming the limit."""


def describe(selection: pb.Selection) -> str:
    """How the user wrote the selection: box-a, box-a@job=ID, box-a@commit=abc, with its time range."""
    parts = ([f"job={selection.job_id}"] if selection.job_id else []) + \
        [f"{key}={value}" for key, value in sorted(selection.labels.items())]
    text = selection.machine + ("@" + ",".join(parts) if parts else "")
    return text


@dataclass
class _Bench:
    """One benchmark's runs as they are read (in the order stored)."""

    variants: Counter = field(default_factory=Counter)
    excluded: dict[str, int] = field(default_factory=dict)
    interfered: int = 0
    shapes: list[int] = field(default_factory=list)        # the shape of each kept run
    vals: dict[int, bytearray] = field(default_factory=dict)  # per shape, its kept runs' values
    first_ns: int | None = None
    last_ns: int | None = None


class Selector:
    """Reads the selected runs of machines from one Storage (server/storage.py); one per request."""

    def __init__(self, storage, interference: InterferencePolicy | None = None, pool: bool = False,
                 limit: int = MAX_COMPARE_RUNS):
        self.storage, self.pool, self.limit = storage, pool, limit
        self.interference = interference or InterferencePolicy()
        self._shapes = storage.shapes()
        self._contexts = storage.contexts()

    def dataset(self, selection: pb.Selection, benchmarks: list[str] | None = None) -> Dataset:
        """The Dataset of one side. DatasetError (one line) when the machine is unknown or nothing is
        selected; TooManyRuns past ``limit``."""
        name = describe(selection)
        dataset = Dataset(f"machine {name}", "perfctl")
        clock = next((machine_id for machine_name, machine_id in self.storage.machine_names().values()
                      if machine_name == selection.machine), None)
        benches: dict[str, _Bench] = {}
        skipped = 0
        for identity, _job_id, context, shape, warmup, outcome, start_ns, vals in self._runs(selection, benchmarks):
            if vals is None or shape not in self._shapes or len(vals) != 8 * (len(self._shapes[shape]) + 1):
                skipped += 1
                continue
            self._add(benches.setdefault(identity["name"], _Bench()), identity, context, shape, warmup, outcome,
                      start_ns, bytes(vals))
        self._finish(dataset, benches, clock)
        if skipped:
            dataset.notes.append(f"{skipped} stored samples of machine {selection.machine} could not be used and "
                                 "were skipped (their values could not be read)")
        if not dataset.benchmarks:
            what = f" of {', '.join(benchmarks)}" if benchmarks else ""
            chosen = " selected" if selection.labels or selection.job_id or selection.since_ns or selection.until_ns \
                else ""
            why = "; ".join(note for note in dataset.notes if ": left out" in note)
            raise DatasetError(f"machine {name!r} has no measured runs{what}{chosen}" + (f" ({why})" if why else ""))
        return dataset

    def payloads(self, selection: pb.Selection, benchmarks: list[str] | None = None) -> list[bytes]:
        """The stored payloads of the runs ``dataset`` would compare, for a client that draws every run
        (perfctl report box-a@commit=abc box-b). DatasetError when nothing is selected."""
        found = [bytes(row[-1]) for row in self._runs(selection, benchmarks, payloads=True)]
        if not found:
            raise DatasetError(f"machine {describe(selection)!r} has no stored runs selected")
        return found

    def _runs(self, selection: pb.Selection, benchmarks: list[str] | None, payloads: bool = False):
        """The selected runs, in the order stored: (benchmark identity, job_id, context, shape, warmup,
        outcome, start_time_ns, vals or payload)."""
        storage, name = self.storage, describe(selection)
        machine_pk = storage.machine_pk(selection.machine)
        if machine_pk is None:
            raise DatasetError(f"no machine named {selection.machine!r} on this server")
        identities = storage.benchmark_rows(benchmarks) if benchmarks else storage.benchmark_rows()
        context_pks = None
        if selection.labels:
            wanted = dict(selection.labels)
            context_pks = {pk for pk, ctx in self._contexts.items()
                           if all(ctx["labels"].get(k) == v for k, v in wanted.items())}
        filters = dict(benchmark_pks=set(identities) if benchmarks else None, context_pks=context_pks,
                       since_ns=selection.since_ns, until_ns=selection.until_ns)
        chosen = None
        job_ids = {selection.job_id} if selection.job_id else None
        if job_ids is None and not selection.all_history:
            chosen = self._latest_jobs(machine_pk, identities, filters)
            job_ids = set(chosen.values())
        seen = 0
        for rows in storage.stored_values(machine_pk, job_ids=job_ids, payloads=payloads, **filters):
            seen += len(rows)
            if seen > self.limit:
                raise TooManyRuns(f"{name} selects more than {self.limit:,} runs, the most this server compares "
                                  "(perfctl server --max-compare-runs): narrow it with @job=ID, a label, "
                                  "--since/--until or --benchmark")
            for benchmark_pk, job_id, *rest in rows:
                identity = identities.get(benchmark_pk)
                if identity is None:
                    continue
                if chosen is not None and chosen.get(identity["name"]) != job_id:
                    continue  # another job's runs of this benchmark: the default takes the most recent job
                yield (identity, job_id, *rest)

    def _latest_jobs(self, machine_pk: int, identities: dict, filters: dict) -> dict[str, str | None]:
        """For each benchmark name, the job whose last run started last (runs without a job count as one)."""
        latest: dict[str, tuple[int, str | None]] = {}
        for _, benchmark_pk, job_id, _, _, _, last in self.storage.series(machine_pk, **filters):
            identity = identities.get(benchmark_pk)
            if identity is None:
                continue
            name = identity["name"]
            if name not in latest or (last, job_id or "") > (latest[name][0], latest[name][1] or ""):
                latest[name] = (last, job_id)
        return {name: job for name, (_, job) in latest.items()}

    def _add(self, bench: _Bench, identity: dict, context: int, shape: int, warmup: bool, outcome: str,
             start_ns: int, vals: bytes) -> None:
        """One run, as DatasetBuilder._add takes a record (perfctl/formats/jsonl.py)."""
        interfered = False
        if not warmup and outcome == "ok":
            index = _interference_index(self._shapes[shape])
            if index is not None:
                wall, value = struct.unpack_from("<d", vals, 0)[0], struct.unpack_from("<d", vals, 8 * (index + 1))[0]
                interfered = wall > 0 and value / wall > self.interference.limit
        if interfered:
            bench.interfered += 1
        if warmup or outcome != "ok" or (interfered and self.interference.exclude):
            reason = "warmup" if warmup else outcome if outcome != "ok" else "interfered-with"
            bench.excluded[reason] = bench.excluded.get(reason, 0) + 1
            return
        kernel = self._contexts.get(context, {}).get("kernel", "unknown")
        bench.variants[(identity["executable_sha256"], identity["input_digest"], tuple(identity["argv"]), kernel)] += 1
        bench.shapes.append(shape)
        bench.vals.setdefault(shape, bytearray()).extend(vals)
        bench.first_ns = start_ns if bench.first_ns is None else min(bench.first_ns, start_ns)
        bench.last_ns = start_ns if bench.last_ns is None else max(bench.last_ns, start_ns)

    def _finish(self, dataset: Dataset, benches: dict[str, _Bench], clock: str | None) -> None:
        """The Dataset and its notes, in DatasetBuilder.finish's order."""
        for name, bench in benches.items():
            if bench.excluded:
                left_out = ", ".join(f"{n} {what}" for what, n in sorted(bench.excluded.items()))
                dataset.notes.append(f"{name}: left out {left_out} runs")
        for name, bench in benches.items():
            if bench.interfered:
                if not self.interference.exclude:
                    dataset.notes.append(f"{name}: {bench.interfered} runs flagged: {self.interference.describe()} "
                                         "(kept; --exclude-interfered leaves them out)")
                else:
                    dataset.notes.append(f"{name}: interfered-with runs are those in which "
                                         f"{self.interference.describe()}")
        for name, bench in benches.items():
            if bench.shapes:
                self._values(dataset, name, bench, clock)
                dataset.benchmarks[name].variants = bench.variants
        for data in dataset.benchmarks.values():
            for metric, backends in data.backends.items():
                if len(backends) > 1:
                    data.note(metric, f"mixed backends: {', '.join(sorted(backends))}")
        unmix(dataset, self.pool)

    def _values(self, dataset: Dataset, name: str, bench: _Bench, clock: str | None) -> None:
        """One benchmark's metrics: the kept runs' values per label, in the order the runs were stored."""
        data = dataset.benchmark(name)
        order = np.asarray(bench.shapes)
        columns: dict[str, np.ndarray] = {}
        data.metrics[WALL_TIME], data.units[WALL_TIME] = [], "ns"
        data.backends[WALL_TIME] = {"perfctl"}
        for shape in dict.fromkeys(bench.shapes):  # in order of each shape's first kept run
            spec = self._shapes[shape]
            matrix = np.frombuffer(bytes(bench.vals[shape]), dtype="<f8").reshape(-1, len(spec) + 1)
            where = np.flatnonzero(order == shape)
            for column, (label, _event, backend, unit, status, reason) in enumerate([[WALL_TIME, None, "perfctl", "ns",
                                                                                      "ok", None]] + spec):
                if status in ("ok", "multiplexed"):
                    data.metrics.setdefault(label, [])
                    data.units.setdefault(label, unit)
                    if backend:
                        data.backends.setdefault(label, set()).add(backend)
                    full = columns.setdefault(label, np.full(len(order), np.nan))
                    full[where] = matrix[:, column]
                    if status == "multiplexed":
                        data.note(label, "multiplexed counter: scaled estimates in some runs")
                elif status == "unsupported":
                    data.note(label, f"unsupported: {reason}")
                else:
                    data.note(label, f"counter error in some runs: {reason}")
        for label, full in columns.items():
            data.metrics[label] = full[~np.isnan(full)].tolist()
        data.started(bench.first_ns, clock)
        if bench.last_ns is not None:
            data.started(bench.last_ns, clock)


def _interference_index(spec: list) -> int | None:
    """The position of the ebpf backend's interference-time among a shape's readings, when it counted."""
    for index, (_, event, _, _, status, _) in enumerate(spec):
        if event == INTERFERENCE_EVENT and status == "ok":
            return index
    return None
