"""The Google Benchmark, pytest-benchmark and perf stat (-j and -x,) readers: real files made by the real
tools read to the values the tools wrote (in ns), hostile variants refused in one line naming the field, both
perf stat syntaxes meaning the same, detection of every format, and `perfctl compare` end to end on Google
Benchmark files."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import perfctl

from perfctl.formats import FORMATS, WALL_TIME, DatasetError, detect, read_dataset

DATA = Path(__file__).resolve().parent / "data"
GOOGLE = DATA / "googlebench.json"
GOOGLE_COUNTERS = {side: DATA / f"googlebench_counters_{side}.json" for side in "ab"}
PYTEST_BENCHMARK = DATA / "pytest_benchmark.json"
PYTEST_BENCHMARK_NODATA = DATA / "pytest_benchmark_nodata.json"

needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="probe: perf(1) not on PATH (linux-perf)")
needs_benchmark = pytest.mark.skipif(shutil.which("g++") is None or not Path("/usr/include/benchmark").is_dir(),
                                     reason="probe: g++ or libbenchmark-dev missing (deploy/setup.sh installs them)")


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def _hostile(tmp_path, source: Path, change) -> str:
    document = json.loads(source.read_text())
    change(document)
    path = tmp_path / source.name
    path.write_text(json.dumps(document))
    return str(path)


def _refused(tmp_path, source: Path, fmt: str, change, message: str) -> None:
    """The real file ``source`` changed by ``change`` is refused in one line that names the file."""
    path = _hostile(tmp_path, source, change)
    with pytest.raises(DatasetError, match=message) as err:
        read_dataset(path, fmt)
    assert _one_line(err).startswith(path)


# Google Benchmark

def test_google_benchmark_repetitions_are_runs_in_ns():
    dataset = read_dataset(str(GOOGLE))
    assert dataset.format == "google-benchmark"
    assert list(dataset.benchmarks) == ["BM_copy/64", "BM_copy/4096", "BM_sleepless"]
    copy = dataset.benchmarks["BM_copy/64"]
    # time_unit "ns": the values as written; the aggregates (mean 32.855...) are not runs
    assert copy.metrics[WALL_TIME] == [32.516580568389429, 33.109985418860674, 32.939192169751479]
    assert copy.metrics["cpu-time"] == [32.462578143546729, 32.894387230242252, 32.786016120462584]
    assert copy.units == {WALL_TIME: "ns", "cpu-time": "ns"}
    assert "repetition" in copy.notes[WALL_TIME][0]
    # time_unit "us": times 1000
    sleepless = dataset.benchmarks["BM_sleepless"]
    assert sleepless.metrics[WALL_TIME] == pytest.approx([1.0432094965018271, 1.2709834471855237,
                                                          0.9613951372268103], rel=1e-12)
    assert sleepless.metrics["cpu-time"][0] == pytest.approx(1.0391992176106133, rel=1e-12)


def _entries(change):
    return lambda document: [change(entry) for entry in document["benchmarks"]]


@pytest.mark.parametrize("change, message", [
    (_entries(lambda e: e.update(real_time="12")), r"benchmarks\[0\]\.real_time: expected a number, got a string"),
    (_entries(lambda e: e.update(cpu_time=float("nan"))), r"benchmarks\[0\]\.cpu_time: non-finite value nan"),
    (_entries(lambda e: e.update(real_time=-1.0)), r"benchmarks\[0\]\.real_time: negative time"),
    (_entries(lambda e: e.update(real_time=1e300, time_unit="s")),
     r"benchmarks\[0\]\.real_time: 1e\+300 s is too large to be a time in ns \(at most 1.798e\+308 ns\)$"),
    (_entries(lambda e: e.pop("time_unit")), r"benchmarks\[0\]\.time_unit: missing"),
    (_entries(lambda e: e.update(time_unit="min")), r"benchmarks\[0\]\.time_unit: unknown unit 'min'"),
    (_entries(lambda e: e.pop("run_type")), r"benchmarks\[0\]\.run_type: missing"),
    (_entries(lambda e: e.update(run_type="other")), r"benchmarks\[0\]\.run_type: expected 'iteration'"),
    (_entries(lambda e: e.update(name=3, run_name=None)), r"benchmarks\[0\]\.name: expected a string, got a number"),
    (lambda d: d["benchmarks"].insert(0, [1]), r"benchmarks\[0\]: expected an object, got a list"),
    (lambda d: d.update(benchmarks={}), r"not Google Benchmark JSON: no 'benchmarks' list"),
    (lambda d: d.update(benchmarks=[e for e in d["benchmarks"] if e["run_type"] == "aggregate"]),
     r"no measured runs .*only 12 aggregate entries .*--benchmark_report_aggregates_only"),
    (lambda d: d.update(benchmarks=[]), r"no measured runs in this google-benchmark file"),
])
def test_google_benchmark_hostile_files(tmp_path, change, message):
    _refused(tmp_path, GOOGLE, "google-benchmark", change, message)


def test_google_benchmark_errored_repetitions_are_left_out_and_said(tmp_path):
    def fail_first(document):
        document["benchmarks"][0].update(error_occurred=True, error_message="boom")
    dataset = read_dataset(_hostile(tmp_path, GOOGLE, fail_first))
    assert dataset.benchmarks["BM_copy/64"].metrics[WALL_TIME] == [33.109985418860674, 32.939192169751479]
    assert dataset.notes == ["BM_copy/64: left out 1 repetitions that reported error_occurred"]


def _iterations(path: Path) -> list[dict]:
    return [e for e in json.loads(path.read_text())["benchmarks"] if e["run_type"] == "iteration"]


def test_google_benchmark_user_counters_are_named_not_read():
    """state.counters["bytes"] = FILL_BYTES and SetItemsProcessed(iterations), 3 repetitions of 64 (A) and
    64 KiB (B) fills (tests/data/README): the JSON does not carry the counters' flags (kIsRate, kInvert),
    so not their direction; only the times are read and a note names what was not."""
    dataset = read_dataset(str(GOOGLE_COUNTERS["a"]))
    fill = dataset.benchmarks["BM_fill"]
    assert set(fill.metrics) == {WALL_TIME, "cpu-time"} and fill.units == {WALL_TIME: "ns", "cpu-time": "ns"}
    assert dataset.notes == ["user counters not read (bytes, items_per_second): the file does not say which are "
                             "rates or inverted, so not whether higher or lower is better; real_time and cpu_time "
                             "are read"]


def test_google_benchmark_fields_that_are_not_numbers_are_not_counters(tmp_path):
    def annotate(document):
        for entry in document["benchmarks"]:
            entry.update(label="64 bytes", a_later_field="text", a_flag=True)
    dataset = read_dataset(_hostile(tmp_path, GOOGLE_COUNTERS["a"], annotate))
    assert set(dataset.benchmarks["BM_fill"].metrics) == {WALL_TIME, "cpu-time"}
    assert "(bytes, items_per_second)" in dataset.notes[0]  # text and booleans are not named as counters


def test_google_benchmark_counters_that_are_not_read_are_not_checked(tmp_path):
    """A NaN counter (the reporter writes NaN) or one named cpu-time is not read, so it refuses nothing."""
    def change(document):
        for entry in document["benchmarks"]:
            entry.update({"bytes": float("nan"), "cpu-time": 1.0})
    fill = read_dataset(_hostile(tmp_path, GOOGLE_COUNTERS["a"], change)).benchmarks["BM_fill"]
    assert fill.metrics["cpu-time"] == [e["cpu_time"] for e in _iterations(GOOGLE_COUNTERS["a"])]


def test_compare_google_benchmark_rate_is_not_a_metric():
    """compare --metric items_per_second on the two real files: B fills 1024 times the bytes, so it does
    about 100 times fewer fills a second; read as a cost that would call B faster. Not read: one line, exit 2."""
    a, b = (str(GOOGLE_COUNTERS[side]) for side in "ab")
    result = perfctl("compare", a, b, "--metric", "items_per_second")
    assert result.returncode == 2 and result.stderr.strip().endswith(
        "metric 'items_per_second' is not measured on both sides (both have: cpu-time, wall-time)"), result.stderr


@pytest.fixture(scope="module")
def google_benchmark_files(tmp_path_factory):
    """Two real files: the same benchmark binary, a string copy of 64 bytes (A) and 64 KiB (B) under one
    name, 8 repetitions each."""
    out = tmp_path_factory.mktemp("googlebench")
    source = out / "copy.cc"
    source.write_text("""#include <benchmark/benchmark.h>
