"""The CLI against hostile input (issue 11): files with wrong types and absurd nesting, names that carry
terminal escapes or rich markup, outputs that cannot be written, and signals during `perfctl stat`.

Every bad input ends in one line and exit 2, never a traceback; every name from a file, an agent or another
client is shown literally (ESC as ``\\x1b``), never interpreted by the terminal or by rich.
"""

import contextlib
import copy
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid

import grpc
import pytest
from conftest import one_line, perfctl, processes_with, sample_of, signal_when
from fleet import fake_query_server, free_port, wait_for

from perfctl import cli, wire
from perfctl.formats import DatasetError
from perfctl.formats.jsonl import DatasetBuilder
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

ESC = "\x1b"
HOSTILE = "evil\x1b[2J\x1b]0;owned\x07[bold red]x[/]\u202eab\nforged"
HOSTILE_SHOWN = "evil\\x1b[2J\\x1b]0;owned\\x07[bold red]x[/]\\u202eab\\nforged"


def _one_line(result, prefix="perfctl compare: "):
    return one_line(result, prefix, code=2)


def _sample(name="bench", run_index=0, wall_ns=1_000_000, instructions=1000, **changes):
    """A perfctl JSON Lines sample record as `perfctl stat` writes it (docs/samples.md)."""
    record = {
        # a uuid per benchmark and run: a uuid met twice is one run (docs/samples.md, "The identity of a run")
        # and values: two files of other values are other runs, a run on both sides of a compare is refused
        "type": "sample", "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{run_index}/{wall_ns}/{instructions}")),
        "machine_id": "0123456789abcdef",
        "benchmark": {"name": name, "argv": ["/bin/true"], "executable": "/bin/true",
                      "executable_sha256": "a" * 64, "input_digest": "b" * 64},
        "job_id": None, "run_index": run_index, "warmup": False, "start_time_ns": 1_700_000_000_000_000_000,
        "wall_ns": wall_ns, "outcome": "ok", "exit_status": 0, "signal": None,
        "environment": {"aslr_off": True, "env_bytes": 4096, "pinned_cpu": None, "user": "root", "cwd": "/"},
        "readings": [
            {"event": "instructions", "backend": "perf_event", "scope": "user", "status": "ok", "unit": "count",
             "value": instructions, "time_enabled": 10, "time_running": 10},
            {"event": "cycles", "backend": "perf_event", "scope": "user", "status": "multiplexed", "unit": "count",
             "value": 500, "time_enabled": 10, "time_running": 5, "scaled": 1000.0, "reason": "counted 50%"},
            {"event": "branches", "backend": "perf_event", "scope": "user", "status": "unsupported",
             "unit": "count", "reason": "no PMU"},
        ],
        "backends": ["perf_event"], "stderr_tail": None, "max_rss_kib": 1000, "schema_version": 1, "extra": {},
    }
    record.update(changes)
    return record


def _jsonl(path, records):
    lines = [json.dumps({"type": "machine", "machine_id": "0123456789abcdef"})]
    lines += [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _twin(path) -> str:
    """A copy of ``path`` for B: one file on both sides is refused before it is read (cli/compare.py), and
    these tests are about what reading it says."""
    twin = f"{path}.twin"
    with open(path, "rb") as source, open(twin, "wb") as copied:
        copied.write(source.read())
    return twin


def _runs(name="bench", n=6, base=1000):
    return [_sample(name, run_index=i, wall_ns=1_000_000 + 1000 * i, instructions=base + i) for i in range(n)]


# ---- finding 11: tracebacks where one line and exit 2 belong ------------------------------------------------

@pytest.mark.parametrize("options, redirect", [
    (["-o", "/dev/full"], False),
    (["--json"], True),
    (["--csv"], True),
    ([], True),  # the plain table
])
def test_stat_output_that_cannot_be_written_is_one_line(options, redirect):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "perfctl", "stat", "-r", "2", "-e", "task-clock",
                                 *options, "--", "/bin/true"], stdout=full if redirect else subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    line = _one_line(result, "perfctl stat: ")
    assert "No space left on device" in line
    assert ("/dev/full" in line) if "-o" in options else ("/dev/full" not in line)


def test_compare_output_that_cannot_be_written_is_one_line(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", _runs())
    other = _jsonl(tmp_path / "b.jsonl", _runs(base=2000))
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "perfctl", "compare", path, other], stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    assert "No space left on device" in _one_line(result, "perfctl")


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
    _one_line(perfctl("compare", *options, str(path), str(path)))


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
    assert field in _one_line(perfctl("compare", str(path), _twin(path)))


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
    records = _runs()
    change(records[2])
    path = _jsonl(tmp_path / "a.jsonl", records)
    line = _one_line(perfctl("compare", path, _twin(path)))
    assert f"a.jsonl:4: {field}" in line, line


