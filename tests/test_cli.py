"""`perfctl stat` as a user runs it: outputs, exit codes, and every kind of bad input (an option unknown to the
command it was given to, an integer beyond the wire); an output that cannot be written, a run that cannot start or
a disk that fills leaves the samples file whole or as it was."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    jsonl_file,
    needs_no_pmu,
    one_line,
    perfctl,
    read_records,
    sample_of,
    sample_records,
)


def test_stat_writes_samples_and_a_summary(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "3", "--warmup", "1", "-o", str(out), "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    assert "page-faults" in result.stdout and "median" in result.stdout
    records = read_records(out)
    assert records[0]["type"] == "machine"
    samples = [sample_of(record) for record in records[1:]]
    assert [s.warmup for s in samples] == [True, False, False, False]
    assert all(s.reading("page-faults").value > 0 for s in samples)
    assert samples[0].benchmark.executable == "/bin/true" and len(samples[0].benchmark.executable_sha256) == 64


def test_json_goes_to_stdout_and_summary_to_stderr():
    result = perfctl("stat", "-r", "2", "--json", "-e", "page-faults,task-clock", "--", "/bin/true")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["machine", "sample", "sample"]
    assert "median" in result.stderr


def test_csv_has_one_row_per_run_and_event():
    result = perfctl("stat", "-r", "2", "--csv", "-e", "page-faults,task-clock", "--", "/bin/true")
    rows = result.stdout.strip().splitlines()
    assert rows[0].startswith("run_index,warmup,outcome") and len(rows) == 1 + 2 * 2


@pytest.mark.parametrize("args, message", [
    (["stat", "--", "/nonexistent/bench"], "command not found"),
    (["stat", "--", "no-such-command-anywhere"], "command not found in PATH"),
    (["stat", "--", "/tmp"], "not an executable file"),
    (["stat", "-e", "bogus", "--", "/bin/true"], "unknown event"),
    (["stat", "-e", "nosuchgroup:nosuchevent", "--", "/bin/true"], "unknown"),
    (["stat", "-r", "0", "--", "/bin/true"], "at least 1"),
    (["stat", "-r", "x", "--", "/bin/true"], "not an integer"),
    (["stat", "--warmup", "-1", "--", "/bin/true"], "negative"),
    (["stat", "--timeout", "0", "--", "/bin/true"], "positive"),
    (["stat", "--pin", "4096", "--", "/bin/true"], "--pin 4096"),
    (["stat", "--user", "no-such-user-x", "--", "/bin/true"], "user"),
    (["stat", "--env-size", "10", "--", "/bin/true"], "--env-size"),
    (["stat", "--backend", "magic", "--", "/bin/true"], "unknown backend 'magic'"),
        (["stat", "--backend", "dbi,ebpf", "--", "/bin/true"], "only perf_event,ebpf can"),
        (["stat", "--backend", "ebpf", "-e", "cycles", "--", "/bin/true"], "the ebpf backend counts a fixed set"),
    (["stat"], "no command given"),
    ([], "required"),
])
def test_bad_input_gets_one_line_and_exit_2(args, message):
    result = perfctl(*args)
    assert result.returncode == 2
    assert message in one_line(result)


def test_not_executable_file_is_refused(tmp_path):
    script = tmp_path / "bench"
    script.write_text("#!/bin/sh\n")
    assert "not executable" in one_line(perfctl("stat", "--", str(script)))


def test_bad_input_leaves_existing_samples_intact(tmp_path):
    out = tmp_path / "s.jsonl"
    assert perfctl("stat", "-r", "2", "-o", str(out), "--", "/bin/true").returncode == 0
    before = out.read_bytes()
    assert perfctl("stat", "-e", "bogus", "-o", str(out), "--", "/bin/true").returncode == 2
    assert out.read_bytes() == before
    assert perfctl("stat", "-r", "1", "-o", str(out), "--", "/bin/true").returncode == 0
    assert out.read_bytes().startswith(before) and len(read_records(out)) == 2 + 1 + 2


def test_failed_runs_are_recorded_and_exit_1(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "2", "-o", str(out), "--", "/bin/sh", "-c", "echo broken >&2; kill -SEGV $$")
    assert result.returncode == 1
    assert "2 of 2 runs failed" in result.stdout and "signal 11" in result.stdout and "broken" in result.stdout
    assert [s["outcome"] for s in read_records(out)[1:]] == ["signal", "signal"]


def test_a_failed_runs_stderr_is_shown_as_it_was_written():
    """Not read as rich's emoji codes: a run that wrote ":fire:" was shown as the emoji."""
    result = perfctl("stat", "-r", "1", "--", "/bin/sh", "-c", "echo bad :fire: :smile: >&2; exit 3")
    assert result.returncode == 1
    assert "exited with status 3: bad :fire: :smile:" in result.stdout, result.stdout


