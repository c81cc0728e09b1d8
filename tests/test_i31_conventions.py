"""Issue 31's conventions, through the real command line: a schema and the perfctl version in every JSON
document; no abbreviated options, a "did you mean" for a mistyped command, option or value; completion of
option values in bash, zsh and fish (each run in the real shell); a man page generated from the parser
that groff renders without a warning; `perfctl info -q` that always says what it checked."""

import argparse
import json
import os
import re
import shutil
import subprocess

import pytest
from conftest import needs_root, one_line, perfctl

from perfctl import __version__
from perfctl.agent import inventory
from perfctl.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hyperfine(path, commands):
    path.write_text(json.dumps({"results": [{"command": c, "times": t, "exit_codes": [0] * len(t)}
                                            for c, t in commands.items()]}))
    return str(path)


# 1. schema and version


def test_every_json_document_starts_with_its_schema_and_the_perfctl_version(tmp_path):
    a = _hyperfine(tmp_path / "a.json", {"sort": [0.010, 0.011, 0.0105, 0.0102, 0.0108] * 4})
    b = _hyperfine(tmp_path / "b.json", {"sort": [0.012, 0.013, 0.0125, 0.0122, 0.0128] * 4})
    compared = perfctl("compare", a, b, "--format", "json")
    assert compared.returncode in (0, 3), compared.stderr
    info = perfctl("info", "--json")
    ab = perfctl("ab", "--max-runs", "6", "--min-runs", "6", "--format", "json", "--", "true", ":::", "true",
                 timeout=300)
    assert ab.returncode in (0, 3, 4), ab.stderr
    for result, schema in ((compared, "perfctl.compare/1"), (info, "perfctl.info/1"), (ab, "perfctl.ab/1")):
        document = json.loads(result.stdout)
        assert list(document)[:2] == ["schema", "perfctl"], list(document)[:4]
        assert (document["schema"], document["perfctl"]) == (schema, __version__)
    assert json.loads(info.stdout)["type"] == "machine"  # the inventory's own keys are kept beside them


def test_a_listing_stays_an_array_and_each_element_carries_the_stamp():
    from perfctl.report import Report, json_text, versioned
    from perfctl.report.fleet import JobsReport, JobsWaitReport, MachineReport

    class Listing(Report):
        kind = "benchmarks"

        def document(self):
            return [{"benchmark": "x"}, {"benchmark": "y"}]

    document = json.loads(json_text(versioned(Listing())))
    assert document == [{"schema": "perfctl.benchmarks/1", "perfctl": __version__, "benchmark": name}
                        for name in ("x", "y")]
    assert versioned(JobsReport([])) == []  # an empty listing has nothing to stamp
    # one machine and the --wait listing keep the shapes of `machines` and `jobs`
    assert (MachineReport.schema, JobsWaitReport.schema) == ("machines", "jobs")


def test_every_report_kind_has_its_own_schema_name():
    import importlib
    import pkgutil

    import perfctl.report as reports
    from perfctl.report import Report

    for module in pkgutil.iter_modules(reports.__path__):
        importlib.import_module(f"perfctl.report.{module.name}")

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    names = {}
    for cls in subclasses(Report):
        if "json" in cls.formats and cls.__module__.startswith("perfctl.report"):
            name = cls.schema or cls.kind.replace(" ", "-")
            assert " " not in name and name, cls
            names.setdefault(name, set()).add(cls.__name__)
    assert {"compare", "ab", "info", "machines", "jobs", "benchmarks", "audit", "cache-mrc"} <= set(names), names
    shared = {name: classes for name, classes in names.items() if len(classes) > 1}
    # the one machine's and --wait's documents are the listings' shapes; a failed audit is an audit document
    assert shared == {"machines": {"MachinesReport", "MachineReport"}, "jobs": {"JobsReport", "JobsWaitReport"},
                      "audit": {"AuditReport", "AuditFailed"}}, shared


# 2. no abbreviations, did you mean


