"""perfctl JSON Lines, read: one JSON object per line, ``"type": "machine"`` (the inventory) then ``"sample"``.

Each line is written and flushed as its run ends (perfctl/formats/jsonl_writer.py), so an interrupted
measurement keeps every finished run; a torn last line (the writer was killed mid-write) is reported by the
reader with its line number. Schema: docs/samples.md.
"""

from __future__ import annotations

import json
from array import array

import orjson

from perfctl.dataset import Dataset, DatasetError, RunIdentity, left_out_notes
from perfctl.formats.dataset import BOM, json_kind, type_problem
from perfctl.model import (
    INTERFERENCE_EVENT,
    MAX_VALUE,
    OUTCOMES,
    READING_STATUSES,
    SCHEMA_VERSION,
    WALL_TIME,
    InterferencePolicy,
    counter_labels,
)


class DatasetBuilder:
    """Turns sample records (JSON Lines dicts) into a Dataset: measured runs that ended ok, one value per
    reading label, plus wall-time; warmups and failed runs are left out and counted in the notes, and so
    are repeats of a run already read (same uuid; RunIdentity). Every kept value carries its run's pairing
    key (BenchmarkData.keys). Used for files here and for samples stored on the server (stored_dataset)."""

    def __init__(self, path: str, fmt: str = "perfctl", interference: InterferencePolicy | None = None,
                 exclude: frozenset[int] = frozenset()):
        self.dataset = Dataset(path, fmt)
        self._excluded: dict[str, dict[str, int]] = {}
        self._interference = interference or InterferencePolicy()
        self._interfered: dict[str, int] = {}
        self._records = 0
        self._warmups: dict[str, dict[str, list[float]]] = {}
        # for _add_measured: checked benchmark identities and reading layouts, and per pair of them the
        # lists the values go to (bench.metrics' own lists)
        self._identities: dict[tuple, tuple] = {}
        self._layouts: dict[tuple, tuple] = {}
        self._targets: dict[tuple, tuple] = {}
        self._variants: list[tuple] = []
        self.identity = RunIdentity(exclude)  # ``exclude``: the other side's runs (cli/compare.py)

    def add(self, record: dict, line: int | None = None) -> None:
        """Add one sample record (a JSON Lines dict). A malformed one raises DatasetError naming the record
        (``line`` of the file when given, else its place among the records added) and the field. A record
        whose uuid was read before is the same run again: left out and counted (RunIdentity)."""
        self._records += 1
        try:
            run = _run(record)
            if self.identity.seen(run):  # a repeat, or the other side's run: counted there
                _checked(record)  # checked as any record (a bad line is refused, repeat or not)
                return
            key = _run_key(self.identity, record)
            if not self._add_measured(record, key):
                self._add(_checked(record), key)
        except _FieldError as err:
            where = f"{self.dataset.path}:{line}" if line is not None else \
                f"{self.dataset.path}: sample record {self._records}"
            raise DatasetError(f"{where}: {err}") from None
        self.identity.read(run)

    def add_or_skip(self, record: dict) -> str | None:
        """Add one stored sample (a record the server kept, which an older server may have checked less):
        None, or why it cannot be used; then nothing of it is kept (the values it added before failing are
        taken back, so the runs stay aligned across metrics)."""
        name = record.get("benchmark", {}).get("name") if isinstance(record.get("benchmark"), dict) else None
        bench = self.dataset.benchmarks.get(name)
        lengths = {metric: len(values) for metric, values in bench.metrics.items()} if bench is not None else None
        key_lengths = {metric: len(keys) for metric, keys in bench.keys.items()} if bench is not None else None
        try:
            self.add(record)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            self._count_variants()
            self._targets.clear()  # they may name the lists taken back below
            self._variants.clear()
            if lengths is None:
                self.dataset.benchmarks.pop(name, None)
            else:
                for metric in list(bench.metrics):
                    if metric in lengths:
                        del bench.metrics[metric][lengths[metric]:]
                    else:
                        del bench.metrics[metric]
                for metric in list(bench.keys):
                    if metric in key_lengths:
                        del bench.keys[metric][key_lengths[metric]:]
                    else:
                        del bench.keys[metric]
            detail = f"{type(err).__name__} {err}" if isinstance(err, KeyError) else str(err)
            return f"sample {str(record.get('uuid'))[:36]}: {detail}"
        return None

    def _add_measured(self, record, key=None) -> bool:
        """Add a measured run (no warm-up, ended ok, not interfered with) whose every field is plainly
        right, as _checked then _add would, and say so; False, having changed nothing, sends the record
        the general way, which names what is wrong. The runs of a file repeat a few benchmark identities
        and reading layouts: each is checked when first met and looked up after (a key equal to one of
        checked strings holds the same strings), so a run costs a dictionary lookup and its numbers' checks.
        Reading 100,000 runs through the general checks took longer than comparing them
        (bench/compare_speed.py)."""
        if type(record) is not dict:
            return False
        get = record.get
        bench_info, raw_readings = get("benchmark"), get("readings")
        if (get("outcome") != "ok" or get("warmup") is not False or get("schema_version") != SCHEMA_VERSION
                or type(get("schema_version")) is not int or type(bench_info) is not dict
                or type(raw_readings) is not list):
            return False
        argv = bench_info.get("argv")
        if type(argv) is not list:
            return False
        identity = (bench_info.get("name"), bench_info.get("executable_sha256"), bench_info.get("input_digest"),
                    tuple(argv))
        try:
            known = self._identities.get(identity)
        except TypeError:  # an object or list where a string belongs
            return False
        if known is None:
            if not (type(identity[0]) is str and all(v is None or type(v) is str for v in identity[1:3])
                    and all(type(arg) is str for arg in argv)):
                return False
            known = self._identities[identity] = (identity[0], (identity[1], identity[2], identity[3], ""))
        name, variant = known
        layout, numbers = [], []
        for raw in raw_readings:
            if type(raw) is not dict:
                return False
            reading_get = raw.get
            status = reading_get("status")
            layout.append((reading_get("event"), reading_get("scope"), reading_get("backend"), status,
                           reading_get("unit"), reading_get("reason")))
            value, scaled = reading_get("value"), reading_get("scaled")
            if value is not None and (value := _plain_number(value)) is None:
                return False
            if scaled is not None and (scaled := _plain_number(scaled)) is None:
                return False
            number = value if status == "ok" else scaled if status == "multiplexed" else None
            if number is None and status in ("ok", "multiplexed"):
                return False
            numbers.append(number)
        layout = tuple(layout)
        try:
            shape = self._layouts.get(layout)
        except TypeError:
            return False
        if shape is None:
            shape = _layout_shape(layout)
            if shape is None:
                return False
            self._layouts[layout] = shape
        labels, interference = shape
        timing = _plain_timing(record)
        if timing is None:
            return False
        wall_ns, machine_id, start = timing
        if interference is not None and self._interference.flags(
                [{"event": INTERFERENCE_EVENT, "status": "ok", "value": numbers[interference]}], wall_ns):
            return False  # flagged or left out: the general way counts it
        cached = (id(known), id(shape))  # both kept by their caches, so their ids name them for good
        targets = self._targets.get(cached)
        if targets is None:
            targets = self._targets[cached] = self._targets_of(name, variant, labels, layout)
        bench, lists, key_lists, runs = targets
        runs[0] += 1  # into bench.variants when the reading ends (_count_variants)
        lists[0].append(wall_ns)
        for values, number in zip(lists[1:], numbers):
            if values is not None:
                values.append(number)
        if key is not None:  # beside each value appended above
            for keys in key_lists:
                if keys is not None:
                    keys.append(key)
        bench.started(start, machine_id)
        return True

    def _targets_of(self, name: str, variant: tuple, labels: tuple[str, ...], layout: tuple) -> tuple:
        """A benchmark, for a run of this layout the list each value goes to (wall time first; None for a
        reading without a value) and the list of run keys beside each, with the units, backends and notes
        that _add_reading would set, and the count of such runs of this variant."""
        bench = self.dataset.benchmarks.get(name) or self.dataset.benchmark(name)
        bench.units.setdefault(WALL_TIME, "ns")
        bench.backends.setdefault(WALL_TIME, set()).add("perfctl")
        lists = [bench.metrics.setdefault(WALL_TIME, [])]
        for label, (_, _, backend, status, unit, reason) in zip(labels, layout):
            lists.append(_reading_target(bench, label, status, unit, backend, reason))
        bench.variants.setdefault(variant, 0)  # listed where first met, as the general way lists it
        self._variants.append((bench, variant, runs := [0]))
        key_lists = [bench.keys.setdefault(WALL_TIME, array("q"))]
        for label, values in zip(labels, lists[1:]):
            key_lists.append(None if values is None else bench.keys.setdefault(label, array("q")))
        return bench, lists, key_lists, runs

    def _count_variants(self) -> None:
        """The runs _add_measured counted, into their benchmarks' variants (a Counter's += per run cost more
        than the rest of the run's bookkeeping)."""
        for bench, variant, runs in self._variants:
            if runs[0]:
                bench.variants[variant] += runs[0]
                runs[0] = 0

    def _add(self, record: dict, key) -> None:
        bench_info = record["benchmark"]
        name = bench_info["name"]
        outcome = record["outcome"]
        reason, interfered = self._interference.judge(record["warmup"], outcome, record["readings"], record["wall_ns"])
        if interfered:
            self._interfered[name] = self._interfered.get(name, 0) + 1
        if record["warmup"] and outcome == "ok":
            self._warmup(name, record)
        if reason is not None:
            counts = self._excluded.setdefault(name, {})
            counts[reason] = counts.get(reason, 0) + 1
            return
        # an existing benchmark without building the BenchmarkData that Dataset.benchmark's setdefault would
        bench = self.dataset.benchmarks.get(name) or self.dataset.benchmark(name)
        bench.variants[bench_info["executable_sha256"], bench_info["input_digest"], tuple(bench_info["argv"]), ""] += 1
        if interfered:
            bench.flagged[len(bench.metrics.get(WALL_TIME, ()))] = "interfered-with"
        bench.add(WALL_TIME, record["wall_ns"], "ns", "perfctl", key)
        readings = record["readings"]
        for reading, label in zip(readings, _labels(readings)):
            _add_reading(bench, label, reading, key)
        bench.started(record["start_time_ns"], record["machine_id"])

    def _warmup(self, name: str, record: dict) -> None:
        """A warm-up's values, kept aside for the report's plot of runs in order (never compared)."""
        values = self._warmups.setdefault(name, {})
        values.setdefault(WALL_TIME, []).append(record["wall_ns"])
        for reading, label in zip(record["readings"], _labels(record["readings"])):
            value = reading["value"] if reading["status"] == "ok" else reading.get("scaled")
            if reading["status"] in ("ok", "multiplexed") and value is not None:
                values.setdefault(label, []).append(value)

    def finish(self):
        self._count_variants()
        dataset = self.dataset
        for name, values in self._warmups.items():
            if name in dataset.benchmarks:
                dataset.benchmarks[name].warmups = values
        left_out_notes(dataset, self._excluded, self._interfered, self._interference)
        self.identity.note(dataset)
        self.identity.blocks(dataset)
        dataset.runs = self.identity.runs
        return dataset