#include <cstdlib>
#include <string>
static void BM_copy(benchmark::State& state) {
  std::string src(std::atoi(std::getenv("COPY_BYTES")), 'x');
  for (auto _ : state) { std::string dst = src; benchmark::DoNotOptimize(dst); }
}
BENCHMARK(BM_copy);
BENCHMARK_MAIN();
""")
    binary = out / "copy"
    subprocess.run(["g++", "-O2", "-o", str(binary), str(source), "-lbenchmark", "-lpthread"], check=True)
    files = {}
    for label, size in (("a", 64), ("b", 65536)):
        files[label] = out / f"{label}.json"
        subprocess.run([str(binary), "--benchmark_repetitions=8", "--benchmark_min_time=0.01",
                        f"--benchmark_out={files[label]}", "--benchmark_out_format=json"],
                       env={"COPY_BYTES": str(size)}, check=True, capture_output=True)
    return files


@needs_benchmark
def test_real_google_benchmark_files_read_as_written(google_benchmark_files):
    path = google_benchmark_files["a"]
    written = [e for e in json.loads(path.read_text())["benchmarks"] if e["run_type"] == "iteration"]
    assert detect(str(path)) == "google-benchmark"
    runs = read_dataset(str(path)).benchmarks["BM_copy"]
    assert len(written) == 8 and {e["time_unit"] for e in written} == {"ns"}
    assert runs.metrics[WALL_TIME] == [e["real_time"] for e in written]
    assert runs.metrics["cpu-time"] == [e["cpu_time"] for e in written]


@needs_benchmark
def test_compare_real_google_benchmark_files(google_benchmark_files):
    result = perfctl("compare", str(google_benchmark_files["a"]), str(google_benchmark_files["b"]),
                     "--format", "json")
    assert result.returncode == 3, result.stdout + result.stderr  # copying 1024 times the bytes is slower
    document = json.loads(result.stdout)
    assert document["format"] == "google-benchmark"
    benchmark = document["benchmarks"][0]
    assert benchmark["n_a"] == 8 and benchmark["n_b"] == 8
    table = perfctl("compare", str(google_benchmark_files["a"]), str(google_benchmark_files["b"]))
    assert table.returncode == 3 and "BM_copy" in table.stdout and WALL_TIME in table.stdout, table.stdout


# pytest-benchmark

def test_pytest_benchmark_rounds_are_runs_in_ns():
    dataset = read_dataset(str(PYTEST_BENCHMARK))
    written = json.loads(PYTEST_BENCHMARK.read_text())["benchmarks"]
    assert dataset.format == "pytest-benchmark"
    assert list(dataset.benchmarks) == ["test_tiny.py::test_sum_squares_100", "test_tiny.py::test_sum_squares_1000"]
    small = dataset.benchmarks["test_tiny.py::test_sum_squares_100"]
    assert len(small.metrics[WALL_TIME]) == written[0]["stats"]["rounds"] == 32
    assert small.metrics[WALL_TIME][0] == pytest.approx(11191.001249244437, rel=1e-12)  # 11.19 us
    assert small.metrics[WALL_TIME] == pytest.approx([s * 1e9 for s in written[0]["stats"]["data"]], rel=1e-12)
    assert small.units[WALL_TIME] == "ns" and "round" in small.notes[WALL_TIME][0]


def test_pytest_benchmark_without_data_is_refused_never_invented():
    with pytest.raises(DatasetError, match=r"benchmarks\[0\]\.stats\.data: missing: .*--benchmark-save-data") as err:
        read_dataset(str(PYTEST_BENCHMARK_NODATA))
    assert _one_line(err).startswith(str(PYTEST_BENCHMARK_NODATA))


def _stats(change):
    return lambda document: change(document["benchmarks"][0]["stats"])


@pytest.mark.parametrize("change, message", [
    (_stats(lambda s: s["data"].__setitem__(3, "1e-5")), r"benchmarks\[0\]\.stats\.data\[3\]: expected a number"),
    (_stats(lambda s: s["data"].__setitem__(0, float("inf"))), r"benchmarks\[0\]\.stats\.data\[0\]: non-finite"),
    (_stats(lambda s: s["data"].__setitem__(0, -1e-6)), r"benchmarks\[0\]\.stats\.data\[0\]: negative time"),
    (_stats(lambda s: s.update(data=[], rounds=0)), r"benchmarks\[0\]\.stats\.data: empty"),
    (_stats(lambda s: s.update(data={})), r"benchmarks\[0\]\.stats\.data: expected a list, got an object"),
    (_stats(lambda s: s["data"].pop()), r"benchmarks\[0\]\.stats\.data: 31 round times but stats\.rounds is 32"),
    (lambda d: d["benchmarks"][0].pop("stats"), r"benchmarks\[0\]\.stats: missing"),
    (lambda d: d["benchmarks"][0].update(name=None, fullname=None), r"benchmarks\[0\]\.name: missing"),
    (lambda d: d.update(benchmarks=None), r"not pytest-benchmark JSON: no 'benchmarks' list"),
    (lambda d: d.update(benchmarks=[]), r"no measured runs in this pytest-benchmark file"),
])
def test_pytest_benchmark_hostile_files(tmp_path, change, message):
    _refused(tmp_path, PYTEST_BENCHMARK, "pytest-benchmark", change, message)


# perf stat: -x, CSV and -j JSON, one meaning (perfctl/formats/perf_stat.py) in two syntaxes

SYNTAXES = {"perf-stat": "-x,", "perf-stat-json": "-j"}
GOOD_LINE = {"counter-value": "1.5", "unit": "msec", "event": "task-clock", "pcnt-running": 100.0}


def _perf_stat(path: Path, fmt: str, *options: str, command=("/bin/true",)) -> Path:
    subprocess.run(["perf", "stat", SYNTAXES[fmt], "-o", str(path), *options, "--", *command], check=True)
    return path


def _written(path: Path, fmt: str) -> list[tuple[str, str]]:
    """(event, counter value) of each line as perf wrote it."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    if fmt == "perf-stat-json":
        return [(r["event"], r["counter-value"]) for r in map(json.loads, lines)]
    return [(line.split(",")[2], line.split(",")[0]) for line in lines]


