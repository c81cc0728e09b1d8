"""`perfctl compare` as users run it: on files written by perfctl, hyperfine, pyperf and perf stat, with its
outputs, exit codes and every kind of bad input."""

import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import jsonl_file, one_line, perfctl, sample_records
from fleet import perfctl_command

from perfctl.report import NORMAL, VERBOSE


def _hyperfine_file(path, commands):
    path.write_text(json.dumps({"results": [{"command": c, "times": t, "exit_codes": [0] * len(t)}
                                            for c, t in commands.items()]}))
    return str(path)


@pytest.fixture(scope="module")
def builds(tmp_path_factory, programs):
    """Two real measurements with perfctl stat: pagetouch of 2000 pages twice (same work), and pagetouch of
    4000 pages (twice the faults) under the same benchmark name."""
    out = tmp_path_factory.mktemp("builds")
    files = {}
    for label, pages in (("a", 2000), ("b", 2000), ("c", 4000)):
        path = out / f"{label}.jsonl"
        result = perfctl("stat", "-r", "12", "--name", "pagetouch", "-e", "page-faults,task-clock", "-o",
                         str(path), "--", str(programs / "pagetouch"), str(pages))
        assert result.returncode == 0, result.stderr
        files[label] = str(path)
    return files


def test_equal_work_is_equivalent_and_exits_0(builds):
    result = perfctl("compare", builds["a"], builds["b"], "--metric", "page-faults")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("No change: the benchmark is equivalent within ±5%.")
    assert "metrics chosen with --metric" not in result.stdout
    assert "Exit 0: no slowdown of B" in " ".join(result.stdout.split())
    verbose = perfctl("compare", builds["a"], builds["b"], "--metric", "page-faults", "-v").stdout
    assert "ratio = A/B" in verbose and "Bonferroni" in verbose and "equivalence" in verbose


def test_relevant_slowdown_exits_3_and_json_says_so(builds):
    result = perfctl("compare", builds["a"], builds["c"], "--metric", "page-faults", "--format", "json")
    assert result.returncode == 3, result.stderr
    document = json.loads(result.stdout)
    row = document["benchmarks"][0]
    assert row["verdict"] == "relevant difference" and row["median_protocol"] == "B slower"
    assert 0.45 < row["ratio_a_over_b"] < 0.55  # B takes twice the faults
    assert document["relevant_slowdowns"] == ["pagetouch"]
    assert document["parameters"]["correction"] == "holm"


def test_default_metric_is_stated(builds):
    result = perfctl("compare", builds["a"], builds["b"], "--format", "json")
    document = json.loads(result.stdout)
    if document["metrics"] == ["task-clock"]:
        assert "instructions, cycles not measured on both sides" in document["metric_choice"]
    else:
        assert document["metrics"] == ["instructions"]


def test_csv_and_markdown(builds):
    rows = list(csv.DictReader(io.StringIO(perfctl("compare", builds["a"], builds["c"], "--metric",
                                                   "page-faults", "--format", "csv").stdout)))
    assert rows[0]["benchmark"] == "pagetouch" and rows[0]["verdict"] == "relevant difference"
    markdown = perfctl("compare", builds["a"], builds["c"], "--metric", "page-faults", "--format", "markdown").stdout
    assert "| pagetouch | page-faults |" in markdown


@pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH")
def test_real_hyperfine_exports(tmp_path):
    for name, command in (("a", "/bin/true"), ("b", "/bin/sleep 0.02")):
        subprocess.run(["hyperfine", "-N", "--runs", "10", "--export-json", str(tmp_path / f"{name}.json"), command],
                       check=True, capture_output=True)
    result = perfctl("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert result.returncode == 3, result.stdout + result.stderr  # sleeping 20 ms is a relevant slowdown
    assert "one benchmark per file" in result.stdout and "wall-time" in result.stdout


def test_real_pyperf_files(tmp_path):
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-m", "pyperf", "command", "--quiet", "-p", "4", "-n", "3", "-w", "1",
                        "--name", "true", "-o", str(tmp_path / f"{name}.json"), "--", "/bin/true"],
                       check=True, capture_output=True)
    result = perfctl("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "json")
    assert result.returncode in (0, 3), result.stderr
    document = json.loads(result.stdout)
    assert document["format"] == "pyperf" and document["benchmarks"][0]["n_a"] == 4  # one sample per process


@pytest.mark.skipif(shutil.which("perf") is None, reason="probe: perf(1) not on PATH (linux-perf)")
def test_real_perf_stat_csv(tmp_path, programs):
    for name, pages in (("old", 1000), ("new", 3000)):
        for _ in range(6):
            subprocess.run(["perf", "stat", "-x,", "-o", str(tmp_path / f"{name}.csv"), "--append", "-e",
                            "page-faults", "--", str(programs / "pagetouch"), str(pages)], check=True)
    result = perfctl("compare", str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--metric", "page-faults")
    assert result.returncode == 3 and "perf stat" in result.stdout, result.stdout + result.stderr  # one name a side


def test_benchmarks_on_one_side_are_listed(tmp_path):
    a = _hyperfine_file(tmp_path / "a.json", {"x": [1.0, 1.1, 0.9, 1.0, 1.05, 0.95], "only-a": [1.0, 1.0]})
    b = _hyperfine_file(tmp_path / "b.json", {"x": [1.0, 1.1, 0.9, 1.0, 1.05, 0.95], "only-b": [2.0, 2.0]})
    result = perfctl("compare", a, b, "--format", "json")
    document = json.loads(result.stdout)
    assert document["only_a"] == ["only-a"] and document["only_b"] == ["only-b"]


@pytest.mark.parametrize("values, reason", [
    ([1.0], "one run on a side"),
    ([0.0, 0.0, 0.0], "values <= 0"),
    ([-1.0, -2.0, -3.0], "values <= 0"),
])
def test_cannot_conclude_cases_exit_4_with_the_reason(tmp_path, values, reason):
    a = _hyperfine_file(tmp_path / "a.json", {"x": values})
    b = _hyperfine_file(tmp_path / "b.json", {"x": values})
    result = perfctl("compare", a, b)
    assert result.returncode == 4 and "cannot conclude" in result.stdout and reason in result.stdout


def test_all_values_equal_is_equivalence(tmp_path):
    a = _hyperfine_file(tmp_path / "a.json", {"x": [2.0] * 12})
    b = _hyperfine_file(tmp_path / "b.json", {"x": [2.0] * 12})
    result = perfctl("compare", a, b, "--format", "json")
    assert result.returncode == 0 and json.loads(result.stdout)["benchmarks"][0]["verdict"] == "equivalence"


def test_bad_files_and_options(tmp_path, builds):
    good = _hyperfine_file(tmp_path / "good.json", {"x": [1.0, 1.1, 1.2]})
    empty = tmp_path / "empty.json"
    empty.write_text("")
    nan = tmp_path / "nan.json"
    nan.write_text('{"results": [{"command": "x", "times": [1.0, NaN]}]}')
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("hello world\n")
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text(open(builds["a"]).read()[:-30])
    other = _hyperfine_file(tmp_path / "other.json", {"y": [1.0, 1.1]})
    other2 = _hyperfine_file(tmp_path / "other2.json", {"y": [1.0, 1.1], "z": [1.0, 2.0]})
    cases = [
        ((str(tmp_path / "missing.json"), good), "No such file"),
        ((str(empty), good), "empty file"),
        ((str(nan), good), "non-finite"),
        ((str(garbage), good), "unknown format"),
        ((str(truncated), builds["b"]), "not a perfctl sample line"),
        ((builds["a"], good), "compare files written by the same tool"),
        ((good, str(other2)), "no benchmark in common"),
        ((good, other, "--metric", "cycles"), "not measured on both sides"),
        ((good, other, "--alpha", "1.5"), "between 0 and 1"),
        ((good, other, "--input-format", "yaml"), "invalid choice"),
    ]
    for args, message in cases:
        result = perfctl("compare", *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in one_line(result), (args, result.stderr)


def test_readmes_main_job_compares_two_builds():
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    # the perfctl of the environment under test (.venv, or .venv-latest for an unpinned run)
    environment = {**os.environ, "PERFCTL": os.path.join(os.path.dirname(sys.executable), "perfctl")}
    result = subprocess.run([str(root / "examples/compare-builds.sh"), "--format", "json"], capture_output=True,
                            text=True, timeout=300, env=environment)
    # -O2 is not slower than -O0; sort and hashtable are the same program on both sides (noise may still show a
    # relevant difference there: the exit code is 0 or 3)
    assert result.returncode in (0, 3), result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert {row["benchmark"] for row in document["benchmarks"]} == {"matmul", "sort", "hashtable"}
    row = next(row for row in document["benchmarks"] if row["benchmark"] == "matmul")
    assert (row["verdict"], row["median_protocol"]) == ("relevant difference", "B faster")
    assert row["ratio_a_over_b"] > 1.5
    report = root / "examples/results/report.html"
    assert "HTML report written to examples/results/report.html" in result.stderr and report.stat().st_size > 0


def _render_at(width: int, a: str, b: str, fmt: str = "table", verbosity: int = NORMAL) -> str:
    from rich.console import Console

    from perfctl.analysis.compare import Parameters
    from perfctl.formats import read_dataset
    from perfctl.report import compare as compare_report
    from perfctl.report import write

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, highlight=False, color_system=None)
    write(compare_report.compare_report(read_dataset(a), read_dataset(b), None, Parameters(), ("A", "B"),
                                        verbosity=verbosity), fmt, console)
    return buffer.getvalue()


def _tables(text: str) -> list[list[str]]:
    """The lines of each table (a 'benchmark' header line to the next blank line)."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("benchmark "):
            current = []
            tables.append(current)
        elif current is not None and not line.strip():
            current = None
        elif current is not None:
            current.append(line)
    return tables


def test_compare_table_shows_units_and_fits_100_columns(tmp_path):
    """Times in ms/µs, the ratio as '1.045× [lo, hi]', each benchmark's row on one line at 100 columns (the
    details table too); the JSON keeps raw seconds-turned-nanoseconds and names the unit."""
    slow = [0.0121, 0.0125, 0.0119, 0.0122, 0.0124, 0.0120, 0.0123, 0.0121, 0.0122, 0.0126]
    fast = [0.000810, 0.000805, 0.000820, 0.000812, 0.000808, 0.000815, 0.000811, 0.000809, 0.000813, 0.000806]
    a = _hyperfine_file(tmp_path / "a.json", {"build-step": slow, "link": fast})
    b = _hyperfine_file(tmp_path / "b.json", {"build-step": [v * 0.9 for v in slow], "link": fast})
    text = _render_at(100, a, b, verbosity=VERBOSE)
    tables = _tables(text)
    # the verdict table and the two details tables (-v): a rule, then one line per benchmark (a wrapped cell would
    # add a line that starts blank)
    assert [[line.split()[0][:1] for line in table] for table in tables] == [["─", "b", "l"]] * 3, text
    rows = tables[0][1:]
    build, link = rows[0].split(), rows[1].split()
    assert build[2:6] == ["12.200", "ms", "10.980", "ms"], rows[0]  # medians of 12.2 ms and 0.9 x that
    assert link[2:6] == ["810.500", "µs", "810.500", "µs"], rows[1]
    assert build[6] == "1.111×" and build[7].startswith("[") and build[8].endswith("]"), rows[0]
    assert "e+0" not in text and "e-0" not in text
    document = json.loads(_render_at(100, a, b, "json"))
    row = document["benchmarks"][0]
    assert document["units"] == {"wall-time": "ns"}
    assert row["median_a"] == pytest.approx(12.2e6) and isinstance(row["median_a"], float)
    assert row["ratio_a_over_b"] == pytest.approx(1 / 0.9)


def test_long_names_fold_but_numbers_and_verdicts_stay_whole_at_100_columns(tmp_path):
    """Names of 30-40 characters (hyperfine names commands by their command line) at 100 columns: every
    line fits, and no number, interval or verdict is cut across lines; only the names fold."""
    names = ["./build/release/server --bench read-heavy", "./build/release/server --bench write-heavy"]
    slow = [0.0121, 0.0125, 0.0119, 0.0122, 0.0124, 0.0120, 0.0123, 0.0121, 0.0122, 0.0126]
    a = _hyperfine_file(tmp_path / "a.json", {name: slow for name in names})
    b = _hyperfine_file(tmp_path / "b.json", {name: [v * 0.93 for v in slow] for name in names})
    text = _render_at(100, a, b)
    assert all(len(line) <= 100 for line in text.splitlines()), text
    verdicts = _tables(text)[0]
    assert sum(line.rstrip().endswith("B faster") for line in verdicts) == 2, text
    assert sum("1.075× [" in line and "]" in line for line in verdicts) == 2, text


def test_human_units():
    from perfctl import units

    assert [units.quantity(v, "ns") for v in (37_790_000, 812_517, 950, 2.5e9)] == [
        "37.790 ms", "812.517 µs", "950 ns", "2.500 s"]
    assert units.quantity(0.0125, "s") == "12.500 ms" and units.quantity(1_234_567, "count") == "1,234,567"
    assert units.quantity(float("nan"), "ns") == "-" and units.quantity(2.5, "count") == "2.50"
    assert units.ratio(1.0449, 1.0241, 1.0722) == "1.045× [1.024, 1.072]" and units.ratio(None) == "-"
    assert units.interval(44_568_000, 47_456_000, "ns") == "[44.568, 47.456] ms"
    assert units.interval(950, 1_200, "ns") == "[950 ns, 1.200 µs]" and units.interval(None, 5, "count") == "[…, 5]"


def _read_off(low, high, margin):
    """SPARC's Table I read off an interval (docs/statistics.md)."""
    if low is None or high is None:
        return "indeterminate"
    difference = high < 1 or low > 1
    equivalence = 1 - margin <= low and high <= 1 + margin
    return {(True, False): "relevant difference", (True, True): "trivial difference",
            (False, True): "equivalence", (False, False): "indeterminate"}[difference, equivalence]


def _spread(center, n=20, cv=0.004, seed=0):
    import numpy as np

    return [float(v) for v in center * np.exp(np.random.default_rng(seed).normal(0, cv, n))]


def test_every_verdict_reads_off_the_interval_printed_beside_it(tmp_path):
    """Issue 14 point 1: the default family's intervals are the ones the verdicts read from, at the level
    the statement names; the sparc family says its intervals are not adjusted."""
    a = _hyperfine_file(tmp_path / "a.json", {f"b{k}": _spread(0.010, seed=k) for k in range(6)})
    b = _hyperfine_file(tmp_path / "b.json", {f"b{k}": _spread(0.010 * f, seed=10 + k)
                                              for k, f in enumerate((1.0, 1.0, 1.01, 1.03, 1.08, 0.9))})
    done = perfctl("compare", a, b, "--format", "json")
    document = json.loads(done.stdout)
    assert document["interval_level"] == pytest.approx(1 - 0.05 / 6) and document["family_size"] == 6
    for row in document["benchmarks"]:
        assert row["interval_level"] == document["interval_level"]
        assert row["verdict"] == _read_off(row["ratio_low"], row["ratio_high"], 0.05), row
    text = perfctl("compare", a, b, "-v").stdout
    assert "every verdict reads off its A/B interval, at 99.17%" in " ".join(text.split())
    assert "A/B [99.17%]" in text
    assert "intervals at 99.17% (Bonferroni over 6: 95% together)" in " ".join(perfctl("compare", a, b).stdout.split())
    sparc = " ".join(perfctl("compare", a, b, "--family", "sparc", "-v").stdout.split())
    assert "--family sparc" in sparc and "not adjusted: a verdict may not read off its interval" in sparc
    sparc = " ".join(perfctl("compare", a, b, "--family", "sparc").stdout.split())
    assert "Verdicts from SPARC's tests at alpha 0.05" in sparc and "intervals at 95%, not adjusted" in sparc


def test_fail_on_chooses_which_slowdown_exits_3(tmp_path):
    """Issue 14 point 2: a 5% slowdown, shown but not shown beyond the 5% margin (its interval crosses the
    band's edge), is a relevant difference: it fails under --fail-on relevant (the default) and passes under
    --fail-on beyond; a 20% one fails both."""
    a = _hyperfine_file(tmp_path / "a.json", {"x": _spread(0.010, seed=1, cv=0.01)})
    small = _hyperfine_file(tmp_path / "small.json", {"x": _spread(0.0105, seed=2, cv=0.01)})
    large = _hyperfine_file(tmp_path / "large.json", {"x": _spread(0.012, seed=3)})
    row = json.loads(perfctl("compare", a, small, "--format", "json").stdout)["benchmarks"][0]
    assert row["verdict"] == "relevant difference" and row["margin"] == "crosses" and row["beyond"] is None, row
    assert perfctl("compare", a, small).returncode == 3
    assert perfctl("compare", a, small, "--fail-on", "beyond").returncode == 0
    row = json.loads(perfctl("compare", a, large, "--format", "json").stdout)["benchmarks"][0]
    assert row["margin"] == "beyond" and row["beyond"] == "slower"
    assert perfctl("compare", a, large, "--fail-on", "beyond").returncode == 3
    quiet = perfctl("compare", a, large, "--fail-on", "beyond", "-q")
    assert quiet.stdout.startswith("slowdown of B beyond the margin: x")


def test_one_benchmark_reads_without_contradiction(tmp_path):
    """Issue 14 points 4 and 5: with one benchmark the overall test says why it does not apply, every ratio
    says what it is, and the mean protocol's column is only under --verbose."""
    a = _hyperfine_file(tmp_path / "a.json", {"x": _spread(0.010, seed=1, cv=0.01)})
    b = _hyperfine_file(tmp_path / "b.json", {"x": _spread(0.0105, seed=2, cv=0.01)})
    default = " ".join(perfctl("compare", a, b).stdout.split())
    # one benchmark: no overall section, no proportion of one, no legend; the headline and the row say it
    assert "overall" not in default and "proportion" not in default and "SPARC" not in default, default
    text = " ".join(perfctl("compare", a, b, "-v").stdout.split())
    assert "Hodges-Lehmann estimate (the median of all A_i/B_j)" in text
    assert "weighted speedups: of medians" in text and "sum of A's medians / sum of B's" in text
    assert "not applied" in text and "p = 1" not in text
    assert "relevant difference: the interval excludes 1 and is not inside the margin band" in text
    assert " mean " not in perfctl("compare", a, b).stdout
    assert "Speedup-Test's protocols" in perfctl("compare", a, b, "-v").stdout


def test_nothing_judged_levels_and_legends_say_what_holds(tmp_path):
    """From the adversarial test of issue 14: a report of benchmarks none of which can be judged is written
    (exit 4), and the statement does not name the other family; a level near 1 is never rounded to 100%;
    under --family sparc the legend says the verdicts come from the tests, not from the interval."""
    from perfctl.report.compare import percent

    a = _hyperfine_file(tmp_path / "a.json", {"x": [0.01]})
    b = _hyperfine_file(tmp_path / "b.json", {"x": [0.02]})
    out = tmp_path / "r.html"
    assert perfctl("report", a, b, "-o", str(out)).returncode == 4 and out.stat().st_size > 0
    text = " ".join(perfctl("compare", a, b, "-v").stdout.split())
    assert "no benchmark could be judged, so no interval is adjusted" in text and "--family sparc" not in text
    assert "Exit 4: no benchmark could be judged." in " ".join(perfctl("compare", a, b).stdout.split())
    assert [percent(v) for v in (0.95, 1 - 0.05 / 3, 1 - 0.001 / 50, 0.9999999)] == [
        "95%", "98.33%", "99.998%", "99.99999%"]
    c = _hyperfine_file(tmp_path / "c.json", {"x": _spread(0.010, seed=1)})
    d = _hyperfine_file(tmp_path / "d.json", {"x": _spread(0.0102, seed=2)})
    sparc = " ".join(perfctl("compare", c, d, "--family", "sparc", "-v").stdout.split())
    assert "verdicts from the paper's tests (SPARC Table I on the adjusted p-values), not from the interval" in sparc


@pytest.mark.parametrize("option, value, message", [
    ("--precision", "1e-300", "precision: must be between 1e-06 and 1, got 1e-300"),
    ("--proportion", "1e-300", "proportion: must be between 1e-06 and 0.999999, got 1e-300"),
])
def test_local_compare_refuses_a_parameter_out_of_range_in_one_line(tmp_path, option, value, message):
    samples = tmp_path / "a.jsonl"
    measured = subprocess.run(perfctl_command("stat", "-r", "3", "-e", "task-clock", "-o", str(samples), "--",
                                              "/bin/true"), capture_output=True, text=True, timeout=60)
    assert measured.returncode == 0, measured.stderr
    result = subprocess.run(perfctl_command("compare", str(samples), str(samples), option, value),
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr.strip()) == (2, f"perfctl compare: {message}")


def test_compare_output_that_cannot_be_written_is_one_line(tmp_path):
    path = jsonl_file(tmp_path / "a.jsonl", sample_records())
    other = jsonl_file(tmp_path / "b.jsonl", sample_records(base=2000))
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "perfctl", "compare", path, other], stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    assert "No space left on device" in one_line(result, "perfctl", code=2)