def read_dataset(path: str, interference: InterferencePolicy | None = None, labels: dict | None = None,
                 exclude: frozenset[int] = frozenset()):
    """A perfctl JSON Lines file as a Dataset (see DatasetBuilder); with ``labels``, only the samples that
    carry every one of them (the others are not read further); ``exclude``: runs left out as the other
    side's (RunIdentity).

    Reads the JSON objects directly (orjson) rather than as Samples: building 100,000 frozen dataclasses took
    longer than the whole comparison (bench/compare_speed.py). Malformed lines are
    reported with the file and line.
    """
    builder = DatasetBuilder(path, interference=interference, exclude=exclude)
    for number, record in records(path):
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "machine":
            builder.dataset.machine = builder.dataset.machine or record
            builder.identity.new_measurement()
        elif kind == "sample":
            if labels and not _labelled(record, labels):
                continue
            builder.add(record, line=number)
        else:
            raise DatasetError(f"{path}:{number}: not a perfctl sample line: unknown record type {kind!r}")
    return builder.finish()


def records(path: str):
    """Each JSON object of a perfctl JSON Lines file with its line number, blank lines skipped: the one reading
    of the lines (read_dataset here, the history's points in perfctl/history_files.py). DatasetError for a
    file that cannot be opened or a line that is not JSON."""
    try:
        stream = open(path, "rb")
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    with stream:
        for number, line in enumerate(stream, 1):
            if number == 1:
                line = line.removeprefix(BOM.encode())
            if not line or line.isspace():  # blank (isspace: no stripped copy)
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as err:
                # what json writes and orjson refuses: a lone surrogate escaped (argv bytes that are not
                # UTF-8, as jsonl_writer writes them), NaN and Infinity
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):  # RecursionError: nested deeper than json's stack allows
                    raise DatasetError(f"{path}:{number}: not a perfctl sample line: {err}") from None
            yield number, record