@needs_perf
@pytest.mark.parametrize("fmt", SYNTAXES)
def test_perf_stat_runs_from_append_blocks(tmp_path, fmt):
    """Three runs of /bin/true by perf stat -o FILE --append, as the readers' docstrings say to record them."""
    path = tmp_path / "true.out"
    for _ in range(3):
        _perf_stat(path, fmt, "--append", "-e", "task-clock,page-faults")
    written = _written(path, fmt)
    assert detect(str(path)) == fmt
    runs = read_dataset(str(path)).benchmarks["perf stat"]  # no command recorded: the one neutral name
    task_clock = [float(value) * 1e6 for event, value in written if event == "task-clock"]
    page_faults = [float(value) for event, value in written if event == "page-faults"]
    assert len(task_clock) == 3 and runs.metrics["task-clock"] == pytest.approx(task_clock, rel=1e-12)
    assert runs.metrics["page-faults"] == page_faults and all(v > 0 for v in page_faults)
    assert runs.units == {"task-clock": "ns", "page-faults": "count"}


@needs_perf
@pytest.mark.parametrize("fmt", SYNTAXES)
def test_perf_stat_without_started_on_lines_a_repeated_event_starts_a_run(tmp_path, fmt):
    """perf stat ... 2>>FILE writes no '# started on' line: the event repeats, a new run begins."""
    path = tmp_path / "true.out"
    for _ in range(3):
        with open(path, "a") as stderr:
            subprocess.run(["perf", "stat", SYNTAXES[fmt], "-e", "task-clock", "--", "/bin/true"], stderr=stderr,
                           check=True)
    assert "# started on" not in path.read_text()
    task_clock = read_dataset(str(path), fmt).benchmarks["perf stat"].metrics["task-clock"]
    assert task_clock == pytest.approx([float(value) * 1e6 for _, value in _written(path, fmt)], rel=1e-12)
    assert len(task_clock) == 3