def test_compare_reads_pipes_and_refuses_devices(tmp_path):
    """<(cmd) and /dev/stdin are read once (detection and reading each opened the file: the second read of a
    pipe found it empty); devices and directories are refused in one line."""
    a = _jsonl(tmp_path / "a.jsonl", _runs())
    b = _jsonl(tmp_path / "b.jsonl", _runs(base=2000))
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
    assert _one_line(broken).startswith("perfctl compare: /dev/fd/"), broken.stderr  # named as the user did
    for device in ("/dev/zero", str(tmp_path)):
        for options in ([], ["--input-format", "perfctl"]):
            assert "not a regular file or a pipe" in _one_line(perfctl("compare", *options, device, b))


def test_a_byte_order_mark_is_skipped(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", _runs())
    b = _jsonl(tmp_path / "b.jsonl", _runs(base=2000))
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
    builder.add(_sample())
    bad = _sample(run_index=1)
    bad["readings"][0]["status"] = ["ok"]
    with pytest.raises(DatasetError, match=r"^machine box-a: sample record 2: readings\[0\]\.status: expected a "
                                           r"string, got a list$"):
        builder.add(bad)
    nan = _sample(run_index=2)
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
    good = _jsonl(tmp_path / "good.jsonl", _runs())
    checked = 0
    for path, replacement, record in _json_cases(_sample(run_index=99)):
        bad = tmp_path / "bad.jsonl"
        _jsonl(bad, [*_runs(), record])
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


# ---- finding 9: control characters and markup from names reach the terminal ----------------------------------

def _assert_literal(text):
    """The hostile name shows as its escapes, and nothing of it reached the output raw."""
    assert HOSTILE_SHOWN in text, text
    assert ESC not in text and "\x07" not in text and "\u202e" not in text, repr(text)


def _first_column(table: str, index: int = 0) -> str:
    """A column of a rich table (the first: the benchmark), its folded lines joined back together without
    the spaces at which rich folded them."""
    rows = [line for line in table.splitlines() if line.startswith("│")]
    return "".join(row.split("│")[1 + index].replace(" ", "") for row in rows)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_compare_shows_hostile_benchmark_names_literally(tmp_path, fmt):
    a = _jsonl(tmp_path / "a.jsonl", _runs(HOSTILE) + _runs("plain"))
    b = _jsonl(tmp_path / "b.jsonl", _runs(HOSTILE, base=2000) + _runs("other"))
    result = perfctl("compare", a, b, "--format", fmt)
    assert result.returncode == 3, result.stderr  # instructions doubled: a relevant slowdown
    if fmt == "markdown":  # Markdown escapes the name's [ ] and \ too: it is literal once rendered
        from markdown_it import MarkdownIt

        rendered = MarkdownIt("commonmark").enable("table").render(result.stdout)
        assert f"<td>{HOSTILE_SHOWN}</td>" in rendered, rendered
    else:
        _assert_literal(result.stdout)  # compare's table is borderless and wide enough not to fold the name
    assert ESC not in result.stdout
    assert "Traceback" not in result.stderr
    if fmt == "markdown":
        row = next(line for line in result.stdout.splitlines() if line.startswith("| evil"))
        assert row.count(" | ") == 10  # eleven cells: nothing in the name forged a column or a row
    if fmt == "table":
        assert "only in A: plain; only in B: other" in result.stdout


def test_json_keeps_names_exact(tmp_path):
    """JSON escapes control characters itself: the name reads back unchanged."""
    a = _jsonl(tmp_path / "a.jsonl", _runs(HOSTILE))
    b = _jsonl(tmp_path / "b.jsonl", _runs(HOSTILE, base=2000))
    result = perfctl("compare", a, b, "--format", "json")
    assert ESC not in result.stdout and json.loads(result.stdout)["benchmarks"][0]["benchmark"] == HOSTILE


def test_integer_options_beyond_the_wire_are_one_line(tmp_path):
    """A seed of 10^23 passed argparse and then overflowed the request's uint64 (a ValueError traceback)."""
    path = _jsonl(tmp_path / "a.jsonl", _runs())
    line = _one_line(perfctl("compare", path, path, "--seed", "9" * 23))
    assert "--seed: must be at most 4294967295" in line
    assert "must be at most 4294967295" in _one_line(perfctl("stat", "-r", str(1 << 40), "--", "/bin/true"),
                                                     "perfctl stat: ")


@pytest.mark.parametrize("words, prefix, said", [
    (["--bogus"], "perfctl: ", "unknown option --bogus before the command (see perfctl --help)"),
    (["-x", "stat"], "perfctl: ", "unknown option -x before the command"),
    (["stat", "--bogus", "--", "/bin/true"], "perfctl stat: ", "unrecognized arguments: --bogus (see perfctl stat "
                                                               "--help)"),
    (["compare", "a", "b", "--nope", "1"], "perfctl compare: ", "unrecognized arguments: --nope 1"),
    (["jobs", "--wiat"], "perfctl jobs: ", "unrecognized arguments: --wiat (see perfctl jobs --help)"),
])
def test_unknown_options_are_named_by_the_command_they_were_given_to(words, prefix, said):
    """`perfctl --bogus` said only that a command is required, and `perfctl stat --bogus` blamed `perfctl` and
    pointed at its --help rather than stat's."""
    assert said in _one_line(perfctl(*words), prefix)


def test_error_lines_show_control_characters(tmp_path):
    result = perfctl("compare", str(tmp_path / "no\x1b[2Jfile.jsonl"), str(tmp_path / "b.jsonl"))
    line = _one_line(result)
    assert "no\\x1b[2Jfile.jsonl" in line and ESC not in result.stderr


def test_stat_shows_a_failing_benchmarks_stderr_literally():
    script = "printf 'boom \\033[2J\\033]0;owned\\007[bold red]x[/]\\n' >&2; exit 1"
    result = perfctl("stat", "-r", "1", "-e", "task-clock", "--", "/bin/sh", "-c", script)
    assert result.returncode == 1, result.stderr
    assert "boom \\x1b[2J\\x1b]0;owned\\x07[bold red]x[/]" in result.stdout, result.stdout
    assert ESC not in result.stdout and "\x07" not in result.stdout



def test_listings_from_a_real_server_show_hostile_strings_literally(fleet):
    """A client submits a job whose argv carries a newline, a bidi override and markup; an agent registers
    with an inventory holding markup (the server refuses escapes there) and a markup event
    name, and sends samples of a benchmark whose name is markup. Every listing shows them literally.
    (The server refuses ESC in names and argv; the hostile-server test below covers those.)"""
    markup = "[bold red]b[/]|x"
    for name in ("box-a", "box-b"):
        fleet.agent_token(name)
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    wait_for(lambda: fleet.client("machines", "--json", server=server).returncode == 0, 60, "the server")
    agent = rpc.AgentServiceStub(grpc.insecure_channel(server))
    # the server refuses control characters in an inventory's names: what it accepts is markup and bidi-free
    # text that rich would still interpret
    inventory = {"cpu": {"vendor": "[bold red]v[/]", "family": 25, "model": 1}, "kernel": {"release": "6.1[blink]"},
                 "pmu": {"present": False}}
    for name in ("box-a", "box-b"):
        metadata = (("authorization", f"Bearer {open(fleet.agent_token(name)).read().strip()}"),)
        agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(
            name=name, machine_id="0123456789abcdef", inventory_json=json.dumps(inventory), backends=["perf_event"],
            events=[pb.EventSupport(event="[bold red]ev[/]", supported=True)])), metadata=metadata)
        base = 1000 if name == "box-a" else 2000
        samples = [wire.sample_to_proto(sample_of({**record, "uuid": str(uuid.uuid4())}))
                   for record in _runs(markup, base=base)]
        acks = list(agent.StreamSamples(iter([pb.SampleBatch(sequence=1, samples=samples)]), metadata=metadata))
        assert acks and acks[-1].sequence == 1

    argv = ["/bin/echo", "a\nforged", "\u202eab", "[bold red]x[/]"]
    submitted = fleet.client("submit", "--machines", "box-a", "--", *argv, server=server)
    assert submitted.returncode == 0, submitted.stderr
    jobs = fleet.client("jobs", server=server)
    assert jobs.returncode == 0, jobs.stderr
    assert "/bin/echoa\\nforged\\u202eab[boldred]x[/]" in _first_column(jobs.stdout, 4), jobs.stdout
    assert "\u202e" not in jobs.stdout and "forged │" not in jobs.stdout
    assert json.loads(fleet.client("jobs", "--json", server=server).stdout)[0]["commands"] == [argv]

    machines = fleet.client("machines", "box-a", server=server)  # the details of one machine
    assert machines.returncode == 0, machines.stderr
    shown = " ".join(machines.stdout.split())
    assert "[bold red]v[/]" in shown and "6.1[blink]" in shown and "[bold red]ev[/]" in shown, machines.stdout
    assert ESC not in machines.stdout and "\x07" not in machines.stdout

    for fmt in ("table", "markdown", "csv"):
        compare = fleet.client("compare", "box-a", "box-b", "--format", fmt, server=server)
        assert compare.returncode == 3, compare.stderr
        assert {"table": "[bold red]b[/]|x  ", "markdown": "| \\[bold red\\]b\\[/\\]\\|x |",
                "csv": "[bold red]b[/]|x,"}[fmt] in compare.stdout, compare.stdout


