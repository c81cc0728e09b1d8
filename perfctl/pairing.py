"""From two Datasets to the samples a comparison needs (which benchmarks match, which metric, what to warn),
and to the comparison itself with the context that says what was compared: one path for files compared by
the CLI and machines compared by the server (``compared``).

The metric default (stated in every output): instructions where both sides have it, else cycles, else
task-clock, else wall time. A metric name matches a reading label exactly, or with perf's ``:u`` suffix
(``instructions`` matches ``instructions:u``).
"""

from __future__ import annotations

import datetime
import shlex
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from perfctl.analysis.compare import Comparison, Parameters, compare
from perfctl.dataset import BenchmarkData, Block, Dataset
from perfctl.model import DEFAULT_METRICS, SCOPE_SUFFIX, metric_label

# a perf stat file's format: the option that wrote it (the server imports this module, never perfctl.formats)
PERF_STAT_SYNTAX = {"perf-stat": "-x,", "perf-stat-json": "-j"}


class PairingError(ValueError):
    """The two files cannot be compared; one line for the user."""


@dataclass(frozen=True)
class Paired:
    a: dict[tuple[str, str], list[float]]
    b: dict[tuple[str, str], list[float]]
    notes: dict[tuple[str, str], list[str]]
    metrics: tuple[str, ...]
    metric_choice: str
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    renamed: str | None
    units: dict[str, str]
    # A's benchmark name -> B's, as compared (the report looks B's runs up through it)
    mapping: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CompareContext:
    """What was compared and how it was read: the inputs' labels, their format, the metrics compared (and
    how they were chosen), the benchmark renaming said to the user, and each metric's unit."""

    a: str
    b: str
    format: str
    metrics: tuple[str, ...]
    metric_choice: str
    renamed: str | None = None
    units: dict[str, str] = field(default_factory=dict)
    # A's benchmark name -> B's where they differ (one benchmark per file under two names): the report draws
    # B's runs of the benchmark through it
    renames: dict[str, str] = field(default_factory=dict)
    # with --paired, how the runs were paired (pairing_words, from the same notes the user reads)
    pairing: str = ""


@dataclass(frozen=True)
class Compared:
    """A comparison, what it compared, and the inputs' notes (what they left out), each said with its side."""

    comparison: Comparison
    context: CompareContext
    notes: tuple[str, ...]


def compared(a: Dataset, b: Dataset, metrics: list[str] | None, parameters: Parameters,
             labels: tuple[str, str], workers=map) -> Compared:
    """Pair two Datasets and compare them (``workers``: see analysis/compare.py). Raises PairingError."""
    paired = pair(a, b, metrics, by_run=parameters.paired)
    result = compare(paired.a, paired.b, parameters, paired.notes, paired.only_a, paired.only_b, workers)
    renames = {name_a: name_b for name_a, name_b in paired.mapping.items() if name_a != name_b}
    pairing = pairing_words(note for notes in paired.notes.values() for note in notes) if parameters.paired else ""
    context = CompareContext(a=labels[0], b=labels[1], format=a.format, metrics=tuple(paired.metrics),
                             metric_choice=paired.metric_choice, renamed=paired.renamed, units=dict(paired.units),
                             renames=renames, pairing=pairing)
    unpaired = [f"{_listed('A', paired.only_a)} and {_listed('B', paired.only_b)} pair with nothing: "
                f"{unpaired_hint(a.format, paired.only_a, paired.only_b)}"] if paired.only_a and paired.only_b else []
    if a.format in PERF_STAT_SYNTAX and paired.mapping:  # the one name perfctl/formats/perf_stat.py gives, said
        unpaired.insert(0, f"perf stat {PERF_STAT_SYNTAX[a.format]} records no command: each file's runs are one "
                           f"benchmark, called {next(iter(paired.mapping))!r}")
    return Compared(result, context, tuple(side_notes(a.notes, b.notes)) + tuple(unpaired))


