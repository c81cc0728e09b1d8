"""The Dataset: what every reader of runs fills (one module per file format, perfctl/formats/, and the
server's selections of stored runs, server/selection.py) and compare, the report and the server read. Per
benchmark, per metric, one value per run, with the runs' identities (RunIdentity), their pairing keys and
blocks, and the notes on what was left out or mixed, worded once for files and stored runs alike.

Part of the common model (DESIGN.md, "Layout"): it imports nothing of the formats, the CLI or the server.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from dataclasses import dataclass, field


class DatasetError(ValueError):
    """A file that cannot be read as samples; the message is one line naming the file."""


@dataclass(frozen=True)
class Block:
    """One measurement of a benchmark (RunIdentity's block): what names it on both sides of a comparison
    (``tag``: its job and `perfctl ab`'s seed, where its runs carry them), when its measured runs started
    (first and last, ns since the epoch) and on whose clock; None where the runs do not all say. With
    --paired, perfctl/pairing.py matches A's blocks with B's by these (match_blocks), never by count."""

    tag: tuple | None = None
    first_ns: int | None = None
    last_ns: int | None = None
    clock: str | None = None


@dataclass
class BenchmarkData:
    name: str
    metrics: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    backends: dict[str, set[str]] = field(default_factory=dict)
    # for the report's runs-in-order plot (perfctl/report/html.py), where the reader knows them: each
    # metric's warm-up values, and the kept runs flagged as interfered-with (index into metrics' lists)
    warmups: dict[str, list[float]] = field(default_factory=dict)
    flagged: dict[int, str] = field(default_factory=dict)
    # when the first and the last kept run started (ns since the epoch) and on whose clock (a machine's
    # id or host name), where the file says so for every kept run, else None: with the other side's, they
    # tell whether the two sides were measured on one machine in blocks, one after the other
    # (perfctl/pairing.py)
    first_ns: int | None = None
    last_ns: int | None = None
    clock: str | None = None
    start_unknown: bool = False
    # what the kept runs ran, where the reader knows it: runs per (executable sha256, input digest, argv,
    # kernel); more than one is a mixture that ``unmix`` leaves out unless pooled
    variants: Counter = field(default_factory=Counter)
    # each metric's run keys, beside its values (one per value, same order), where the reader knows them:
    # the key that pairs a run with the other side's run of the same round (run_key); a metric without
    # as many keys as values is paired by position (perfctl/pairing.py says so). Keys are RunIdentity's
    # packed integers in int64 arrays: 8 bytes a value, where a tuple per run cost ~15 MB per 50,000 runs
    keys: dict[str, array] = field(default_factory=dict)
    # the blocks the keys name (key >> 32 -> Block), where the reader knows them; a block missing here is
    # known by its number only
    blocks: dict[int, Block] = field(default_factory=dict)

    def add(self, metric: str, value: float, unit: str, backend: str | None = None, key=None) -> None:
        # an integer stays the int it is: a count past 2^53 has no float of its own (2^53 + 1 reads as 2^53),
        # and the verdict's exact edges compare ratios of the counts themselves (analysis/ratio_edges.py)
        self.metrics.setdefault(metric, []).append(value if type(value) is int else float(value))
        if key is not None:
            self.keys.setdefault(metric, array("q")).append(key)
        self.units.setdefault(metric, unit)
        if backend:
            self.backends.setdefault(metric, set()).add(backend)

    def started(self, time_ns: int | None, clock: str | None) -> None:
        """One more kept run started at ``time_ns`` on ``clock``. A run without either, or on another
        clock than the others, makes the span unknown for good: a span that leaves out some runs could
        claim blocks that are not there, and two clocks do not order runs."""
        if time_ns is not None and clock is not None and clock == self.clock:  # most runs: one more on that clock
            if time_ns < self.first_ns:
                self.first_ns = time_ns
            elif time_ns > self.last_ns:
                self.last_ns = time_ns
            return
        if time_ns is None or clock is None or self.start_unknown or self.clock not in (None, clock):
            self.start_unknown, self.first_ns, self.last_ns, self.clock = True, None, None, None
            return
        self.clock = clock
        self.first_ns = time_ns if self.first_ns is None else min(self.first_ns, time_ns)
        self.last_ns = time_ns if self.last_ns is None else max(self.last_ns, time_ns)

    def keyed(self, metric: str) -> array | None:
        """The run keys of ``metric``'s values, or None when the reader did not give every value one."""
        keys = self.keys.get(metric)
        values = self.metrics.get(metric)
        return keys if keys is not None and values is not None and len(keys) == len(values) else None

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
    # the runs read (RunIdentity.run of each sample with a uuid), where the reader knows them: a run on
    # both sides of a comparison is left out of one (cli/compare.py, RunIdentity.shared)
    runs: set[int] = field(default_factory=set)

    def benchmark(self, name: str) -> BenchmarkData:
        return self.benchmarks.setdefault(name, BenchmarkData(name))


# The forms of a uuid that uuid.UUID reads, one run whichever is written: any case, with or without its
# dashes, in braces, or as a URN. Matched strictly (uuid.UUID itself also takes a sign, an underscore or a
# blank that int() accepts, which would make another uuid of a typo)
_UUID = re.compile(r"(?i)(?:urn:uuid:)?(\{)?([0-9a-f]{8})-?([0-9a-f]{4})-?([0-9a-f]{4})-?([0-9a-f]{4})-?([0-9a-f]{12})"
                   r"(?(1)\})")


# the form perfctl and the server write (server/validation.py): nearly every uuid read, told by one match
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def canonical_uuid(text: str) -> str:
    """A run's uuid in its canonical form (lower case, 8-4-4-4-12, as str(uuid.UUID(text))), whichever form
    it is written in; ValueError saying what is wrong when ``text`` is no uuid."""
    if _CANONICAL_UUID.fullmatch(text):  # as written: parsing it again cost 3 times the match
        return text
    match = _UUID.fullmatch(text)
    if match is None:
        raise ValueError(f"not a uuid: {text[:60]!r}")
    return "-".join(match.groups()[1:]).lower()


class RunIdentity:
    """The one owner of what identifies a run among those read (a file's lines, a machine's stored runs),
    used by every reader that knows it (docs/samples.md, "The identity of a run"):

    - a run is its machine and its ``uuid`` (read in any form uuid.UUID reads: case, braces, dashes, a
      URN), as the server stores a uuid once per machine: a sample met again under a run already read is
      the same run, left out and counted (``repeated``; a file appended to itself, two files cat'ed
      together, a line re-sent). A run without a uuid cannot be found again: they are counted
      (``anonymous``) and the note says so;
    - the same run on both sides of a comparison is no comparison: ``shared`` decides what is left out
      (cli/compare.py reads the sides again without it);
    - a measured run's pairing key is ``(block, index)``, packed as ``block << 32 | index`` (one int64, in
      the same order as the pairs): ``index`` is the round of an interleaved measurement (``extra.round``,
      `perfctl ab`), else the ``run_index``; a block is one measurement of the benchmark: ``perfctl stat -o``
      appended several times, as examples/compare-builds.sh does (begun by a machine line), a job, or a
      `perfctl ab` session (its ``extra.seed``: two sessions joined by hand repeat their rounds), whatever
      order the runs' lines are in. Each block keeps what identifies it in time (Block: its job and seed, its
      first and last start): perfctl/pairing.py matches a block of A with the block of B measured with it or
      next to it (match_blocks), and run k of a block with run k of its partner, whatever failed or was left
      out around it. An index met twice in one block is left out with its partner (pairing.py says which).

    Warm-ups have no key and do not move the blocks.

    Formats without a uuid name a run by what their writer makes unique in one file (``entry``; docs/samples.md
    lists each reader's): a Google Benchmark repetition, a pyperf run. A repeat there is left out with the
    same count and note, worded by ``identified_by``; such identities are not compared across files (two
    files of one program hold the same names and indexes), so they do not go into Dataset.runs."""

    def __init__(self, exclude: frozenset[int] = frozenset(), identified_by: str = "uuid"):
        self.identified_by = identified_by
        # the runs' hashes, not their uuids: 10^6 runs' strings would hold ~90 MB for the whole reading. Two
        # runs of one reading share a 64-bit SipHash (seeded per process, and the same in a forked child)
        # with probability n^2 / 2^65: 3e-8 at 10^6 runs, and no file can aim at it
        self.runs: set[int] = set()
        self.repeated = 0
        self.anonymous = 0
        # runs of the other side of a comparison, left out here (cli/compare.py) and counted
        self._exclude = exclude
        self.excluded = 0
        self._segment = 0
        # benchmark name -> {(segment, job, seed): [block, first start, last start, clock, times known]}, in
        # the order the blocks were met
        self._blocks: dict[str, dict[tuple, list]] = {}

    def new_measurement(self) -> None:
        """A machine line: the runs that follow were appended by another measurement."""
        self._segment += 1

    @staticmethod
    def run(uuid: str | None, machine_id=None) -> int | None:
        """The identity of a run (a hash of its machine and canonical uuid), None for a hand-made record
        without a uuid; ValueError when ``uuid`` is no uuid."""
        if uuid is None:
            return None
        return hash((machine_id if type(machine_id) is str else None, canonical_uuid(uuid)))

    @staticmethod
    def entry(*fields) -> int:
        """The identity of a run that a format names by ``fields`` (JSON values: str, int, float, bool, None
        and lists of them), as ``run`` is one by its uuid."""
        return hash(repr(fields))  # repr: 1 and 1.0 and True stay three values, lists become hashable

    def seen(self, run: int | None) -> bool:
        """Whether ``run`` (RunIdentity.run) was read before, or is the other side's: then counted, and
        left out by the caller."""
        if run is None:
            return False
        if run in self._exclude:
            self.excluded += 1
            return True
        if run in self.runs:
            self.repeated += 1
            return True
        return False

    def read(self, run: int | None) -> None:
        """``run``'s record was kept or left out: read, either way, so its repeats are."""
        if run is None:
            self.anonymous += 1
        else:
            self.runs.add(run)

    def key(self, name, index, job=None, seed=None, start_ns=None, clock=None) -> int | None:
        """The pairing key of a measured run of benchmark ``name`` with round or run index ``index`` (None
        when the record has no usable index: its benchmark is then paired by position), in the block of its
        measurement, job and ab ``seed``; ``start_ns`` and ``clock`` (its machine) date the block."""
        if type(index) is not int or not 0 <= index < 1 << 32 or type(name) is not str:
            return None
        blocks = self._blocks.setdefault(name, {})
        job = job if type(job) is str else None
        seed = seed if type(seed) is int else None
        span = blocks.get((self._segment, job, seed))
        if span is None:
            span = blocks[self._segment, job, seed] = [len(blocks), start_ns, start_ns, clock, True]
        timed = type(start_ns) is int and type(clock) is str and clock == span[3]
        if not timed:  # a run without its start, or on another clock: the block's time is unknown
            span[4] = False
        elif not span[4]:  # unknown already (its first start may be None): a later start cannot date it
            pass
        elif start_ns < span[1]:
            span[1] = start_ns
        elif start_ns > span[2]:
            span[2] = start_ns
        block = span[0]
        return block << 32 | index if block < 1 << 30 else None

    def blocks(self, dataset: Dataset) -> None:
        """Give each benchmark of ``dataset`` its blocks (BenchmarkData.blocks), as met while reading."""
        for name, found in self._blocks.items():
            bench = dataset.benchmarks.get(name)
            if bench is None:
                continue
            for (_segment, job, seed), (block, first, last, clock, timed) in found.items():
                tag = (job, seed) if job is not None or seed is not None else None
                bench.blocks[block] = Block(tag, *((first, last, clock) if timed else (None, None, None)))

    def note(self, dataset: Dataset) -> None:
        if self.repeated:
            dataset.notes.append(f"left out {self.repeated} samples whose {self.identified_by} an earlier sample "
                                 "already had: a run counts once (the input holds some runs twice, e.g. a file "
                                 "appended to itself)")
        if self.excluded:
            dataset.notes.append(shared_note(self.excluded))
        if self.anonymous:
            dataset.notes.append(f"{self.anonymous} samples carry no uuid: a run read twice among them cannot be "
                                 "told from two runs")

    @staticmethod
    def shared(a: set[int], b: set[int]) -> tuple[set[int], set[int]] | None:
        """The runs to leave out of A and of B when some runs are on both sides, or None when every run is:
        the side made only of shared runs keeps them (A.jsonl against a file holding A's runs and B's: they
        are A's), and where both sides hold other runs too, no side can claim them: left out of both."""
        common = a & b
        if not common:
            return set(), set()
        losers = RunIdentity.losers(common == a, common == b)
        return None if losers is None else (common if losers[0] else set(), common if losers[1] else set())

    @staticmethod
    def losers(only_shared_a: bool, only_shared_b: bool) -> tuple[bool, bool] | None:
        """Which sides leave out the runs both hold (some are), from whether each holds only those: see
        ``shared``; None when both do. A server's selections (server/selection.py) decide by it too."""
        if only_shared_a and only_shared_b:
            return None
        return not only_shared_a, not only_shared_b


def shared_note(runs: int) -> str:
    """The note of a side that left out ``runs`` runs as the other side's (RunIdentity.shared): files and a
    server's selections say it alike."""
    return f"left out {runs} samples that are also the other side's (same uuid): a run is A's or B's, not both"


def left_out_notes(dataset: Dataset, excluded: dict[str, dict[str, int]], interfered: dict[str, int],
                   interference) -> None:
    """The notes on the runs a reader left out or flagged, per benchmark in the order met: warm-ups, failed
    and interfered-with runs (``interference``: model.InterferencePolicy), then the benchmarks' mixed
    backends. The one wording of files (perfctl/formats/jsonl.py) and stored runs (server/selection.py)."""
    for name, counts in excluded.items():
        if counts:
            left_out = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
            dataset.notes.append(f"{name}: left out {left_out} runs")
    for name, count in interfered.items():
        if not count:
            continue
        if not interference.exclude:
            dataset.notes.append(f"{name}: {count} runs flagged: {interference.describe()} "
                                 "(kept; --exclude-interfered leaves them out)")
        else:
            dataset.notes.append(f"{name}: interfered-with runs are those in which {interference.describe()}")
    for bench in dataset.benchmarks.values():
        for metric, backends in bench.backends.items():
            if len(backends) > 1:
                bench.note(metric, f"mixed backends: {', '.join(sorted(backends))}")


def mixture(variants: Counter) -> str | None:
    """What differs among the runs under one benchmark name, with run counts, or None when nothing does:
    '2 executables (sha256 1a2b3c4d5e6f: 40 runs, sha256 5e6f7a8b9c0d: 60 runs)', input digests, argv, kernels."""
    if len(variants) < 2:
        return None
    parts = []
    for index, what, show in ((0, "executables", lambda v: f"sha256 {str(v)[:12]}"),
                              (1, "input digests", lambda v: str(v)[:12]),
                              (2, "argv", lambda v: " ".join(v)[:60]), (3, "kernels", str)):
        counts: Counter = Counter()
        for variant, runs in variants.items():
            counts[variant[index]] += runs
        if len(counts) > 1:
            listed = ", ".join(f"{show(value)}: {runs} runs" for value, runs in counts.most_common(4))
            more = f", {len(counts) - 4} more" if len(counts) > 4 else ""
            parts.append(f"{len(counts)} {what} ({listed}{more})")
    return " and ".join(parts)


def unmix(dataset: Dataset, pool: bool = False) -> Dataset:
    """Leave out each benchmark whose runs mix executables, inputs or kernels (two builds under one name are
    two programs: pooled, their spread reads as noise and their difference as nothing), and say so; with
    ``pool`` (--pool) keep them and say what was pooled. Files and a server's runs alike. DatasetError when
    that leaves nothing to compare: the reason then is the error, not a note after another error."""
    left_out = []
    for name in list(dataset.benchmarks):
        mixed = mixture(dataset.benchmarks[name].variants)
        if mixed and pool:
            dataset.notes.append(f"{name}: pooled runs that mix {mixed} (--pool)")
        elif mixed:
            del dataset.benchmarks[name]
            left_out.append(f"{name}: left out: its runs mix {mixed}; compare one of them (on a server: "
                            "@job=ID or a label) or pool them with --pool")
    if left_out and not dataset.benchmarks:
        raise DatasetError(f"{dataset.path}: no benchmark to compare: {'; '.join(left_out[:3])}")
    dataset.notes.extend(left_out)
    return dataset
