"""What readers read, exactly (issue 28, after the second hostile review): a file cut at a line end inside
its last run, counts beyond 2^53 kept as the integers they are up to the verdict, and StatCC's cold share."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import perfctl

from perfctl.analysis import lru, reuse, statcc, statstack
from perfctl.analysis.compare import Parameters, compare
from perfctl.formats import DatasetError, read_dataset

DATA = Path(__file__).parent / "data"
needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="probe: perf(1) not on PATH (linux-perf)")
needs_hyperfine = pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH")


# --- 1. a file cut at a line end inside its last run -------------------------------------------------------

def _perf_stat_runs(path: Path, syntax: str, runs: int, events: str = "task-clock,page-faults,context-switches"):
    for _ in range(runs):
        subprocess.run(["perf", "stat", syntax, "-o", str(path), "--append", "-e", events, "--", "/bin/true"],
                       check=True)
    return path.read_text().splitlines(keepends=True)


@needs_perf
@pytest.mark.parametrize("syntax", ["-x,", "-j"])
def test_perf_stat_cut_at_each_line_end_of_its_last_run_is_refused_or_read_whole(tmp_path, syntax):
    """Every prefix of a real perf stat file that ends at a line end: the last run is whole (read), has no
    event (a note), or lacks some of the events (refused in one line naming its first line, exit 2). Before,
    the short run was read with a note that `-q` and `--format csv` do not print, and its task-clock entered
    the verdict (6/6 runs against 5 whole ones)."""
    lines = _perf_stat_runs(tmp_path / "whole.out", syntax, 3)
    headers = [n for n, line in enumerate(lines, 1) if line.startswith("# started on")]
    event_lines = [n for n, line in enumerate(lines, 1) if n > headers[-1] and line.strip()]
    assert len(headers) == 3 and len(event_lines) == 3
    cut = tmp_path / "cut.out"
    for end in range(headers[-1], len(lines) + 1):
        cut.write_text("".join(lines[:end]))
        kept = [n for n in event_lines if n <= end]
        if 0 < len(kept) < 3:
            with pytest.raises(DatasetError) as err:
                read_dataset(str(cut))
            message = str(err.value)
            assert message.startswith(f"{cut}:{kept[0]}: the run from line {kept[0]} lacks ")
            assert "the last run, cut at a line end" in message and "\n" not in message
            result = perfctl("compare", "-q", str(cut), str(tmp_path / "whole.out"))
            assert result.returncode == 2 and result.stderr == f"perfctl compare: {message}\n"
            continue
        dataset = read_dataset(str(cut))
        counts = {len(values) for values in dataset.benchmarks["perf stat"].metrics.values()}
        assert counts == ({3} if kept else {2})  # whole runs only
        assert bool(dataset.notes) == (not kept)  # the empty last run: said


@needs_perf
def test_perf_stat_run_short_in_the_middle_is_refused(tmp_path):
    """A run cut at a line end and then appended to (perf stat --append again) lacks events in the middle
    of the file: incomplete as well, refused naming it."""
    first = _perf_stat_runs(tmp_path / "a.out", "-x,", 2)
    later = _perf_stat_runs(tmp_path / "b.out", "-x,", 2)
    cut = first[:-1]  # the last run's last event (context-switches) lost
    path = tmp_path / "appended.csv"
    path.write_text("".join(cut + later))
    result = perfctl("compare", str(path), str(tmp_path / "b.out"))
    assert result.returncode == 2
    short_first = next(n for n, line in enumerate(cut, 1) if n > 5 and "task-clock" in line)
    assert result.stderr == (f"perfctl compare: {path}:{short_first}: the run from line {short_first} lacks "
                             "context-switches, which other runs count (perf writes every event of a run): a run "
                             "cut and then appended to, or recorded with other -e events; remove its lines or "
                             "record it again\n")


def _line_cuts(path: Path) -> list[str]:
    text = path.read_text()
    return [text[:i + 1] for i, char in enumerate(text) if char == "\n" and text[i + 1:].strip()]


@needs_hyperfine
@pytest.mark.parametrize("source", ["hyperfine", "googlebench.json", "pytest_benchmark.json", "pyperf"])
def test_json_exports_cut_at_any_line_end_are_refused(tmp_path, source):
    """The same class in the one-document formats: an export cut at any line end before its last is no
    longer JSON, so no record of it is read half (hyperfine, Google Benchmark, pytest-benchmark, pyperf)."""
    if source == "hyperfine":
        path = tmp_path / "h.json"
        subprocess.run(["hyperfine", "-N", "-r", "3", "--export-json", str(path), "true"], check=True,
                       capture_output=True)
    elif source == "pyperf":
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"version": "1.0", "metadata": {"name": "x", "unit": "second"}, "benchmarks": [
            {"runs": [{"values": [0.1, 0.2]}, {"values": [0.3]}]}]}, indent=2))
    else:
        path = DATA / source
    cuts = _line_cuts(path)
    assert len(cuts) > 5
    read_dataset(str(path))
    for number, text in enumerate(cuts, 1):
        cut = tmp_path / f"cut{number}.json"
        cut.write_text(text)
        with pytest.raises(DatasetError) as err:
            read_dataset(str(cut))
        assert "\n" not in str(err.value)


def test_perfctl_jsonl_cut_at_a_line_end_holds_whole_runs_only(tmp_path):
    """perfctl's JSON Lines: a run is one line, so a cut at a line end leaves whole runs (read) and a cut
    inside the last line is no JSON (refused, naming the line): no run is read half."""
    path = tmp_path / "s.jsonl"
    assert perfctl("stat", "-r", "3", "-o", str(path), "--", "true").returncode in (0, 1)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    assert len(lines) == 4  # machine line and 3 samples
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:3]))
    assert len(read_dataset(str(cut)).benchmarks["true"].metrics["wall-time"]) == 2
    cut.write_text("".join(lines[:3]) + lines[3][:len(lines[3]) // 2])
    with pytest.raises(DatasetError, match=r":4: not a perfctl sample line"):
        read_dataset(str(cut))


# --- 3. StatCC's cold share: StatStack's, one owner ----------------------------------------------------------

def _dying_in_bursts(n_hot=100, n_cold=2000, rounds=400, offset=0):
    """Lines first touched together, reused by a hot loop, and left together at the end (the exit): the
    dangling samples sit in one burst that short windows mostly miss (tests/test_i28_cache.py)."""
    hot = np.tile(np.arange(n_hot), rounds)
    sweep = np.arange(n_hot, n_hot + n_cold)
    return np.concatenate([sweep, hot, sweep]) + offset


def test_statcc_alone_is_the_statstack_curve_of_its_sample_and_exact_from_the_footprint_on():
    """One application alone in the shared cache: StatCC is StatStack's pooled curve (one cold share, one
    cap), and from the footprint on, exact LRU's cold ratio F/N. Before: the sample's dangling count, 0 to
    a few in these seeds for 2,100 cold lines in 44,100 accesses, so StatCC said ~0 where exact LRU says
    0.048."""
    lines = _dying_in_bursts()
    footprint, n = len(np.unique(lines)), len(lines)
    sizes = [50, 100, 1000, 2099, footprint, 4 * footprint]
    exact = lru.exact_mrc(lines, sizes).miss_ratios
    for seed in range(6):
        sample = reuse.hierarchical_sample(lines, reuse.settings_for_rate(0.05, n), seed=seed)
        app = statcc.Application("bursts", sample, 0.3)
        alone = [float(statcc.shared_miss_ratios([app], [1.0], size)[0]) for size in sizes]
        pooled = statstack.statstack(sample, sizes, per_window=False).miss_ratios
        assert alone == pytest.approx(pooled.tolist(), rel=1e-12), seed
        assert min(alone) >= footprint / n - 1e-15, (seed, alone)
        assert alone[-2:] == pytest.approx(exact[-2:].tolist(), rel=1e-12), seed
    co_run = statcc.solve([statcc.Application("a", sample, 0.3),
                           statcc.Application("b", reuse.hierarchical_sample(
                               _dying_in_bursts(offset=10_000), reuse.settings_for_rate(0.05, n), seed=1), 0.2)],
                          2 * footprint)
    assert co_run.converged  # two footprints fit: only cold misses, each application's own F/N
    assert co_run.miss_ratios == pytest.approx([footprint / n] * 2, rel=1e-12)


EXAMPLE_BIN = Path(__file__).resolve().parents[1] / "examples" / "bin"
EXAMPLES = [("sort", ["20000"]), ("hashtable", ["5000"]), ("matmul", ["40"]), ("matmul-O0", ["30"]),
            ("pagetouch", ["1500"]), ("spin", ["0.01"])]


@pytest.fixture(scope="module")
def traced_examples(tmp_path_factory):
    """Each example program traced once: its curve (exact LRU beside StatStack) and its reuse sample."""
    assert EXAMPLE_BIN.is_dir(), f"{EXAMPLE_BIN} is missing: deploy/setup.sh builds it"
    folder = tmp_path_factory.mktemp("examples")
    traced = {}
    for name, args in EXAMPLES:
        sample = folder / f"{name}.rds"
        result = perfctl("cache", "mrc", "--json", "--rds", str(sample), "--", str(EXAMPLE_BIN / name), *args,
                         timeout=900)
        assert result.returncode == 0, result.stderr
        traced[name] = (json.loads(result.stdout), sample)
    return traced


@pytest.mark.parametrize("name", [name for name, _ in EXAMPLES])
def test_statcc_tail_matches_exact_lru_on_every_example(traced_examples, name):
    """Every program of examples/bin, through `perfctl cache corun` alone: never below the cold ratio the
    trace proves, and from the footprint on exact LRU's miss ratio (before, on sort 20000: 0.00111 at
    256 KiB, ES uncapped, and the dangling share 0.00072 from 1 MiB on, against exact 0.00105)."""
    document, sample = traced_examples[name]
    footprint = document["footprint_lines"]
    cold = footprint / document["accesses"]
    for row in document["curve"]:
        result = perfctl("cache", "corun", "--json", "--cache", str(row["bytes"]), str(sample))
        assert result.returncode in (0, 3), result.stderr
        alone = json.loads(result.stdout)["applications"][0]["alone_miss_ratio"]
        assert alone >= cold - 1e-12, (row, alone)
        if row["lines"] >= footprint:
            assert alone == pytest.approx(row["exact_lru"], rel=1e-9), (row, alone)


def test_statcc_co_run_of_two_examples_has_only_cold_misses_when_both_fit(traced_examples):
    """sort and hashtable sharing a cache that holds both footprints: each misses only its own first
    touches, F_i/N_i, whatever the rates (the cap is the lines both hold together, Σ F − 1)."""
    (sort, sort_rds), (table, table_rds) = traced_examples["sort"], traced_examples["hashtable"]
    both = (sort["footprint_lines"] + table["footprint_lines"]) * 64
    result = perfctl("cache", "corun", "--json", "--cache", str(both), str(sort_rds), str(table_rds))
    assert result.returncode == 0, result.stderr
    ratios = [app["corun_miss_ratio"] for app in json.loads(result.stdout)["applications"]]
    assert ratios == pytest.approx([doc["footprint_lines"] / doc["accesses"] for doc in (sort, table)], rel=1e-9)


# --- 2. counts past 2^53 stay the integers they are, up to the verdict ----------------------------------------

# a / b = 1 + 10^-6 exactly, the upper edge of --margin 0.000001; neither is a float (spacing 128 near 10^18)
EDGE_B = 10**6 * (10**12 + 1)
EDGE_A = (10**6 + 1) * (10**12 + 1)


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("a, b, margin, verdict, beyond", [
    (2**64 - 1, 2**64 - 2, 0.05, "trivial difference", None),  # 1 + 5.4e-20: above 1, inside the band
    (2**64 - 2, 2**64 - 1, 0.05, "trivial difference", None),
    (2**53 + 1, 2**53, 0.05, "trivial difference", None),  # 1 + 1.1e-16, one float (2^53) before
    (2**64 - 1, 2**64 - 1, 0.05, "equivalence", None),
    (EDGE_A, EDGE_B, 1e-6, "trivial difference", None),  # on the closed band's edge: inside
    (EDGE_A - 1, EDGE_B, 1e-6, "trivial difference", None),
    (EDGE_A + 1, EDGE_B, 1e-6, "relevant difference", "faster"),  # one count past it: beyond
], ids=["u64", "u64-reversed", "2^53+1", "u64-same", "on-edge", "inside-edge", "past-edge"])
def test_constant_counts_past_2_53_are_judged_on_their_exact_ratio(a, b, margin, verdict, beyond, paired):
    """Constant samples' interval is their one ratio a/b, judged as the rational it is. Before, the counts
    became floats: 2^64 - 1 against 2^64 - 2 (and 2^53 + 1 against 2^53) were one float, ratio 1,
    "equivalence" for a ratio that excludes 1; a/b exactly on the band's edge read "relevant difference,
    faster", beyond a band documented as closed."""
    result = compare({("count", "page-faults"): [a] * 8}, {("count", "page-faults"): [b] * 8},
                     Parameters(margin=margin, paired=paired)).benchmarks[0]
    assert (result.verdict, result.sparc.beyond) == (verdict, beyond)
    low, high, estimate = result.sparc.low, result.sparc.high, result.sparc.tests.ratio
    assert low <= estimate <= high  # the estimate moved with its settled ends
    exact = Fraction(a, b)
    assert (low > 1) == (exact > 1) and (high < 1) == (exact < 1)