class _HostileQueries(rpc.QueryServiceServicer):
    """A QueryService that answers with escapes everywhere: a compromised or older server, or a stored
    row that predates the server's checks. The client is the last line of defence of the terminal."""

    def ListMachines(self, request, context):
        malformed = [pb.MachineSummary(name=f"odd-{i}", machine_id="m", inventory_json=text) for i, text in enumerate(
            ('{"cpu": 5, "kernel": "x", "pmu": [1]}', '{"cpu": {"vendor": NaN}}', "[" * 100_000, "not json"))]
        return pb.ListMachinesResponse(machines=[pb.MachineSummary(
            name=HOSTILE, machine_id="m", inventory_json=json.dumps({"kernel": {"release": HOSTILE}}),
            backends=[HOSTILE], events=[pb.EventSupport(event=HOSTILE, supported=True)], audit_verdict=HOSTILE),
            *malformed])

    def GetAudits(self, request, context):
        good = {"audit_id": "a" * 8, "verdict": "trusted", "time_ns": time.time_ns(), "fit": None,
                "kernels": [{"kernel": HOSTILE, "backend": "dbi", "expected": 5, "exact": True}]}
        broken = [{**good, "kernels": 5}, {**good, "fit": {"a": 1, "b": 1, "a_interval": [1], "b_interval": 2}},
                  {**good, "time_ns": "now"}, [1, 2],
                  # counts whose squares overflow floats broke the fleet spread's standard deviation
                  {**good, "kernels": [{**good["kernels"][0], "kernel": "k", "expected": 10**200}]}]
        return pb.GetAuditsResponse(audits=[
            pb.AuditRecord(machine=HOSTILE, audit_id="1", report_json=json.dumps(good)),
            *(pb.AuditRecord(machine="box-b", audit_id=str(i), report_json=json.dumps(report))
              for i, report in enumerate(broken)),
            pb.AuditRecord(machine="box-b", audit_id="9", report_json="{" * 100_000)])

    def ListAudits(self, request, context):
        """The same reports as their own summaries: a server that digests nothing."""
        return pb.ListAuditsResponse(audits=[pb.AuditSummary(machine=r.machine, audit_id=r.audit_id,
                                                             digest_json=r.report_json)
                                             for r in self.GetAudits(request, context).audits])

    def GetAuditReport(self, request, context):
        return next(r for r in self.GetAudits(None, context).audits if r.audit_id == request.audit_id)

    def GetJobs(self, request, context):
        return pb.GetJobsResponse(jobs=[pb.JobStatus(
            job_id=HOSTILE, machine=HOSTILE, state=HOSTILE, message=HOSTILE,
            job=pb.Job(commands=[pb.Command(name="x", argv=["/bin/echo", HOSTILE])]))])

    def Compare(self, request, context):
        if request.a.machine == "broken":  # something that is not a comparison, naming a type to build
            return pb.CompareResponse(comparison_json=json.dumps({"type": f"os.system{HOSTILE}", "fields": {}}))
        return pb.CompareResponse(comparison_json=_hostile_comparison())

    def SubmitJob(self, request, context):
        return pb.SubmitJobResponse(job_ids=[HOSTILE])