def _suite(tmp_path):
    """A: four benchmarks; B: parse 30% slower, link 20% faster, lex the same, scan too noisy to tell."""
    base = {name: _spread(0.010, seed=k, cv=0.005) for k, name in enumerate(("parse", "link", "lex"))}
    base["scan"] = _spread(0.010, n=6, seed=9, cv=0.08)
    other = {"parse": _spread(0.013, seed=11, cv=0.005), "link": _spread(0.008, seed=12, cv=0.005),
             "lex": _spread(0.010, seed=13, cv=0.005), "scan": _spread(0.0104, n=6, seed=14, cv=0.08)}
    return _hyperfine_file(tmp_path / "a.json", base), _hyperfine_file(tmp_path / "b.json", other)


def test_every_output_leads_with_what_changed_and_why_the_exit_code(tmp_path):
    """Issue 31: the verdict carries its direction in words in every format, and one sentence leads: what
    changed, by how much, with what confidence, why the exit code is 3."""
    a, b = _suite(tmp_path)
    table = perfctl("compare", a, b, "--width", "200")
    assert table.returncode == 3, table.stderr
    headline = " ".join(table.stdout.split("\n\n")[0].split())
    assert headline.startswith("B slower on 1 of 4 benchmarks: parse 0.7"), headline
    assert "beyond ±5%; B faster on 1: link 1.2" in headline and "1 equivalent within ±5%" in headline, headline
    assert "1 no difference shown" in headline and "The intervals hold together with 95% confidence." in headline
    assert headline.endswith("Exit 3: parse slower (--fail-on relevant)."), headline
    findings = {line.split()[0]: line for line in table.stdout.split("\n\n")[1].splitlines()[2:]}
    assert findings["parse"].rstrip().endswith("B slower beyond ±5%"), table.stdout
    assert findings["link"].rstrip().endswith("B faster beyond ±5%") and "equivalent within ±5%" in findings["lex"]
    assert "no difference shown" in findings["scan"]
    document = json.loads(perfctl("compare", a, b, "--format", "json").stdout)
    assert document["headline"] == headline and document["schema"].startswith("perfctl.compare/")
    assert {row["benchmark"]: row["finding"] for row in document["benchmarks"]} == {
        "parse": "B slower beyond ±5%", "link": "B faster beyond ±5%", "lex": "equivalent within ±5%",
        "scan": "no difference shown"}
    markdown = perfctl("compare", a, b, "--format", "markdown").stdout
    assert markdown.startswith(f"**{headline}**\n"), markdown
    rows = list(csv.DictReader(io.StringIO(perfctl("compare", a, b, "--format", "csv").stdout)))
    assert [row["finding"] for row in rows] == [document_row["finding"] for document_row in document["benchmarks"]]
    passed = perfctl("compare", a, b, "--fail-on", "beyond", "--benchmark", "lex", "--benchmark", "link")
    assert passed.returncode == 0 and "Exit 0: no slowdown of B beyond the margin (--fail-on beyond)." in \
        " ".join(passed.stdout.split())


