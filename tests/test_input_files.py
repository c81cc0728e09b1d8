"""The files `perfctl compare` reads (perfctl JSON Lines, hyperfine and pyperf JSON, perf stat CSV) against hostile
input: wrong types named by line and field, absurd nesting, pipes and devices, a byte order mark, and fuzzed
variants of valid files (every path of a document replaced by every kind of value). Every bad input ends in one
line and exit 2, never a traceback."""

import contextlib
import copy
import io
import json
import math
import subprocess
import sys

import pytest
from conftest import (
    ESC,
    HOSTILE,
    jsonl_file,
    one_line,
    perfctl,
    sample_record,
    sample_records,
)

from perfctl import cli
from perfctl.formats import DatasetError
from perfctl.formats.jsonl import DatasetBuilder


def _twin(path) -> str:
    """A copy of ``path`` for B: one file on both sides is refused before it is read (cli/compare.py), and
    these tests are about what reading it says."""
    twin = f"{path}.twin"
    with open(path, "rb") as source, open(twin, "wb") as copied:
        copied.write(source.read())
    return twin


@pytest.mark.parametrize("name, prefix, input_format", [
    ("deep.json", "", None),
    ("deep.jsonl", "", None),
    ("deep.json", '{"results": ', None),  # detected as hyperfine, then parsed in full
    ("deep.jsonl", '{"type": "sample", "x": ', None),  # the first line decides the format
    ("deep.json", "", "hyperfine"),
    ("deep.json", "", "pyperf"),
    ("deep.json", "", "perfctl"),
    ("deep.json", "", "perf-stat"),
])
def test_deeply_nested_json_is_one_line(tmp_path, name, prefix, input_format):
    path = tmp_path / name
    path.write_text(prefix + "[" * 100_000 + "\n")
    options = ["--input-format", input_format] if input_format else []
    one_line(perfctl("compare", *options, str(path), str(path)), "perfctl compare: ", code=2)


def _hyperfine(command):
    return {"results": [{"command": command, "times": [0.1, 0.11, 0.12, 0.1], "exit_codes": [0, 0, 0, 0]}]}


@pytest.mark.parametrize("document, field", [
    (_hyperfine({"a": 1}), "results[0].command"),
    ({"results": [{"command": "x", "times": [0.1, 0.2], "exit_codes": 5}]}, "results[0].exit_codes"),
    ({"results": [{"command": "x", "times": [0.1, 0.2], "exit_codes": [0]}]}, "2 times but 1 exit codes"),
    ({"results": [{"command": "x", "times": ["0.1", 0.2]}]}, "results[0].times[0]"),
    ({"benchmarks": [{"metadata": {"name": {"x": 1}}, "runs": [{"values": [0.1]}]}]}, "metadata.name"),
    ({"metadata": [1], "benchmarks": [{"runs": [{"values": [0.1]}]}]}, "metadata"),
    ({"benchmarks": [{"metadata": {"unit": []}, "runs": [{"values": [0.1]}]}]}, "metadata.unit"),
    ({"benchmarks": [{"runs": [[0.1]]}]}, "runs[0]"),
    ({"benchmarks": [{"runs": [{"values": "0.1"}]}]}, "runs[0].values"),
    ({"benchmarks": [{"runs": [{"values": [1e308, 1e308]}]}]}, "1e+308 second is too large to be a time in ns"),
])
def test_json_exports_with_wrong_types_are_one_line(tmp_path, document, field):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document))
    assert field in one_line(perfctl("compare", str(path), _twin(path)), "perfctl compare: ", code=2)