@needs_perf
@pytest.mark.parametrize("fmt", SYNTAXES)
@pytest.mark.parametrize("options, command, message", [
    (("-r", "3", "-e", "task-clock,page-faults"), ("/bin/true",), r":3: this is perf stat -r output"),
    (("-I", "100", "-e", "task-clock"), ("sleep", "0.25"), r":3: this is perf stat -I output"),
    # the same event twice in one run is one run, not two
    (("-e", "task-clock,task-clock"), ("/bin/true",),
     r":4: task-clock: a second value in the run started on line 1 \(the first on line 3\): -e named it twice"),
    (("-A", "-a", "-e", "task-clock"), ("sleep", "0.01"), r"(?i):3: .*per-cpu.* output has several values per event"),
], ids=["repeat", "interval", "twice", "per-cpu"])
def test_perf_stat_output_without_one_value_per_run_is_refused(tmp_path, fmt, options, command, message):
    path = tmp_path / "out"
    try:
        _perf_stat(path, fmt, *options, command=command)
    except subprocess.CalledProcessError:  # -a wants CAP_PERFMON or perf_event_paranoid <= 0
        pytest.skip(f"probe: perf stat {' '.join(options)} cannot count here")
    with pytest.raises(DatasetError, match=message) as err:
        read_dataset(str(path), fmt)
    assert _one_line(err).startswith(str(path))


