"""Issue 33, a hyperfine user's habits: --shell (and the shell's own cost, measured and subtracted in stat's
summary), the hint for a shell command line given without it, and the hooks around the runs (--prepare,
--setup, --cleanup) in stat and ab. Real programs (sh, sort, cat, true), software counters."""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import statistics
import subprocess
import sys
import uuid

from conftest import one_line, perfctl, processes_with, read_records, signal_when

from perfctl.units import quantity

EVENTS = "page-faults,task-clock"


def samples(path) -> list[dict]:
    return [record for record in read_records(path) if record["type"] == "sample"]


def reading(sample: dict, event: str) -> float:
    found = next(r for r in sample["readings"] if r["event"] == event)
    assert found["status"] == "ok", found
    return found["value"]


def test_shell_runs_a_command_line_and_subtracts_the_shells_median(tmp_path):
    unsorted, out = tmp_path / "in.txt", tmp_path / "out.txt"
    unsorted.write_text("3\n1\n2\n")
    line = f"sort {unsorted} | cat > {out}"
    result = perfctl("stat", "-r", "3", "-e", EVENTS, "-o", str(tmp_path / "s.jsonl"), "--shell", "--", line)
    assert result.returncode == 0, result.stderr
    assert out.read_text() == "1\n2\n3\n"  # the pipeline ran, through the shell
    runs = samples(tmp_path / "s.jsonl")
    assert len(runs) == 3 and all(r["benchmark"]["argv"] == ["/bin/sh", "-c", line] for r in runs)
    assert runs[0]["benchmark"]["name"] == "sort"
    shell = runs[0]["extra"]["shell"]
    assert all(r["extra"]["shell"] == shell for r in runs)
    assert shell["argv"] == ["/bin/sh", "-c", ""] and shell["runs"] == 10
    # the shell alone faults in fewer pages than the shell running sort and cat: its median is a real cost
    assert 0 < shell["median"]["page-faults"] < min(reading(r, "page-faults") for r in runs)
    text = " ".join(result.stdout.split())  # the summary's prose wraps at the width
    assert "shell /bin/sh -c '' (median of 10 runs before these, not samples)" in text
    less = statistics.median(reading(r, "page-faults") for r in runs) - shell["median"]["page-faults"]
    assert f"page-faults {quantity(less, 'count')}" in text.split("medians less the shell's:")[1]


def test_a_shell_command_line_without_shell_gets_the_hint(tmp_path):
    line = "sort /etc/hostname | cat"
    said = one_line(perfctl("stat", "-r", "1", "--", line), "perfctl stat: ", code=2)
    assert f"{line!r} looks like a shell command: use --shell, or sh -c {line!r}" in said
    said = one_line(perfctl("ab", "--", "true", ":::", "true && true"), "perfctl ab: ", code=2)
    assert "'true && true' looks like a shell command: use --shell" in said
    # a program that does not exist, with no shell syntax, is only not found
    said = one_line(perfctl("stat", "-r", "1", "--", "no-such-program-i33"), "perfctl stat: ", code=2)
    assert "command not found" in said and "--shell" not in said


def test_shell_with_the_dbi_backend_or_a_command_line_for_its_value_is_refused():
    """valgrind counts only the process it starts: under --shell, the shell and none of the command line."""
    said = one_line(perfctl("stat", "--backend", "dbi", "--shell", "--", "sort /etc/hostname | cat"),
                    "perfctl stat: ", code=2)
    assert "--shell with --backend dbi would count the shell alone" in said
    # without --, the command line is taken for --shell's value: said, not run as a shell
    said = one_line(perfctl("ab", "--shell", "sort /etc/hostname | cat", ":::", "true"), "perfctl ab: ", code=2)
    assert "--shell took 'sort /etc/hostname | cat' as the shell to run: put -- before the command" in said
    # --shell ./prog, no --, no other word: the program was taken for the shell, and the error says so
    said = one_line(perfctl("stat", "--shell", "./prog"), "perfctl stat: no command given", code=2)
    assert "--shell took './prog' as the shell to run" in said, said


def _flaky(path, flag) -> str:
    """A script that fails (exit 5, "boom" on stderr) every second run, after busy work in the failing
    ones: a failed run's time is longer than an ok run's, so it would show if it were summarized."""
    path.write_text(f"#!/bin/sh\n[ -e {flag} ] && {{ rm {flag}; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; "
                    f"echo boom >&2; exit 5; }}\ntouch {flag}; exit 0\n")
    path.chmod(0o755)
    return str(path)