def unpaired_hint(fmt: str, only_a, only_b) -> str:
    """Why benchmarks of A and of B were not paired, and the ways to pair them: benchmarks pair by name, and
    hyperfine names one by its command, so two builds (`matmul-O0 150`, `matmul 150`) never pair. (One
    benchmark a side pairs whatever its names, and the header says so: benchmark_mapping.)"""
    example = f"--benchmark {shlex.quote(only_a[0])} --benchmark {shlex.quote(only_b[0])}"
    said = "benchmarks pair by name"
    if fmt == "hyperfine":
        return (f"{said}, and hyperfine names one by its command; give both the same name (hyperfine -n NAME), or "
                f"compare one of each side by name ({example})")
    return f"{said}; compare one of each side by name ({example})"


def _listed(side: str, names) -> str:
    shown = ", ".join(map(repr, names[:3])) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{side}'s {shown}"


def side_notes(a: list[str], b: list[str]) -> list[str]:
    """Each input's notes, said once with the side it is about: 'A and B: matmul: left out 2 warmup
    runs' rather than the same line twice."""
    in_b = set(b)
    both = [note for note in a if note in in_b]
    shared = set(both)
    return ([f"A and B: {note}" for note in both] + [f"A: {note}" for note in a if note not in shared]
            + [f"B: {note}" for note in b if note not in shared])


def _resolve(dataset: Dataset, names: list[str], metric: str) -> str | None:
    """The label under which ``metric`` appears in all of ``names`` of this dataset, if any."""
    if not names:
        return metric
    counted = set.intersection(*({label for label, values in dataset.benchmarks[n].metrics.items() if values}
                                 for n in names))
    label = metric_label(metric, counted)
    return label if label in counted else None


def pair(a: Dataset, b: Dataset, metrics: list[str] | None = None, by_run: bool = False) -> Paired:
    """Which benchmark of A is compared with which of B, on which metrics, with which runs. ``by_run``
    (--paired): the runs of each side are put in the order of their pairs, A's run with B's run of the
    same round (align_runs)."""
    if a.format != b.format:
        raise PairingError(f"{a.path} is {a.format} and {b.path} is {b.format}: compare files written by the "
                           "same tool (their metrics and units differ)")
    names_a, names_b = set(a.benchmarks), set(b.benchmarks)
    mapping, renamed = benchmark_mapping(names_a, names_b)
    if not mapping:
        hint = f": {unpaired_hint(a.format, sorted(names_a), sorted(names_b))}" if names_a and names_b else ""
        raise PairingError(f"no benchmark in common between {a.path} ({', '.join(sorted(names_a))}) and "
                           f"{b.path} ({', '.join(sorted(names_b))}){hint}")
    only_a = tuple(sorted(names_a - set(mapping)))
    only_b = tuple(sorted(names_b - set(mapping.values())))
    chosen, choice = _choose_metrics(a, b, mapping, metrics)
    paired_a, paired_b, notes, units = {}, {}, {}, {}
    for name_a, name_b in mapping.items():
        for metric in chosen:
            label_a = _resolve(a, [name_a], metric)
            label_b = _resolve(b, [name_b], metric)
            key = (name_a, metric)
            paired_a[key] = list(a.benchmarks[name_a].metrics.get(label_a, [])) if label_a else []
            paired_b[key] = list(b.benchmarks[name_b].metrics.get(label_b, [])) if label_b else []
            key_notes = []
            if by_run and label_a and label_b:
                paired_a[key], paired_b[key], how = align_runs(a.benchmarks[name_a], label_a,
                                                               b.benchmarks[name_b], label_b)
                key_notes.append(how)
            for side, dataset, name, label in (("A", a, name_a, label_a), ("B", b, name_b, label_b)):
                bench = dataset.benchmarks[name]
                for note in bench.notes.get(label or metric, []) + bench.notes.get(metric + SCOPE_SUFFIX["user"], []):
                    key_notes.append(f"{side}: {note}")
                if label:
                    units[metric] = bench.units.get(label, units.get(metric, ""))
            blocks = measured_in_blocks(a.benchmarks[name_a], b.benchmarks[name_b])
            if blocks:
                key_notes.append(blocks)
            notes[key] = list(dict.fromkeys(key_notes))
    return Paired(paired_a, paired_b, notes, tuple(chosen), choice, only_a, only_b, renamed, units, dict(mapping))


