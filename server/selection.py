"""Which stored runs one side of a comparison takes, read as Datasets from the values stored at ingest.

A side is a machine with a selection (protos: Selection; `perfctl compare box-a@commit=abc`): a job, labels
that every run must carry, a time range, and by default, for each benchmark, only the runs of the most
recent job on that machine that ran it (the job whose runs the server received last: server/clock.py),
never all history silently.

The Dataset is built from each run's ``vals`` and ``shape`` (server/schema.py), never from its payload, and
holds what perfctl/formats/jsonl.py's DatasetBuilder would build from the same runs in a file: the same
metrics in the same order, values, units, backends, notes and start times (tests/test_fleet_compare.py
compares the two JSON outputs). Unlike a file, one benchmark name that covers runs of several executables,
inputs (argv or input digest) or kernels is not pooled unless ``pool``: it is left out and the note names
what was mixed.
"""

from __future__ import annotations

from array import array
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from perfctl.analysis.ratio_edges import EXACT_IN_FLOAT
from perfctl.dataset import (
    Block,
    Dataset,
    DatasetError,
    RunIdentity,
    left_out_notes,
    shared_note,
    unmix,
)
from perfctl.model import INTERFERENCE_EVENT, WALL_TIME, InterferencePolicy
from perfctl.pairing import PairingError
from perfctl.units import clock_offset
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
    """One benchmark's runs as they are read: per run kept, its shape, start and context (arrays), and
    per shape the kept runs' values."""

    excluded: dict[str, int] = field(default_factory=dict)
    interfered: int = 0
    order: array = field(default_factory=lambda: array("q"))
    starts: array = field(default_factory=lambda: array("q"))
    # with --paired, each kept run's pairing key (perfctl/dataset.py RunIdentity: the block of its job, its
    # run_index), or None once a run of the benchmark came without its index (then paired by position, and
    # said so); a block is a job, numbered in reading order, and dated by its runs' first and last start:
    # perfctl/pairing.py matches A's jobs with B's by them (match_blocks), as it matches a file's blocks
    keys: array | None = field(default_factory=lambda: array("q"))
    job_blocks: dict = field(default_factory=dict)  # job id -> [block, first start, last start]
    contexts: Counter = field(default_factory=Counter)  # (benchmark id, context) -> kept runs
    vals: dict[int, list] = field(default_factory=dict)
    # kept run (its place in ``order``) -> its values as sent (ints), for the runs holding a count past 2^53
    # that its float64 ``vals`` rounds (Selector._exact_series)
    exact: dict[int, list] = field(default_factory=dict)