def _counted_file(path: Path, base: Path, value: int) -> Path:
    """``base`` (a real perfctl stat file) with every run's page-faults set to ``value``, new uuids."""
    lines = []
    for line in base.read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "sample":
            record["uuid"] = str(uuid.uuid4())
            for reading in record["readings"]:
                if reading["event"] == "page-faults":
                    reading["value"] = value
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def stat_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("stat") / "base.jsonl"
    result = perfctl("stat", "-r", "8", "-o", str(path), "--", "true")
    assert result.returncode in (0, 1), result.stderr
    document = [json.loads(line) for line in path.read_text().splitlines()]
    # page-faults is a software counter: every kernel perfctl runs on counts it (not a capability to probe)
    assert any(r["event"] == "page-faults" and r["status"] == "ok" for r in document[-1].get("readings", [])), document
    return path


def _row(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("true "))


def test_compare_of_perfctl_files_reads_u64_counts_exactly(stat_file, tmp_path):
    """The review's pair, through the reader: 2^64 - 1 against 2^64 - 2 page faults in every run. Before:
    `1.000× [1.000, 1.000] equivalence`; now a ratio above 1 (the ends printed with the digits that show it)
    and "trivial difference"; the same count on both sides stays equivalence."""
    a = _counted_file(tmp_path / "a.jsonl", stat_file, 2**64 - 1)
    b = _counted_file(tmp_path / "b.jsonl", stat_file, 2**64 - 2)
    assert read_dataset(str(a)).benchmarks["true"].metrics["page-faults"] == [2**64 - 1] * 8
    result = perfctl("compare", str(a), str(b), "--metric", "page-faults", "--width", "250")
    assert result.returncode == 0, result.stderr
    row = _row(result.stdout)
    assert "B faster, within ±5%" in row and "[1.0000000000000002, 1.0000000000000002]" in row, row
    same = perfctl("compare", str(a), str(_counted_file(tmp_path / "c.jsonl", stat_file, 2**64 - 1)),
                   "--metric", "page-faults", "--width", "250")
    assert same.returncode == 0 and "equivalent within ±5%" in _row(same.stdout), same.stdout
    edge = perfctl("compare", str(_counted_file(tmp_path / "e.jsonl", stat_file, EDGE_A)),
                   str(_counted_file(tmp_path / "f.jsonl", stat_file, EDGE_B)), "--metric", "page-faults",
                   "--margin", "0.000001", "--width", "250")
    assert edge.returncode == 0 and ", within ±0.0001%" in _row(edge.stdout), edge.stdout


