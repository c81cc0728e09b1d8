"""`perfctl machines`, `perfctl benchmarks` and `perfctl jobs`, and the wait of `jobs --wait` / `submit
--wait`: the rendering from constructed server answers, the wait loop with a scripted GetJobs, and the real
command line against a stand-in QueryService (a gRPC server in the test) whose jobs move as scripted."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import perfctl, read_terminal
from fleet import fake_query_server

from perfctl import __version__
from perfctl.cli.listings import _LineProgress, select_jobs, watch_jobs
from perfctl.cli.options import duration
from perfctl.output import UsageError
from perfctl.report import QUIET, write
from perfctl.report.fleet import (
    EXIT_WAIT_TIMEOUT,
    BenchmarksReport,
    JobsReport,
    JobsWaitReport,
    MachineReport,
    MachinesReport,
    when,
)
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

INVENTORY = {"type": "machine", "machine_id": "0123abcd", "hostname": "box-a",
             "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 33, "model_name": "Ryzen [bold]9[/]"},
             "kernel": {"release": "6.1.0-18-amd64"}, "pmu": {"present": False, "reason": "no PMU: ENOENT"},
             "governors": ["performance", "powersave"], "hz": None}


def _machine(name="box-a", **kw) -> pb.MachineSummary:
    """A machine last heard 3 s ago, audited 5 min ago (times from now: ``ago`` reads the clock as it renders)."""
    now_ns = time.time_ns()
    fields = dict(name=name, machine_id="0123abcd", inventory_json=json.dumps(INVENTORY),
                  backends=["perf_event", "ebpf"], last_heard_ns=now_ns - 3_000_000_000, connected=True,
                  samples=12345, audit_verdict="no-PMU", audit_time_ns=now_ns - 300_000_000_000,
                  events=[pb.EventSupport(event="page-faults", supported=True),
                          pb.EventSupport(event="instructions", supported=False, reason="no PMU counts it (ENOENT)"),
                          pb.EventSupport(event=f"ev{name}", supported=False, reason="not permitted (EACCES)")])
    fields.update(kw)
    return pb.MachineSummary(**fields)


def _render(report, fmt="table") -> str:
    from rich.console import Console

    out = io.StringIO()
    write(report, fmt, Console(file=out, width=250, color_system=None))
    return out.getvalue()


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]


def test_machines_prints_one_short_row_per_machine():
    machines = [_machine("box-a"), _machine("box-b", connected=False, audit_verdict="", audit_time_ns=0,
                                            backends=["perf_event"], samples=0,
                                            last_heard_ns=time.time_ns() - 600 * 10**9)]
    table = _render(MachinesReport(machines))
    assert _rows(table) == [["box-a", "yes", "no-PMU (5 min ago)", "perf_event, ebpf",
                             "12,345", "3 s ago", "unknown"],
                            ["box-b", "no", "never audited", "perf_event", "0", "10 min ago", "unknown"]]
    assert len(table.splitlines()) == 8  # title, 3 rules and the header, a line per machine, the caption
    assert "perfctl machines NAME" in table
    assert "Ryzen" not in table and "instructions" not in table  # details are `machines NAME`'s
    quiet = _render(MachinesReport(machines, verbosity=-1))
    assert [row[0] for row in _rows(quiet)] == ["box-b"]  # only the disconnected one
    document = json.loads(_render(MachinesReport(machines), "json"))
    assert document[0]["inventory"] == INVENTORY and document[0]["samples"] == 12345
    assert document[0]["events"][1] == {"event": "instructions", "supported": False,
                                        "reason": "no PMU counts it (ENOENT)"}


def test_machines_name_shows_the_inventory_and_why_each_event_is_unsupported():
    table = _render(MachineReport(_machine()))
    rows = {row[0]: row[1:] for row in _rows(table)}
    assert rows["machine id"] == ["0123abcd"] and rows["samples stored"] == ["12,345"]
    assert rows["cpu.model_name"] == ["Ryzen [bold]9[/]"]  # markup from an agent shown as text
    assert rows["governors"] == ["performance, powersave"] and rows["hz"] == ["unknown"]
    assert rows["pmu.reason"] == ["no PMU: ENOENT"]
    assert rows["instructions"] == ["no", "no PMU counts it (ENOENT)"] and rows["page-faults"] == ["yes", ""]
    quiet = {row[0] for row in _rows(_render(MachineReport(_machine(), verbosity=-1)))}
    assert {"instructions", "evbox-a"} <= quiet and "page-faults" not in quiet and "cpu.vendor" not in quiet
    assert json.loads(_render(MachineReport(_machine()), "json"))[0]["inventory"]["cpu"]["family"] == 25
    hostile = _render(MachineReport(_machine("[red]evil[/]\x1b[2J")))
    assert "machine [red]evil[/]\\x1b[2J" in hostile and "\x1b" not in hostile


def test_benchmarks_lists_identity_labels_jobs_runs_and_time_range():
    start = 1_764_000_000 * 10**9
    response = pb.ListBenchmarksResponse(benchmarks=[
        pb.BenchmarkSummary(machine="box-a", name="gzip", runs=40, executable_sha256="ab12" * 16,
                            input_digest="cd34" * 16, argv=["/usr/bin/gzip", "-c", "/etc/my services"], jobs=2,
                            labels=["commit=abc123", "try=quickstart"], first_ns=start, last_ns=start + 90 * 10**9),
        pb.BenchmarkSummary(machine="box-b", name="x\x1b[2J", runs=3)])
    table = _render(BenchmarksReport(response.benchmarks))
    rows = _rows(table)
    first = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start / 1e9))
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start / 1e9 + 90))
    # by default digests of 12 hex digits, the last run alone, in short (2025-11-24: not this year)
    assert rows[0] == ["box-a", "gzip", "ab12ab12ab12", "cd34cd34cd34", "/usr/bin/gzip -c '/etc/my services'",
                       "commit=abc123, try=quickstart", "40", when(start + 90 * 10**9, short=True)]
    assert rows[1] == ["box-b", "x\\x1b[2J", "?", "?", "", "", "3", "unknown"]
    assert "\x1b" not in table
    # -v: whole digests, jobs, the first and last run to the second
    from rich.console import Console

    out = io.StringIO()
    BenchmarksReport(response.benchmarks, verbosity=1).table(Console(file=out, width=400, color_system=None))
    rows = _rows(out.getvalue())
    assert rows[0] == ["box-a", "gzip", "ab12" * 16, "cd34" * 16, "/usr/bin/gzip -c '/etc/my services'",
                       "commit=abc123, try=quickstart", "2", "40", first, last]
    document = json.loads(_render(BenchmarksReport(response.benchmarks), "json"))
    assert document[0] == {"schema": "perfctl.benchmarks/1", "perfctl": __version__,
                           "machine": "box-a", "benchmark": "gzip", "executable_sha256": "ab12" * 16,
                           "input_digest": "cd34" * 16, "argv": ["/usr/bin/gzip", "-c", "/etc/my services"],
                           "labels": ["commit=abc123", "try=quickstart"], "labels_left_out": 0, "jobs": 2, "runs": 40,
                           "first_ns": start, "last_ns": start + 90 * 10**9}
    assert document[1]["executable_sha256"] is None and document[1]["first_ns"] is None


def _job(job_id, state, samples=0, machine="box-a", message="", commands=1, repetitions=10, warmups=1,
         failed_runs=None):
    job = pb.Job(job_id=job_id, repetitions=repetitions, warmups=warmups,
                 commands=[pb.Command(name="true", argv=["/bin/true"])] * commands)
    return pb.JobStatus(job_id=job_id, machine=machine, state=state, samples=samples, message=message, job=job,
                        failed_runs=failed_runs)


def test_a_wait_ends_0_when_all_are_done_1_when_one_failed_or_was_refused_124_when_time_ran_out():
    done, failed = _job("j1", "done", 22, commands=2), _job("j2", "failed", 5, message="agent error")
    assert JobsWaitReport([done]).exit_code() == 0
    assert JobsWaitReport([done, failed]).exit_code() == 1
    assert JobsWaitReport([_job("j3", "refused", message="not allowed")]).exit_code() == 1
    running = _job("j4", "running", 3)
    assert JobsWaitReport([done, running], timed_out=True).exit_code() == EXIT_WAIT_TIMEOUT == 124
    assert JobsWaitReport([failed, running], timed_out=True).exit_code() == 1  # a failure says more
    assert JobsWaitReport.progress_line(done) == "box-a\tj1\tdone\t22/22 runs\t"  # (10 + 1) runs x 2 commands
    summary = JobsWaitReport([done, failed, running], timed_out=True).summary()
    assert summary == ("1 of 3 jobs done; box-a failed (agent error); still box-a running 3/11 runs "
                       "(they go on running on the server)")


def test_a_job_done_with_runs_that_failed_fails_the_wait_as_stat_fails_on_a_run():
    """JobStatus.failed_runs, counted by the server when the job ended: a wait over /bin/false's job exited 0."""
    clean, broken = _job("j1", "done", 11, failed_runs=0), _job("j2", "done", 11, machine="box-b", failed_runs=10,
                                                                  message="11 runs; a measured run that "
                                                                          "failed: run 0 exited with status 1")
    assert JobsWaitReport([clean]).exit_code() == 0 and JobsWaitReport([_job("j0", "done", 11)]).exit_code() == 0
    assert JobsWaitReport([clean, broken]).exit_code() == 1
    assert JobsWaitReport.progress_line(clean) == "box-a\tj1\tdone\t11/11 runs\t"
    assert JobsWaitReport.progress_line(broken).split("\t")[2:4] == ["done", "11/11 runs (10 failed)"]
    assert JobsWaitReport([clean, broken]).summary() == (
        "2 of 2 jobs done; box-b done, 10 measured runs failed (11 runs; a measured run that failed: run 0 "
        "exited with status 1)")
    assert [row["failed_runs"] for row in JobsReport([clean, broken, _job("j3", "running")]).document()] == [0, 10,
                                                                                                             None]
    quiet = _render(JobsReport([clean, broken], verbosity=QUIET))
    assert "j2" in quiet and "10 failed" in quiet and "j1" not in quiet


