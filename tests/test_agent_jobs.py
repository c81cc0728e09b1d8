"""An agent's jobs that cannot be run as asked: a job that cannot run with --user fails with one log line, jobs
naming files that would block (a pseudo file, a FIFO) neither hang the agent nor stay queued, and a job whose
preparation was cut short is failed, not retried forever. A real server and agent."""

import os
import shutil

import pytest
from conftest import TRACE_PIPE, needs_root, perfctl
from fleet import finished_job, start_agent_with, start_sqlite_server, submit_job, wait_connected

from perfctl.agent.spool import Spool
from perfctl.v1 import fleet_pb2 as pb


@needs_root
@pytest.mark.skipif(shutil.which("perf") is None, reason="probe: no perf(1) (apt-get install linux-perf)")
def test_a_job_that_cannot_run_as_asked_fails_with_one_log_line(fleet):
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", ["/bin/*"])
    wait_connected(fleet, server, "box-a")
    job_id = submit_job(fleet, server, "box-a", "--backend", "perf-stat", "-r", "1", "--", "/bin/true")
    job = finished_job(fleet, server, job_id)
    assert job["state"] == "failed" and job["message"].startswith("--user is not available with --backend "
                                                                  "perf-stat"), job
    log = fleet.log("box-a")
    assert "Traceback" not in log, log
    said = [line for line in log.splitlines() if f"job {job_id} failed" in line]
    assert len(said) == 1 and f"job {job_id} failed: --user is not available" in said[0], log


@needs_root
@pytest.mark.skipif(not os.path.exists(TRACE_PIPE), reason=f"probe: no {TRACE_PIPE}")
def test_jobs_naming_blocking_files_neither_hang_the_agent_nor_stay_queued(fleet, shared_dir):
    fifo = shared_dir / "fifo"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o777)  # "executable": opening it to read its magic blocked the agent, as root
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", ["/bin/*", "/usr/bin/*"])
    wait_connected(fleet, server, "box-a")
    pipe_job = submit_job(fleet, server, "box-a", "-r", "1", "--", "/bin/true", TRACE_PIPE)
    fifo_job = submit_job(fleet, server, "box-a", "-r", "1", "--", str(fifo))
    after = submit_job(fleet, server, "box-a", "-r", "3", "--", "/bin/true")
    assert finished_job(fleet, server, pipe_job)["state"] == "done"
    assert finished_job(fleet, server, fifo_job)["state"] == "refused"
    assert finished_job(fleet, server, after)["samples"] == 3


@needs_root
def test_a_job_whose_preparation_was_cut_short_is_failed_not_retried_forever(fleet):
    server = start_sqlite_server(fleet)
    spool = fleet.dir / "spool"
    start_agent_with(fleet, "box-a", server, spool, ["/bin/*"])
    wait_connected(fleet, server, "box-a")
    fleet.kill("box-a", 15)
    job_id = submit_job(fleet, server, "box-a", "-r", "1", "--", "/bin/true")
    # what the spool holds when an agent dies (killed, or hung and restarted) while preparing a job
    job = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=1)
    kept = Spool(str(spool))
    kept.add_job(job_id, job.SerializeToString())
    kept.set_job_state(job_id, "preparing", report=False)
    kept.close()
    start_agent_with(fleet, "box-a", server, spool, ["/bin/*"])
    job = finished_job(fleet, server, job_id)
    assert job["state"] == "failed" and "stopped while preparing" in job["message"], job


@needs_root
def test_a_tracepoint_this_kernel_lacks_refuses_the_job_as_stat_refuses_it(fleet, tmp_path):
    """One check of the events asked for (events.check_tracepoints): stat exits 2 on a misspelt tracepoint; a
    job that names one was measured with an 'unsupported' reading in its place."""
    stat = perfctl("stat", "-e", "irq:no_such_tracepoint", "--", "/bin/true", cwd=tmp_path)
    assert stat.returncode == 2 and "unknown tracepoint irq:no_such_tracepoint" in stat.stderr, stat.stderr
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", ["/bin/*"])
    wait_connected(fleet, server, "box-a")
    job_id = submit_job(fleet, server, "box-a", "-e", "irq:no_such_tracepoint", "-r", "3", "--", "/bin/true")
    job = finished_job(fleet, server, job_id)
    assert job["state"] == "refused" and job["message"].startswith("unknown tracepoint irq:no_such_tracepoint"), job