def test_an_abbreviated_option_is_a_usage_error_with_the_option_it_may_mean():
    line = one_line(perfctl("stat", "--rep", "2", "--", "true"), "perfctl stat: ", code=2)
    assert "unrecognized arguments: --rep" in line and "did you mean '--repeat'?" in line
    line = one_line(perfctl("compare", "--form", "json", "a", "b"), "perfctl compare: ", code=2)
    assert "unrecognized arguments: --form" in line and "did you mean '--format'?" in line
    # no parser of any command takes a prefix
    parsers = [build_parser()]
    for parser in parsers:  # grows as subcommands are found
        assert parser.allow_abbrev is False, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
    assert len(parsers) > 16
    # short options still combine: -qv is -q -v, which exclude each other
    assert "not allowed with" in one_line(perfctl("info", "-qv"), code=2)


def test_a_mistyped_command_or_value_gets_did_you_mean():
    assert one_line(perfctl("stats"), code=2) == "perfctl: no command 'stats'; did you mean 'stat'?"
    assert one_line(perfctl("cache", "mrk"), code=2) == "perfctl cache: no command 'mrk'; did you mean 'mrc'?"
    assert one_line(perfctl("zzzz"), code=2) == "perfctl: no command 'zzzz' (see perfctl --help)"
    line = one_line(perfctl("compare", "--format", "jsn", "a", "b"), "perfctl compare: ", code=2)
    assert "invalid choice: 'jsn'" in line and "did you mean 'json'?" in line
    line = one_line(perfctl("stat", "--backend", "perf_event,ebfp", "--", "true"), "perfctl stat: ", code=2)
    assert "unknown backend 'ebfp'" in line and "did you mean 'ebpf'?" in line


# 3. completion, in the real shells


def _script(tmp_path, shell):
    result = perfctl("completion", shell)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    path = tmp_path / f"perfctl.{shell}"
    path.write_text(result.stdout)
    return str(path)