def benchmark_mapping(names_a: set[str], names_b: set[str]) -> tuple[dict[str, str], str | None]:
    """Which benchmark of A is compared with which of B: those of one name, else, when each side holds one
    benchmark under two names, that one (and the sentence saying so); an empty mapping when neither."""
    common = sorted(names_a & names_b)
    if not common and len(names_a) == 1 and len(names_b) == 1:
        (name_a,), (name_b,) = names_a, names_b
        return {name_a: name_b}, f"one benchmark per file: comparing {name_a!r} (A) with {name_b!r} (B)"
    return {name: name for name in common}, None


def select(names: list[str], a: Dataset, b: Dataset) -> None:
    """Keep only the benchmarks named (--benchmark) and their partners: a name picks the pairs of the
    mapping it is in, under A's name or B's (`compare psA.csv psB.csv --benchmark psA` compares psA with
    psB, as without it); a name that pairs with nothing keeps its own benchmark, paired as the others left
    allow (naming one of each side's compares those two). PairingError for a name in neither A nor B."""
    wanted = set(names)
    missing = [n for n in dict.fromkeys(names) if n not in a.benchmarks and n not in b.benchmarks]
    if missing:
        raise PairingError(f"no benchmark named {', '.join(map(repr, missing))} in A or B")
    mapping, _ = benchmark_mapping(set(a.benchmarks), set(b.benchmarks))
    chosen = {(x, y) for x, y in mapping.items() if x in wanted or y in wanted}
    keep_a = wanted | {x for x, _ in chosen}
    keep_b = wanted | {y for _, y in chosen}
    a.benchmarks = {n: bench for n, bench in a.benchmarks.items() if n in keep_a}
    b.benchmarks = {n: bench for n, bench in b.benchmarks.items() if n in keep_b}


BY_ROUND, BY_POSITION = "by round (run index)", "by position"