class Selector:
    """Reads the selected runs of machines from one Storage (server/storage.py); one per request."""

    def __init__(self, storage, interference: InterferencePolicy | None = None, pool: bool = False,
                 limit: int = MAX_COMPARE_RUNS, paired: bool = False):
        self.storage, self.pool, self.limit, self.paired = storage, pool, limit, paired
        self.interference = interference or InterferencePolicy()
        self._shapes = storage.shapes()
        self._contexts = storage.contexts()

    def datasets(self, a: pb.Selection, b: pb.Selection, benchmarks: list[str] | None = None) -> list[Dataset]:
        """The Datasets of both sides of a comparison, read at once, without a run on both sides: two
        selections of one machine may overlap (box-a@job=J and box-a, whose latest job is J). The rule of
        files (perfctl/cli/compare.py _apart, RunIdentity.shared): the side made only of shared runs keeps
        them, where both hold others too neither does, and the same runs on both sides are refused
        (PairingError). Each side's note says how many it left out."""
        wheres = [self._where(side, benchmarks)[1] for side in (a, b)]
        both = _intersection(*wheres)
        shared = sum(runs for *_, runs in self.storage.run_counts(**both)) if both else 0
        left_out: list = [None, None]
        if shared:
            counted = [self.storage.run_counts(**where) for where in wheres]
            for side, rows in zip((a, b), counted):  # a selection too large is refused as such first
                self._within_limit(describe(side), sum(runs for _, warmup, outcome, runs in rows
                                                       if not warmup and outcome == "ok"))
            totals = [sum(runs for *_, runs in rows) for rows in counted]
            losers = RunIdentity.losers(totals[0] == shared, totals[1] == shared)
            if losers is None:
                raise PairingError(f"A and B select the same {shared} runs ({describe(a)} and {describe(b)}): a run "
                                   "compared with itself says nothing")
            left_out = [(wheres[1 - side], both) if losers[side] else None for side in (0, 1)]
        # both sides read at once: each waits on the database (which runs the scan and concatenation in its
        # own process, or in SQLite's C code without the GIL) for much of its time; A's error first
        with ThreadPoolExecutor(2, thread_name_prefix="compare-read") as readers:
            return list(readers.map(lambda side: self.dataset(side[0], benchmarks, excluding=side[1]),
                                    ((a, left_out[0]), (b, left_out[1]))))

    def dataset(self, selection: pb.Selection, benchmarks: list[str] | None = None,
                excluding: tuple | None = None) -> Dataset:
        """The Dataset of one side, without the runs that ``excluding`` (the other side's selection, and
        what both take: datasets) also selects. DatasetError (one line) when the machine is unknown or
        nothing is selected; TooManyRuns past ``limit``."""
        name = describe(selection)
        dataset = Dataset(f"machine {name}", "perfctl")
        clock = next((machine_id for machine_name, machine_id in self.storage.machine_names().values()
                      if machine_name == selection.machine), None)
        identities, where = self._where(selection, benchmarks)
        names = {pk: identity["name"] for pk, identity in identities.items()}
        benches: dict[str, _Bench] = {}
        measured = 0
        other = excluding[0] if excluding else None
        counts = Counter()
        for benchmark_pk, warmup, outcome, runs in self.storage.run_counts(**where):
            counts[benchmark_pk, warmup, outcome] += runs
        for benchmark_pk, warmup, outcome, runs in self.storage.run_counts(**excluding[1]) if excluding else ():
            counts[benchmark_pk, warmup, outcome] -= runs  # the other side's: not counted here
        for (benchmark_pk, warmup, outcome), runs in counts.items():
            if runs <= 0:
                continue
            bench = benches.setdefault(names[benchmark_pk], _Bench())
            if not warmup and outcome == "ok":
                measured += runs
                continue
            reason = "warmup" if warmup else outcome
            bench.excluded[reason] = bench.excluded.get(reason, 0) + runs
        self._within_limit(name, measured)
        skipped = 0
        for benchmark_pk, job_id, context, runs, vals, shapes, starts, indexes in \
                self.storage.grouped_values(run_indexes=self.paired, **where):
            exact = None
            if context is not None and vals and len(vals) % 8 == 0 and \
                    (np.abs(np.frombuffer(vals, dtype="<f8")) >= EXACT_IN_FLOAT).any():
                exact_series = self._exact_series(where, benchmark_pk, job_id, context, runs)
                if exact_series is not None:
                    vals, shapes, starts, indexes, exact = exact_series
            name_of = names[benchmark_pk]
            bench = benches.get(name_of)
            if bench is None:
                bench = benches[name_of] = _Bench()
            taken = _taken(other, benchmark_pk, job_id, context, starts) if other and len(starts) == runs else None
            if taken is not None and taken.all():
                continue  # the other side's runs
            if not self.paired:
                bench.keys = None
            elif bench.keys is not None and indexes is not None and len(indexes) == runs == len(starts) and runs \
                    and 0 <= int(indexes.min()) and int(indexes.max()) < 1 << 32:
                first, last = int(starts.min()), int(starts.max())
                span = bench.job_blocks.setdefault(job_id, [len(bench.job_blocks), first, last])
                span[1:] = min(span[1], first), max(span[2], last)
                indexes = indexes | (span[0] << 32)
            else:
                indexes = None
            if context is None:  # rows migration 0004 could not fill: their payloads do not decode
                skipped += runs
            elif not self._series(bench, benchmark_pk, context, runs, vals or b"", shapes, starts, indexes, taken,
                                  exact):
                # a row whose values cannot be read (stored by a server that checked less, or damaged):
                # this series run by run, leaving out only such rows
                one = dict(where, jobs={job_id: {benchmark_pk}}, context_pks={context})
                bench.keys = None  # run by run, without their indexes: paired by position
                for rows in self.storage.stored_values(measured=True, **one):
                    for row in rows:
                        run_benchmark, run_context, _, _, _, start_ns, _ = row  # Storage.stored_values' row
                        if not (other and _taken(other, run_benchmark, job_id, run_context,
                                                 np.array([start_ns])).all()):
                            skipped += self._add(bench, row)
        for bench_name, bench in benches.items():
            self._build(dataset, bench_name, bench, identities, clock)
        self._notes(dataset, benches)
        ahead, most = self.storage.clock_ahead(**where)
        if ahead:  # server/clock.py: stored as measured; their dates are the agent's clock's
            dataset.notes.append(f"{ahead} runs of machine {selection.machine} were stamped by its agent's clock up "
                                 f"to {clock_offset(most)} after the server received them: their start times "
                                 "are not to be trusted (perfctl machines shows the machine's clock)")
        if excluding:
            dataset.notes.append(shared_note(sum(runs for *_, runs in self.storage.run_counts(**excluding[1]))))
        if skipped:
            dataset.notes.append(f"{skipped} stored samples of machine {selection.machine} could not be used and "
                                 "were skipped (their values could not be read)")
        unmix(dataset, self.pool)
        if not dataset.benchmarks:
            what = f" of {', '.join(benchmarks)}" if benchmarks else ""
            chosen = " selected" if selection.labels or selection.job_id or selection.since_ns or selection.until_ns \
                else ""
            why = "; ".join(note for note in dataset.notes if ": left out" in note)
            raise DatasetError(f"machine {name!r} has no measured runs{what}{chosen}" + (f" ({why})" if why else ""))
        return dataset

    def _within_limit(self, name: str, measured: int) -> None:
        """TooManyRuns when the selection ``name`` holds more measured runs than ``limit``."""
        if measured > self.limit:
            raise TooManyRuns(f"{name} selects more than {self.limit:,} runs, the most this server compares "
                              "(perfctl server --max-compare-runs): narrow it with @job=ID, a label, "
                              "--since/--until or --benchmark")

    def where(self, selection: pb.Selection, benchmarks: list[str] | None = None) -> dict:
        """The runs ``selection`` takes (warm-ups and failed runs too) as Storage's query arguments: what
        GetSamples sends a client that draws every run (perfctl report box-a@commit=abc box-b; server/
        listings.py bounds and streams it). DatasetError for an unknown machine."""
        return self._where(selection, benchmarks)[1]

    def _where(self, selection: pb.Selection, benchmarks: list[str] | None) -> tuple[dict, dict]:
        """(benchmark identities by id, the selection as Storage's query arguments: machine, jobs (per job
        id the benchmark ids taken from it), benchmarks, contexts and times)."""
        storage = self.storage
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
        jobs = None
        if selection.job_id:
            jobs = {selection.job_id: set(identities)}
        elif not selection.all_history:
            jobs = self._latest_jobs(machine_pk, identities, filters)
        return identities, dict(machine_pk=machine_pk, jobs=jobs, **filters)

    def _exact_series(self, where: dict, benchmark_pk: int, job_id, context: int, runs: int):
        """One series (Storage.grouped_values' row) read again from its payloads, for a count past 2^53: the
        float64 ``vals`` stored at ingest (server/decode.py ``values``) round it (10^18 - 1 and 10^18 are
        one float), and a verdict on the edge of the band or of 1 needs the count itself
        (analysis/ratio_edges.py exact_samples), as a file's reader keeps it. (vals, shapes, starts, run
        indexes, per run its values as sent) in the payloads' order; None when they do not give the series'
        runs (then its floats are compared, as before)."""
        from perfctl.server.decode import values as stored_values_of

        vals, shapes, starts, indexes, exact = [], [], [], [], []
        one = dict(where, jobs={job_id or None: {benchmark_pk}}, context_pks={context})
        for rows in self.storage.stored_values(payloads=True, measured=True, **one):
            for _benchmark, _context, shape, _warmup, _outcome, start_ns, payload in rows:
                sample = pb.Sample.FromString(bytes(payload))
                packed = stored_values_of(sample)[1]
                if packed is None:
                    return None
                vals.append(packed)
                shapes.append(shape)
                starts.append(start_ns)
                indexes.append(sample.run_index)
                # decode.values' layout: the wall time, then one number per reading, an ok reading's the
                # int64 sent (a multiplexed reading's scaled estimate is a float as sent: its float is exact)
                exact.append([sample.wall_ns] + [r.value if r.status == "ok" else None for r in sample.readings])
        if len(vals) != runs:
            return None
        return (b"".join(vals), np.array(shapes, dtype=np.int64), np.array(starts, dtype=np.int64),
                np.array(indexes, dtype=np.int64) if self.paired else None, exact)

    def _series(self, bench: _Bench, benchmark_pk: int, context: int, runs: int, vals: bytes, shapes: np.ndarray,
                starts: np.ndarray, keys: np.ndarray | None = None, taken: np.ndarray | None = None,
                exact: list | None = None) -> bool:
        """Add one series' runs (Storage.grouped_values) to its benchmark whole, in start order (ties in the
        order read), but those ``taken`` by the other side; False, adding nothing, when a run of it cannot be
        read (no shape or values: a row migration 0004 could not fill; values of another size than its
        shape's). ``exact``: per run its values as sent (_exact_series), kept beside the floats."""
        if len(shapes) != runs or len(starts) != runs:
            return False
        sizes = np.array([8 * (len(self._shapes[int(shape)]) + 1) if int(shape) in self._shapes else -1
                          for shape in np.unique(shapes)])
        size_of = dict(zip(np.unique(shapes).tolist(), sizes.tolist()))
        widths = np.array([size_of[shape] for shape in shapes.tolist()]) if len(size_of) > 1 else \
            np.full(runs, sizes[0])
        if (widths < 0).any() or int(widths.sum()) != len(vals):
            return False
        if taken is not None and taken.any():  # the other side's runs are left out of this series
            kept = np.flatnonzero(~taken)
            offsets = np.concatenate(([0], np.cumsum(widths))).tolist()
            vals = b"".join(vals[offsets[i]:offsets[i + 1]] for i in kept.tolist())
            shapes, starts, widths, runs = shapes[kept], starts[kept], widths[kept], len(kept)
            keys = None if keys is None else keys[kept]
            exact = None if exact is None else [exact[i] for i in kept.tolist()]
            size_of = {shape: size_of[shape] for shape in np.unique(shapes).tolist()}
        in_order = bool((starts[1:] >= starts[:-1]).all())
        order = np.arange(runs) if in_order else np.argsort(starts, kind="stable")
        if len(size_of) == 1:  # one shape: the usual case, added whole
            if not in_order:
                vals = np.frombuffer(vals, dtype=np.uint8).reshape(runs, -1)[order].tobytes()
            bench.vals.setdefault(int(shapes[0]), []).append(vals)
        else:
            offsets = np.concatenate(([0], np.cumsum(widths))).tolist()
            for index in order.tolist():
                bench.vals.setdefault(int(shapes[index]), []).append(vals[offsets[index]:offsets[index + 1]])
        shapes, starts = shapes[order], starts[order]
        if exact is not None:
            base = len(bench.order)
            bench.exact.update((base + place, exact[index]) for place, index in enumerate(order.tolist()))
        if keys is None:
            bench.keys = None
        elif bench.keys is not None:
            bench.keys.frombytes(keys[order].astype(np.int64).tobytes())
        bench.order.frombytes(shapes.astype(np.int64).tobytes())
        bench.starts.frombytes(starts.tobytes())
        bench.contexts[benchmark_pk, context] += runs
        return True

    def _add(self, bench: _Bench, row) -> int:
        """One measured run (Storage.stored_values); 1 when its values cannot be read (it is skipped)."""
        benchmark_pk, context, shape, _warmup, _outcome, start_ns, vals = row
        spec = self._shapes.get(shape)
        if vals is None or spec is None or len(vals) != 8 * (len(spec) + 1):
            return 1
        bench.order.append(shape)
        bench.starts.append(start_ns)
        bench.contexts[benchmark_pk, context] += 1
        bench.vals.setdefault(shape, []).append(bytes(vals))
        return 0

    def _latest_jobs(self, machine_pk: int, identities: dict, filters: dict) -> dict:
        """Per job, the benchmark ids whose name's most recent job it is: the job whose runs the server
        received last (server/clock.py: never the agent's stamps, which a clock days ahead would keep in
        front); runs without a job count as one, None. From the series kept at ingest; with a time range,
        among the series holding runs in it."""
        found = self.storage.latest_series(machine_pk, filters["benchmark_pks"], filters["context_pks"])
        if filters["since_ns"] or filters["until_ns"]:
            in_range = {(b, j, context) for _, b, j, context, _, _, _ in self.storage.series(machine_pk, **filters)}
            found = [(b, j, context, received) for b, j, context, received in found if (b, j, context) in in_range]
        latest: dict[str, tuple[int, str]] = {}
        for benchmark_pk, job_id, _context, received in found:
            identity = identities.get(benchmark_pk)
            if identity is None:
                continue
            key = (received, job_id or "")
            if identity["name"] not in latest or key > latest[identity["name"]]:
                latest[identity["name"]] = key
        jobs: dict = {}
        for pk, identity in identities.items():
            if identity["name"] in latest:
                jobs.setdefault(latest[identity["name"]][1] or None, set()).add(pk)
        return jobs

    def _build(self, dataset: Dataset, name: str, bench: _Bench, identities: dict, clock: str | None) -> None:
        """One benchmark's metrics: the kept runs' values per label, in the order read, as DatasetBuilder
        builds them from records (perfctl/formats/jsonl.py): same labels in the same order, units,
        backends and notes. Runs that other tasks interfered with are counted, and left out under
        --exclude-interfered."""
        if not bench.order:
            return
        order = np.frombuffer(bench.order, dtype=np.int64)
        keep = np.ones(len(order), dtype=bool)
        matrices = {}
        for shape in dict.fromkeys(bench.order):  # in order of each shape's first kept run
            spec = self._shapes[shape]
            matrix = np.frombuffer(b"".join(bench.vals.pop(shape)), dtype="<f8").reshape(-1, len(spec) + 1)
            matrices[shape] = matrix
            index = _interference_index(spec)
            if index is None and _interference_unknown(spec):  # model.interference_share: flagged
                bench.interfered += len(matrix)
                if self.interference.exclude:
                    keep[np.flatnonzero(order == shape)] = False
            elif index is not None:
                wall, other = matrix[:, 0], matrix[:, index + 1]
                with np.errstate(divide="ignore", invalid="ignore"):
                    flagged = (wall > 0) & (other / np.where(wall > 0, wall, 1) > self.interference.limit)
                bench.interfered += int(flagged.sum())
                if self.interference.exclude and flagged.any():
                    keep[np.flatnonzero(order == shape)[flagged]] = False
        if not keep.all():
            bench.excluded["interfered-with"] = bench.excluded.get("interfered-with", 0) + int((~keep).sum())
            if keep.sum() == 0:
                return
        data = dataset.benchmark(name)
        run_keys = None
        if bench.keys is not None:
            run_keys = np.frombuffer(bench.keys, dtype=np.int64)
            # the jobs numbered in start order, as the user can find them (the n-th job of the side)
            in_start_order = sorted(bench.job_blocks.items(), key=lambda job_span: job_span[1][1])
            rank = np.zeros(len(in_start_order), dtype=np.int64)
            rank[[span[0] for _, span in in_start_order]] = np.arange(len(in_start_order))
            run_keys = (rank[run_keys >> 32] << 32) | (run_keys & 0xFFFFFFFF)
            data.blocks = {number: Block((job_id, None) if job_id else None, first, last, clock)
                           for number, (job_id, (_, first, last)) in enumerate(in_start_order)}
        columns: dict[str, np.ndarray] = {}
        exact_columns: dict[str, dict[int, int]] = {}  # label -> run -> a count no float holds (_exact_series)
        for shape, matrix in matrices.items():
            where = np.flatnonzero(order == shape)
            for column, (label, _event, backend, unit, status, reason) in enumerate(
                    [[WALL_TIME, None, "perfctl", "ns", "ok", None]] + self._shapes[shape]):
                if status in ("ok", "multiplexed"):
                    data.metrics.setdefault(label, [])
                    data.units.setdefault(label, unit)
                    if backend:
                        data.backends.setdefault(label, set()).add(backend)
                    full = columns.get(label)
                    if full is None:
                        full = columns[label] = np.full(len(order), np.nan)
                    full[where] = matrix[:, column]
                    for run in where.tolist() if bench.exact else ():
                        value = bench.exact.get(run, (None,) * (column + 1))[column]
                        if type(value) is int and value >= EXACT_IN_FLOAT:
                            exact_columns.setdefault(label, {})[run] = value
                    if status == "multiplexed":
                        data.note(label, "multiplexed counter: scaled estimates in some runs")
                elif status == "unsupported":
                    data.note(label, f"unsupported: {reason}")
                else:
                    data.note(label, f"counter error in some runs: {reason}")
        for label, full in columns.items():
            # compact float64 arrays, not lists of Python floats: 10^6 runs of 13 counters are 100 MB, not 400
            data.metrics[label] = array("d", full[keep & ~np.isnan(full)].tobytes())
            if label in exact_columns:  # a list as a file's reader gives: ints past 2^53 as sent
                counts = exact_columns[label]
                data.metrics[label] = [counts.get(run, value) for run, value in
                                       zip(np.flatnonzero(keep & ~np.isnan(full)).tolist(), data.metrics[label])]
            if run_keys is not None and len(run_keys) == len(order):
                data.keys[label] = array("q", run_keys[keep & ~np.isnan(full)].tobytes())
        starts = np.frombuffer(bench.starts, dtype=np.int64)[keep]
        data.started(int(starts.min()), clock)
        data.started(int(starts.max()), clock)
        for (benchmark_pk, context), runs in bench.contexts.items():
            identity = identities[benchmark_pk]
            kernel = self._contexts.get(context, {}).get("kernel", "unknown")
            data.variants[identity["executable_sha256"], identity["input_digest"], tuple(identity["argv"]), kernel] \
                += runs

    def _notes(self, dataset: Dataset, benches: dict[str, _Bench]) -> None:
        """The Dataset's notes, worded as for files (perfctl/dataset.py left_out_notes)."""
        left_out_notes(dataset, {name: bench.excluded for name, bench in benches.items()},
                       {name: bench.interfered for name, bench in benches.items()}, self.interference)