@pytest.mark.parametrize("change, field", [
    (lambda r: r["benchmark"].update(name={"x": 1}), "benchmark.name: expected a string, got an object"),
    (lambda r: r["benchmark"].update(argv="/bin/true"), "benchmark.argv"),
    (lambda r: r.update(readings={"event": "x"}), "readings: expected a list"),
    (lambda r: r["readings"][0].pop("value"), "readings[0].value: missing"),
    (lambda r: r["readings"][0].update(value="1000"), "readings[0].value: expected a number, got a string"),
    # NaN is not JSON; json reads it (the reader's way for what orjson refuses) and the field is refused
    (lambda r: r["readings"][0].update(value=math.nan), "readings[0].value: non-finite value nan"),
    (lambda r: r["readings"][1].pop("scaled"), "readings[1].scaled: missing"),
    (lambda r: r.update(wall_ns=True), "wall_ns: expected a number, got a boolean"),
    (lambda r: r.update(warmup="no"), "warmup"),
    (lambda r: r["benchmark"].update(executable_sha256=["a"]), "benchmark.executable_sha256"),
    # numbers no run can have: the statistics would overflow into inf (seen: a CSV with median inf, exit 0)
    (lambda r: r.update(wall_ns=1.5e308), "wall_ns: 1.5e+308 is not a count or a time"),
    (lambda r: r["readings"][0].update(value=-5), "readings[0].value: -5 is not a count or a time"),
    (lambda r: r["readings"].append(dict(r["readings"][0])), "readings[3]: repeats the event, scope and backend"),
])
def test_perfctl_samples_with_wrong_types_are_one_line_naming_line_and_field(tmp_path, change, field):
    records = sample_records()
    change(records[2])
    path = jsonl_file(tmp_path / "a.jsonl", records)
    line = one_line(perfctl("compare", path, _twin(path)), "perfctl compare: ", code=2)
    assert f"a.jsonl:4: {field}" in line, line


def test_compare_reads_pipes_and_refuses_devices(tmp_path):
    """<(cmd) and /dev/stdin are read once (detection and reading each opened the file: the second read of a
    pipe found it empty); devices and directories are refused in one line."""
    a = jsonl_file(tmp_path / "a.jsonl", sample_records())
    b = jsonl_file(tmp_path / "b.jsonl", sample_records(base=2000))
    expected = perfctl("compare", a, b, "--format", "csv")
    assert expected.returncode == 3, expected.stderr
    substituted = subprocess.run(["bash", "-c", f'"$0" -m perfctl compare <(cat {a}) <(cat {b}) --format csv',
                                  sys.executable], capture_output=True, text=True, timeout=120)
    assert (substituted.returncode, substituted.stdout) == (3, expected.stdout), substituted.stderr
    with open(a, "rb") as source:
        piped = subprocess.run([sys.executable, "-m", "perfctl", "compare", "/dev/stdin", b, "--format", "csv"],
                               stdin=source, capture_output=True, text=True,
                               timeout=120)
    assert (piped.returncode, piped.stdout) == (3, expected.stdout), piped.stderr
    cat = subprocess.Popen(["cat", a], stdout=subprocess.PIPE)
    piped = subprocess.run([sys.executable, "-m", "perfctl", "compare", "/dev/stdin", b, "--format", "csv"],
                           stdin=cat.stdout, capture_output=True, text=True, timeout=120)
    cat.wait()
    assert (piped.returncode, piped.stdout) == (3, expected.stdout), piped.stderr
    broken = subprocess.run(["bash", "-c", f'"$0" -m perfctl compare <(echo "{{") {b}', sys.executable],
                            capture_output=True, text=True, timeout=120)
    assert one_line(broken, "perfctl compare: /dev/fd/", code=2), broken.stderr  # named as the user did
    for device in ("/dev/zero", str(tmp_path)):
        for options in ([], ["--input-format", "perfctl"]):
            assert "not a regular file or a pipe" in one_line(perfctl("compare", *options, device, b),
                                                              "perfctl compare: ", code=2)


def test_a_byte_order_mark_is_skipped(tmp_path):
    a = jsonl_file(tmp_path / "a.jsonl", sample_records())
    b = jsonl_file(tmp_path / "b.jsonl", sample_records(base=2000))
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + open(a, "rb").read())
    hyperfine = tmp_path / "h.json"
    hyperfine.write_bytes(b"\xef\xbb\xbf" + json.dumps({"results": [{"command": "x", "times": [0.1, 0.2, 0.1]}]})
                          .encode())
    assert perfctl("compare", str(marked), b, "--format", "csv").stdout == \
        perfctl("compare", a, b, "--format", "csv").stdout
    assert perfctl("compare", str(hyperfine), _twin(hyperfine)).returncode in (0, 4)


def test_dataset_builder_names_the_record_and_field_without_a_file():
    """The server builds datasets from stored samples (server/service.py): no line numbers there."""
    builder = DatasetBuilder("machine box-a")
    builder.add(sample_record())
    bad = sample_record(run_index=1)
    bad["readings"][0]["status"] = ["ok"]
    with pytest.raises(DatasetError, match=r"^machine box-a: sample record 2: readings\[0\]\.status: expected a "
                                           r"string, got a list$"):
        builder.add(bad)
    nan = sample_record(run_index=2)
    nan["readings"][0]["value"] = math.nan  # JSON cannot carry it, a dict from elsewhere can
    with pytest.raises(DatasetError, match=r"^machine box-a: sample record 3: readings\[0\]\.value: non-finite"):
        builder.add(nan)
    assert builder.finish().benchmarks["bench"].metrics["instructions:u"] == [1000.0]