def test_timeout_is_recorded_and_exit_1(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "1", "--timeout", "0.3", "-o", str(out), "--", "/bin/sleep", "20")
    assert result.returncode == 1 and "timed out" in result.stdout
    assert read_records(out)[1]["outcome"] == "timeout"


def test_interrupt_keeps_every_finished_run(tmp_path):
    out = tmp_path / "s.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "100000", "-o", str(out), "--",
                             "/bin/sleep", "0.01"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "interrupted after" in stderr and "Traceback" not in stderr
    records = read_records(out)  # every line parses: nothing torn
    assert len(records) >= 10 and all(r["outcome"] == "ok" for r in records[1:])
    assert "median" in stdout


def test_samples_are_on_disk_while_the_measurement_runs(tmp_path):
    out = tmp_path / "s.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "50", "-o", str(out), "--",
                             "/bin/sleep", "0.05"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert len(read_records(out)) >= 5
    finally:
        proc.kill()
        proc.wait()
    assert os.path.getsize(out) > 0


def test_file_the_kernel_cannot_exec_is_refused(tmp_path):
    script = tmp_path / "bench"
    script.write_text("echo no shebang\n")
    script.chmod(0o755)
    assert "not an ELF executable" in one_line(perfctl("stat", "--", str(script)))



def test_reader_closing_the_pipe_early_does_not_change_the_exit_code(tmp_path):
    out = tmp_path / "s.jsonl"
    for _ in range(5):  # the race between `head` exiting and the table being written varies run to run
        result = subprocess.run(f"{sys.executable} -m perfctl stat -r 20 -o {out} -- /bin/true | head -c 10; "
                                "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True,
                                text=True)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_a_reader_gone_before_the_output_keeps_the_comparisons_exit_code():
    """`perfctl compare ... | true`: nothing can be written, no traceback, and the exit code still says what
    the comparison found (3: a relevant difference between these files)."""
    data = Path(__file__).resolve().parent / "data"
    files = f"{data / 'googlebench_counters_a.json'} {data / 'googlebench_counters_b.json'}"
    for fmt in ("json", "csv", "markdown", "table"):
        result = subprocess.run(f"{sys.executable} -m perfctl compare {files} --format {fmt} | true; "
                                "exit ${PIPESTATUS[0]}",
                                shell=True, executable="/bin/bash", capture_output=True, text=True)
        assert "Traceback" not in result.stderr and result.stderr == "", result.stderr
        direct = subprocess.run([sys.executable, "-m", "perfctl", "compare", str(data / "googlebench_counters_a.json"),
                                 str(data / "googlebench_counters_b.json"), "--format", fmt], capture_output=True)
        assert result.returncode == direct.returncode, fmt