def _intersection(one: dict, other: dict) -> dict | None:
    """The runs two selections (Selector._where's query arguments) both take, as one selection; None when
    they cannot share a run (two machines, or nothing in common)."""
    if one["machine_pk"] != other["machine_pk"]:
        return None

    def meet(x, y):  # None: any
        return y if x is None else x if y is None else x & y

    benchmark_pks, context_pks = (meet(one[key], other[key]) for key in ("benchmark_pks", "context_pks"))
    jobs = one["jobs"] if other["jobs"] is None else other["jobs"] if one["jobs"] is None else \
        {job: one["jobs"][job] & other["jobs"][job] for job in one["jobs"].keys() & other["jobs"].keys()
         if one["jobs"][job] & other["jobs"][job]}
    until = min((u for u in (one["until_ns"], other["until_ns"]) if u), default=0)
    since = max(one["since_ns"], other["since_ns"])
    if jobs == {} or benchmark_pks == set() or context_pks == set() or (until and since >= until):
        return None
    return dict(machine_pk=one["machine_pk"], jobs=jobs, benchmark_pks=benchmark_pks, context_pks=context_pks,
                since_ns=since, until_ns=until)


def _taken(where: dict, benchmark_pk: int, job_id, context: int, starts: np.ndarray) -> np.ndarray:
    """Which runs of one series (its benchmark, job, context, and the runs' starts) ``where`` selects too:
    Storage._selected's conditions, on the series' own fields."""
    none = np.zeros(len(starts), dtype=bool)
    if where["benchmark_pks"] is not None and benchmark_pk not in where["benchmark_pks"]:
        return none
    if where["context_pks"] is not None and context not in where["context_pks"]:
        return none
    if where["jobs"] is not None and benchmark_pk not in where["jobs"].get(job_id or None, ()):
        return none
    taken = ~none
    if where["since_ns"]:
        taken &= starts >= where["since_ns"]
    if where["until_ns"]:
        taken &= starts < where["until_ns"]
    return taken


def _interference_unknown(spec: list) -> bool:
    """Whether a shape's runs carry the ebpf backend's interference-time as an error: eBPF could not tell it."""
    return any(event == INTERFERENCE_EVENT and status == "error" for _, event, _, _, status, _ in spec)


def _interference_index(spec: list) -> int | None:
    """The position of the ebpf backend's interference-time among a shape's readings, when it counted."""
    for index, (_, event, _, _, status, _) in enumerate(spec):
        if event == INTERFERENCE_EVENT and status == "ok":
            return index
    return None