def align_runs(a: BenchmarkData, label_a: str, b: BenchmarkData, label_b: str) -> tuple[list, list, str]:
    """A's and B's values of one metric in the order of their pairs, and how they were paired (the note,
    which starts 'paired BY_ROUND' or 'paired BY_POSITION': the report's header reads it, pairing_words).

    Runs are paired by their key (perfctl/dataset.py RunIdentity: a block, one measurement, and the round or
    run index within it, whatever order the file's lines are in): A's blocks are matched with B's by what
    identifies them (match_blocks), and run k of a block with run k of its partner. A run that failed, was
    left out or never ran on one side leaves its partner out, and the others keep their true partners.
    Pairing by place in the lists, or blocks by their count, would shift every pair after the first missing
    run or measurement onto the next round's partner, and a drift across rounds then reads as noise or as a
    difference. A key held twice on one side (files joined by hand, runs without a uuid read twice) cannot
    tell which run is whose partner: those runs are left out with their partners, never paired by place.
    Where a side's reader knows no keys (hyperfine's own runs aside: pyperf, perf stat files), runs are
    paired by position, and the note says why. PairingError when blocks cannot be matched unambiguously."""
    values_a, values_b = a.metrics.get(label_a, []), b.metrics.get(label_b, [])
    keys_a, keys_b = a.keyed(label_a), b.keyed(label_b)
    if keys_a is None or keys_b is None:
        which = "A's and B's" if keys_a is None and keys_b is None else "A's" if keys_a is None else "B's"
        return list(values_a), list(values_b), (f"paired {BY_POSITION}: {which} runs carry no round or run index, "
                                                "so the i-th run of A is paired with the i-th of B")
    # numpy: 10^6 runs a side are joined in ~0.3 s, where Python sets and dicts took seconds
    ka, kb = np.frombuffer(keys_a, dtype=np.int64), np.frombuffer(keys_b, dtype=np.int64)
    numbers_a = np.unique(ka >> 32)
    partner, left = match_blocks(a, set(numbers_a.tolist()), b, set(np.unique(kb >> 32).tolist()))
    twice_a, twice_b = _repeated(ka), _repeated(kb)
    # A's runs under their partner's key in B's blocks; a run of a block without a partner has none (-1)
    target = np.array([partner.get(n, -1) for n in numbers_a.tolist()], dtype=np.int64)[
        np.searchsorted(numbers_a, ka >> 32)]
    usable_a = (target >= 0) & ~np.isin(ka, twice_a)
    usable_b = ~np.isin(kb, twice_b)
    moved = np.where(target >= 0, (target << 32) | (ka & 0xFFFFFFFF), -1)  # A's keys as B's partner keys
    _, in_a, in_b = np.intersect1d(moved[usable_a], kb[usable_b], assume_unique=True, return_indices=True)
    # the values as read, never through a float array: counts past 2^53 stay the ints they are, for the
    # verdict's exact edges (analysis/ratio_edges.py exact_samples)
    x = [values_a[i] for i in np.flatnonzero(usable_a)[in_a].tolist()]  # in key order: the pairs' order
    y = [values_b[i] for i in np.flatnonzero(usable_b)[in_b].tolist()]
    how = f"paired {BY_ROUND}: {len(x)} pairs"
    # each run left out is counted under its own reason: its block has no partner (the blocks' note names
    # them), its round is held twice on its side, its partner's round is held twice on the other side, or
    # the other side has no run of its round
    blocked_a = target < 0
    blocked_b = ~np.isin(kb >> 32, np.fromiter(partner.values(), dtype=np.int64, count=len(partner)))
    twice_in_a, twice_in_b = np.isin(ka, twice_a) & ~blocked_a, np.isin(kb, twice_b) & ~blocked_b
    partner_twice_a = ~blocked_a & ~twice_in_a & np.isin(moved, twice_b)
    partner_twice_b = ~blocked_b & ~twice_in_b & np.isin(kb, moved[twice_in_a])
    alone_a = len(values_a) - len(x) - int(blocked_a.sum() + twice_in_a.sum() + partner_twice_a.sum())
    alone_b = len(values_b) - len(y) - int(blocked_b.sum() + twice_in_b.sum() + partner_twice_b.sum())
    if alone_a or alone_b:
        how += (f"; left out {alone_a} runs of A and {alone_b} of B whose round has no run on the other side (a "
                "failed, left-out or interrupted run leaves its partner out)")
    for side, other, held, partners, bench in (("A", "B", twice_in_a, partner_twice_b, a),
                                               ("B", "A", twice_in_b, partner_twice_a, b)):
        keys = np.unique((ka if side == "A" else kb)[held])  # those of a block without a partner: its reason
        if len(keys):
            key = int(keys[0])
            how += (f"; {side} holds {len(keys)} rounds (run indexes) twice in one measurement, e.g. round "
                    f"{key & 0xFFFFFFFF} of {_block_name(bench, side, key >> 32)} (files joined by hand, runs "
                    f"without a uuid read twice): its {int(held.sum())} runs of those rounds are left out"
                    + (f", with their {int(partners.sum())} partners of {other}" if partners.any() else "")
                    + ", never paired by place")
    if left:
        how += f"; {left}"
    return x, y, how


def _repeated(keys: np.ndarray) -> np.ndarray:
    """The keys met more than once, in order."""
    unique, counts = np.unique(keys, return_counts=True)
    return unique[counts > 1]