def _perf_stat_lines(fmt: str, *lines: dict) -> str:
    """Lines of either syntax from the fields perf stat -j names."""
    if fmt == "perf-stat-json":
        return "\n".join(json.dumps(line) for line in lines) + "\n"
    return "".join(f"{line['counter-value']},{line['unit']},{line['event']},1000,{line['pcnt-running']},,\n"
                   for line in lines)


@pytest.mark.parametrize("fmt", SYNTAXES)
def test_perf_stat_multiplexing_and_unsupported_are_noted_alike(tmp_path, fmt):
    path = tmp_path / "mux.out"
    path.write_text(_perf_stat_lines(
        fmt,
        {**GOOD_LINE, "pcnt-running": 50.0},
        {"counter-value": "<not supported>", "unit": "", "event": "cycles", "pcnt-running": 100.0},
        {"counter-value": "<not counted>", "unit": "", "event": "instructions", "pcnt-running": 0.0},
        {**GOOD_LINE, "counter-value": "2.5"},  # a second run: perf writes every event of each run
        {"counter-value": "<not supported>", "unit": "", "event": "cycles", "pcnt-running": 100.0},
        {"counter-value": "<not counted>", "unit": "", "event": "instructions", "pcnt-running": 0.0}))
    runs = read_dataset(str(path), fmt).benchmarks["perf stat"]
    assert runs.metrics == {"task-clock": [1.5e6, 2.5e6]}  # never a 0 for cycles or instructions
    assert runs.notes["cycles"] == ["unsupported: perf stat printed <not supported>"]
    assert runs.notes["instructions"] == ["perf stat printed <not counted> in some runs"]
    assert runs.notes["task-clock"] == ["multiplexed: counted 50.00% of the time in some runs (scaled by perf)"]


@pytest.mark.parametrize("fmt", SYNTAXES)
@pytest.mark.parametrize("change, message", [
    ({"counter-value": "1e305"}, r":1: counter-value: 1e\+305 msec is too large to be a time in ns"),
    ({"counter-value": "nan"}, r":1: counter-value: non-finite value"),
    ({"counter-value": "lots"}, r":1: counter-value: not a number: 'lots'"),
    ({"pcnt-running": "most"}, r":1: pcnt-running: "),
])
def test_perf_stat_bad_values_are_refused_alike(tmp_path, fmt, change, message):
    path = tmp_path / "bad.out"
    path.write_text(_perf_stat_lines(fmt, {**GOOD_LINE, **change}))
    with pytest.raises(DatasetError, match=message) as err:
        read_dataset(str(path), fmt)
    assert _one_line(err).startswith(str(path))