# The fuzz: every field of a valid record of each format, replaced by each of these (or removed).
REPLACEMENTS = [{"x": 1}, [1], "s", "", None, math.nan, 1e308, 10**30, -1, True, HOSTILE]


_REMOVED = object()


def _paths(value, prefix=()):
    """Every path into a JSON document: keys of objects and indexes of lists, containers included."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _mutated(document, path, replacement):
    if not path:
        return replacement
    document = copy.deepcopy(document)
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if replacement is _REMOVED:
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    else:
        parent[path[-1]] = replacement
    return document


def _compare_in_process(path_a, path_b):
    """cli.main as the `perfctl` command runs it, in this process: thousands of cases in seconds. An
    exception out of main is a traceback the user would have seen."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["compare", path_a, path_b])
    return code, stdout.getvalue(), stderr.getvalue()


def _check(case, code, stderr):
    if code == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("perfctl compare: "), (case, stderr)
        assert ESC not in stderr, (case, stderr)
    else:
        assert code in (0, 3, 4), (case, code, stderr)


def _json_cases(valid):
    for path in _paths(valid):
        for replacement in [*REPLACEMENTS, _REMOVED] if path else REPLACEMENTS:
            yield path, replacement, _mutated(valid, path, replacement)


def test_fuzz_perfctl_jsonl_reader(tmp_path):
    good = jsonl_file(tmp_path / "good.jsonl", sample_records())
    checked = 0
    for path, replacement, record in _json_cases(sample_record(run_index=99)):
        bad = tmp_path / "bad.jsonl"
        jsonl_file(bad, [*sample_records(), record])
        code, _, stderr = _compare_in_process(str(bad), good)
        _check((path, replacement), code, stderr)
        checked += 1
    assert checked > 400


HYPERFINE = {"results": [{"command": "sleep 0.1", "mean": 0.1, "stddev": 0.01, "median": 0.1, "user": 0.0,
                           "system": 0.0, "min": 0.09, "max": 0.12, "times": [0.1, 0.11, 0.09, 0.12, 0.1],
                           "exit_codes": [0, 0, 0, 0, 0], "parameters": {}}]}


PYPERF = {"version": "1.0", "metadata": {"name": "bench", "unit": "second", "loops": 4},
          "benchmarks": [{"metadata": {"name": "bench"},
                          "runs": [{"metadata": {"date": "2024-01-01"}, "warmups": [[1, 0.2]],
                                    "values": [0.1 + i / 1000, 0.1]} for i in range(4)]
                          + [{"metadata": {"calibrate_loops": 4}, "warmups": [[1, 0.2]]}]}]}


@pytest.mark.parametrize("valid, cases", [(HYPERFINE, 200), (PYPERF, 300)], ids=["hyperfine", "pyperf"])
def test_fuzz_json_export_reader(tmp_path, valid, cases):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(valid))
    checked = 0
    for path, replacement, document in _json_cases(valid):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(document))
        code, _, stderr = _compare_in_process(str(bad), str(good))
        _check((path, replacement), code, stderr)
        checked += 1
    assert checked > cases


def test_fuzz_perf_stat_csv_reader(tmp_path):
    """perf stat -x, has only text fields: each field of each line replaced by garbage of each kind."""
    lines = [f"{1000 + run},,instructions:u,1000,100.00,," for run in range(4)]
    lines = [x for run, line in enumerate(lines) for x in (line, f"{0.5 + run / 10},msec,task-clock,500,100.00,,")]
    good = tmp_path / "good.csv"
    good.write_text("\n".join(lines) + "\n")
    garbage = ["", "x", "nan", "inf", "-1", "1e999", "9" * 5000, "<not counted>", "<not supported>", "{", HOSTILE,
               "12.5%"]
    checked = 0
    for number, line in enumerate(lines):
        fields = line.split(",")
        for index in range(len(fields)):
            for text in garbage:
                mutated = list(lines)
                mutated[number] = ",".join(fields[:index] + [text] + fields[index + 1:])
                bad = tmp_path / "bad.csv"
                bad.write_text("\n".join(mutated) + "\n")
                code, _, stderr = _compare_in_process(str(bad), str(good))
                _check((number, index, text), code, stderr)
                checked += 1
    assert checked > 500
