"""`perfctl machines`, `perfctl jobs` and `perfctl benchmarks`: the fleet's machines, jobs and stored
benchmarks, from the server; and the one wait for jobs to end (`perfctl jobs --wait`, `perfctl submit
--wait`), which polls GetJobs about once a second. Jobs are read a page at a time (the most recent --last N)
or looked up by id and id prefix: never the whole history in one answer."""

from __future__ import annotations

import re
import sys
import time

from perfctl.analysis.verdicts import DEFAULT_FAIL_ON
from perfctl.cli.options import (
    SIGNAL_EXIT,
    connection_of,
    connection_options,
    duration,
    exit_status,
    loudness,
    positive_int,
    verbosity,
)
from perfctl.exit_codes import EXIT_NO_VERDICT, EXIT_SLOWDOWN, EXIT_WAIT_TIMEOUT, meaning
from perfctl.model import SIDE_LABEL, side_letter
from perfctl.output import UsageError, console, interactive, say
from perfctl.report import QUIET, write

POLL_SECONDS = 1.0
# how long a wait asks again while the server or its database cannot answer (an outage, a restart)
OUTAGE_RIDE_S = 300.0  # --wait's help says "5 minutes"
DEFAULT_LAST = 50  # `perfctl jobs`: the most recent jobs shown; --last N for more
ECHOED = 64  # characters of what the user typed that an error line repeats
WHOLE_JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")  # as the server makes them


def wait_exit_codes(usage: str) -> tuple[str, ...]:
    """The exit codes of submit and jobs after their 0, in --help: the wait's, and ``usage`` (2) among them."""
    return ("1 with --wait: a job failed, was refused or was lost, or a run of one failed", usage,
            meaning(EXIT_WAIT_TIMEOUT))


def wait_options(command, what: str) -> None:
    """--wait and --wait-timeout, for `submit` and `jobs`."""
    command.add_argument("--wait", action="store_true",
                         help=f"wait until {what} done, failed, refused or lost, showing each job's state and runs "
                              "(live on a terminal, else a line per change, on stderr); a server or database "
                              "that cannot answer is asked again for up to 5 minutes; Ctrl-C stops waiting, "
                              "not the jobs")
    command.add_argument("--wait-timeout", type=duration, metavar="DURATION",
                         help="with --wait: give up waiting after DURATION (90, 90s, 15m, 2h), exit 124")


def add_parser(sub) -> None:
    machines = sub.add_parser("machines", help="list the fleet's machines, or show one in full", epilog=exit_status(
        "0 listed (with --retire: retired)", "2 bad usage, an unknown machine, a machine to retire whose agent is "
        "connected, or a server that cannot be reached or refuses the query",
        SIGNAL_EXIT))
    machines.add_argument("name", nargs="?", metavar="NAME",
                          help="show this machine in full: inventory, and every event with why it is unsupported")
    machines.add_argument("--retire", metavar="NAME",
                          help="take a decommissioned machine out of service: its heartbeat and audit alerts stop; "
                               "its runs, jobs and audits are kept; its agent registering again puts it back "
                               "(refused while its agent is connected)")
    _common(machines, quiet="only machines in service disconnected or whose latest audit failed (with NAME: its "
                            "unsupported events)")

    jobs = sub.add_parser("jobs", help="list jobs and their states, or wait for jobs to end", epilog=exit_status(
        "0 listed (with --wait: every job done)", *wait_exit_codes(
            "2 bad usage, an unknown job, or a server that cannot be reached or refuses the query"),
        "with --wait, of jobs submitted --until-settled, as perfctl ab: " + meaning(EXIT_SLOWDOWN),
        meaning(EXIT_NO_VERDICT), SIGNAL_EXIT))
    jobs.add_argument("job_ids", nargs="*", metavar="JOB", help="only these jobs (an id, or its first characters)")
    jobs.add_argument("--last", type=positive_int, default=DEFAULT_LAST, metavar="N",
                      help=f"without JOB: the N most recent jobs ({DEFAULT_LAST}), oldest of them first")
    jobs.add_argument("--retry", metavar="JOB", help="queue a lost job again (an id, or its first characters): the "
                      "runs already stored are kept and not measured again")
    wait_options(jobs, "every JOB is")
    _common(jobs, quiet="only the jobs that failed, were refused or lost, or have runs that failed")

    benchmarks = sub.add_parser("benchmarks", help="list the benchmarks the server stores runs of",
                                epilog=exit_status("0 listed", "2 bad usage, or a server that cannot be reached or "
                                                   "refuses the query", SIGNAL_EXIT))
    benchmarks.add_argument("machine", nargs="?", metavar="MACHINE", help="only this machine's")
    _common(benchmarks, quiet="accepted (the list is the output)")


