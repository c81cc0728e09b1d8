"""Issue 31: instability is said. analysis/stability.py's checks (their statistics against references, their
false alarms by simulation, their detection on simulated and on real disturbed runs), `perfctl stat`'s
warnings under its table and compare's per-side warnings; and stat's table, which never cuts a name or a
number at 80, 100 or 120 columns."""

from __future__ import annotations

import fcntl
import json
import math
import os
import pty
import random
import re
import statistics
import struct
import subprocess
import sys
import termios
import time

import pytest
from conftest import perfctl, read_records, read_terminal, sample_of
from rich.console import Console

from perfctl.analysis import stability
from perfctl.analysis.compare import compare
from perfctl.report.stat import QUIET, EventSummary, StatSummary, render

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _lognormal(rng, n, cv, level=16e6):
    sigma = math.sqrt(math.log(1 + cv * cv))
    return [level * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


# --- the statistics ---------------------------------------------------------------------------------------

def test_mann_kendall_s_and_p_match_their_definition():
    """S is the sum over i < j of sign(x_j - x_i); p the two-sided normal tail of (S - sign S) / sqrt(Var S)
    with Kendall's ties correction, against scipy's Kendall tau of the values against their order."""
    from scipy import stats

    rng = random.Random(5)
    for values in ([rng.randint(0, 6) for _ in range(40)], [rng.random() + i / 30 for i in range(25)],
                   [3, 1, 2, 2, 5, 4, 4, 4, 6, 7]):
        s, p = stability.mann_kendall(values)
        brute = sum((b > a) - (b < a) for i, a in enumerate(values) for b in values[i + 1:])
        assert s == brute
        # scipy's asymptotic tau-b test has the same variance of S, without the continuity correction
        _, scipy_p = stats.kendalltau(range(len(values)), values, method="asymptotic")
        ties = sum(t * (t - 1) * (2 * t + 5) for t in (values.count(v) for v in set(values)))
        sd = math.sqrt((len(values) * (len(values) - 1) * (2 * len(values) + 5) - ties) / 18)
        assert p == pytest.approx(math.erfc(max(abs(s) - 1, 0) / sd / math.sqrt(2)), rel=1e-12)
        assert math.erfc(abs(s) / sd / math.sqrt(2)) == pytest.approx(scipy_p, rel=1e-9)


def test_bimodality_coefficient_matches_scipys_moments():
    from scipy import stats

    rng = random.Random(2)
    values = [rng.gauss(0, 1) ** 3 for _ in range(30)]
    g1, g2 = stats.skew(values, bias=False), stats.kurtosis(values, bias=False)
    n = len(values)
    assert stability.bimodality_coefficient(values) == pytest.approx(
        (g1 ** 2 + 1) / (g2 + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))), rel=1e-12)
    assert stability.bimodality_coefficient([1.0] * 10) is None


def test_each_finding_says_its_number_and_its_remedy():
    rng = random.Random(11)
    steady = _lognormal(rng, 30, 0.02)
    two = steady[:10] + [1.6 * v for v in steady[10:20]] + steady[20:]
    (found,) = stability.check(two).findings
    assert found.kind == stability.BIMODAL and "10 of 30 at 1.6" in found.what and "Ashman's D" in found.what
    assert stability.INFO in found.advice

    slowing = [v * (1 + 0.3 * i / 30) for i, v in enumerate(steady)]
    (found,) = stability.check(slowing).findings
    assert found.kind == stability.DRIFT and "Mann-Kendall" in found.what and found.value < 0.01
    assert re.search(r"first 15 runs' median is 0\.\d\d× the last 15's", found.what)
    assert stability.QUIET_MACHINE in found.advice
    warming = [v * (1 + 0.3 * (30 - i) / 30) for i, v in enumerate(steady)]
    (found,) = stability.check(warming).findings
    assert found.kind == stability.DRIFT and any("(--warmup" in remedy for remedy in found.advice)

    middle = statistics.median(steady)
    cold_start = [2.0 * middle] + steady[1:]
    (found,) = stability.check(cold_start).findings
    assert found.kind == stability.OUTLIERS and found.what.startswith("1 of 30 runs is an outlier, up to 2.0")
    assert found.what.endswith(": the first run") and found.advice == ("leave out the slow first run (--warmup 1)",)
    stray = steady[:12] + [1.8 * middle, 0.7 * middle] + steady[14:]
    (found,) = stability.check(stray).findings
    assert found.what.startswith("2 of 30 runs are outliers, 0.70× to 1.80× the median, moving the mean by +1.")
    assert found.value == 2
    # one run 8% slow among runs 0.5% apart: an outlier by its Z-score, but it moves the mean by 0.3%
    tight = _lognormal(rng, 30, 0.005)
    slight = tight[:5] + [1.08 * statistics.median(tight)] + tight[6:]
    assert stability.check(slight).stable and stability.check(slight).outliers == 1
    assert found.advice == (stability.QUIET_MACHINE, stability.INFO)

    # pyperf's spread alone: wide, with no group, drift or outlier to explain it
    wide = _lognormal(random.Random(3), 30, 0.15)
    result = stability.check(wide)
    assert [f.kind for f in result.findings] == [stability.SPREAD], result
    assert "of the mean (pyperf warns from 10%)" in result.findings[0].what
    assert "-r " in result.findings[0].advice[0] and str(result.findings[0]).count(" — ") == 1