def test_version_prints_the_package_version_and_exits_0():
    from perfctl import __version__

    result = perfctl("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"perfctl {__version__}\n" and __version__.count(".") == 2


@needs_no_pmu
def test_without_a_pmu_stat_says_once_what_it_cannot_count():
    """One line for the events the missing PMU takes away (with the correction it makes impossible); a
    distinct reason its own line; -v each event and the correction's sentence apart."""
    result = perfctl("stat", "-r", "2", "-e", "instructions:u,cycles:u,branches:u,page-faults", "--width", "250",
                     "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if "unsupported" in line or "not corrected" in line]
    assert said == ["3 hardware events unsupported and instructions not corrected: no PMU counts them here (ENOENT)"
                    " — `perfctl info` says why, -v lists them"], result.stdout
    verbose = perfctl("stat", "-v", "-r", "2", "-e", "instructions:u,cycles:u,page-faults", "--width", "250", "--",
                      "/bin/true")
    lines = verbose.stdout.splitlines()
    assert "unsupported instructions:u: no hardware PMU counts this event here (ENOENT); see `perfctl info` for why" \
        in lines and "instructions not corrected: no PMU counts them here" in lines, verbose.stdout
    assert sum("unsupported" in line for line in lines) == 2
    alone = perfctl("stat", "-r", "1", "-e", "cycles:u,page-faults", "--", "/bin/true")
    assert "1 hardware event unsupported: no PMU counts them here (ENOENT)" in alone.stdout, alone.stdout


def test_distinct_unsupported_reasons_get_a_line_each():
    from perfctl.report.stat import VERBOSE, EventSummary, StatSummary, unsupported_lines

    summary = StatSummary(correction_note="instructions not corrected: no PMU counts them here",
                          no_pmu_events=frozenset({"instructions:u", "retired-stores:u"}))
    for label, reason in (("instructions:u", "no hardware PMU counts this event here (ENOENT)"),
                          ("retired-stores:u", "no exact retired-store event is known"),
                          ("tp:x", "not permitted (EACCES)"), ("tp:y", "not permitted (EACCES)")):
        summary.events[label] = EventSummary(label, "count", "perf_event", unsupported=reason)
    assert unsupported_lines(summary) == [
        "1 hardware event unsupported and instructions not corrected: no PMU counts them here (ENOENT) — "
        "`perfctl info` says why, -v lists them",
        "unsupported retired-stores:u: no exact retired-store event is known",
        "unsupported tp:x, tp:y: not permitted (EACCES)"]
    assert len(unsupported_lines(summary, VERBOSE)) == 5


def test_quiet_stat_prints_no_table_but_failed_runs():
    ok = perfctl("stat", "-q", "-r", "2", "--", "/bin/true")
    assert ok.returncode == 0 and ok.stdout == "", ok.stdout
    failed = perfctl("stat", "-q", "-r", "2", "--", "/bin/false")
    assert failed.returncode == 1 and "2 of 2 runs failed" in failed.stdout and "median" not in failed.stdout
    both = perfctl("stat", "-q", "-v", "--", "/bin/true")
    assert both.returncode == 2 and "not allowed with" in both.stderr


# --- the command line as people expect it (issue 13) ---

def _leaf_parsers():
    """(command path, parser) of every command a user can run, `cache mrc` and the like included."""
    import argparse

    from perfctl.cli import build_parser

    def walk(parser, path):
        children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not children:
            yield path, parser
        for action in children:
            for name, child in action.choices.items():
                yield from walk(child, f"{path} {name}".strip())

    return list(walk(build_parser(), ""))


def test_every_command_says_its_exit_codes_in_its_help():
    commands = _leaf_parsers()
    assert {"stat", "compare", "report", "audit", "info", "cache mrc", "cache corun", "cache pirate", "completion",
            "machines", "jobs", "server", "agent", "token", "submit"} <= {path for path, _ in commands}
    for path, _ in commands + [("cache", None)]:
        result = perfctl(*path.split(), "--help")
        assert result.returncode == 0, result.stderr
        epilog = result.stdout[result.stdout.index("exit status:"):]
        assert epilog.startswith("exit status: 0 "), (path, result.stdout)
        assert "; 2 " in " ".join(epilog.split()), (path, epilog)  # every command has its usage error
    compare = " ".join(perfctl("compare", "--help").stdout.split())
    assert all(code in compare for code in ("0 no relevant slowdown", "3 a relevant slowdown", "4 no benchmark",
                                            "2 bad usage"))
    audit = " ".join(perfctl("audit", "--help").stdout.split())
    assert all(code in audit for code in ("0 trusted", "3 degraded", "4 untrusted", "2 the calibration", "128+N"))


def test_every_command_takes_quiet_and_verbose_but_not_both():
    for path, parser in _leaf_parsers():
        options = {o for action in parser._actions for o in action.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= options, path
    both = perfctl("info", "-q", "-v")
    assert both.returncode == 2 and "not allowed with" in one_line(both)
    assert perfctl("info", "-v").returncode == 0


def _hyperfine(path, commands):
    path.write_text(json.dumps({"results": [{"command": c, "times": t, "exit_codes": [0] * len(t)}
                                            for c, t in commands.items()]}))
    return str(path)


def test_quiet_compare_prints_only_the_relevant_slowdowns(tmp_path):
    fast = [0.0100, 0.0101, 0.0099, 0.0100, 0.0102, 0.0098, 0.0100, 0.0101, 0.0099, 0.0100]
    a = _hyperfine(tmp_path / "a.json", {"parse": fast, "link": fast})
    b = _hyperfine(tmp_path / "b.json", {"parse": [v * 1.5 for v in fast], "link": fast})
    loud = perfctl("compare", a, b)
    quiet = perfctl("compare", "-q", a, b)
    assert loud.returncode == quiet.returncode == 3, quiet.stderr
    said = " ".join(loud.stdout.split())  # the headline: what changed, and why the exit code is 3
    assert said.startswith("B slower on 1 of 2 benchmarks: parse 0.667×") and "Exit 3: parse slower" in said
    assert quiet.stdout.startswith("relevant slowdown of B: parse (wall-time) A/B 0.6")
    assert len(quiet.stdout.splitlines()) == 1, quiet.stdout
    copy = tmp_path / "a-again.json"  # a copy: one file on both sides is refused (a run compared with itself)
    copy.write_bytes(open(a, "rb").read())
    same = perfctl("compare", "-q", a, str(copy))
    assert same.returncode == 0 and same.stdout == "", same.stdout


def test_a_format_a_report_does_not_have_isone_line():
    from perfctl.output import UsageError
    from perfctl.report import write
    from perfctl.report.info import InfoReport
    from perfctl.report.stat import StatReport, StatSummary

    with pytest.raises(UsageError, match=r"^no JSON report for stat \(it has table, markdown, html\)$"):
        write(StatReport(StatSummary(), "t"), "json", None)
    with pytest.raises(UsageError, match="^no HTML report for info"):
        write(InfoReport(None, []), "html", None)


_COLOR_SYSTEM = "from perfctl.output import console, interactive; print(console().color_system, interactive(False))"


def _color_system(env: dict, terminal: bool) -> str:
    """What perfctl's console factory decides, with stdout a terminal (a pty) or a pipe."""
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    environment.update(TERM="xterm-256color", **env)
    if not terminal:
        return subprocess.run([sys.executable, "-c", _COLOR_SYSTEM], capture_output=True, text=True,
                              env=environment, timeout=60).stdout.strip()
    leader, follower = os.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-c", _COLOR_SYSTEM], stdout=follower, env=environment)
        os.close(follower)
        process.wait(timeout=60)
        output = os.read(leader, 4096)  # one short line, all in the terminal's buffer once the writer exited
    finally:
        os.close(leader)
    return output.decode().strip()


def test_colour_only_on_a_terminal_and_never_with_no_color():
    assert _color_system({}, terminal=True) == "256 True"
    assert _color_system({"NO_COLOR": "1"}, terminal=True) == "None True"
    assert _color_system({"NO_COLOR": ""}, terminal=True) == "256 True"  # no-color.org: set and non-empty
    assert _color_system({}, terminal=False) == "None False"
    assert _color_system({"FORCE_COLOR": "1"}, terminal=False) == "None False"


def _complete(script: str, *words: str, cwd=None) -> list[str]:
    """COMPREPLY of the bash completion function for the command line ``words`` (the last one is being
    completed), in a real bash."""
    driver = (f'source "$1"; COMP_WORDS=({" ".join(json.dumps(w) for w in words)}); '
              f'COMP_CWORD={len(words) - 1}; _perfctl; printf "%s\\n" "${{COMPREPLY[@]}}"')
    result = subprocess.run(["bash", "--norc", "-c", driver, "bash", script], capture_output=True, text=True,
                            timeout=60, cwd=cwd)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return sorted(line for line in result.stdout.splitlines() if line)


def test_bash_completion_completes_commands_options_and_files(tmp_path):
    result = perfctl("completion", "bash")
    assert result.returncode == 0, result.stderr
    script = tmp_path / "perfctl.bash"
    script.write_text(result.stdout)
    assert _complete(str(script), "perfctl", "com") == ["compare", "completion"]
    assert _complete(str(script), "perfctl", "stat", "--rep") == ["--repeat"]
    assert _complete(str(script), "perfctl", "cache", "m") == ["mrc"]
    assert "--max-trace-bytes" in _complete(str(script), "perfctl", "cache", "mrc", "--")
    assert _complete(str(script), "perfctl", "compare", "--format", "m") == ["markdown"]
    (tmp_path / "runs-a.jsonl").write_text("")
    (tmp_path / "runs-b.jsonl").write_text("")
    assert _complete(str(script), "perfctl", "compare", "runs-", cwd=tmp_path) == ["runs-a.jsonl", "runs-b.jsonl"]
    assert _complete(str(script), "perfctl", "stat", "-o", "runs-a", cwd=tmp_path) == ["runs-a.jsonl"]
    assert _complete(str(script), "perfctl", "stat", "-r", "") == []  # a number: nothing to offer


def test_zsh_completion_is_valid_zsh(tmp_path):
    import shutil

    result = perfctl("completion", "zsh")
    assert result.returncode == 0 and result.stdout.startswith("#compdef perfctl"), result.stderr
    if shutil.which("zsh") is None:
        pytest.skip("probe: shutil.which(\"zsh\") found no zsh (deploy/setup.sh installs it); only the bash script ran")
    script = tmp_path / "_perfctl"
    script.write_text(result.stdout)
    check = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_a_run_that_cannot_start_leaves_the_output_file_as_it_was(tmp_path):
    """perfctl receives the arguments; the benchmark receives them plus a 1 MiB environment, which passes
    ARG_MAX only there: execve fails in the first run. That is a usage error, and -o FILE keeps exactly
    what it held (it used to get this machine's inventory line appended)."""
    out = tmp_path / "samples.jsonl"
    before = '{"type": "machine", "kept": true}\n'
    out.write_text(before)
    arg_max = os.sysconf("SC_ARG_MAX")
    arguments = ["y" * 100_000] * ((arg_max - (1 << 20)) // 100_000 + 2)
    result = perfctl("stat", "-o", str(out), "--env-size", str(1 << 20), "-r", "1", "--", "/bin/true", *arguments)
    one_line(result, "perfctl stat:", code=2)
    assert out.read_text() == before
    absent = tmp_path / "new.jsonl"  # a file that did not exist is not left behind empty
    result = perfctl("stat", "-o", str(absent), "--env-size", str(1 << 20), "-r", "1", "--", "/bin/true", *arguments)
    one_line(result, "perfctl stat:", code=2)
    assert not absent.exists()


@pytest.mark.parametrize("value", ["4194305", "100000000000"])
def test_ebpf_max_tasks_beyond_the_kernels_task_limit_is_a_usage_error(value):
    """Linux has at most PID_MAX_LIMIT (2^22) tasks; a bigger map follows nothing more."""
    result = perfctl("stat", "--backend", "perf_event,ebpf", "--ebpf-max-tasks", value, "-r", "1", "--", "/bin/true")
    line = one_line(result, code=2)
    assert "--ebpf-max-tasks" in line and "4194304" in line, line


def test_a_full_disk_leaves_the_samples_file_whole_for_the_next_run(tmp_path):
    """stat -o FILE on a filesystem that fills up: the line that did not fit is cut off again, so the file
    ends with a whole sample; a partial line left by a kill mid-write is cut off (and said) before the next
    run appends, and every reader then takes the file."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(small)], check=True)
    try:
        samples = small / "s.jsonl"
        full = perfctl("stat", "-r", "200", "-e", "page-faults,task-clock", "-o", str(samples), "--", "/bin/true")
        assert full.returncode == 2 and "No space left on device; measurement stopped after" in full.stderr
        kept = samples.read_bytes()
        assert kept.endswith(b"\n") and all(json.loads(line) for line in kept.splitlines())
        copy = tmp_path / "copy.jsonl"
        copy.write_bytes(kept + b'{"type":"sample","uuid":"cut sh')  # a write a kill cut short
    finally:
        subprocess.run(["umount", str(small)], check=True)
    more = perfctl("stat", "-r", "2", "-e", "page-faults", "-o", str(copy), "--", "/bin/true")
    assert more.returncode == 0 and "ended in a partial line (31 bytes" in more.stderr, more.stderr
    lines = copy.read_bytes().splitlines()
    assert copy.read_bytes().startswith(kept) and len(lines) == len(kept.splitlines()) + 3  # machine + 2 runs
    # read whole: compared with itself, it is refused only as the same runs on both sides (docs/samples.md)
    compared = perfctl("compare", str(copy), str(copy))
    assert compared.returncode == 2 and "A and B are the same" in compared.stderr, compared.stderr


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
    line = one_line(result, "perfctl stat: ", code=2)
    assert "No space left on device" in line
    assert ("/dev/full" in line) if "-o" in options else ("/dev/full" not in line)


def test_integer_options_beyond_the_wire_are_one_line(tmp_path):
    """A seed of 10^23 passed argparse and then overflowed the request's uint64 (a ValueError traceback)."""
    path = jsonl_file(tmp_path / "a.jsonl", sample_records())
    line = one_line(perfctl("compare", path, path, "--seed", "9" * 23), "perfctl compare: ", code=2)
    assert "--seed: must be at most 4294967295" in line
    assert "must be at most 4294967295" in one_line(perfctl("stat", "-r", str(1 << 40), "--", "/bin/true"),
                                                    "perfctl stat: ", code=2)


@pytest.mark.parametrize("words, prefix, said", [
    (["--bogus"], "perfctl: ", "unknown option --bogus before the command (see perfctl --help)"),
    (["-x", "stat"], "perfctl: ", "unknown option -x before the command"),
    (["stat", "--bogus", "--", "/bin/true"], "perfctl stat: ", "unrecognized arguments: --bogus (see perfctl stat "
                                                               "--help)"),
    (["compare", "a", "b", "--nope", "1"], "perfctl compare: ", "unrecognized arguments: --nope 1"),
    (["jobs", "--wiat"], "perfctl jobs: ", "unrecognized arguments: --wiat; did you mean '--wait'? (see perfctl jobs "
                                           "--help)"),
])
def test_unknown_options_are_named_by_the_command_they_were_given_to(words, prefix, said):
    """`perfctl --bogus` said only that a command is required, and `perfctl stat --bogus` blamed `perfctl` and
    pointed at its --help rather than stat's."""
    assert said in one_line(perfctl(*words), prefix, code=2)
