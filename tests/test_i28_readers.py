"""Issue 28, section 3: readers that mean what they say. Real files made by the real tools: Google Benchmark
rate counters are not compared as costs, detection goes by structure and names what an unknown file looks
like, and a perf stat file cut inside its last line is refused, naming the line."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import perfctl

from perfctl.formats import WALL_TIME, DatasetError, detect, read_dataset

needs_benchmark = pytest.mark.skipif(shutil.which("g++") is None or not Path("/usr/include/benchmark").is_dir(),
                                     reason="probe: g++ or libbenchmark-dev missing (deploy/setup.sh installs them)")
needs_hyperfine = pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH")
needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="probe: perf(1) not on PATH (linux-perf)")
READS = "perfctl reads perfctl JSON Lines, hyperfine, pyperf, Google Benchmark or pytest-benchmark JSON"

# --- Google Benchmark: a rate is not a cost ---

RATE_SOURCE = r"""#include <benchmark/benchmark.h>
#include <chrono>
#include <cstdlib>
// Busy-waits SPIN_NS ns per iteration. SetItemsProcessed writes items_per_second; "ops" is a user counter
// with Counter::kIsRate, "sec_per_op" one with kIsRate | kInvert: the JSON holds three bare numbers.
static void BM_spin(benchmark::State& state) {
  const long ns = std::strtol(std::getenv("SPIN_NS"), nullptr, 10);
  for (auto _ : state) {
    auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
    while (std::chrono::steady_clock::now() < end) {}
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["ops"] = benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
  state.counters["sec_per_op"] = benchmark::Counter(state.iterations(),
                                                    benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_spin);
BENCHMARK_MAIN();
"""


@pytest.fixture(scope="module")
def rate_files(tmp_path_factory):
    """A spins 50 us an iteration, B 40 us (B 20% faster), 6 repetitions each, one real binary."""
    out = tmp_path_factory.mktemp("rates")
    (out / "spin.cc").write_text(RATE_SOURCE)
    subprocess.run(["g++", "-O2", str(out / "spin.cc"), "-o", str(out / "spin"), "-lbenchmark", "-lpthread"],
                   check=True, capture_output=True)
    files = {}
    for side, ns in (("a", 50_000), ("b", 40_000)):
        files[side] = out / f"{side}.json"
        subprocess.run([str(out / "spin"), "--benchmark_repetitions=6", "--benchmark_min_time=0.02",
                        f"--benchmark_out={files[side]}", "--benchmark_out_format=json"],
                       env={"SPIN_NS": str(ns)}, check=True, capture_output=True)
    return files


@needs_benchmark
def test_google_benchmark_rates_are_not_compared_as_costs(rate_files):
    written = [e for e in json.loads(rate_files["a"].read_text())["benchmarks"] if e["run_type"] == "iteration"]
    assert {"items_per_second", "ops", "sec_per_op"} <= written[0].keys()  # the library wrote them, unflagged
    dataset = read_dataset(str(rate_files["a"]))
    assert set(dataset.benchmarks["BM_spin"].metrics) == {WALL_TIME, "cpu-time"}
    assert dataset.notes[0].startswith("user counters not read (items_per_second, ops, sec_per_op): the file does "
                                       "not say which are rates or inverted")
    a, b = str(rate_files["a"]), str(rate_files["b"])
    # before: "0.798x [0.796, 0.801] relevant difference beyond", exit 3, "lower items_per_second is better"
    rate = perfctl("compare", a, b, "--metric", "items_per_second")
    assert rate.returncode == 2 and "metric 'items_per_second' is not measured on both sides" in rate.stderr
    assert rate.stderr.count("\n") == 1 and rate.stdout == ""
    # the times say B is faster, in the one direction compare knows (CPU time: a busy wait is not disturbed
    # by the other load of this machine as much as its wall time)
    cpu = perfctl("compare", a, b, "--metric", "cpu-time", "--format", "json")
    document = json.loads(cpu.stdout)
    assert document["benchmarks"][0]["ratio_a_over_b"] > 1.1, cpu.stdout
    assert "user counters not read (items_per_second, ops, sec_per_op)" in cpu.stdout


# --- detection by structure ---

@pytest.fixture(scope="module")
def pyperf_named_results(tmp_path_factory):
    """pyperf timeit --name results: the word "results" in the file, not a hyperfine export."""
    path = tmp_path_factory.mktemp("pyperf") / "results.json"
    subprocess.run([sys.executable, "-m", "pyperf", "timeit", "--name", "results", "-p", "3", "-n", "3", "-l",
                    "100", "-w", "0", "-q", "-s", "x = 1", "x + 1", "-o", str(path)], check=True, capture_output=True)
    return path


def test_pyperf_file_named_results_is_pyperf(pyperf_named_results):
    assert '"results"' in pyperf_named_results.read_text()[:4096]
    assert detect(str(pyperf_named_results)) == "pyperf"  # before: "hyperfine", then "not a hyperfine export"
    runs = read_dataset(str(pyperf_named_results)).benchmarks["results"]
    assert len(runs.metrics[WALL_TIME]) == 3


@pytest.fixture(scope="module")
def hyperfine_exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("hyperfine")
    subprocess.run(["hyperfine", "-N", "--runs", "3", "--style", "none", "true", "sleep 0.001",
                    "--export-json", str(out / "h.json"), "--export-csv", str(out / "h.csv"),
                    "--export-markdown", str(out / "h.md")], check=True, capture_output=True)
    return out


def _twin(path: Path) -> str:
    """A copy of ``path`` for B: one file on both sides is refused before it is read (cli/compare.py), and
    these tests are about what reading it says."""
    twin = path.with_name("twin-" + path.name)
    shutil.copyfile(path, twin)
    return str(twin)


def _unknown(path: Path, looks_like: str) -> None:
    """detect() and `perfctl compare` both refuse ``path`` in one line saying it looks like ``looks_like``."""
    with pytest.raises(DatasetError) as err:
        detect(str(path))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: unknown format: {looks_like}"), message
    assert READS in message
    result = perfctl("compare", str(path), _twin(path))
    assert result.returncode == 2 and result.stderr == f"perfctl compare: {message}\n", result.stderr


@needs_hyperfine
def test_files_that_are_no_format_say_what_they_look_like(hyperfine_exports, tmp_path):
    exported = hyperfine_exports / "h.json"
    results = json.loads(exported.read_text())["results"]
    indented, compact = tmp_path / "indented.json", tmp_path / "compact.json"
    indented.write_text(json.dumps(results, indent=2))
    compact.write_text(json.dumps(results))  # before: "pcnt-running: not a number" (a comma on line 1)
    for listed in (indented, compact):
        _unknown(listed, "a JSON list of 2 objects with keys command, mean, stddev")
    zipped = tmp_path / "h.json.gz"
    zipped.write_bytes(gzip.compress(exported.read_bytes()))
    _unknown(zipped, "gzip-compressed data")
    for encoding in ("UTF-16", "UTF-16LE", "UTF-16BE"):  # with a byte order mark, and without
        converted = tmp_path / f"{encoding}.csv"
        converted.write_bytes(subprocess.run(["iconv", "-f", "UTF-8", "-t", encoding, str(hyperfine_exports / "h.csv")],
                                             check=True, capture_output=True).stdout)
        _unknown(converted, "UTF-16 text")
    _unknown(hyperfine_exports / "h.csv", "a hyperfine CSV export")  # before: "pcnt-running: not a number"
    _unknown(hyperfine_exports / "h.md", "a hyperfine Markdown export")
    report = tmp_path / "report.html"
    made = perfctl("compare", str(exported), _twin(exported), "--html", str(report))
    assert made.returncode in (0, 4) and report.stat().st_size > 0, made.stderr
    _unknown(report, "an HTML page")  # before: "not a perf stat -x, line"
    _unknown(Path(shutil.which("true")), "an ELF executable")
    lines = tmp_path / "other.jsonl"
    lines.write_text('{"name": "x", "ms": 1}\n{"name": "x", "ms": 2}\n')
    _unknown(lines, "JSON Lines whose first record is a JSON object with keys name, ms")


@needs_perf
@pytest.mark.parametrize("syntax, fmt", [("-x,", "perf-stat"), ("-j", "perf-stat-json")])
@pytest.mark.parametrize("options, refused", [
    (("--append",), None), (("-r", "2"), "perf stat -r output"), (("-I", "100"), "perf stat -I output"),
    (("-a", "--per-socket"), "per-"), (("-a", "-I", "100", "--per-core"), "perf stat -I output")],
    ids=["runs", "repeat", "interval", "per-socket", "interval-per-core"])
def test_every_perf_stat_layout_is_detected_so_its_reader_can_speak(tmp_path, syntax, fmt, options, refused):
    """The field-layout check accepts what perf writes, -r, -I and --per-* (one or two columns before the
    value) too: their reader, not detection, says which option made them."""
    path = tmp_path / "out"
    try:
        subprocess.run(["perf", "stat", syntax, "-o", str(path), *options, "-e", "task-clock,page-faults", "--",
                        "sleep", "0.15"], check=True, capture_output=True)
    except subprocess.CalledProcessError:  # -a wants CAP_PERFMON or perf_event_paranoid <= 0
        pytest.skip(f"probe: perf stat {' '.join(options)} cannot count here")
    assert detect(str(path)) == fmt
    if refused:
        with pytest.raises(DatasetError, match=f"{path}:3: .*{refused}"):
            read_dataset(str(path))
    else:
        assert read_dataset(str(path)).benchmarks["perf stat"].metrics.keys() == {"task-clock", "page-faults"}


def test_a_comma_is_not_a_perf_stat_line(tmp_path):
    """Three numbers, or words, with commas: no value, unit and event in perf's order."""
    for name, text in (("numbers.csv", "1,2,3\n4,5,6\n"), ("words.csv", "name,value,unit\nx,1,ms\n"),
                       ("time-series.csv", "1,2,foo\n")):
        path = tmp_path / name
        path.write_text(text)
        _unknown(path, f"text whose first line is {text.splitlines()[0]!r}")


# --- a perf stat file cut inside its last line ---

@needs_perf
@pytest.mark.parametrize("syntax, fmt", [("-x,", "perf-stat"), ("-j", "perf-stat-json")])
def test_a_perf_stat_file_cut_inside_its_last_event_is_refused(tmp_path, syntax, fmt):
    whole = tmp_path / "whole.out"
    for _ in range(3):
        subprocess.run(["perf", "stat", syntax, "-o", str(whole), "--append", "-e", "page-faults,task-clock", "--",
                        "/bin/true"], check=True)
    text = whole.read_text()
    assert text.endswith("\n")  # perf ends every line, the last one too
    assert read_dataset(str(whole)).benchmarks["perf stat"].metrics.keys() == {"page-faults", "task-clock"}
    cut = tmp_path / "cut.out"
    cut.write_text(text[:text.rindex("task-clock") + len("task-cl")])
    line = cut.read_text().count("\n") + 1
    assert detect(str(cut)) == fmt
    with pytest.raises(DatasetError) as err:
        read_dataset(str(cut))  # before (-x,): read silently, "task-cl" a new event with one run
    message = str(err.value)
    assert message.startswith(f"{cut}:{line}: the last line has no line end: the file was cut while it was "
                              "written") and message.endswith("task-cl'") and "\n" not in message
    result = perfctl("compare", str(cut), str(whole))
    assert result.returncode == 2 and result.stderr == f"perfctl compare: {message}\n"


@needs_perf
@pytest.mark.parametrize("syntax", ["-x,", "-j"])
def test_a_perf_stat_file_cut_at_a_line_end_refuses_the_short_run(tmp_path, syntax):
    """Cut after a whole line, a file parses: its last run then lacks events the others have (perf writes a
    run's events together), or has none after its '# started on' line. A short run is no run: refused,
    naming its line (before: read with a note, its values in the verdict); an empty one gives no value, and
    a note (perf writes it so for a command that did not start)."""
    whole = tmp_path / "whole.out"
    for _ in range(3):
        subprocess.run(["perf", "stat", syntax, "-o", str(whole), "--append", "-e", "page-faults,task-clock", "--",
                        "/bin/true"], check=True)
    lines = whole.read_text().splitlines(keepends=True)
    headers = [number for number, line in enumerate(lines, 1) if line.startswith("# started on")]
    assert len(headers) == 3 and read_dataset(str(whole)).notes == []
    events = [number for number, line in enumerate(lines, 1) if "page-faults" in line]
    short = tmp_path / "short.out"
    short.write_text("".join(lines[:events[-1]]))  # the last run's first event, page-faults, and no more
    with pytest.raises(DatasetError) as err:
        read_dataset(str(short))
    assert str(err.value) == (
        f"{short}:{events[-1]}: the run from line {events[-1]} lacks task-clock, which other runs count (perf "
        "writes every event of a run): the last run, cut at a line end while the file was written (a full disk, "
        "a killed perf stat); remove its lines or record it again")
    header_only = tmp_path / "header.out"
    header_only.write_text("".join(lines[:headers[-1]]))
    assert read_dataset(str(header_only)).notes == [
        f"header: no event after the '# started on' line {headers[-1]}: a run that perf did not count, or a file "
        "cut after it"]


@needs_perf
@pytest.mark.parametrize("syntax", ["-x,", "-j"])
def test_a_perf_stat_file_cut_mid_line_then_appended_to_is_refused_at_the_cut(tmp_path, syntax):
    """A run cut inside a line, then `perf stat --append` run again: the next run's '# started on' follows the
    cut text on one line. Read, 'task-cl# started on ...' became an event and one run's values merged into
    the next (exit 3, notes blaming lines 3, 8, 13); refused, naming the cut line."""
    path = tmp_path / "cut.out"

    def append():
        subprocess.run(["perf", "stat", syntax, "-o", str(path), "--append", "-e", "page-faults,task-clock", "--",
                        "/bin/true"], check=True)
    for _ in range(2):
        append()
    text = path.read_text()
    path.write_text(text[:text.rindex("task-clock") + len("task-cl")])
    line = path.read_text().count("\n") + 1
    append()
    assert "task-cl# started on" in path.read_text()
    result = perfctl("compare", str(path), _twin(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"perfctl compare: {path}:{line}: a line cut while it was written (")
    assert result.stderr.count("\n") == 1 and "'# started on' appended after it" in result.stderr


def test_a_perf_stat_csv_event_with_spaces_is_not_perf_s(tmp_path):
    """perf's event names hold no spaces and no '#': such a field is text that is not perf's layout."""
    path = tmp_path / "odd.csv"
    path.write_text("4.60,msec,task clock,4596560,100.00,0.330,CPUs utilized\n")
    with pytest.raises(DatasetError, match=r"odd.csv:1: not a perf stat -x, line: event 'task clock'$"):
        read_dataset(str(path))


def test_nul_bytes_are_not_utf16_text(tmp_path):
    """1000 NUL bytes were called 'UTF-16 text' (a NUL in every other byte, and in the others too); UTF-16
    has text between its NULs. Text converted by iconv is still told, both byte orders."""
    zeros = tmp_path / "zeros.bin"
    zeros.write_bytes(bytes(1000))
    _unknown(zeros, "binary data: NUL bytes only")
    counts = tmp_path / "counts.bin"  # little-endian int32 counts: NULs in every other byte, no text between
    counts.write_bytes(b"".join(n.to_bytes(4, "little") for n in range(1, 300)))
    _unknown(counts, "binary data;")
    for order in ("UTF-16LE", "UTF-16BE"):
        text = tmp_path / f"{order}.csv"
        text.write_bytes(subprocess.run(["iconv", "-t", order], input=b"command,mean\nsleep 1,1.0\n",
                                        capture_output=True, check=True).stdout)
        _unknown(text, "UTF-16 text (convert it first")


@pytest.mark.parametrize("seconds", [1e308, 1.7e300])
def test_a_time_too_large_for_nanoseconds_is_named(tmp_path, seconds):
    """hyperfine times of 1e308 s are finite in s but not in ns: refused as 'non-finite value inf', a value
    the file does not hold; the message names the value and why."""
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"results": [{"command": "x", "times": [0.1, seconds, 0.2]}]}))
    with pytest.raises(DatasetError) as err:
        read_dataset(str(path))
    assert str(err.value) == (f"{path}: results[0].times[1]: {seconds!r} s is too large to be a time in ns "
                              "(at most 1.798e+308 ns)")
    result = perfctl("compare", str(path), _twin(path))
    assert result.returncode == 2 and result.stderr == f"perfctl compare: {err.value}\n"


