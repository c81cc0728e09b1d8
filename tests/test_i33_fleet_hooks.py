"""hyperfine's --prepare, --setup and --cleanup in fleet jobs (issue 33): a real server and agent run them
around a job's runs, as its user and never through a shell; a hook whose program the agent does not allow is
refused as a command would be; a failing hook fails the job naming it, keeping the runs measured before it;
the server refuses hostile hooks before any agent sees them."""

import os
import pwd
import shutil
import signal
import tempfile
from pathlib import Path

import grpc
import pytest
from conftest import fleet_in, needs_root, perfctl
from fleet import (
    finished_job,
    listed_jobs,
    raised,
    start_agent_with,
    start_server,
    submit_job,
    wait_connected,
    wait_for,
)

from perfctl.server.validation import MAX_ARG_BYTES, MAX_ARGV
from perfctl.v1 import fleet_pb2 as pb

# hook.sh WHAT LOG [FAILS_FROM]: appends "WHAT UID" to LOG; with FAILS_FROM, exits 1 once LOG held that many
# lines before (the FAILS_FROM+1-th call fails).
HOOK = """#!/bin/sh
n=$(cat "$2" 2>/dev/null | wc -l)
echo "$1 $(id -u)" >> "$2"
[ -z "$3" ] || [ "$n" -lt "$3" ]
"""


@pytest.fixture(scope="module")
def hooked(tmp_path_factory):
    """One server and one agent (as nobody, working in a directory nobody may write) that allows /bin/true
    and the scripts of its directory: (fleet, server, the directory)."""
    if os.geteuid() != 0:
        pytest.skip("probe: euid is not 0 (the agent runs its jobs as nobody)")
    directory = Path(tempfile.mkdtemp(prefix="perfctl-i33-hooks-"))
    os.chmod(directory, 0o777)
    (directory / "hook.sh").write_text(HOOK)
    os.chmod(directory / "hook.sh", 0o755)
    with fleet_in(tmp_path_factory.mktemp("fleet")) as fleet:
        server = start_server(fleet)
        start_agent_with(fleet, "box-a", server.address, fleet.dir / "spool", ["/bin/true", f"{directory}/*.sh"],
                         extra=["--workdir", str(directory)])
        wait_connected(fleet, server.address, "box-a")
        yield fleet, server, directory
    shutil.rmtree(directory, ignore_errors=True)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@needs_root
def test_a_job_runs_its_prepare_setup_and_cleanup_around_its_runs_as_its_user(hooked):
    fleet, server, directory = hooked
    log = directory / "around.log"
    hook = f"{directory}/hook.sh"
    job_id = submit_job(fleet, server.address, "box-a", "-r", "3", "--warmup", "1",
                        "--setup", f"{hook} setup {log}", "--prepare", f"{hook} 'prepare' {log}",
                        "--cleanup", f"{hook} cleanup {log}", "--", "/bin/true", ":::", "/bin/true")
    job = finished_job(fleet, server.address, job_id)
    assert job["state"] == "done" and job["samples"] == 8, (job["state"], job["message"], job["samples"])
    lines = _lines(log)
    nobody = pwd.getpwnam("nobody").pw_uid
    assert {line.split()[1] for line in lines} == {str(nobody)}, lines  # the job's user, not the agent's root
    what = [line.split()[0] for line in lines]
    # setup once per command before its first run, prepare before every run (warm-ups too), cleanup once per
    # command after the last: 2 + 8 + 2
    assert what.count("setup") == 2 and what.count("prepare") == 8 and what.count("cleanup") == 2, what
    assert what[0] == "setup" and what[-2:] == ["cleanup", "cleanup"], what
    assert job["prepare"] == [f"{hook} 'prepare' {log}"] and job["setup"] and job["cleanup"], job
    table = fleet.client("jobs", server=server.address)
    assert table.returncode == 0 and "--prepare" in table.stdout, table.stdout