def match_blocks(a: BenchmarkData, numbers_a: set[int], b: BenchmarkData, numbers_b: set[int]):
    """Which block (measurement) of B each block of A pairs with, and the note on the blocks left out:
    ({A's block: B's block}, note or ""). The rule (docs/samples.md, "The identity of a run"):

    - one block on each side: they pair;
    - blocks that name each other pair: the same job, or the same `perfctl ab` session (its seed);
    - blocks measured at the same time (their runs' start times overlap), one of A with one of B, pair;
    - the others, on one machine's clock, by alternation, as examples/compare-builds.sh takes them (A, B,
      A, B...): a block pairs with the other side's block measured right after it, in the round order (A
      first or B first) that pairs the most blocks, i.e. that needs the fewest measurements missing.

    A block left without a partner (a measurement skipped on the other side) is left out and said. Where
    the blocks cannot be matched one way only (both round orders pair as many; blocks without start times,
    or on two machines' clocks, left on both sides), PairingError names them: pairing them by their count
    would pair a measurement with another round's and report the drift between them as a difference."""
    blocks_a = {n: a.blocks.get(n, Block()) for n in sorted(numbers_a)}
    blocks_b = {n: b.blocks.get(n, Block()) for n in sorted(numbers_b)}
    if len(blocks_a) == 1 and len(blocks_b) == 1:
        return {next(iter(blocks_a)): next(iter(blocks_b))}, ""
    partner: dict[int, int] = {}
    tags_a = Counter(block.tag for block in blocks_a.values() if block.tag is not None)
    tags_b = Counter(block.tag for block in blocks_b.values() if block.tag is not None)
    for side, bench, blocks, tags in (("A", a, blocks_a, tags_a), ("B", b, blocks_b, tags_b)):
        # a job or an ab session is one measurement a side: met twice, it was read twice (a file joined to
        # itself, runs without a uuid), and its copies would be taken for measurements in turn
        twice = {n: blk for n, blk in blocks.items() if blk.tag is not None and tags[blk.tag] > 1}
        if twice:
            raise PairingError(f"{a.name}: {side} holds one job or ab session more than once "
                               f"({_names(bench, side, twice)} carry the same job or seed): a file joined to "
                               "itself, or runs without a uuid read twice; keep one copy (or compare without "
                               "--paired)")
    by_tag = {block.tag: n for n, block in blocks_b.items() if tags_b[block.tag] == 1 and tags_a[block.tag] == 1}
    for n, block in blocks_a.items():
        if block.tag in by_tag:
            partner[n] = by_tag[block.tag]
    rest_a = {n: blk for n, blk in blocks_a.items() if n not in partner}
    taken = set(partner.values())
    rest_b = {n: blk for n, blk in blocks_b.items() if n not in taken}
    timed = all(blk.first_ns is not None for blk in (*rest_a.values(), *rest_b.values()))
    if rest_a and rest_b and timed:
        overlapping = _overlapping(rest_a, rest_b)
        overlapped = Counter(m for found in overlapping.values() for m in found)
        for n, found in overlapping.items():
            if len(found) == 1 and overlapped[found[0]] == 1:
                partner[n] = found[0]
        rest_a = {n: blk for n, blk in rest_a.items() if n not in partner}
        taken = set(partner.values())
        rest_b = {n: blk for n, blk in rest_b.items() if n not in taken}
        clocks = {blk.clock for blk in (*rest_a.values(), *rest_b.values())}
        if rest_a and rest_b and len(clocks) == 1:
            if not _interleaved(rest_a, rest_b):
                first, then = ("A", "B") if min(blk.first_ns for blk in rest_a.values()) < \
                    min(blk.first_ns for blk in rest_b.values()) else ("B", "A")
                raise PairingError(f"{a.name}: {_names(a, 'A', rest_a)} and {_names(b, 'B', rest_b)} cannot be "
                                   f"paired: the sides were not measured alternately (every measurement of {first} "
                                   f"was taken before every one of {then}), so no round holds one of each; "
                                   "alternate the measurements (examples/compare-builds.sh) or compare without "
                                   "--paired")
            alternated, unclear = _alternation(rest_a, rest_b)
            if unclear:
                raise PairingError(f"{a.name}: {_names(a, 'A', rest_a)} and {_names(b, 'B', rest_b)} cannot be "
                                   "matched one way only: measured in turn, each could be the partner of the "
                                   "measurement before it or after it; keep one measurement of each side per round "
                                   "(or compare without --paired)")
            partner.update(alternated)
            taken = set(partner.values())
            # those left have no measurement of the other side next to them: alone, not unclear
            return partner, _alone(a, b, {n: blk for n, blk in rest_a.items() if n not in partner},
                                   {n: blk for n, blk in rest_b.items() if n not in taken})
    if rest_a and rest_b:
        raise PairingError(f"{a.name}: {_names(a, 'A', rest_a)} and {_names(b, 'B', rest_b)} cannot be matched: "
                           "no job, ab session or time on one machine's clock says which is whose partner; compare "
                           "one measurement of each (FILE@LABEL=VALUE, MACHINE@job=ID) or without --paired")
    return partner, _alone(a, b, rest_a, rest_b)