def test_what_is_not_judged():
    assert stability.check([1, 2]).judged == "too few runs"
    assert stability.check([0, 5, 3, 1, 7, 2, 9, 4, 1, 1]).judged == "a value of 0 or below: no ratio"
    # a small count spreads by its discreteness: context switches from 1 to 7 say nothing of the machine
    assert stability.check([1, 3, 7, 2, 2, 5, 1, 3, 2, 4]).judged == "small count"
    assert stability.check([16e6] * 20).stable  # identical runs: nothing to say
    with pytest.raises(ValueError, match="values: all must be finite"):
        stability.check([1.0, math.nan] * 5)
    with pytest.raises(ValueError, match="values: need a 1-D sequence"):
        stability.check([[1.0]] * 5)


@pytest.mark.parametrize("n, cv, shape, most", [
    (20, 0.02, "lognormal", 0.01), (20, 0.02, "normal", 0.01), (20, 0.05, "lognormal", 0.02),
    (10, 0.05, "normal", 0.05), (100, 0.05, "lognormal", 0.01)])
def test_stable_runs_rarely_draw_a_warning(n, cv, shape, most):
    """False alarms by simulation: 1000 stable series (n runs, the given CV) flag at most ``most`` of them
    (measured: 0%, 0%, 0.1%, 3.1% and 0%). Below pyperf's 10% no spread is said."""
    rng = random.Random(20261128)
    flagged = 0
    for _ in range(1000):
        values = (_lognormal(rng, n, cv) if shape == "lognormal"
                  else [16e6 * (1 + rng.gauss(0, cv)) for _ in range(n)])
        flagged += not stability.check(values).stable
    assert flagged / 1000 <= most, flagged


def test_disturbed_runs_are_found():
    """Detection by simulation: a block of runs at 1.5x (a job sharing the CPU) or a 20% drift in 30 runs
    at 2% CV are found in at least 95% of 300 series."""
    rng = random.Random(7)
    found = {"block": 0, "drift": 0}
    for _ in range(300):
        steady = _lognormal(rng, 30, 0.02)
        start = rng.randrange(0, 20)
        block = [v * (1.5 if start <= i < start + 10 else 1) for i, v in enumerate(steady)]
        found["block"] += not stability.check(block).stable
        found["drift"] += not stability.check([v * (1 + 0.2 * i / 30) for i, v in enumerate(steady)]).stable
    assert min(found.values()) >= 285, found


def test_large_series_are_judged_quickly():
    """100,000 runs (an agent's long job through compare): under 5 s each, the mixture fitted to a histogram
    and the trend to block medians (measured: ~0.4 s stable, ~1 s two groups)."""
    rng = random.Random(1)
    two = [v * (2 if rng.random() < 0.3 else 1) for v in _lognormal(rng, 100_000, 0.03)]
    start = time.perf_counter()
    assert [f.kind for f in stability.check(two).findings] == [stability.BIMODAL]
    assert time.perf_counter() - start < 5


# --- compare: each side's warnings ------------------------------------------------------------------------

def test_compare_attaches_each_sides_findings_to_the_benchmark():
    rng = random.Random(4)
    steady, other = _lognormal(rng, 30, 0.02), _lognormal(rng, 30, 0.02, level=17e6)
    disturbed = other[:8] + [1.8 * v for v in other[8:16]] + other[16:]
    result = compare({("sort", "wall-time"): steady, ("spin", "wall-time"): steady},
                     {("sort", "wall-time"): disturbed, ("spin", "wall-time"): other})
    sort, spin = result.benchmarks
    stable_lines = [w for w in spin.warnings if w.startswith(("A: ", "B: "))]
    assert not stable_lines, spin.warnings
    (line,) = [w for w in sort.warnings if w.startswith(("A: ", "B: "))]
    assert re.match(r"B: the runs fall into two groups: 8 of 30 at 1\.[78]\d× the median", line), line
    # the remedies apart, said once for every benchmark under compare's table
    assert "`perfctl info`" not in line and any("`perfctl info`" in remedy for remedy in sort.remedies), sort
    assert spin.remedies == ()