def test_bash_completes_option_values_users_and_files(tmp_path):
    script = _script(tmp_path, "bash")

    def complete(*words):
        driver = (f'source "$1"; complete -p perfctl; COMP_WORDS=({" ".join(json.dumps(w) for w in words)}); '
                  f'COMP_CWORD={len(words) - 1}; _perfctl; printf "%s\\n" "${{COMPREPLY[@]}}"')
        result = subprocess.run(["bash", "--norc", "-c", driver, "bash", script], capture_output=True, text=True,
                                timeout=60, cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        registered, *offered = result.stdout.splitlines()
        assert registered == "complete -F _perfctl perfctl"
        return sorted(w for w in offered if w)

    assert complete("perfctl", "stat", "--backend", "") == ["dbi", "ebpf", "perf-stat", "perf_event",
                                                            "perf_event,ebpf"]
    assert complete("perfctl", "ab", "--fail-on", "") == ["beyond", "relevant"]
    assert complete("perfctl", "compare", "--input-format", "perf-") == ["perf-stat", "perf-stat-json"]
    assert complete("perfctl", "agent", "--user", "roo") == ["root"]
    (tmp_path / "server.crt").write_text("")
    assert complete("perfctl", "server", "--tls-cert", "serv") == ["server.crt"]
    assert complete("perfctl", "completion", "") == ["bash", "fish", "man", "zsh"]


def test_fish_completes_commands_option_values_and_files(tmp_path):
    if shutil.which("fish") is None:
        pytest.skip('probe: shutil.which("fish") found no fish (deploy/setup.sh installs it)')
    script = _script(tmp_path, "fish")
    (tmp_path / "runs-a.jsonl").write_text("")

    def complete(line):
        result = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C {json.dumps(line)}"],
                                capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return sorted(row.split("\t")[0] for row in result.stdout.splitlines())

    assert complete("perfctl com") == ["compare", "completion"]
    assert complete("perfctl cache m") == ["mrc"]
    assert complete("perfctl stat --backend ") == ["dbi", "ebpf", "perf-stat", "perf_event", "perf_event,ebpf"]
    assert complete("perfctl compare --format m") == ["markdown"]
    assert complete("perfctl stat --rep") == ["--repeat"]
    assert complete("perfctl stat -o runs-") == ["runs-a.jsonl"]
    assert complete("perfctl compare runs-") == ["runs-a.jsonl"]
    assert complete("perfctl stat -r ") == []  # a number: nothing to offer
    assert "gzip" in complete("perfctl stat -- gzi")  # the benchmark's program
    assert complete("perfctl stat -- gzip runs-") == ["runs-a.jsonl"]  # then its files, not perfctl's options


def test_zsh_completes_option_values(tmp_path):
    """The generated function run in a real zsh with the completion system's words and CURRENT set, and
    compadd/_files/_users standing in for the widgets (they only run inside a completion widget)."""
    if shutil.which("zsh") is None:
        pytest.skip('probe: shutil.which("zsh") found no zsh (deploy/setup.sh installs it)')
    script = _script(tmp_path, "zsh")

    def complete(*words):
        driver = ('compdef() { :; }; compadd() { [[ $1 == -- ]] && shift; print -l -- "$@"; }; '
                  '_files() { print "<files $*>"; }; _users() { print "<users>"; }; _message() { print "<none>"; }; '
                  f'source "$1"; words=({" ".join(json.dumps(w) for w in words)}); CURRENT={len(words)}; '
                  f'PREFIX={json.dumps(words[-1])}; _perfctl')
        result = subprocess.run(["zsh", "-f", "-c", driver, "zsh", script], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout.split()

    assert complete("perfctl", "stat", "--backend", "") == ["perf_event", "perf-stat", "dbi", "ebpf",
                                                            "perf_event,ebpf"]
    assert "completion" in complete("perfctl", "")
    assert complete("perfctl", "agent", "--user", "") == ["<users>"]
    assert complete("perfctl", "agent", "--spool", "") == ["<files", "-/>"]
    assert complete("perfctl", "stat", "-r", "") == ["<none>"]


# 4. the man page


def test_the_man_page_is_generated_from_the_parser_and_renders_without_a_warning():
    generated = perfctl("completion", "man")
    assert generated.returncode == 0, generated.stderr
    committed = os.path.join(ROOT, "docs", "perfctl.1")
    with open(committed) as f:
        assert f.read() == generated.stdout, "docs/perfctl.1 is stale: perfctl completion man > docs/perfctl.1"
    if shutil.which("groff") is None:
        pytest.skip('probe: shutil.which("groff") found no groff')
    rendered = subprocess.run(["groff", "-man", "-Tutf8", "-ww", committed], capture_output=True, text=True,
                              timeout=60)
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
    text = subprocess.run(["col", "-bx"], input=rendered.stdout, capture_output=True, text=True).stdout
    assert text.startswith("PERFCTL(1)")
    from perfctl.cli.manpage import _commands

    for path, command, _ in _commands(build_parser()):
        assert f"\n   {path}\n" in text, path  # a subsection per command
        for action in command._actions:
            for option in action.option_strings if not isinstance(action, argparse._HelpAction) else ():
                assert option in text, (path, option)  # -h is said once, in DESCRIPTION
    if shutil.which("man"):
        shown = subprocess.run(["man", "-l", committed], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "80"})
        assert shown.returncode == 0 and "perfctl cache mrc" in shown.stdout, shown.stderr


# 5. info says what it checked


def _checks():
    """The rows `perfctl info` shows: the inventory with its eBPF probe."""
    import dataclasses

    return inventory.checks(dataclasses.replace(inventory.collect(), ebpf=inventory.probe_ebpf()))


def test_info_quiet_always_says_what_it_checked():
    checks = _checks()
    result = perfctl("info", "-q")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    said = " ".join(result.stdout.split())  # the last paragraph, which wraps with an indent
    last = said[said.rindex("checked "):]
    disturbing = [c for c in checks if not c.ok]
    assert last.startswith(f"checked {len(checks)} items: ")
    if disturbing:
        assert f"{len(disturbing)} disturb" in last
        assert all(c.item in result.stdout for c in disturbing)
    else:
        assert "none disturbs counting as it is" in last and "┃ item" not in result.stdout


def test_every_row_of_info_says_how_it_is_changed():
    checks = _checks()
    assert len(checks) >= 18
    assert all(c.fix for c in checks), [c.item for c in checks if not c.fix]
    table = perfctl("info", env={**os.environ, "COLUMNS": "200"}).stdout
    for check in checks:
        assert " ".join(check.fix.split()[:2]) in " ".join(table.split()), check.item


# 6. the fleet's listings at a terminal's width


def _benchmarks(argv, labels=("try=quickstart",)):
    import hashlib
    import time

    from perfctl.v1 import fleet_pb2 as pb

    digest = hashlib.sha256(b"gzip").hexdigest()
    return [pb.BenchmarkSummary(machine=machine, name="gzip", runs=20, jobs=1, executable_sha256=digest,
                                input_digest=digest[::-1], argv=argv, labels=labels, first_ns=time.time_ns() - 10**10,
                                last_ns=time.time_ns()) for machine in ("box-a", "box-b")]


@pytest.mark.parametrize("width", [120, 100])
def test_benchmarks_keep_a_benchmark_on_one_line_at_the_terminals_width(width):
    import io

    from rich.console import Console

    from perfctl.report.fleet import BenchmarksReport

    long_argv = ["/usr/local/lib/perfctl/benchmarks/bin/matmul-O3-native", "--size", "1500", "--out", "/dev/null"]
    for argv in (["/usr/bin/gzip", "-c", "/etc/services"], long_argv):
        out = io.StringIO()
        BenchmarksReport(_benchmarks(argv)).table(Console(file=out, width=width))
        lines = out.getvalue().splitlines()
        rows = [line for line in lines if line.startswith("│")]
        assert len(rows) == 2 and all(len(line.rstrip()) <= width for line in lines), out.getvalue()
        cells = [c.strip() for c in rows[0].split("│")[1:-1]]
        header = [c.strip() for c in next(line for line in lines if line.startswith("┃")).split("┃")[1:-1]]
        assert header == ["machine", "benchmark", "executable", "input", "argv", "labels", "runs", "last run"]
        assert cells[2] == hashlib_hex()[:12] and len(cells[3]) == 12
        shown = cells[4]
        full = " ".join(argv)
        assert shown == full or (shown.startswith(full[:4]) and shown.endswith(full[-4:]) and "…" in shown), shown
    # -v: the full digests and argv (folded); no labels anywhere: no labels column
    out = io.StringIO()
    BenchmarksReport(_benchmarks(long_argv, labels=()), verbosity=1).table(Console(file=out, width=width))
    lines = out.getvalue().splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("┃")).split("┃")[1:-1]]
    assert "labels" not in header and "first run" in header and "jobs" in header

    def column(name):  # a column's cells, the lines of its folded values joined
        return "".join(line.split("│")[1 + header.index(name)].strip() for line in lines if line.startswith("│"))

    assert hashlib_hex() in column("executable")
    assert "".join(long_argv) in column("argv").replace(" ", "")