@needs_root
def test_a_hook_whose_program_the_agent_does_not_allow_refuses_the_job(hooked):
    fleet, server, directory = hooked
    log = directory / "refused.log"
    job_id = submit_job(fleet, server.address, "box-a", "-r", "2", "--setup", f"{directory}/hook.sh setup {log}",
                        "--prepare", "/bin/echo hello", "--", "/bin/true")
    job = finished_job(fleet, server.address, job_id)
    assert job["state"] == "refused", job
    assert job["message"] == ("--prepare /bin/echo hello: /bin/echo is not allowed by this agent's --allow "
                              "patterns"), job
    assert job["samples"] == 0 and not _lines(log), (job, _lines(log))  # refused before anything ran
    # a shell given the command line would run anything: a job's hook is never given to one, and
    # /bin/sh is not allowed here either
    job_id = submit_job(fleet, server.address, "box-a", "-r", "1", "--prepare", "/bin/sh -c true", "--", "/bin/true")
    job = finished_job(fleet, server.address, job_id)
    assert job["state"] == "refused" and "/bin/sh is not allowed" in job["message"], job


@needs_root
def test_a_failing_hook_fails_the_job_naming_it_and_keeps_the_runs_before_it(hooked):
    fleet, server, directory = hooked
    log, cleaned = directory / "failing.log", directory / "cleaned.log"
    prepare = f"{directory}/hook.sh prepare {log} 2"
    job_id = submit_job(fleet, server.address, "box-a", "-r", "5", "--prepare", prepare,
                        "--setup", f"{directory}/hook.sh setup {cleaned}",
                        "--cleanup", f"{directory}/hook.sh cleanup {cleaned}", "--", "/bin/true")
    job = finished_job(fleet, server.address, job_id)
    assert job["state"] == "failed", job
    assert job["message"] == (f"--prepare failed (exit status 1): {prepare}; the runs measured before it are "
                              "kept"), job
    assert job["samples"] == 2, job  # the two runs whose prepare succeeded
    assert len(_lines(log)) == 3, _lines(log)
    # the command was set up, so its cleanup ran all the same, as stat's does after a failed hook
    assert [line.split()[0] for line in _lines(cleaned)] == ["setup", "cleanup"], _lines(cleaned)

    failing_cleanup = f"{directory}/hook.sh cleanup {log} 0"  # fails at once
    job_id = submit_job(fleet, server.address, "box-a", "-r", "2", "--cleanup", failing_cleanup, "--setup",
                        f"{directory}/hook.sh setup {cleaned}", "--", "/bin/true")
    job = finished_job(fleet, server.address, job_id)
    assert job["state"] == "failed" and job["samples"] == 2, job
    assert job["message"].startswith(f"--cleanup failed (exit status 1): {failing_cleanup}"), job


def _job(**hooks) -> pb.Job:
    return pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"]), pb.Command(name="true", argv=["/bin/true"])],
                  repetitions=1, **hooks)


HOSTILE = [
    (_job(prepare=["x" * (MAX_ARG_BYTES + 1)]), f"prepare[0] longer than {MAX_ARG_BYTES} characters"),
    (_job(setup=["/bin/true " + "a " * MAX_ARGV]), f"setup[0]: more than {MAX_ARGV} words"),
    (_job(cleanup=["/bin/true\x1b[2J"]), "cleanup[0] has control characters"),
    (_job(prepare=["a", "b", "c"]), "prepare: 3 commands; give none, one (for every command) or one per command"),
    (_job(prepare=["   "]), "prepare[0] has no words"),
    (_job(setup=["/bin/true 'unclosed"]), "setup[0] cannot be split into words (No closing quotation)"),
    (_job(prepare=["sync; /bin/true"]), "prepare[0] has the shell operator ';'"),
]


@needs_root
def test_the_server_refuses_hostile_hooks_before_any_agent_sees_them(hooked):
    fleet, server, _ = hooked
    before = set(listed_jobs(fleet, server.address))
    for job, message in HOSTILE:
        error = raised(lambda job=job: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                              metadata=server.client_md, timeout=30))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details(), (message,
                                                                                                 error.details())
    assert set(listed_jobs(fleet, server.address)) == before  # nothing queued