def _hostile_comparison() -> str:
    """A real comparison whose benchmark, labels and notes are hostile text."""
    from perfctl import results
    from perfctl.analysis.compare import Parameters, compare
    from perfctl.pairing import CompareContext, Compared

    key = (HOSTILE, "task-clock")
    comparison = compare({key: [1.0, 1.1, 1.2, 1.0, 1.1]}, {key: [1.0, 1.1, 1.2, 1.0, 1.2]}, Parameters(),
                         {key: [HOSTILE]})
    context = CompareContext(HOSTILE, HOSTILE, "perfctl", ("task-clock",), HOSTILE, units={"task-clock": HOSTILE})
    return results.dumps(Compared(comparison, context, (HOSTILE,)))


@pytest.fixture
def hostile_server(tmp_path):
    server, connection = fake_query_server(_HostileQueries(), tmp_path)
    yield connection
    server.stop(grace=None)


@pytest.mark.parametrize("command", [["jobs"], ["machines"], ["compare", "box-a", "box-b", "--format", "csv"],
                                     ["compare", "broken", "box-b"], ["submit", "--machines", "box-a"],
                                     ["audit", "report"]])
def test_a_hostile_server_cannot_drive_the_terminal(hostile_server, command):
    args = [command[0], *hostile_server, *command[1:]] + (["--", "/bin/true"] if command[0] == "submit" else [])
    result = perfctl(*args)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert ESC not in output and "\x07" not in output and "\u202e" not in output, repr(output)
    # shown, and literally: interpreted markup would leave the "x" alone, without "red]" and "[/]"
    assert "\\x1b[2J" in output and "red]x[/]" in output, output
    if command[1:2] == ["broken"]:
        _one_line(result)
    else:
        assert result.returncode == 0, result.stderr
    if command == ["machines"]:  # inventories of the wrong shape show as '?', the listing goes on
        assert all(f"odd-{i}" in result.stdout for i in range(4)), result.stdout
    if command == ["audit", "report"]:  # reports of the wrong shape are set aside and counted
        assert "6 audit reports of machine box-b could not be read" in " ".join(result.stdout.split())
        for machines_json in (perfctl("machines", *hostile_server, "--json"),
                              perfctl("audit", "report", *hostile_server, "--json")):
            assert machines_json.returncode == 0, machines_json.stderr
            json.loads(machines_json.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    if command[0] == "compare" and result.returncode == 0:
        # rendered here from data: a name's line breaks cannot forge rows (a header and one row)
        assert len(result.stdout.splitlines()) == 2, result.stdout


@pytest.mark.parametrize("text, shown", [
    ("plain name-1.2_x", "plain name-1.2_x"),
    ("é 日本 ünïcode", "é 日本 ünïcode"),
    ("\x1b[2J", "\\x1b[2J"),
    ("a\tb\nc\rd", "a\\tb\\nc\\rd"),
    ("\x7f\x9b", "\\x7f\\x9b"),  # DEL, and C1 CSI (an escape sequence on its own in some terminals)
    ("\u202eevil\u2066", "\\u202eevil\\u2066"),  # bidi override and isolate
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
    ("\ud800", "\\ud800"),  # a lone surrogate: JSON can carry it, UTF-8 cannot encode it
    ("[bold red]x[/]", "[bold red]x[/]"),  # markup is text here; cell() keeps rich from reading it
])
def test_visible(text, shown):
    from perfctl.text import cell, visible

    assert visible(text) == shown
    assert cell(text).plain == shown and not cell(text).spans


def test_visible_lines_keeps_line_ends_and_escapes_the_rest():
    from perfctl.text import visible_lines

    assert visible_lines("a,\x1b\r\nb\rc\n\n") == "a,\\x1b\r\nb\\rc\n\n"


# ---- finding 12: SIGTERM and SIGHUP of `perfctl stat` -------------------------------------------------------

@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_stops_stat_keeps_finished_runs_and_kills_the_benchmark_tree(tmp_path, signum, code):
    """The benchmark forks a child into its own session (as a daemon would) and waits for it: the signal
    arrives mid-run, after a few finished runs."""
    marker = f"0.3{os.getpid()}{signum}"  # a sleep duration no other process has: the child's name in /proc
    script = tmp_path / "bench.sh"
    script.write_text(f"#!/bin/sh\nsetsid sleep {marker} &\nwait\n")
    script.chmod(0o755)
    out = tmp_path / "s.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "1000", "-e", "task-clock",
                             "-o", str(out), "--", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # a few runs finished, then into the next one, whose child must be running
    stdout, stderr = signal_when(
        proc, lambda: out.exists() and out.read_text().count("\n") >= 4 and processes_with(marker), signum,
        "four finished runs", settle=0.1)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "interrupted after" in stderr and signal.Signals(signum).name in stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]  # nothing torn
    samples = [r for r in records if r["type"] == "sample"]
    assert len(samples) >= 3 and all(s["outcome"] == "ok" for s in samples)
    assert f"({len(samples)} runs" in " ".join(stdout.split())  # the summary of exactly the finished runs
    assert processes_with(marker) == [], "a process of the benchmark's tree survived"