def _run(record) -> int | None:
    """The record's run (RunIdentity.run: its machine and uuid), None for a hand-made record without a uuid;
    _FieldError when the uuid is not one, as for any other bad field."""
    if type(record) is not dict:
        return None
    uuid = record.get("uuid")
    if uuid is not None and type(uuid) is not str:
        raise _FieldError("uuid", f"expected a string, got {json_kind(uuid)}")
    try:
        return RunIdentity.run(uuid, record.get("machine_id"))
    except ValueError as err:
        raise _FieldError("uuid", str(err)) from None


def _run_key(identity: RunIdentity, record) -> int | None:
    """A measured run's pairing key (RunIdentity.key): its round when it has one (`perfctl ab`'s
    ``extra.round``, in the session of its ``extra.seed``), else its run_index; None for a warm-up or a
    record without either."""
    if type(record) is not dict:
        return None
    run_index, round_index, seed = _pairing_fields(record)  # checked for warm-ups too: a bad line is refused
    if record.get("warmup") is not False:
        return None
    bench = record.get("benchmark")
    index = round_index if round_index is not None else run_index
    return identity.key(bench.get("name") if type(bench) is dict else None, index, record.get("job_id"),
                        seed, record.get("start_time_ns"), record.get("machine_id"))


def _labelled(record: dict, labels: dict) -> bool:
    carried = record.get("labels")
    return isinstance(carried, dict) and all(carried.get(key) == value for key, value in labels.items())