def _alone(a: BenchmarkData, b: BenchmarkData, rest_a: dict, rest_b: dict) -> str:
    """The note on the blocks match_blocks left without a partner."""
    return "; ".join(f"left out {_names(bench, side, rest)}: no measurement of {other} was taken with or next to it"
                     for side, other, bench, rest in (("A", "B", a, rest_a), ("B", "A", b, rest_b)) if rest)


def _overlapping(rest_a: dict, rest_b: dict) -> dict[int, list[int]]:
    """Per block of A, the blocks of B whose runs' start times overlap its own, found through B's blocks in
    order of their first start and the greatest last start up to each (a side's measurements follow one
    another: a few steps per block, not the product of the counts)."""
    import bisect
    import itertools

    order = sorted(rest_b.items(), key=lambda item: item[1].first_ns)
    firsts = [blk.first_ns for _, blk in order]
    reach = list(itertools.accumulate((blk.last_ns for _, blk in order), max))
    found = {}
    for n, blk in rest_a.items():
        j, hits = bisect.bisect_right(firsts, blk.last_ns) - 1, []
        while j >= 0 and reach[j] >= blk.first_ns:
            if order[j][1].last_ns >= blk.first_ns:
                hits.append(order[j][0])
            j -= 1
        found[n] = hits
    return found


def _interleaved(rest_a: dict, rest_b: dict) -> bool:
    """Whether two sides' blocks were measured alternately: not every block of one side before every block
    of the other (their timeline, in start order, changes side at least twice: A, B, A or B, A, B). Blocks
    measured all of A and then all of B hold no round: the last of A and the first of B are next to each
    other only because one series ended where the other began (docs/samples.md, "The identity of a run")."""
    return not (max(blk.first_ns for blk in rest_a.values()) < min(blk.first_ns for blk in rest_b.values())
                or max(blk.first_ns for blk in rest_b.values()) < min(blk.first_ns for blk in rest_a.values()))


def _alternation(rest_a: dict, rest_b: dict) -> tuple[dict[int, int], bool]:
    """A's blocks paired with B's measured right after or before them on one clock (match_blocks), and
    whether that is unclear (both round orders pair as many blocks, differently)."""
    timeline = sorted([(blk.first_ns, blk.last_ns, "A", n) for n, blk in rest_a.items()] +
                      [(blk.first_ns, blk.last_ns, "B", n) for n, blk in rest_b.items()])
    parses = []
    for first in ("A", "B"):
        pairs, i = {}, 0
        while i < len(timeline):
            if timeline[i][2] == first and i + 1 < len(timeline) and timeline[i + 1][2] != first:
                one, two = timeline[i][3], timeline[i + 1][3]
                pairs[one if first == "A" else two] = two if first == "A" else one
                i += 2
            else:
                i += 1
        parses.append(pairs)
    by_a, by_b = parses
    if len(by_a) == len(by_b) and by_a != by_b:
        return {}, True
    return max(parses, key=len), False