def _common(command, quiet: str) -> None:
    connection_options(command, "the fleet server")
    command.add_argument("--json", action="store_true", help="every field, for scripts")
    loudness(command, verbose="accepted (every column is always shown)", quiet=quiet)


def run(args) -> int:
    from perfctl.cli.remote import call, known_machine, pages
    from perfctl.report.fleet import BenchmarksReport, JobsReport, MachineReport, MachinesReport
    from perfctl.v1 import fleet_pb2 as pb

    fmt = "json" if args.json else "table"
    server = connection_of(args)
    if args.command == "machines":
        if args.retire is not None:
            if args.name is not None or not args.retire.strip():
                raise UsageError("perfctl machines: --retire takes one machine NAME and no other")
            retired = call(server, "RetireMachine", pb.RetireMachineRequest(name=args.retire)).machine
            return write(MachineReport(retired, verbosity(args)), fmt, console())
        if args.name is None:
            machines = list(pages(server, "ListMachines", pb.ListMachinesRequest(), "machines"))
            return write(MachinesReport(machines, verbosity(args)), fmt, console())
        found = known_machine(server, args.name, "perfctl machines")
        return write(MachineReport(found, verbosity(args)), fmt, console())
    if args.command == "benchmarks":
        summaries = list(pages(server, "ListBenchmarks", pb.ListBenchmarksRequest(machine=args.machine or ""),
                               "benchmarks"))
        return write(BenchmarksReport(summaries, verbosity(args)), fmt, console())
    if args.retry is not None:
        if not args.retry.strip():
            raise UsageError("perfctl jobs: --retry needs a job id (or its first characters)")
        if args.wait or args.job_ids:
            raise UsageError("perfctl jobs: --retry JOB takes no other JOB and no --wait (wait afterwards: "
                             "perfctl jobs --wait JOB)")
        (lost,) = find_jobs(args, [args.retry], "perfctl jobs")
        retried = call(server, "RetryJob", pb.RetryJobRequest(job_id=lost.job_id)).job
        return write(JobsReport([retried], verbosity(args)), fmt, console())
    if args.wait_timeout is not None and not args.wait:
        raise UsageError("perfctl jobs: --wait-timeout bounds --wait, which is not given")
    if args.wait:
        if not args.job_ids:
            raise UsageError("perfctl jobs: --wait needs the JOB ids to wait for (perfctl jobs lists them)")
        return wait(args, args.job_ids, "json" if args.json else None)
    if args.job_ids:
        jobs = find_jobs(args, args.job_ids, "perfctl jobs")
    else:  # newest first from the server, a page at a time; shown oldest first, as they happened
        jobs = list(pages(server, "GetJobs", pb.GetJobsRequest(), "jobs", most=args.last))[::-1]
    return write(JobsReport(jobs, verbosity(args)), fmt, console())


def find_jobs(args, wanted: list[str], command: str) -> list:
    """The jobs named by ``wanted`` (whole ids, or their first characters), looked up on the server by id
    and by prefix (GetJobs job_ids and id_prefixes), never by listing every job; as select_jobs."""
    from perfctl.cli.remote import call
    from perfctl.server.validation import MAX_JOB_IDS
    from perfctl.v1 import fleet_pb2 as pb

    wanted = [key.lower() for key in wanted]  # ids are lower-case UUIDs: C71619BE names c71619be-...
    whole = [key for key in wanted if WHOLE_JOB_ID.match(key)]
    prefixes = [key[:64] for key in wanted if not WHOLE_JOB_ID.match(key)]  # longer: no id starts with it
    found = []
    for start in range(0, max(len(whole), len(prefixes)), MAX_JOB_IDS):
        found += call(connection_of(args), "GetJobs", pb.GetJobsRequest(job_ids=whole[start:start + MAX_JOB_IDS],
                                                         id_prefixes=prefixes[start:start + MAX_JOB_IDS])).jobs
    return select_jobs(found, wanted, command)