# --- stat: the table and its warnings, on real runs -------------------------------------------------------

@pytest.fixture(scope="module")
def sort_runs(programs, tmp_path_factory):
    """A real `perfctl stat -r 20 -- sort 100000` with the default events (tracepoints included)."""
    path = tmp_path_factory.mktemp("sort") / "sort.jsonl"
    result = perfctl("stat", "-r", "20", "-q", "-o", str(path), "--", str(programs / "sort"), "100000")
    assert result.returncode == 0, result.stderr
    summary = StatSummary()
    for record in read_records(path):
        if record["type"] == "sample":
            summary.add(sample_of(record))
    return summary


def _rendered(summary, width, verbosity=0) -> str:
    console = Console(width=width, color_system=None, highlight=False, emoji=False)
    with console.capture() as captured:
        render(summary, console, "perfctl stat: sort 100000  (20 runs, backend perf_event)", verbosity)
    return captured.get()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_stat_table_never_cuts_a_name_or_a_number(sort_runs, width):
    from perfctl.units import quantity

    text = _rendered(sort_runs, width)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width, text
    assert "…" not in text
    for entry in sort_runs.events.values():
        if not entry.values:
            continue
        d = entry.description
        row = next((line for line in lines if line.startswith(entry.label + " ")), None)
        assert row is not None, (entry.label, text)  # the name whole, on its row's line
        for number in (quantity(d.median, entry.unit), quantity(d.min, entry.unit), quantity(d.max, entry.unit)):
            assert number in row, (number, row)
    header = next(line for line in lines if line.startswith("event"))
    assert "note" not in header and " n " not in header  # empty, or said by the title: not columns
    if width >= 100:  # this machine's default events fit whole from 100 columns
        assert "stderr" in header and "mean" in header and "left out" not in text


def test_a_narrow_terminal_leaves_out_columns_and_says_so():
    """Counts of a PMU machine (instructions in the billions, the corrected row's long name): at 120 columns
    the whole table; at 100 stderr, then the mean, are left out and a line says so; narrower still, each
    event on its own lines with every statistic, none split."""
    from perfctl.units import count

    summary = StatSummary(runs=10)
    summary.outcomes["ok"] = 10
    for label, base in (("instructions:u corrected", 12_345_678_901), ("cycles:u", 9_876_543_210)):
        summary.events[label] = EventSummary(label, "count", "perf_event", values=[base + 7 * i for i in range(10)])
    assert "left out" not in _rendered(summary, 120)
    text = _rendered(summary, 100)
    header = text.splitlines()[1]
    assert "(stderr and mean left out to fit 100 columns" in text and "mean" not in header and "median" in header
    for width in (80, 40):
        narrow = _rendered(summary, width)
        lines = narrow.splitlines()
        assert max(map(len, lines)) <= width and "left out" not in narrow, narrow
        assert "instructions:u corrected" in lines and "cycles:u" in lines
        for statistic in ("median 12,345,678,932.50", "mean 12,345,678,932.50", "CV 0.00%",
                          f"min {count(12_345_678_901)}", f"max {count(12_345_678_964)}", "stderr 6.70"):
            assert statistic in narrow, (statistic, narrow)


def test_notes_go_under_the_table(sort_runs):
    summary = StatSummary(runs=10)
    summary.events["cycles:u"] = EventSummary("cycles:u", "count", "perf_event", values=[1e9 + i for i in range(10)],
                                              multiplexed=3)
    text = _rendered(summary, 80)
    assert "cycles:u: scaled: multiplexed in 3 runs" in text
    timer = sort_runs.events.get("timer-interrupts")
    if timer is not None and timer.source:  # how it is counted is the method: -v says it
        assert timer.source not in _rendered(sort_runs, 100)
        assert f"timer-interrupts: counts {timer.source}" in _rendered(sort_runs, 100, verbosity=1)