@pytest.mark.parametrize("line, message", [
    ({**GOOD_LINE, "counter-value": "nan"}, r":1: counter-value: non-finite"),
    ({**GOOD_LINE, "counter-value": True}, r":1: counter-value: expected a number or a string, got a boolean"),
    ({**GOOD_LINE, "counter-value": "lots"}, r":1: counter-value: not a number: 'lots'"),
    ({k: v for k, v in GOOD_LINE.items() if k != "event"}, r":1: event: missing"),
    ({**GOOD_LINE, "event": 7}, r":1: event: expected a string, got a number"),
    ({**GOOD_LINE, "unit": []}, r":1: unit: expected a string, got a list"),
    ({**GOOD_LINE, "interval": 1.0}, r":1: this is perf stat -I output"),
    ({**GOOD_LINE, "cpu": "0"}, r":1: cpu: per-cpu output"),
    ([1, 2], r":1: not a perf stat -j line"),
    ({**GOOD_LINE, "counter-value": "<not supported>"}, r"no measured runs .*unsupported|no measured runs"),
])
def test_perf_stat_json_hostile_lines(tmp_path, line, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(DatasetError, match=message) as err:
        read_dataset(str(path), "perf-stat-json")
    assert _one_line(err).startswith(str(path))


# detection

def _hyperfine(path):
    path.write_text(json.dumps({"results": [{"command": "true", "times": [0.1], "exit_codes": [0]}]}))


def _pyperf(path):
    path.write_text(json.dumps({"benchmarks": [{"runs": [{"values": [0.1]}]}], "metadata": {"name": "x"},
                                "version": "1.0"}))


def _perfctl(path):
    path.write_text(json.dumps({"type": "machine", "machine_id": "m"}) + "\n")


def _perf_stat_csv(path):
    path.write_text("# started on Thu Nov 26 13:15:48 2026\n\n1.23,msec,task-clock,1230000,100.00,0.5,CPUs\n")


def _perf_stat_json_stderr(path):  # perf stat -j 2>FILE: no "# started on" header
    path.write_text("\n" + json.dumps(GOOD_LINE) + "\n")


def _sorted_keys(source):  # jq -S: "benchmarks" first, the tool's top-level keys after 4 KiB of data
    return lambda path: path.write_text(json.dumps(json.loads(source.read_text()), sort_keys=True))


@pytest.mark.parametrize("write, fmt", [
    (_perfctl, "perfctl"),
    (_hyperfine, "hyperfine"),
    (_pyperf, "pyperf"),
    (lambda path: path.write_text(GOOGLE.read_text()), "google-benchmark"),
    (_sorted_keys(GOOGLE), "google-benchmark"),
    (lambda path: path.write_text(PYTEST_BENCHMARK.read_text()), "pytest-benchmark"),
    (_sorted_keys(PYTEST_BENCHMARK), "pytest-benchmark"),
    (_perf_stat_csv, "perf-stat"),
    (_perf_stat_json_stderr, "perf-stat-json"),
    (lambda path: path.write_text("# started on Thu Nov 26 13:15:48 2026\n\n" + json.dumps(GOOD_LINE) + "\n"),
     "perf-stat-json"),
])
def test_every_format_is_detected(tmp_path, write, fmt):
    path = tmp_path / "file"
    write(path)
    assert detect(str(path)) == fmt
    assert fmt in FORMATS
    if fmt == "perfctl":  # a machine line and no sample: read by the perfctl reader, which finds no runs
        with pytest.raises(DatasetError, match="no measured runs in this perfctl file"):
            read_dataset(str(path))
    else:
        assert read_dataset(str(path)).format == fmt


def test_detection_covers_every_format():
    assert set(FORMATS) == {"perfctl", "hyperfine", "pyperf", "google-benchmark", "pytest-benchmark",
                            "perf-stat", "perf-stat-json"}


def test_unknown_json_is_one_line(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"something": 1}')
    with pytest.raises(DatasetError, match="unknown format: a JSON object with keys something; perfctl reads") as err:
        detect(str(path))
    _one_line(err)


# when the runs were taken: blocks or rounds (issue 14, point 6)

BLOCKS = "measured in blocks: every run of {} before every run of {}; a drift of the machine between the blocks"


def _stat(path: Path, program: Path, runs: int) -> None:
    result = perfctl("stat", "-q", "-r", str(runs), "--name", "sort", "-e", "task-clock", "-o", str(path), "--",
                     str(program), "20000")
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def taken(tmp_path_factory, programs):
    """Real perfctl stat files of one program: A's 4 runs then B's 4 (blocks), and C and D alternating in
    two rounds of 2 (interleaved)."""
    out = tmp_path_factory.mktemp("taken")
    files = {side: out / f"{side}.jsonl" for side in "ABCD"}
    _stat(files["A"], programs / "sort", 4)
    _stat(files["B"], programs / "sort", 4)
    for _ in range(2):
        _stat(files["C"], programs / "sort", 2)
        _stat(files["D"], programs / "sort", 2)
    return files


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_perfctl_files_give_the_span_of_their_kept_runs(taken):
    records = [r for r in _records(taken["C"]) if r["type"] == "sample" and not r["warmup"]]
    bench = read_dataset(str(taken["C"])).benchmarks["sort"]
    starts = [r["start_time_ns"] for r in records]
    assert len(starts) == 4 and starts == sorted(starts)
    assert (bench.first_ns, bench.last_ns) == (starts[0], starts[-1]) and bench.first_ns < bench.last_ns
    assert bench.clock == records[0]["machine_id"]


def test_runs_in_blocks_are_said_and_rounds_are_not(taken):
    from perfctl.pairing import pair

    a, b, c, d = (read_dataset(str(taken[side])) for side in "ABCD")
    assert any(note.startswith(BLOCKS.format("A", "B")) and "perfctl submit" in note and "compare-builds.sh" in note
               for note in pair(a, b).notes[("sort", "task-clock")])
    assert any(note.startswith(BLOCKS.format("B", "A")) for note in pair(b, a).notes[("sort", "task-clock")])
    assert not any("measured in blocks" in note for note in pair(c, d).notes[("sort", "task-clock")])
    blocks = perfctl("compare", str(taken["A"]), str(taken["B"]))
    assert blocks.returncode in (0, 3, 4), blocks.stderr
    assert "measured in blocks: every run of A before every run of B" in " ".join(blocks.stdout.split())
    rounds = perfctl("compare", str(taken["C"]), str(taken["D"]))
    assert rounds.returncode in (0, 3, 4) and "measured in blocks" not in rounds.stdout, rounds.stderr


def _rewritten(tmp_path: Path, source: Path, name: str, change) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(change(r) if r["type"] == "sample" else r) + "\n" for r in _records(source)))
    return str(path)