def test_an_open_verdict_says_how_many_runs_would_settle_it(tmp_path):
    a, b = _suite(tmp_path)
    said = " ".join(perfctl("compare", a, b).stdout.split())
    found = re.search(r"scan: no difference shown yet: about (\d+) runs a side could settle it, if they "
                      r"spread as these 6 do \(an estimate\)", said)
    assert found and int(found.group(1)) > 6, said
    from perfctl.analysis.verdicts import runs_to_settle

    # an interval twice as wide as the distance to the nearer edge needs four times the runs
    assert runs_to_settle(1.0, 0.9, 1 / 0.9, 10, 0.05) == math.ceil(10 * (math.log(1 / 0.9) / math.log(1.05)) ** 2)
    assert runs_to_settle(1.001, 0.5, 2.0, 10, 0.05) is None  # more than 100 times the runs: not worth saying
    # an uneven interval: the end facing 1 decides, and never fewer runs than were taken
    assert runs_to_settle(1.2, 0.99, 1.25, 20, 0.05) == 23 and runs_to_settle(1.3, 0.999, 1.31, 20, 0.05) == 21


def test_notes_that_differ_only_in_the_benchmark_are_said_once():
    from perfctl.report.compare import collapsed

    notes = [f"A and B: {name}: left out 4 warmup runs" for name in ("matmul", "sort", "hashtable")]
    notes += ["A: machine box-a has never been audited (perfctl audit)"] * 6
    assert collapsed(notes, ["matmul", "sort", "hashtable"]) == [
        "A and B: matmul, sort, hashtable: left out 4 warmup runs",
        "A: machine box-a has never been audited (perfctl audit)"]