def test_markdown_keeps_the_failed_runs_lines_and_q_prints_only_them(tmp_path):
    flaky = _flaky(tmp_path / "flaky.sh", tmp_path / "flag")
    result = perfctl("stat", "-r", "4", "-e", "task-clock", "--format", "markdown", "--", flaky)
    assert result.returncode == 1, result.stderr
    assert "| task-clock | 2 |" in result.stdout, result.stdout
    assert "2 of 4 runs failed \\(2 failed\\); they are recorded but not summarized  \n" in result.stdout
    assert "run 1 exited with status 5\\: boom" in result.stdout, result.stdout
    failed = perfctl("stat", "-r", "2", "-e", "task-clock", "--format", "markdown", "--", "/bin/false")
    assert failed.returncode == 1 and "|" not in failed.stdout and "2 of 2 runs failed" in failed.stdout
    quiet = perfctl("stat", "-q", "-r", "2", "-e", "task-clock", "--format", "markdown", "--", "/bin/false")
    assert quiet.stdout.startswith("2 of 2 runs failed") and "perfctl stat" not in quiet.stdout, quiet.stdout


def test_ab_leaves_a_failed_runs_value_out_of_its_figures(tmp_path):
    """B fails in its second run (the rounds stop there): its line and CSV row summarize its one ok run, and
    say one failed (the failed run's longer time used to be B's max)."""
    for form in ("table", "csv"):
        (tmp_path / "flag").unlink(missing_ok=True)
        flaky = _flaky(tmp_path / "flaky.sh", tmp_path / "flag")
        done = perfctl("ab", "-e", "task-clock", "--seed", "1", "--format", form, "--width", "250", "--",
                       "true", ":::", flaky)
        assert done.returncode == 1, done.stderr
        if form == "table":
            line = next(line for line in done.stdout.splitlines() if line.startswith("B: task-clock"))
            assert line.endswith("(2 runs, 1 failed: not in these figures)"), line
            median = re.search(r"median (\S+ \S+), min (\S+ \S+), max (\S+ \S+)", line)
            assert median[1] == median[2] == median[3], line  # one run: its value, not the failed one's
        else:
            row = list(csv.DictReader(io.StringIO(done.stdout)))[1]
            assert (row["runs"], row["failed"]) == ("2", "1") and row["min"] == row["max"] == row["median"], row


def test_a_command_cheaper_than_the_shell_is_shown_as_0_and_said(tmp_path):
    """A SHELL that busy-works only for the empty command line (its measured cost) and runs a trivial one
    quickly: the command's medians less the shell's are below 0, shown as 0 as hyperfine clamps them, with
    a line naming the events. At 50 columns no figure is parted from its unit."""
    shell = tmp_path / "slowsh"
    shell.write_text('#!/bin/sh\n[ -z "$2" ] && { i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; }\n'
                     'exec /bin/sh "$@"\n')
    shell.chmod(0o755)
    result = perfctl("stat", "-r", "3", "-e", "task-clock", f"--shell={shell}", "--", "true",
                     env={**os.environ, "COLUMNS": "50"})
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "medians less the shell's: wall-time 0 ns, task-clock 0 ns" in said, result.stdout
    assert "wall-time, task-clock: the command's median is below the shell's own, shown as 0" in said
    units = ("ns", "µs", "ms", "s")
    lines = result.stdout.splitlines()
    for above, below in zip(lines, lines[1:]):
        assert not (re.search(r"\d$", above) and below.split() and below.split()[0].rstrip(",") in units), (
            above, below)


def test_prepare_runs_before_every_run_setup_and_cleanup_once(tmp_path):
    log, cpus = tmp_path / "hooks.log", tmp_path / "cpus.log"
    # the prepare also burns CPU (hashing 32 MB): outside the counted interval, /bin/true's task-clock stays small
    result = perfctl("stat", "-r", "3", "--warmup", "2", "-e", EVENTS, "-o", str(tmp_path / "s.jsonl"),
                     "--setup", f"echo setup >> {log}", "--cleanup", f"echo cleanup >> {log}",
                     "--prepare", f"echo prepare >> {log}; grep Cpus_allowed_list /proc/self/status >> {cpus}; "
                                  "head -c 32000000 /dev/zero | md5sum",
                     "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    assert log.read_text().split() == ["setup", *["prepare"] * 5, "cleanup"]
    # every prepare may run on the CPUs perfctl may (the runs' loop pins perfctl's thread, not its hooks)
    with open("/proc/self/status") as status:
        ours = next(line for line in status if line.startswith("Cpus_allowed_list"))
    assert cpus.read_text().splitlines(keepends=True) == [ours] * 5
    runs = samples(tmp_path / "s.jsonl")
    assert len(runs) == 5  # hooks' runs are not samples
    assert max(reading(r, "task-clock") for r in runs) < 20e6  # ns; hashing 32 MB takes ~50 ms of CPU


def test_a_failing_hook_stops_with_its_name_status_and_command_keeping_the_samples(tmp_path):
    counter = tmp_path / "n"
    failing = f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; [ $n -lt 2 ]"
    output = tmp_path / "s.jsonl"
    result = perfctl("stat", "-q", "-r", "5", "-e", EVENTS, "-o", str(output), "--prepare", failing,
                     "--", "/bin/true")
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"perfctl stat: --prepare failed (exit status 1): {failing}; stopped after 2 measured runs; "
        f"samples are in {output}")
    assert len(samples(output)) == 2
    result = perfctl("stat", "-q", "-r", "2", "-e", EVENTS, "--cleanup", "exit 7", "--", "/bin/true")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("perfctl stat: --cleanup failed (exit status 7): exit 7")