def test_a_json_integer_too_long_to_convert_is_one_line(tmp_path):
    """A 30-million-digit integer: the message told the user to call sys.set_int_max_str_digits(); it says
    the number is too long, with its length, whether detection, the reader or perf stat -j's lines meet it."""
    huge = tmp_path / "huge.json"
    huge.write_text('{"a": ' + "1" * 30_000_000 + "}")
    long_code = tmp_path / "hyperfine.json"
    long_code.write_text('{"results": [{"command": "x", "times": [0.1, 0.2], "exit_codes": [0, ' + "9" * 5000 + "]}]}")
    for path, digits in ((huge, "30,000,000"), (long_code, "5,000")):
        result = perfctl("compare", str(path), _twin(path))
        assert result.returncode == 2 and result.stderr == (
            f"perfctl compare: {path}: an integer of {digits} digits, too long to be a value (at most 4,300)\n")
    with pytest.raises(DatasetError, match=r"hyperfine.json: an integer of 5,000 digits, too long"):
        read_dataset(str(long_code), "hyperfine")
    lines = tmp_path / "perf.json"
    record = '{"counter-value" : "4.6", "unit" : "msec", "event" : "task-clock", "pcnt-running" : 100.00}\n'
    lines.write_text(record + record.replace("100.00", "1" * 5000))
    with pytest.raises(DatasetError, match=r"perf.json:2: an integer of 5,000 digits, too long to be a value"):
        read_dataset(str(lines), "perf-stat-json")