def select_jobs(jobs, wanted: list[str], command: str) -> list:
    """The jobs named by ``wanted`` (whole ids, or first characters that only one id starts with), in the
    order named; a UsageError names an id that matches none or several (the server sends at most two jobs
    per prefix: enough to tell)."""
    chosen = []
    for key in (key.lower() for key in wanted):  # as find_jobs
        matches = [j for j in jobs if j.job_id == key] or [j for j in jobs if key and j.job_id.startswith(key)]
        if len(matches) != 1:
            found = "several jobs on the server have ids" if matches else "no job on the server has an id"
            shown = repr(key[:ECHOED]) + ("..." if len(key) > ECHOED else "")  # a job id is 36: the line stays one
            raise UsageError(f"{command}: {found} starting with {shown}" + (" (give more of it)" if matches else ""))
        if matches[0] not in chosen:
            chosen.append(matches[0])
    return chosen


def wait(args, job_ids: list[str], fmt: str | None = None) -> int:
    """Wait for ``job_ids`` to end (done, failed or refused), polling GetJobs about once a second, for at most
    args.wait_timeout seconds; progress on stderr (perfctl/report/fleet.py JobsWaitReport). With ``fmt``
    the jobs' final states are written on stdout in it (`perfctl jobs --wait --json`; a table would repeat
    the progress; submit prints job ids instead). The verdicts of --until-settled jobs count as ab's do
    (sequential_verdicts). Returns the wait's exit code (JobsWaitReport.exit_code).
    On Ctrl-C it says that the jobs go on running on the server and how to wait again, and lets the
    interrupt end the command (exit 130)."""
    from perfctl.cli.remote import ServerUnavailable, call
    from perfctl.server.validation import MAX_JOB_IDS
    from perfctl.v1 import fleet_pb2 as pb

    command = f"perfctl {args.command}"
    quiet = verbosity(args) <= QUIET
    live = interactive(stderr=True) and not quiet
    progress = _LiveProgress() if live else _LineProgress(quiet)
    ids, listed = list(job_ids), None
    if not all(WHOLE_JOB_ID.match(job_id) for job_id in ids):  # first characters of ids: the list resolves them
        listed = find_jobs(args, ids, command)
        ids = [j.job_id for j in listed]

    def poll() -> list:
        """The jobs waited for, and only those: the server's whole job history is not read every second (the
        list that resolved the ids is the first poll)."""
        nonlocal listed
        if listed is not None:
            found, listed = listed, None
        else:
            found = ride_out(lambda: [job for start in range(0, len(ids), MAX_JOB_IDS) for job in call(
                connection_of(args), "GetJobs", pb.GetJobsRequest(job_ids=ids[start:start + MAX_JOB_IDS])).jobs])
        return select_jobs(found, ids, command)

    hint = f"the jobs go on running on the server (perfctl jobs --wait {' '.join(ids)})"
    try:
        with progress:
            report = watch_jobs(poll, progress.show, args.wait_timeout, verbosity(args))
            ids = [j.job_id for j in report.jobs]
    except KeyboardInterrupt:
        say(f"{command}: stopped waiting; {hint}")
        raise
    except ServerUnavailable as err:
        raise UsageError(f"{err}; stopped waiting after {OUTAGE_RIDE_S:g} s; {hint}") from None
    report.verdicts = sequential_verdicts(args, report.jobs)
    if not report.finished or report.failed or not quiet:
        say(f"{command}: {report.summary()}")
    if fmt is not None:
        write(report, fmt, console())
    return report.exit_code()


def ride_out(fetch, *, clock=time.monotonic, sleep=time.sleep):
    """``fetch()``, asked again every POLL_SECONDS while the server or its database cannot answer
    (ServerUnavailable), saying so once on stderr; the last ServerUnavailable after OUTAGE_RIDE_S."""
    from perfctl.cli.remote import ServerUnavailable

    since = None
    while True:
        try:
            result = fetch()
        except ServerUnavailable as err:
            if since is None:
                since = clock()
                say(f"{err}; still waiting (asking again for up to {OUTAGE_RIDE_S:g} s)")
            if clock() - since >= OUTAGE_RIDE_S:
                raise
            sleep(POLL_SECONDS)
            continue
        if since is not None:
            say(f"the server answers again after {clock() - since:.0f} s")
        return result


