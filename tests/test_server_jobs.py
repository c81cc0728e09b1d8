"""Jobs as a running server takes them from clients and agents: a job's text without control characters,
commands and selectors of only spaces refused, a job's state moving only forward and its runs bounded, what a
client may not set or retry, GetJobs taking whole job ids (a bounded number of them), and job id prefixes taken in
capitals and echoed bounded in errors. A real `perfctl server` called with grpc stubs (conftest's ``server`` and
``served``)."""

from __future__ import annotations

import json
import uuid

import grpc
from fleet import raised

from perfctl.v1 import fleet_pb2 as pb


def test_a_job_message_is_stored_without_control_characters(server):
    job = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=1)
    job_id = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                    metadata=server.client_md).job_ids[0]
    server.agent.ReportJob(pb.JobReport(job_id=job_id, state="failed", message="exit 1: \x1b[31mred\x1b[0m\nnext"
                                        + "y" * 2000), metadata=server.agent_md("box-a"))
    stored = next(j for j in server.query.GetJobs(pb.GetJobsRequest(machine="box-a"), metadata=server.client_md).jobs
                  if j.job_id == job_id)
    assert stored.message.startswith("exit 1: \ufffd[31mred\ufffd[0m\nnext") and len(stored.message) == 1000


def test_a_submitted_job_with_control_characters_is_refused(server):
    for command, message in ((pb.Command(name="t\x1b[2J", argv=["/bin/true"]), "commands[0].name has control"),
                             (pb.Command(name="t", argv=["/bin/true", "\x00"]), "argv[1]: holds a NUL character")):
        job = pb.Job(commands=[command], repetitions=1)
        error = raised(lambda job=job: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                              metadata=server.client_md))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


def test_a_job_moves_only_forward_and_reports_at_most_its_runs(server):
    job = pb.Job(commands=[pb.Command(name="a", argv=["/bin/true"]), pb.Command(name="b", argv=["/bin/true"])],
                 repetitions=3, warmups=1)
    job_id = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                    metadata=server.client_md).job_ids[0]
    md = server.agent_md("box-a")

    def report(state: str, samples: int = 0):
        return server.agent.ReportJob(pb.JobReport(job_id=job_id, state=state, samples=samples), metadata=md)

    def stored():
        j = next(j for j in server.query.GetJobs(pb.GetJobsRequest(machine="box-a"), metadata=server.client_md).jobs
                 if j.job_id == job_id)
        return j.state, j.samples

    report("running", 2)
    error = raised(lambda: report("running", 4294967295))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == f"job {job_id}: 4294967295 samples reported, the job has 8 runs"
    report("failed", 8)
    assert stored() == ("failed", 8)
    report("failed", 8)  # an agent re-sending its last report after a reconnect: accepted, nothing changes
    for state in ("running", "done", "refused"):
        error = raised(lambda state=state: report(state, 1))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == f"job {job_id} is failed: it cannot become {state} (a job moves only forward: " \
                                  "queued, running, then done, failed or refused)"
    assert stored() == ("failed", 8)


def test_a_job_command_or_compare_selector_of_only_spaces_is_refused(server):
    job = pb.Job(commands=[pb.Command(name="   ", argv=["/bin/true"])], repetitions=1)
    error = raised(lambda: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                  metadata=server.client_md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "commands[0].name has no character other than spaces"
    error = raised(lambda: server.query.Compare(pb.CompareRequest(a=pb.Selection(machine="box-a"),
                                                                  b=pb.Selection(machine="box-b"), benchmarks=["  "]),
                                                metadata=server.client_md))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "benchmarks[0] has no character other than spaces")


def test_a_client_cannot_set_stored_runs_or_retry_what_is_not_lost(server):
    """stored_runs tells an agent to skip runs: only the server sets it, on a retried job. RetryJob takes a
    job id that is a UUID of a lost job, and says which of those it is not."""
    job = pb.Job(commands=[pb.Command(name="t", argv=["/bin/true"])], repetitions=3, stored_runs=[0, 1, 2])
    error = raised(lambda: server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job),
                                                  metadata=server.client_md, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "stored_runs is set by the server" in error.details()
    del job.stored_runs[:]
    (job_id,) = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job), metadata=server.client_md,
                                       timeout=10).job_ids
    for bad, code, said in (("x" * 10_000, grpc.StatusCode.INVALID_ARGUMENT, "job_id is not a UUID"),
                            ("'; DROP TABLE jobs; --", grpc.StatusCode.INVALID_ARGUMENT, "job_id is not a UUID"),
                            (str(uuid.uuid4()), grpc.StatusCode.NOT_FOUND, "no job"),
                            (job_id, grpc.StatusCode.FAILED_PRECONDITION, "only a lost job can be retried")):
        error = raised(lambda bad=bad: server.query.RetryJob(pb.RetryJobRequest(job_id=bad),
                                                             metadata=server.client_md, timeout=10))
        assert error.code() == code and said in error.details(), (bad[:40], error.details())
    agent_token = server.agent_md("box-a")  # an agent cannot retry jobs
    error = raised(lambda: server.query.RetryJob(pb.RetryJobRequest(job_id=job_id), metadata=agent_token, timeout=10))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


def test_get_jobs_takes_whole_job_ids_only_and_a_bounded_number(server):
    """GetJobsRequest.job_ids, what `--wait` polls with: each a UUID, at most MAX_JOB_IDS; one line each."""
    from perfctl.server.validation import MAX_JOB_IDS

    job = pb.Job(commands=[pb.Command(name="t", argv=["/bin/true"])], repetitions=1)
    (job_id,) = server.query.SubmitJob(pb.SubmitJobRequest(machines=["box-a"], job=job), metadata=server.client_md,
                                       timeout=10).job_ids
    for bad, said in (([job_id, job_id[:8]], "job_ids[1]: job_id is not a UUID"),
                      (["'; DROP TABLE jobs; --"], "job_ids[0]: job_id is not a UUID"),
                      ([str(uuid.uuid4())] * (MAX_JOB_IDS + 1), f"at most {MAX_JOB_IDS}")):
        error = raised(lambda bad=bad: server.query.GetJobs(pb.GetJobsRequest(job_ids=bad), metadata=server.client_md,
                                                            timeout=10))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and said in error.details(), error.details()
        assert "\n" not in error.details()
    found = server.query.GetJobs(pb.GetJobsRequest(job_ids=[job_id, str(uuid.uuid4())]), metadata=server.client_md,
                                 timeout=10).jobs
    assert [j.job_id for j in found] == [job_id] and not found[0].HasField("failed_runs")  # open: not counted


def test_job_prefixes_in_capitals_find_the_job_and_errors_echo_a_bounded_prefix(served):
    """Before: `perfctl jobs C71619BE` found nothing, and a 10 KB prefix came back whole in the error line."""
    fleet, address, query, md = served
    job_id = query.SubmitJob(pb.SubmitJobRequest(machines=["box"], job=pb.Job(commands=[pb.Command(
        name="t", argv=["/bin/true"])], repetitions=1)), metadata=md, timeout=30).job_ids[0]
    for wanted in (job_id[:8].upper(), job_id.upper()):
        done = fleet.client("jobs", wanted, "--json", server=address)
        assert done.returncode == 0, done.stderr
        assert [j["job_id"] for j in json.loads(done.stdout)] == [job_id]
    long = fleet.client("jobs", "f" * 10_000, server=address)
    assert long.returncode == 2 and long.stderr.count("\n") == 1, long.stderr[:300]
    assert long.stderr.strip() == f"perfctl jobs: no job on the server has an id starting with {'f' * 64!r}..."