def _stat_under_pty(columns: int, *args: str) -> str:
    """`perfctl stat` on a terminal of ``columns`` columns (a pty: stdout is a tty), its screen output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    process = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "--no-progress", *args], stdin=slave,
                               stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    written = read_terminal(master)
    os.close(master)
    assert process.wait(timeout=120) == 0
    return ANSI.sub("", written.decode()).replace("\r\n", "\n")


@pytest.mark.parametrize("columns", [80, 100])
def test_stat_on_a_terminal_fits_it(programs, columns):
    text = _stat_under_pty(columns, "-r", "20", "--", str(programs / "sort"), "100000")
    lines = text.splitlines()
    assert max(map(len, lines)) <= columns, text
    assert "…" not in text
    for name in ("wall-time", "page-faults", "task-clock"):
        assert any(line.startswith(name + " ") for line in lines), text
    assert re.search(r"^wall-time +\d+\.\d{3} ms +\d+\.\d{3} ms ", text, re.M), text


def test_stat_says_nothing_of_a_stable_counter(programs, tmp_path):
    """pagetouch's page faults are one per page it maps, whatever else runs: a large count (judged: not a
    small one), stable on a busy machine, and nothing is said of it. (Its wall time, and even CPU time on a
    loaded machine, may rightly draw a warning: spin's task-clock showed outliers of 1.2x at load 6.)"""
    out = tmp_path / "faults.jsonl"
    result = perfctl("stat", "-r", "20", "-e", "page-faults", "--no-progress", "-o", str(out), "--",
                     str(programs / "pagetouch"), "12000")
    assert result.returncode == 0, result.stderr
    faults = [r["readings"][0]["value"] for r in read_records(out) if r["type"] == "sample"]
    assert min(faults) >= 12000 and stability.check(faults).judged is None
    assert "unstable page-faults" not in result.stdout, result.stdout


SLOW_GROUP = r"(?:[7-9]|1[0-3])"  # the 10 slow runs' group as the warning counts it, give or take load


def test_stat_warns_of_a_disturbed_measurement(programs, tmp_path):
    """The first 10 of 30 runs sort 400,000 numbers, the others 100,000 (real runs of sort, through sh: a
    cold start made certain, about 4.5x the time). A job sharing the CPU was no sure disturbance here: the
    scheduler shares a CPU between cgroups, and busy loops pinned beside the benchmark slowed it 1.0x to 3x
    with the machine's other load. stat names it under its table (two groups, a drift: whichever the runs
    show) with the remedies, -q hides it, and compare gives A's warning."""
    out, count = tmp_path / "disturbed.jsonl", tmp_path / "count"
    script = ('n=$(cat "$1" 2>/dev/null || echo 0); echo $((n + 1)) > "$1"; '
              'if [ "$n" -lt 10 ]; then exec "$2" 400000; else exec "$2" 100000; fi')
    result = perfctl("stat", "-r", "30", "-e", "task-clock", "--no-progress", "--name", "sort", "-o", str(out), "--",
                     "/bin/sh", "-c", script, "sh", str(count), str(programs / "sort"))
    assert result.returncode == 0, result.stderr
    stdout = result.stdout
    walls = [r["wall_ns"] for r in read_records(out) if r["type"] == "sample"]
    assert statistics.median(walls[:10]) > 2 * statistics.median(walls[10:]), walls  # the first runs were slower
    # 10 of 30 on a quiet machine; under load a run of the fast 20 slowed as much joins the slow group (or
    # a slow one is sped past the cut), so the group's count is the 10 give or take a few
    assert re.search(rf"^unstable wall-time: (the runs fall into two groups: {SLOW_GROUP} of 30|the runs drift)",
                     stdout, re.M), stdout
    assert "The result may be unstable" in stdout and "`perfctl info`" in stdout
    summary = StatSummary()
    for record in read_records(out):
        if record["type"] == "sample":
            summary.add(sample_of(record))
    assert "unstable" not in _rendered(summary, 100, verbosity=QUIET)  # -q: pyperf's --quiet hides them
    other = tmp_path / "other.jsonl"
    assert perfctl("stat", "-r", "10", "-q", "-e", "task-clock", "-o", str(other), "--", str(programs / "sort"),
                   "100000").returncode == 0
    result = perfctl("compare", str(out), str(other), "--metric", "wall-time", "--format", "json")
    assert result.returncode in (0, 3, 4), result.stderr  # 4: A disturbed, no verdict
    (row,) = json.loads(result.stdout)["benchmarks"]
    warnings = row["warnings"] if isinstance(row["warnings"], str) else "; ".join(row["warnings"])
    assert re.search(rf"A: (the runs fall into two groups: {SLOW_GROUP} of 30|the runs drift)", warnings), warnings


def test_at_most_four_findings_unless_verbose():
    """Five events of two groups each: four lines and "(1 more: -v lists them)"; -v lists all five; the
    remedies are said once."""
    rng = random.Random(9)
    summary = StatSummary(runs=30)
    summary.outcomes["ok"] = 30
    for k in range(5):
        steady = _lognormal(rng, 30, 0.02)
        label = f"event-{k}"
        summary.events[label] = EventSummary(label, "ns", "perf_event",
                                             values=steady[:10] + [1.6 * v for v in steady[10:20]] + steady[20:])
    text = _rendered(summary, 100)
    assert text.count("unstable event-") == 4 and "(1 more: -v lists them)" in text
    assert text.count("`perfctl info`") == 1
    assert _rendered(summary, 100, verbosity=1).count("unstable event-") == 5