def _layout_shape(layout: tuple) -> tuple[tuple[str, ...], int | None] | None:
    """For a run's readings as (event, scope, backend, status, unit, reason): their labels and the index of
    the reading an InterferencePolicy looks at (None without one), or None when a field is not plainly right,
    a counter repeats (_plain_reading, _plain) or the run's interference is unknown (model.interference_share)."""
    seen, interference = set(), None
    for index, (event, scope, backend, status, unit, reason) in enumerate(layout):
        if type(event) is not str or type(status) is not str or status not in READING_STATUSES:
            return None
        if not all(v is None or type(v) is str for v in (scope, backend, unit, reason)):
            return None
        if (event, scope, backend) in seen:
            return None
        seen.add((event, scope, backend))
        if event == INTERFERENCE_EVENT and status == "ok" and interference is None:
            interference = index
        if event == INTERFERENCE_EVENT and status == "error":  # unknown: flagged, which the general way does
            return None
    return counter_labels(tuple((event, scope, backend) for event, scope, backend, *_ in layout)), interference


class _FieldError(ValueError):
    """A field of a sample record with the wrong type or value: ``field: problem``."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")


def _field(record: dict, key: str, where: str, types, wanted: str, optional: bool = False):
    """``record[key]`` if it has one of ``types`` (null or absent too when ``optional``)."""
    value = record.get(key)
    if value is None:
        if optional:
            return None
        raise _FieldError(where, "missing" if key not in record else f"expected {wanted}, got null")
    problem = type_problem(value, types, wanted)
    if problem:
        raise _FieldError(where, problem)
    return value


def _number(record: dict, key: str, where: str, optional: bool = False) -> float | int | None:
    """A count or a time: a finite number in [0, 2^64]; an integer stays the int it is (a float holds no
    integer past 2^53 exactly: 2^64 - 1 and 2^64 - 2 are one float, and their runs one ratio, 1)."""
    value = _field(record, key, where, (int, float), "a number", optional)
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float (10^400): no count or time either
        raise _FieldError(where, f"an integer of {len(str(value)):,} digits is not a count or a time (0 to 2^64)") \
            from None
    if number != number or number in (float("inf"), float("-inf")):
        raise _FieldError(where, f"non-finite value {value!r}")
    if not 0 <= number <= MAX_VALUE or type(value) is int and value > _MAX_COUNT:
        raise _FieldError(where, f"{value!r} is not a count or a time (0 to 2^64)")
    return value if type(value) is int else number


_MAX_COUNT = 1 << 64


def _plain_number(value) -> float | int | None:
    """A JSON number in [0, 2^64] (not a boolean) as it is, an integer exact (``_number``), else None:
    _number then says why not."""
    kind = type(value)
    if kind is int:
        return value if 0 <= value <= _MAX_COUNT else None
    if kind is float and 0.0 <= value <= MAX_VALUE:  # NaN fails both comparisons, infinities the range
        return value
    return None


def _plain_reading(reading) -> dict | None:
    """A reading as _checked returns it when every field is plainly right, else None (checked in full)."""
    if type(reading) is not dict:
        return None
    get = reading.get
    status, event, value, scaled = reading["status"], reading["event"], get("value"), get("scaled")
    if type(status) is not str or status not in READING_STATUSES or type(event) is not str:
        return None
    if value is not None and (value := _plain_number(value)) is None or value is None and status == "ok":
        return None
    if scaled is not None and (scaled := _plain_number(scaled)) is None or scaled is None and status == "multiplexed":
        return None
    scope, backend, unit, reason = get("scope"), get("backend"), get("unit"), get("reason")
    if not ((scope is None or type(scope) is str) and (backend is None or type(backend) is str)
            and (unit is None or type(unit) is str) and (reason is None or type(reason) is str)):
        return None
    return {"event": event, "status": status, "value": value, "scaled": scaled, "scope": scope,
            "backend": backend, "unit": unit, "reason": reason}


def _plain_timing(record: dict) -> tuple[float, str | None, int | None] | None:
    """(wall_ns, machine_id, start_time_ns) of a record where each is plainly right, else None."""
    get = record.get
    wall_ns, machine_id, start = _plain_number(get("wall_ns")), get("machine_id"), get("start_time_ns")
    if wall_ns is None or not (machine_id is None or type(machine_id) is str):
        return None
    if start is not None:
        if _plain_number(start) is None:
            return None
        start = int(start)
    return wall_ns, machine_id, start


def _plain(record) -> dict | None:
    """What _checked returns, for a record whose every field is plainly right (exact JSON types, numbers
    in range, no repeated reading), found with one type test per field; None sends the record through the
    full checks, which name the field that is wrong. Reading 100,000 runs spent most of its time in the
    general per-field checks (bench/compare_speed.py)."""
    if type(record) is not dict:
        return None
    try:
        version, bench, outcome, warmup = record["schema_version"], record["benchmark"], record["outcome"], \
            record["warmup"]
        if type(version) is not int or version != SCHEMA_VERSION or type(bench) is not dict:
            return None
        if type(outcome) is not str or outcome not in OUTCOMES or type(warmup) is not bool:
            return None
        name, argv, digest, inputs = bench["name"], bench["argv"], bench.get("executable_sha256"), \
            bench.get("input_digest")
        if type(name) is not str or type(argv) is not list or not (digest is None or type(digest) is str) \
                or not (inputs is None or type(inputs) is str):
            return None
        for arg in argv:
            if type(arg) is not str:
                return None
        timing = _plain_timing(record)
        if timing is None:
            return None
        wall_ns, machine_id, start = timing
        raw_readings = record["readings"]
        if type(raw_readings) is not list:
            return None
        readings, seen = [], set()
        for raw in raw_readings:
            reading = _plain_reading(raw)
            if reading is None:
                return None
            key = (reading["event"], reading["scope"], reading["backend"])
            if key in seen:
                return None
            seen.add(key)
            readings.append(reading)
    except KeyError:  # a required field missing: the full checks say which
        return None
    return {"benchmark": {"name": name, "argv": argv, "executable_sha256": digest, "input_digest": inputs},
            "outcome": outcome,
            "wall_ns": wall_ns, "readings": readings, "warmup": warmup, "start_time_ns": start,
            "machine_id": machine_id}


def _checked(record) -> dict:
    """A sample record with every field the builder reads checked for type and range, numbers as floats;
    _FieldError names the first bad field. Checked before use, so nothing downstream (interference
    shares, labels, sets of digests) meets an object where it expects a string."""
    if type(record) is dict:  # the fields that pair runs, which _plain does not look at
        _pairing_fields(record)
    plain = _plain(record)
    if plain is not None:
        return plain
    if not isinstance(record, dict):
        raise _FieldError("record", f"expected an object, got {json_kind(record)}")
    if type(record.get("schema_version")) is not int or record["schema_version"] != SCHEMA_VERSION:
        raise _FieldError("schema_version", f"unsupported {record.get('schema_version')!r} (perfctl reads "
                                            f"{SCHEMA_VERSION})")
    bench = _field(record, "benchmark", "benchmark", dict, "an object")
    argv = _field(bench, "argv", "benchmark.argv", list, "a list of strings")
    if not all(isinstance(arg, str) for arg in argv):
        raise _FieldError("benchmark.argv", "expected a list of strings")
    checked_bench = {"name": _field(bench, "name", "benchmark.name", str, "a string"), "argv": argv,
                     "executable_sha256": _field(bench, "executable_sha256", "benchmark.executable_sha256", str,
                                                 "a string", optional=True),
                     "input_digest": _field(bench, "input_digest", "benchmark.input_digest", str, "a string",
                                            optional=True)}
    outcome = _field(record, "outcome", "outcome", str, "a string")
    if outcome not in OUTCOMES:
        raise _FieldError("outcome", f"unknown outcome {outcome!r} (one of {', '.join(OUTCOMES)})")
    wall_ns = _number(record, "wall_ns", "wall_ns")
    readings, seen = [], {}
    for index, reading in enumerate(_field(record, "readings", "readings", list, "a list")):
        where = f"readings[{index}]"
        if not isinstance(reading, dict):
            raise _FieldError(where, f"expected an object, got {json_kind(reading)}")
        status = _field(reading, "status", f"{where}.status", str, "a string")
        if status not in READING_STATUSES:
            raise _FieldError(f"{where}.status", f"unknown status {status!r} (one of {', '.join(READING_STATUSES)})")
        checked = {"event": _field(reading, "event", f"{where}.event", str, "a string"), "status": status,
                   "value": _number(reading, "value", f"{where}.value", optional=status != "ok"),
                   "scaled": _number(reading, "scaled", f"{where}.scaled", optional=status != "multiplexed")}
        for key in ("scope", "backend", "unit", "reason"):
            checked[key] = _field(reading, key, f"{where}.{key}", str, "a string", optional=True)
        # one run gives one value per counter: a repeated one would count as a second run
        key = (checked["event"], checked["scope"], checked["backend"])
        if key in seen:
            raise _FieldError(where, f"repeats the event, scope and backend of readings[{seen[key]}]")
        seen[key] = index
        readings.append(checked)
    return {"benchmark": checked_bench, "outcome": outcome, "wall_ns": wall_ns, "readings": readings,
            "warmup": _field(record, "warmup", "warmup", bool, "true or false"),
            # optional: perfctl always writes it, a hand-made file may not
            "start_time_ns": _start_time(record),
            "machine_id": _field(record, "machine_id", "machine_id", str, "a string", optional=True)}


# A pairing index is packed into 32 bits of RunIdentity's key (ab's rounds and stat's run_index stay far below)
_MAX_INDEX = (1 << 32) - 1


def _pairing_fields(record: dict) -> tuple[int | None, int | None, int | None]:
    """A sample's run_index, extra.round and extra.seed, checked as _checked checks every field (this is its
    part for the fields that pair runs; _run_key reads them through it before the record's other checks):
    an index is an integer 0 to 2^32 - 1, a seed one of 64 bits, ``extra`` an object. A boolean, a
    fraction or an index past 32 bits would otherwise turn into "no index" or into another run's index, and
    --paired would pair by position saying the runs "carry no round or run index"."""
    extra = _field(record, "extra", "extra", dict, "an object", optional=True) or {}
    fields = []
    # a seed past 64 bits reaches here as a float (orjson), so its range is said with its type
    for container, key, where, wanted, upper in (
            (record, "run_index", "run_index", "an integer 0 to 2^32 - 1", _MAX_INDEX),
            (extra, "round", "extra.round", "an integer 0 to 2^32 - 1", _MAX_INDEX),
            (extra, "seed", "extra.seed", "an integer 0 to 2^64 - 1", (1 << 64) - 1)):
        value = _field(container, key, where, int, wanted, optional=True)
        if value is not None and not 0 <= value <= upper:
            raise _FieldError(where, f"expected {wanted}, got {value!r:.40}")
        fields.append(value)
    return fields[0], fields[1], fields[2]


def _start_time(record: dict) -> int | None:
    """When the run started, ns since the epoch: kept as the integer written (a float of 1.7e18 ns is off
    by up to 256 ns), None when the record has none."""
    if _number(record, "start_time_ns", "start_time_ns", optional=True) is None:
        return None
    return int(record["start_time_ns"])


def _labels(readings: list[dict]) -> tuple[str, ...]:
    """Each reading's label: its event with the scope's suffix, told apart by backend when one event was
    counted by several (model.counter_labels)."""
    return counter_labels(tuple((r["event"], r.get("scope"), r.get("backend")) for r in readings))


def _add_reading(bench, label: str, reading: dict, key=None) -> None:
    """One checked reading (see _checked) into its benchmark: a value (with its run's pairing ``key``), or a
    note saying why there is none."""
    values = _reading_target(bench, label, reading["status"], reading["unit"], reading["backend"], reading["reason"])
    if values is not None:
        values.append(reading["value"] if reading["status"] == "ok" else reading["scaled"])
        if key is not None:
            bench.keys.setdefault(label, array("q")).append(key)


def _reading_target(bench, label: str, status: str, unit: str | None, backend: str | None,
                    reason: str | None) -> list[float] | None:
    """Where a reading of this kind puts its value in its benchmark (None: it has none), having set the
    label's unit and backend, or the note saying why some runs have no value or a scaled one."""
    if status in ("ok", "multiplexed"):
        values = bench.metrics.setdefault(label, [])
        bench.units.setdefault(label, unit or "count")
        if backend:
            bench.backends.setdefault(label, set()).add(backend)
        if status == "multiplexed":
            bench.note(label, "multiplexed counter: scaled estimates in some runs")
        return values
    if status == "unsupported":
        bench.note(label, f"unsupported: {reason}")
    else:
        bench.note(label, f"counter error in some runs: {reason}")
    return None


def stored_dataset(machine: str, records, benchmarks: list[str] | None = None,
                   interference: InterferencePolicy | None = None, exclude: frozenset[int] = frozenset()):
    """The Dataset of one machine's stored samples: ``records`` yields each sample's record (a dict), or
    the reason it could not be decoded (a string). What cannot be used is skipped and said in a note (stored
    by an older server that validated less: never fatal); a machine without a measured run is a
    DatasetError. Used by the client that fetches a machine's runs itself for a report (perfctl/client.py).
    ``exclude``: runs left out as the other side's (RunIdentity)."""
    builder = DatasetBuilder(f"machine {machine}", interference=interference or InterferencePolicy(), exclude=exclude)
    skipped, first_reason = 0, None
    for record in records:
        reason = record if isinstance(record, str) else builder.add_or_skip(record)
        if reason is not None:
            skipped += 1
            first_reason = first_reason or reason
    dataset = builder.finish()
    if skipped:
        dataset.notes.append(f"{skipped} stored samples of machine {machine} could not be used and were "
                             f"skipped (first: {first_reason})")
    if not dataset.benchmarks:
        raise DatasetError(f"machine {machine!r} has no measured runs"
                           + (f" of {', '.join(benchmarks)}" if benchmarks else ""))
    return dataset