def test_readers_keep_integer_counts_as_ints_and_times_as_floats(tmp_path):
    """perf stat -x, counts are digits: read as the int they spell (2^53 + 1 was the float 2^53); msec
    values and every time stay floats in ns."""
    path = tmp_path / "big.csv"
    path.write_text("# started on x\n\n9007199254740993,,page-faults,1000,100.00,,\n0.50,msec,task-clock,1000,"
                    "100.00,,\n# started on x\n\n9007199254740992,,page-faults,1000,100.00,,\n0.25,msec,task-clock,"
                    "1000,100.00,,\n")
    bench = read_dataset(str(path)).benchmarks["perf stat"]
    assert bench.metrics["page-faults"] == [2**53 + 1, 2**53]
    assert all(type(v) is int for v in bench.metrics["page-faults"])
    assert bench.metrics["task-clock"] == [500000.0, 250000.0]


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("margin", [0.05, 1e-6])
def test_intervals_of_large_counts_agree_with_intervals_computed_in_rationals(paired, margin):
    """Random samples of counts past 2^53 a few units apart, near 1 (margin 0.05) or near an edge of
    --margin 0.000001: every end of the interval lies on the side of 1 and of each edge that the interval
    computed in rationals (the k-th smallest and largest of the exact ratios; paired, of the Walsh products
    r_i r_j against t^2) has. Before, with the counts as floats, 91 of 400 (near 1) and 175 of 400 (near an
    edge) of such comparisons disagreed."""
    from perfctl.analysis.rank_tests import _center_critical_rank, _shift_critical_rank
    from perfctl.analysis.verdicts import band

    rng = np.random.default_rng(11 + paired + int(margin * 100))
    lower, upper = band(margin)
    for _ in range(60):
        n = int(rng.integers(6, 11))
        m = n if paired else int(rng.integers(6, 11))
        base = 10**6 * int(rng.choice([10**12 + 1, 2**50 + 3, 2**57 + 9]))
        b = [base + 10**6 * int(rng.integers(0, 3)) for _ in range(m)]
        scale = Fraction(1) if margin == 0.05 else (upper if rng.random() < 0.5 else lower)
        a = [int(v * scale) + int(rng.choice([0, 0, 1, -1, 2])) for v in (b if paired else [base] * n)]
        result = compare({("c", "page-faults"): a}, {("c", "page-faults"): b},
                         Parameters(margin=margin, paired=paired)).benchmarks[0]
        low, high, level = result.sparc.low, result.sparc.high, result.sparc.level
        if paired:
            ratios = [Fraction(x, y) for x, y in zip(a, b)]
            grid = sorted(ratios[i] * ratios[j] for i in range(n) for j in range(i, n))
            k, power = _center_critical_rank(n, (1 - level) / 2), 2
        else:
            grid = sorted(Fraction(x, y) for x in a for y in b)
            k, power = _shift_critical_rank(n, m, (1 - level) / 2), 1
        exact_low, exact_high = grid[k - 1], grid[len(grid) - k]
        sides = lambda lo, hi, p: (lo > 1, hi < 1, lo >= lower**p, lo > upper**p, hi <= upper**p,  # noqa: E731
                                   hi < lower**p)
        assert sides(Fraction(low), Fraction(high), 1) == sides(exact_low, exact_high, power), (a, b)


def test_sparc_tests_read_numpy_integer_counters_exactly():
    """A library caller's uint64 counters are the integers they hold, as the readers' ints are."""
    from perfctl.analysis.sparc import sparc_tests

    tests = sparc_tests(np.full(8, 2**64 - 1, dtype=np.uint64), np.full(8, 2**64 - 2, dtype=np.uint64))
    assert tests.ratio_low > 1 and tests.ratio_low <= tests.ratio <= tests.ratio_high
    assert sparc_tests([2**53] * 8, [2**53 + 1] * 8, paired=True).ratio_high < 1