def _block_name(bench: BenchmarkData, side: str, number: int) -> str:
    """A block as the user can find it: its side, its place in the file and its job, ab seed or start."""
    block = bench.blocks.get(number, Block())
    what = []
    if block.tag and block.tag[0]:
        what.append(f"job {block.tag[0]}")
    if block.tag and block.tag[1] is not None:
        what.append(f"ab seed {block.tag[1]}")
    if block.first_ns is not None:
        when = datetime.datetime.fromtimestamp(block.first_ns / 1e9, datetime.UTC)
        what.append(f"started {when:%Y-%m-%d %H:%M:%S} UTC")
    return f"{side}'s measurement {number + 1}" + (f" ({', '.join(what)})" if what else "")


def _names(bench: BenchmarkData, side: str, blocks: dict) -> str:
    """Blocks as the user can find them (_block_name), the first five."""
    names = [_block_name(bench, side, n) for n in list(blocks)[:5]]
    return ", ".join(names) + (f" and {len(blocks) - 5} more" if len(blocks) > 5 else "")


def pairing_words(notes) -> str:
    """How the runs were paired, for the report's header, from align_runs' notes (one per benchmark and
    metric): 'by round (run index)', 'by position', or both with the count of each."""
    methods = [method for note in notes for method in (BY_ROUND, BY_POSITION) if note.startswith(f"paired {method}")]
    if not methods:
        return "paired"
    if len(set(methods)) == 1:
        return f"paired {methods[0]}"
    return (f"paired {BY_ROUND} for {methods.count(BY_ROUND)} and {BY_POSITION} for {methods.count(BY_POSITION)} "
            "benchmark metrics (the notes say which and why)")


# How to take runs that a drift of the machine falls on alike (docs/statistics.md, "Measured in blocks").
INTERLEAVE = ("interleave the runs: a fleet job with both commands (perfctl submit ... -- CMD_A ::: CMD_B) "
              "runs them in turn, or alternate rounds of perfctl stat -o on each side as "
              "examples/compare-builds.sh does")


def measured_in_blocks(a: BenchmarkData, b: BenchmarkData) -> str | None:
    """The note for a benchmark whose runs on one side all started before any run of the other, on one
    machine's clock; None when they overlap (runs taken in rounds) or when the files cannot tell (no start
    times, as in hyperfine's or Google Benchmark's; two machines, whose clocks do not order runs).

    A drift of the machine between the blocks (other work, frequency, temperature, page cache) moves
    one side only and reads as a change: the issue-14 study saw up to 2-3% in task-clock between blocks of
    identical programs, where only interleaved runs found a 1% change."""
    if None in (a.first_ns, a.last_ns, b.first_ns, b.last_ns) or a.clock is None or a.clock != b.clock:
        return None
    if a.last_ns < b.first_ns:
        first, then = "A", "B"
    elif b.last_ns < a.first_ns:
        first, then = "B", "A"
    else:
        return None
    return (f"measured in blocks: every run of {first} before every run of {then}; a drift of the machine "
            f"between the blocks cannot be told from a change — {INTERLEAVE}")


def _choose_metrics(a: Dataset, b: Dataset, mapping: dict[str, str], metrics: list[str] | None):
    if metrics:
        for metric in metrics:
            if not any(_resolve(a, [n], metric) for n in mapping) or \
                    not any(_resolve(b, [n], metric) for n in mapping.values()):
                available = sorted({m for n in mapping for m in a.benchmarks[n].metrics} &
                                   {m for n in mapping.values() for m in b.benchmarks[n].metrics})
                raise PairingError(f"metric {metric!r} is not measured on both sides "
                                   f"(both have: {', '.join(available) or 'nothing in common'})")
        return list(metrics), f"metric{'s' if len(metrics) > 1 else ''} chosen with --metric"
    skipped = []
    for metric in DEFAULT_METRICS:
        if _resolve(a, list(mapping), metric) and _resolve(b, list(mapping.values()), metric):
            why = f"; {', '.join(skipped)} not measured on both sides" if skipped else ""
            return [metric], f"default metric {metric}{why}"
        skipped.append(metric)
    raise PairingError(f"none of {', '.join(DEFAULT_METRICS)} is measured for every common benchmark on both "
                       "sides; name one with --metric")