def test_watch_jobs_polls_about_once_a_second_until_every_job_ended():
    script = [[_job("a", "queued"), _job("b", "queued")],
              [_job("a", "running", 0), _job("b", "queued")],
              [_job("a", "done", 11), _job("b", "running", 4)],
              [_job("a", "done", 11), _job("b", "done", 11)]]
    now, slept, shown = [0.0], [], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    def poll():
        now[0] += 0.25  # the RPC's time counts against the second
        return script[len(shown)]

    report = watch_jobs(poll, shown.append, None, clock=lambda: now[0], sleep=sleep)
    assert report.finished and report.exit_code() == 0 and not report.timed_out
    assert [[j.state for j in r.jobs] for r in shown] == [[j.state for j in s] for s in script]
    assert slept == [0.75, 0.75, 0.75]


def test_watch_jobs_gives_up_at_the_timeout():
    now = [0.0]
    polls = []

    def poll():
        polls.append(now[0])
        return [_job("a", "running", 2)]

    report = watch_jobs(poll, lambda r: None, 3.5, clock=lambda: now[0],
                        sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert report.timed_out and report.exit_code() == EXIT_WAIT_TIMEOUT
    assert polls == [0.0, 1.0, 2.0, 3.0]  # no poll after the time is up


def test_without_a_terminal_the_wait_prints_a_line_per_state_change(capsys):
    progress = _LineProgress(quiet=False)
    for states in (["queued", "queued"], ["running", "queued"], ["running", "queued"], ["done", "refused"]):
        progress.show(JobsWaitReport([_job("a", states[0], 11 if states[0] == "done" else 0),
                                      _job("b", states[1], machine="box-b", message="/x is not allowed")]))
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("\t")[:3] for line in lines] == [
        ["box-a", "a", "queued"], ["box-b", "b", "queued"], ["box-a", "a", "running"], ["box-a", "a", "done"],
        ["box-b", "b", "refused"]]
    quiet = _LineProgress(quiet=True)
    quiet.show(JobsWaitReport([_job("a", "done", 11), _job("b", "failed", message="agent error")]))
    assert capsys.readouterr().err == "box-a\tb\tfailed\t0/11 runs\tagent error\n"