def test_runs_without_a_start_or_on_two_machines_say_nothing(taken, tmp_path):
    from perfctl.pairing import pair

    b = read_dataset(str(taken["B"]))
    first = {"done": False}

    def one_without_start(record):  # one kept run without a start time: the span is unknown
        if not record["warmup"] and not first["done"]:
            first["done"] = True
            return {key: value for key, value in record.items() if key != "start_time_ns"}
        return record

    unknown = read_dataset(_rewritten(tmp_path, taken["A"], "unknown.jsonl", one_without_start))
    assert unknown.benchmarks["sort"].first_ns is None and unknown.benchmarks["sort"].last_ns is None
    other = read_dataset(_rewritten(tmp_path, taken["A"], "other.jsonl", lambda r: {**r, "machine_id": "f" * 16}))
    assert other.benchmarks["sort"].first_ns is not None  # known, but on another machine's clock
    for a in (unknown, other):
        assert not any("measured in blocks" in note for note in pair(a, b).notes[("sort", "task-clock")])


@pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH")
def test_hyperfine_files_carry_no_times_and_say_nothing(tmp_path):
    for name in ("a", "b"):
        subprocess.run(["hyperfine", "-N", "--runs", "5", "--export-json", str(tmp_path / f"{name}.json"), "/bin/true"],
                       check=True, capture_output=True)
    bench = read_dataset(str(tmp_path / "a.json")).benchmarks["/bin/true"]
    assert bench.first_ns is None and bench.last_ns is None
    result = perfctl("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert result.returncode in (0, 3, 4) and "measured in blocks" not in result.stdout, result.stderr


def test_pyperf_run_dates_give_the_span_on_the_hosts_clock(tmp_path):
    from datetime import datetime

    from perfctl.pairing import pair

    for name in ("a", "b"):
        subprocess.run([sys.executable, "-m", "pyperf", "command", "--quiet", "-p", "3", "-n", "2", "-w", "1",
                        "--name", "true", "-o", str(tmp_path / f"{name}.json"), "--", "/bin/true"],
                       check=True, capture_output=True)
    written = json.loads((tmp_path / "a.json").read_text())
    dates = [datetime.fromisoformat(run["metadata"]["date"]) for run in written["benchmarks"][0]["runs"]
             if run.get("values")]
    a, b = read_dataset(str(tmp_path / "a.json")), read_dataset(str(tmp_path / "b.json"))
    bench = a.benchmarks["true"]
    assert abs(bench.first_ns - min(dates).timestamp() * 1e9) < 1e3  # to the microsecond pyperf writes
    assert abs(bench.last_ns - max(dates).timestamp() * 1e9) < 1e3 and bench.first_ns < bench.last_ns
    assert bench.clock == written["metadata"]["hostname"]
    assert any(note.startswith(BLOCKS.format("A", "B")) for note in pair(a, b).notes[("true", "wall-time")])
    for run in written["benchmarks"][0]["runs"]:  # a run without its date: nothing is known
        run.get("metadata", {}).pop("date", None)
    (tmp_path / "nodate.json").write_text(json.dumps(written))
    assert read_dataset(str(tmp_path / "nodate.json")).benchmarks["true"].first_ns is None