def sequential_verdicts(args, jobs) -> dict:
    """What the --until-settled jobs among ``jobs`` found, as JobsWaitReport.verdicts takes it ({} when there
    is none): for each job done, the server replays the rounds of each command against A under the job's
    rule (`compare MACHINE@job=ID,ab=A ...,ab=B`, server Compare's sequential part), which gives the agent's
    own settlement, and ab's mapping reads it (report/ab.py settlements_found, with submit's --fail-on;
    `jobs --wait`: relevant). So `submit --until-settled --wait` and `jobs --wait` of such a job exit as ab
    on the same verdict (perfctl/exit_codes.py). A job whose rounds cannot be replayed (a run left out on one
    side) has no verdict here (4), and a line says so."""
    from perfctl import results
    from perfctl.analysis.ab import Replay
    from perfctl.cli.remote import call
    from perfctl.report.ab import settlements_found
    from perfctl.report.fleet import went_wrong
    from perfctl.v1 import fleet_pb2 as pb

    sequential = [job for job in jobs if job.job.HasField("sequential")]
    if not sequential:
        return {}
    settlements, replayed_all = [], True
    for job in sequential:
        # failed, refused, lost, or with runs that failed: the job's own record exits 1 (JobsWaitReport.failed),
        # and is not replayed (a side whose every run failed has nothing to compare); still open: 124
        if job.state != "done" or went_wrong(job):
            continue
        for i in range(1, len(job.job.commands)):
            label = side_letter(i)
            response = call(connection_of(args), "Compare", pb.CompareRequest(
                a=pb.Selection(machine=job.machine, job_id=job.job_id, labels={SIDE_LABEL: side_letter(0)}),
                b=pb.Selection(machine=job.machine, job_id=job.job_id, labels={SIDE_LABEL: label}), paired=True))
            try:
                replay = results.loads(response.sequential_json, Replay) if response.sequential_json else None
            except results.ResultError:
                replay = None
            if replay is None:
                replayed_all = False
                say(f"perfctl {args.command}: {job.machine} job {job.job_id}: the rounds of {label} cannot be "
                    "replayed against A (a run left out on one side): no verdict")
                continue
            settlements.append(replay.settlement)
    found = settlements_found(settlements, getattr(args, "fail_on", DEFAULT_FAIL_ON))
    return {**found, "decided": found["decided"] and replayed_all}


def watch_jobs(poll, show, timeout: float | None, verbosity: int = 0, *, clock=time.monotonic,
               sleep=time.sleep):
    """Call ``poll`` (the JobStatus of the jobs waited for) about every POLL_SECONDS and ``show`` each
    JobsWaitReport, until every job is done, failed or refused or ``timeout`` seconds have passed; returns
    the last report (``timed_out`` set if the time passed first)."""
    from perfctl.report.fleet import JobsWaitReport

    deadline = None if timeout is None else clock() + timeout
    while True:
        started = clock()
        report = JobsWaitReport(poll(), verbosity=verbosity)
        show(report)
        if report.finished:
            return report
        if deadline is not None and started + POLL_SECONDS > deadline:
            report.timed_out = True
            return report
        sleep(max(0.0, POLL_SECONDS - (clock() - started)))


class _LiveProgress:
    """On a terminal: one table of the jobs, redrawn in place on stderr (rich Live); its last state stays."""

    def __init__(self) -> None:
        from rich.live import Live

        self._live = Live(console=console(stderr=True), auto_refresh=False, transient=False)

    def __enter__(self):
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._live.__exit__(*exc)

    def show(self, report) -> None:
        self._live.update(report.progress_table(), refresh=True)


class _LineProgress:
    """Without a terminal (a log, CI): one line on stderr per job whose state changed; quiet: only for
    jobs that failed or were refused."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._states: dict[str, str] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def show(self, report) -> None:
        from perfctl.report.fleet import went_wrong

        for job in report.jobs:
            if self._states.get(job.job_id) == job.state:
                continue
            self._states[job.job_id] = job.state
            if not self.quiet or went_wrong(job):
                print(report.progress_line(job), file=sys.stderr, flush=True)  # its fields made visible