def test_ab_with_shell_and_hooks_one_per_command(tmp_path):
    log, output = tmp_path / "hooks.log", tmp_path / "ab.jsonl"
    result = perfctl("ab", "--max-runs", "4", "--min-runs", "2", "-e", EVENTS, "-o", str(output), "--shell",
                     "--setup", f"echo setup >> {log}", "--cleanup", f"echo cleanup >> {log}",
                     "--prepare", f"echo A >> {log}", "--prepare", f"echo B >> {log}",
                     "--", "sort /etc/passwd | cat", ":::", "sort -r /etc/passwd | cat")
    assert result.returncode in (0, 3, 4), result.stderr
    runs = samples(output)
    sides = [r["labels"]["ab"] for r in runs]
    words = log.read_text().split()
    assert words.count("A") == sides.count("A") >= 2 and words.count("B") == sides.count("B") >= 2
    assert words.count("setup") == 2 and words.count("cleanup") == 2 and words[-2:] == ["cleanup", "cleanup"]
    assert {tuple(r["benchmark"]["argv"][:2]) for r in runs} == {("/bin/sh", "-c")}
    # a hook that fails ends the rounds: exit 1 and its line
    result = perfctl("ab", "--max-runs", "3", "-e", EVENTS, "--prepare", "false", "--", "/bin/true", ":::",
                     "/bin/true")
    assert result.returncode == 1
    assert "perfctl ab: --prepare failed (exit status 1): false" in result.stdout  # the summary says why
    # as many hooks as neither one nor the commands: refused before anything runs
    said = one_line(perfctl("ab", "--prepare", "true", "--prepare", "true", "--prepare", "true", "--",
                            "/bin/true", ":::", "/bin/true"), "perfctl ab: ", code=2)
    assert "--prepare given 3 times" in said


def test_a_stop_during_a_hook_kills_the_hooks_whole_pipeline(tmp_path):
    # a duration of its own names this test's hook processes, wherever they are reparented
    marker = f"300.{uuid.uuid4().int % 10**12:012d}"
    hook = f"sleep {marker} | sleep {marker}"
    process = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "2", "-e", EVENTS, "--setup", hook,
                                "--", "/bin/true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sleeps = f"sleep\0{marker}\0"  # the sleeps' own command lines (NUL-separated), not perfctl's nor the shell's
    signal_when(process, lambda: len(processes_with(sleeps)) == 2, signal.SIGTERM, "the setup's start")
    assert process.returncode == 128 + signal.SIGTERM
    assert processes_with(sleeps) == []


def test_a_failing_cleanup_does_not_hide_a_stop_signal_nor_a_failed_run(tmp_path):
    """--cleanup runs after the runs however they end; its failure is said, but a SIGTERM still exits 143
    (a scan stops on it) and ab's failed run is still what its summary says."""
    marker = f"300.{uuid.uuid4().int % 10**12:012d}"
    output = tmp_path / "s.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "3", "-e", EVENTS, "-o", str(output),
                                "--cleanup", "false", "--", "sleep", marker],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def running() -> bool:  # the benchmark's sleep, not perfctl, whose command line holds the same words
        return bool(set(processes_with(f"sleep\0{marker}\0")) - {process.pid})

    _, stderr = signal_when(process, running, signal.SIGTERM, "the run's start")
    assert process.returncode == 128 + signal.SIGTERM, stderr
    lines = stderr.strip().splitlines()
    assert "perfctl stat: --cleanup failed (exit status 1): false" in lines, stderr
    assert lines[-1] == "perfctl: interrupted after 0 measured runs (SIGTERM)", stderr
    result = perfctl("ab", "--max-runs", "3", "-e", EVENTS, "--cleanup", "false", "--", "/bin/true", ":::",
                     "/bin/false")
    assert result.returncode == 1, result.stderr
    assert "B's run 0 failed, so the rounds stopped" in result.stdout, result.stdout
    assert "perfctl ab: --cleanup failed (exit status 1): false" in result.stderr, result.stderr