def hashlib_hex():
    import hashlib

    return hashlib.sha256(b"gzip").hexdigest()


# 7. imports: what pairs, and why not


def test_hyperfine_commands_that_pair_with_nothing_are_named_with_the_fix(tmp_path):
    times = [0.010 + 0.0001 * i for i in range(10)]
    a = _hyperfine(tmp_path / "a.json", {"matmul-O0 150": times, "sort 100": times})
    b = _hyperfine(tmp_path / "b.json", {"matmul 150": times, "sort 100": times})
    result = perfctl("compare", a, b)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert ("A's 'matmul-O0 150' and B's 'matmul 150' pair with nothing: benchmarks pair by name, and hyperfine "
            "names one by its command; give both the same name (hyperfine -n NAME), or compare one of each side by "
            "name (--benchmark 'matmul-O0 150' --benchmark 'matmul 150')") in said
    assert "pair with nothing" in " ".join(json.loads(perfctl("compare", a, b, "--format", "json").stdout)["notes"])
    # the fix it names works: the two builds compared
    chosen = perfctl("compare", a, b, "--benchmark", "matmul-O0 150", "--benchmark", "matmul 150", "--format", "json")
    assert [row["benchmark"] for row in json.loads(chosen.stdout)["benchmarks"]] == ["matmul-O0 150"], chosen.stderr
    # nothing in common: the one-line error says the same
    c = _hyperfine(tmp_path / "c.json", {"matmul 150": times, "sort-O2 100": times})
    line = one_line(perfctl("compare", a, c), "perfctl compare: no benchmark in common", code=2)
    assert "hyperfine -n NAME" in line and "--benchmark 'matmul-O0 150' --benchmark 'matmul 150'" in line
    # one benchmark a side pairs whatever the names, and says so
    one_a, one_b = (_hyperfine(tmp_path / f"{s}1.json", {name: times}) for s, name in (("a", "x -O0"), ("b", "x")))
    document = json.loads(perfctl("compare", one_a, one_b, "--format", "json").stdout)
    assert "one benchmark per file: comparing 'x -O0' (A) with 'x' (B)" in " ".join(document["statement"])