def test_submit_says_what_is_wrong_with_a_hook_before_it_calls_the_server(tmp_path):
    for hook, said in ((["--prepare", "sync; echo 3 > /proc/sys/vm/drop_caches"], "has the shell operator ';'"),
                       (["--setup", "a", "--setup", "b", "--setup", "c"], "--setup given 3 times"),
                       (["--cleanup", "x 'y"], "cannot be split into words")):
        # an address nothing listens on: the refusal comes before any call
        result = perfctl("submit", "--server", "127.0.0.1:9", "--machines", "box-a", *hook, "--", "/bin/true",
                         ":::", "/bin/true", cwd=tmp_path, timeout=60)
        assert result.returncode == 2 and result.stderr.startswith("perfctl submit: ") and said in result.stderr, \
            result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_hooks_words_are_a_shells_words_and_only_unquoted_operators_are_refused():
    from perfctl.model import job_hook_words

    assert job_hook_words("/opt/b/reset --mode 'a b' \";\" x\\ y") == ["/opt/b/reset", "--mode", "a b", ";", "x y"]
    assert job_hook_words("/opt/b/it\\'s\\ fine") == ["/opt/b/it's fine"]  # a POSIX escape: no operator check
    for hostile in ("a | b", "a;b", "a && b", "a > f", "(a)", "a &"):
        with pytest.raises(ValueError, match="shell operator"):
            job_hook_words(hostile)


@needs_root
def test_a_stopped_agent_kills_the_hook_it_runs_and_leaves_the_job_to_resume(hooked):
    """Last here: it stops the module's agent. A hook that would run for minutes does not hold the agent's
    stop (it is killed as a run is), and the job is not failed by it: it resumes when the agent restarts."""
    fleet, server, directory = hooked
    slow = directory / "slow.sh"
    slow.write_text(f'#!/bin/sh\necho $$ > {directory}/slow.pid\nexec sleep 600\n')
    os.chmod(slow, 0o755)
    job_id = submit_job(fleet, server.address, "box-a", "-r", "1", "--prepare", str(slow), "--", "/bin/true")
    pid_file = directory / "slow.pid"
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 60, "the hook to start"))
    assert fleet.kill("box-a", signal.SIGTERM) == 0, fleet.log("box-a")[-3000:]
    wait_for(lambda: not _alive(pid), 30, "the hook to be killed")
    job = listed_jobs(fleet, server.address)[job_id]
    assert job["state"] not in ("failed", "refused", "done"), (job["state"], job["message"])
    assert "--prepare" not in fleet.log("box-a"), fleet.log("box-a")[-3000:]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_hook_started_after_a_stop_is_killed_at_once_and_its_failure_is_one_line(tmp_path):
    """kill_hooks used to kill only the hooks already registered: one started in the moment between its
    Popen and its registration, or after the stop (a --cleanup during it), ran on, bounded only by the job's
    --timeout, past the agent's stop limit. And a hook with a newline made a two-line failure. In a process of
    its own: the stop is for good in the process that takes it."""
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from perfctl.agent.hooks import HookFailed, Hooks, kill_hooks\n"
        f"hooks = Hooks.of(1, {str(tmp_path)!r}, False, prepare=['echo x\\nfalse'], setup=['sleep 60'])\n"
        "try:\n"
        "    hooks.run('prepare', 0)\n"
        "except HookFailed as err:\n"
        "    print(err)\n"
        "kill_hooks()\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    hooks.run('setup', 0)\n"
        "except HookFailed as err:\n"
        "    print(err)\n"
        "print(f'{time.monotonic() - start:.1f}')\n")
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50)
    assert result.returncode == 0, result.stderr
    first, second, took = result.stdout.splitlines()
    assert first == "--prepare failed (exit status 1): echo x\\nfalse", first
    assert second == "--setup failed (killed by signal 9): sleep 60", second
    assert float(took) < 30 and time.monotonic() - began < 50  # not the sleep's 60 s