def test_jobs_are_named_by_id_or_a_prefix_only_one_id_has():
    jobs = [_job("1a2b3c4d-x", "done"), _job("1a2bffff-y", "done"), _job("9999-z", "done")]
    assert [j.job_id for j in select_jobs(jobs, ["9", "1a2b3c4d-x", "1a2bf"], "perfctl jobs")] == [
        "9999-z", "1a2b3c4d-x", "1a2bffff-y"]
    with pytest.raises(UsageError, match=r"^perfctl jobs: several jobs on the server have ids starting with '1a2b' \("):
        select_jobs(jobs, ["1a2b"], "perfctl jobs")
    with pytest.raises(UsageError, match=r"^perfctl jobs: no job on the server has an id starting with 'zz'$"):
        select_jobs(jobs, ["zz"], "perfctl jobs")


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("1.5m", 90), ("15min", 900), ("2h", 7200),
                                           ("180d", 180 * 86400)])
def test_durations_take_seconds_or_a_unit(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5", "5w", "m", "", "1e9", "4000d"])
def test_bad_durations_are_refused(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


class _ScriptedJobs(rpc.QueryServiceServicer):
    """GetJobs answers from a script, one step per call, staying at the last; SubmitJob gives ids s1, s2...;
    SubmitJob and ListBenchmarks record their requests."""

    def __init__(self):
        self.script, self.calls, self.submitted = [[]], 0, []

    def GetJobs(self, request, context):
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return pb.GetJobsResponse(jobs=step)

    def ListMachines(self, request, context):
        return pb.ListMachinesResponse(machines=[_machine("box-a"), _machine("box-b")])

    def ListBenchmarks(self, request, context):
        self.submitted.append(request)
        return pb.ListBenchmarksResponse(benchmarks=[pb.BenchmarkSummary(machine=request.machine, name="gzip",
                                                                         runs=20)])

    def SubmitJob(self, request, context):
        self.submitted.append(request)
        return pb.SubmitJobResponse(job_ids=[f"s{i + 1}" for i in range(len(request.machines))])


@pytest.fixture
def scripted(tmp_path):
    servicer = _ScriptedJobs()
    server, servicer.connection = fake_query_server(servicer, tmp_path)
    yield servicer
    server.stop(grace=None)


def test_jobs_wait_follows_the_jobs_to_their_end_and_exits_by_how_they_ended(scripted):
    scripted.script = [[_job("j-1", "queued"), _job("j-2", "queued", machine="box-b"), _job("other", "running")],
                       [_job("j-1", "running"), _job("j-2", "queued", machine="box-b")],
                       [_job("j-1", "done", 11), _job("j-2", "refused", machine="box-b", message="/bin/true: not "
                                                                                                 "allowed")]]
    result = perfctl("jobs", *scripted.connection, "--wait", "j-1", "j-2", "--json")
    assert result.returncode == 1, result.stderr
    assert [line.split("\t")[:4] for line in result.stderr.splitlines()[:-1]] == [
        ["box-a", "j-1", "queued", "0/11 runs"], ["box-b", "j-2", "queued", "0/11 runs"],
        ["box-a", "j-1", "running", "0/11 runs"], ["box-a", "j-1", "done", "11/11 runs"],
        ["box-b", "j-2", "refused", "0/11 runs"]]
    assert result.stderr.splitlines()[-1] == ("perfctl jobs: 1 of 2 jobs done; box-b refused (/bin/true: not "
                                              "allowed)")
    assert [j["state"] for j in json.loads(result.stdout)] == ["done", "refused"]
    assert scripted.calls == 3

    scripted.calls = 0
    scripted.script = [[_job("j-1", "running")], [_job("j-1", "done", 11)]]
    done = perfctl("jobs", *scripted.connection, "--wait", "j-1")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert done.stderr.splitlines()[-1] == "perfctl jobs: 1 of 1 job done"

    scripted.calls = 0
    scripted.script = [[_job("j-1", "running", 3)]]
    started = time.monotonic()
    late = perfctl("jobs", *scripted.connection, "--wait", "j-1", "--wait-timeout", "2.5s")
    assert late.returncode == 124 and 2 <= time.monotonic() - started < 30, late.stderr
    assert late.stderr.splitlines()[-1] == ("perfctl jobs: 0 of 1 job done; still box-a running 3/11 runs (they "
                                            "go on running on the server)")
    assert scripted.calls == 3


def test_jobs_wait_refuses_what_it_cannot_wait_for(scripted):
    scripted.script = [[_job("j-1", "running")]]
    for args, message in ((["--wait"], "--wait needs the JOB ids"),
                          (["--wait", "nope"], "no job on the server has an id starting with 'nope'"),
                          (["j-1", "--wait-timeout", "5"], "--wait-timeout bounds --wait"),
                          (["--wait", "j-1", "--wait-timeout", "5x"], "not a duration")):
        result = perfctl("jobs", *scripted.connection, *args)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert message in result.stderr and result.stderr.startswith("perfctl jobs: "), result.stderr


def test_submit_wait_prints_the_job_ids_then_waits_and_sends_the_labels(scripted):
    scripted.script = [[_job("s1", "queued"), _job("s2", "queued", machine="box-b")],
                       [_job("s1", "done", 11), _job("s2", "failed", 4, machine="box-b", message="disk full")]]
    result = perfctl("submit", *scripted.connection, "--machines", "box-a,box-b", "-r", "10", "--warmup", "1",
                     "--label", "commit=abc123", "--label", "try=1", "--wait", "--", "/bin/true")
    assert result.returncode == 1, result.stderr
    assert result.stdout == "box-a\ts1\nbox-b\ts2\n"
    assert "box-b\ts2\tfailed\t4/11 runs\tdisk full" in result.stderr.splitlines()
    assert dict(scripted.submitted[0].job.labels) == {"commit": "abc123", "try": "1"}
    bad = perfctl("submit", *scripted.connection, "--machines", "box-a", "--label", "no-equals-sign", "--",
                  "/bin/true")
    assert bad.returncode == 2 and bad.stderr.startswith("perfctl submit: ") and len(scripted.submitted) == 1


def test_ctrl_c_stops_the_wait_not_the_jobs(scripted):
    scripted.script = [[_job("j-1", "running")]]
    process = subprocess.Popen([sys.executable, "-m", "perfctl", "jobs", *scripted.connection, "--wait", "j-1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while scripted.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.splitlines()[-2:] == ["perfctl jobs: stopped waiting; the jobs go on running on the server "
                                        "(perfctl jobs --wait j-1)", "perfctl jobs: interrupted (SIGINT)"]


def test_on_a_terminal_the_wait_is_a_live_table(scripted):
    scripted.script = [[_job("j-1", "queued")], [_job("j-1", "running", 4)], [_job("j-1", "done", 11)]]
    leader, follower = os.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "perfctl", "jobs", *scripted.connection, "--wait", "j-1"],
                                   stdout=subprocess.PIPE, stderr=follower,
                                   env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"})
        os.close(follower)
        output = read_terminal(leader)
        process.wait(timeout=60)
    finally:
        os.close(leader)
    raw = output.decode(errors="replace")
    assert process.returncode == 0, raw
    assert "\x1b[1A\x1b[2K" in raw  # redrawn in place: cursor up, erase the line
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)  # colours and cursor movements
    assert "┃ machine ┃ job ┃ state" in text and "│ queued" in text and "│ running │ 4/11" in text, text
    lines = text.splitlines()
    assert lines[-1] == "perfctl jobs: 1 of 1 job done" and lines[-3].split()[5:8] == ["done", "│", "11/11"], text
    assert "\tdone\t" not in text  # no lines: the table is the progress


def test_machines_name_and_benchmarks_machine_from_the_command_line(scripted):
    one = perfctl("machines", *scripted.connection, "box-b")
    assert one.returncode == 0, one.stderr
    assert "machine box-b" in one.stdout and "cpu.vendor" in one.stdout and "evbox-b" in one.stdout
    assert "evbox-a" not in one.stdout
    assert [m["name"] for m in json.loads(perfctl("machines", *scripted.connection, "box-b", "--json").stdout)] == [
        "box-b"]
    unknown = perfctl("machines", *scripted.connection, "box-c")
    assert unknown.returncode == 2 and unknown.stderr == ("perfctl machines: no machine 'box-c' on the server "
                                                          "(known: box-a, box-b)\n")
    listed = perfctl("benchmarks", *scripted.connection, "box-b", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["machine"] == "box-b", listed.stderr
    assert scripted.submitted[-1] == pb.ListBenchmarksRequest(machine="box-b")


def test_a_wait_on_whole_ids_that_are_not_the_servers_resolves_them_as_prefixes(scripted):
    """36 characters that are not a lower-case UUID went to the server as whole ids and came back as its raw
    INVALID_ARGUMENT; one with a trailing space is matched against the list as any prefix is, and finds none.
    An upper-case copy is the job: ids are lower-case UUIDs, and what a user types is lower-cased (issue 29)."""
    job_id = "c06f0fde-9ee4-4a2f-b295-e01c876f9d7e"
    scripted.script = [[_job(job_id, "done", 11)]]
    given = job_id[:35] + " "
    result = perfctl("jobs", *scripted.connection, "--wait", given)
    assert result.returncode == 2 and "INVALID_ARGUMENT" not in result.stderr, result.stderr
    assert result.stderr == f"perfctl jobs: no job on the server has an id starting with {given!r}\n"
    for found in (job_id, job_id.upper()):
        assert perfctl("jobs", *scripted.connection, "--wait", found).returncode == 0