def test_a_perf_stat_file_is_one_benchmark_with_a_neutral_name_on_both_sides(tmp_path):
    if shutil.which("perf") is None:
        pytest.skip('probe: shutil.which("perf") found no perf')
    for name, argv in (("old", ["/bin/true"]), ("new", ["/bin/ls", "/"])):
        for _ in range(3):
            made = subprocess.run(["perf", "stat", "-x,", "-o", str(tmp_path / f"{name}.csv"), "--append", "-e",
                                   "page-faults", "--", *argv], capture_output=True, timeout=60)
            assert made.returncode == 0, made.stderr
    result = perfctl("compare", str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--metric", "page-faults",
                     "--format", "json")
    document = json.loads(result.stdout)
    assert [row["benchmark"] for row in document["benchmarks"]] == ["perf stat"], result.stderr
    assert not any("one benchmark per file" in line for line in document["statement"])  # no renaming to say
    assert ("perf stat -x, records no command: each file's runs are one benchmark, called 'perf stat'"
            in document["notes"])


# 6. an agent waits for a server calmly


@needs_root  # the agent runs its audit's kernels as nobody
def test_an_agent_waits_for_its_server_in_one_line_and_warns_only_when_it_lasts(fleet):
    """An agent started before its server (README's quickstart) used to warn "Connection refused" at every
    try: 4 warnings before the server listened. Now one calm line, a warning once UNREACHABLE_WARN_S passed
    (never one per try), and the wait's length when it registers. A real agent and a server started late."""
    from fleet import free_port, wait_for

    from perfctl.agent.uplink import UNREACHABLE_WARN_S

    address = f"127.0.0.1:{free_port()}"
    fleet.agent_token("box-a")
    fleet.start_agent("box-a", address)
    wait_for(lambda: "waiting for server" in fleet.log("box-a"), 60, "the agent to try the server")
    warned = wait_for(lambda: "unreachable for" in fleet.log("box-a"), UNREACHABLE_WARN_S + 30, "the warning")
    fleet.start_server(address, ["--data-dir", str(fleet.dir / "data")])
    wait_for(lambda: f"registered with {address}" in fleet.log("box-a"), 60, "the agent to register")
    log = fleet.log("box-a")
    assert warned and log.count(f"waiting for server {address} (connection refused); retrying") == 1, log
    assert len([line for line in log.splitlines() if " WARNING " in line]) == 1, log
    lasted = re.search(rf"WARNING server {address} unreachable for (\d+) s \(connection refused\); still retrying",
                       log)
    assert lasted and int(lasted[1]) >= UNREACHABLE_WARN_S, log  # at the first try past it (backoff grows)
    assert "Connection refused" not in log and "UNAVAILABLE" not in log and "reconnecting in" not in log, log
    assert re.search(rf"registered with {address} as box-a after waiting \d+ s", log), log
