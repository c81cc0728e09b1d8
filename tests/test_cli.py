"""`perfctl stat` as a user runs it: outputs, exit codes, and every kind of bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import perfctl

from perfctl.formats import jsonl


def _one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_stat_writes_samples_and_a_summary(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "3", "--warmup", "1", "-o", str(out), "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    assert "page-faults" in result.stdout and "median" in result.stdout and "unsupported" in result.stdout
    records = list(jsonl.read(str(out)))
    assert records[0]["type"] == "machine"
    samples = records[1:]
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
    assert message in _one_line(result)


def test_not_executable_file_is_refused(tmp_path):
    script = tmp_path / "bench"
    script.write_text("#!/bin/sh\n")
    assert "not executable" in _one_line(perfctl("stat", "--", str(script)))


def test_bad_input_leaves_existing_samples_intact(tmp_path):
    out = tmp_path / "s.jsonl"
    assert perfctl("stat", "-r", "2", "-o", str(out), "--", "/bin/true").returncode == 0
    before = out.read_bytes()
    assert perfctl("stat", "-e", "bogus", "-o", str(out), "--", "/bin/true").returncode == 2
    assert out.read_bytes() == before
    assert perfctl("stat", "-r", "1", "-o", str(out), "--", "/bin/true").returncode == 0
    assert out.read_bytes().startswith(before) and len(list(jsonl.read(str(out)))) == 2 + 1 + 2


def test_failed_runs_are_recorded_and_exit_1(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "2", "-o", str(out), "--", "/bin/sh", "-c", "echo broken >&2; kill -SEGV $$")
    assert result.returncode == 1
    assert "2 of 2 runs failed" in result.stdout and "signal 11" in result.stdout and "broken" in result.stdout
    samples = list(jsonl.read(str(out)))[1:]
    assert [s.outcome for s in samples] == ["signal", "signal"]


def test_timeout_is_recorded_and_exit_1(tmp_path):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "1", "--timeout", "0.3", "-o", str(out), "--", "/bin/sleep", "20")
    assert result.returncode == 1 and "timed out" in result.stdout
    assert list(jsonl.read(str(out)))[1].outcome == "timeout"


def test_interrupt_keeps_every_finished_run(tmp_path):
    out = tmp_path / "s.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "100000", "-o", str(out), "--",
                             "/bin/sleep", "0.01"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "interrupted after" in stderr and "Traceback" not in stderr
    records = list(jsonl.read(str(out)))  # every line parses: nothing torn
    assert len(records) >= 10 and all(r.outcome == "ok" for r in records[1:])
    assert "median" in stdout


def test_samples_are_on_disk_while_the_measurement_runs(tmp_path):
    out = tmp_path / "s.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "50", "-o", str(out), "--",
                             "/bin/sleep", "0.05"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert len(list(jsonl.read(str(out)))) >= 5
    finally:
        proc.kill()
        proc.wait()
    assert os.path.getsize(out) > 0


def test_file_the_kernel_cannot_exec_is_refused(tmp_path):
    script = tmp_path / "bench"
    script.write_text("echo no shebang\n")
    script.chmod(0o755)
    assert "not an ELF executable" in _one_line(perfctl("stat", "--", str(script)))



def test_reader_closing_the_pipe_early_does_not_change_the_exit_code(tmp_path):
    out = tmp_path / "s.jsonl"
    for _ in range(5):  # the race between `head` exiting and the table being written varies run to run
        result = subprocess.run(f"{sys.executable} -m perfctl stat -r 20 -o {out} -- /bin/true | head -c 10; "
                                "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True,
                                text=True)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
