"""`perfctl submit`: ask machines of the fleet to run a benchmark (the server queues one job per machine),
and with --wait wait for the jobs to end (perfctl/cli/listings.py owns the wait)."""

from __future__ import annotations

import argparse
import os
import sys
import uuid

from perfctl.analysis.verdicts import DEFAULT_CONFIDENCE, DEFAULT_FAIL_ON, DEFAULT_MARGIN, FAIL_ON
from perfctl.cli.ab import DEFAULT_MIN_RUNS, SEPARATOR, commands, confidence
from perfctl.cli.around import hook_options, job_hooks
from perfctl.cli.options import (
    SIGNAL_EXIT,
    backends,
    command_of,
    connection_of,
    connection_options,
    exit_status,
    label_option,
    labels,
    loudness,
    non_negative_int,
    positive_int,
    probability,
    seconds,
)
from perfctl.exit_codes import EXIT_NO_VERDICT, EXIT_OK, EXIT_SLOWDOWN, meaning
from perfctl.model import DEFAULT_METRICS, SIDE_LABEL
from perfctl.output import UsageError, console
from perfctl.report import write


def add_parser(sub) -> None:
    from perfctl.cli.listings import wait_exit_codes, wait_options

    submit = sub.add_parser("submit", help="ask machines to run a benchmark",
                            epilog=exit_status("0 queued: one line per machine with its job id (with --wait: and "
                                               "every job done)", *wait_exit_codes(
                                                   "2 bad usage, an unknown event or label, or a server that "
                                                   "cannot be reached or refuses the job"),
                                               "with --until-settled --wait, as perfctl ab and compare: "
                                               + meaning(EXIT_OK), meaning(EXIT_SLOWDOWN), meaning(EXIT_NO_VERDICT),
                                               SIGNAL_EXIT))
    connection_options(submit, "the fleet server")
    submit.add_argument("--machines", required=True, help="comma-separated machine names")
    submit.add_argument("-r", "--repeat", type=positive_int, default=10, metavar="N")
    submit.add_argument("--warmup", type=non_negative_int, default=0, metavar="K")
    submit.add_argument("--name", help="benchmark name (default: the command's basename)")
    submit.add_argument("-e", "--events", action="append", metavar="EVENTS")
    submit.add_argument("--backend", type=backends, default=("perf_event",), metavar="NAME[,NAME]")
    submit.add_argument("--timeout", type=seconds, metavar="S", help="kill a run after S seconds (per run; "
                        "--wait-timeout bounds the wait)")
    label_option(submit, "every run of the jobs")
    hook_options(submit, "its words, no shell; its program must be allowed by the agent's --allow")
    sequential = submit.add_argument_group(
        "until settled", "with two or more commands: run them in rounds in a random order and stop each job as "
        "soon as every command's comparison with the first is settled, as perfctl ab does (docs/ab.md); -r is "
        "then the most rounds")
    sequential.add_argument("--until-settled", action="store_true", help="stop when the comparison is settled")
    sequential.add_argument("--max-runs", type=positive_int, metavar="N", help="the most rounds (overrides -r)")
    sequential.add_argument("--margin", type=probability, default=DEFAULT_MARGIN,
                            help=f"equivalence margin ({DEFAULT_MARGIN})")
    sequential.add_argument("--confidence", type=confidence, default=DEFAULT_CONFIDENCE,
                            help=f"that every verdict of the job is right, together ({DEFAULT_CONFIDENCE}; "
                                 "0.5 to 0.999999999)")
    sequential.add_argument("--metric", metavar="METRIC",
                            help=f"what is compared (default: {', else '.join(DEFAULT_METRICS)})")
    sequential.add_argument("--min-runs", type=positive_int, metavar="K",
                            help="no verdict is settled before K rounds (default 5, at most the most rounds)")
    sequential.add_argument("--fail-on", choices=FAIL_ON, default=DEFAULT_FAIL_ON,
                            help="with --wait, which slowdown exits 3, as in perfctl ab: relevant (default: a "
                                 "difference shown, with B slower) or beyond (the whole sequence below 1 - margin)")
    wait_options(submit, "every job is")
    loudness(submit, verbose="accepted (the job ids are all there is to say)",
             quiet="the job ids, and with --wait only the jobs that failed, were refused or lost, or have runs "
                   "that failed")
    submit.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS [::: CMD2 ARGS ...]")


def run(args) -> int:
    from perfctl.agent.events import UnknownEvent, parse_events
    from perfctl.cli.remote import call
    from perfctl.report.fleet import SubmitReport
    from perfctl.v1 import fleet_pb2 as pb

    groups = commands(command_of(args))
    if not all(groups):
        raise UsageError("perfctl submit: no command given (usage: perfctl submit --machines A,B -- CMD ARGS)")
    if args.name and len(groups) > 1 and not args.until_settled:
        raise UsageError("perfctl submit: --name names one command; several commands are named after their programs")
    try:
        events = [spec.label for spec in parse_events(args.events)] if args.events else []
    except UnknownEvent as err:
        raise UsageError(f"perfctl submit: {err}") from None
    if args.wait_timeout is not None and not args.wait:
        raise UsageError("perfctl submit: --wait-timeout bounds --wait, which is not given")
    job = pb.Job(commands=[pb.Command(name=args.name or os.path.basename(g[0]), argv=g) for g in groups],
                 repetitions=args.repeat, warmups=args.warmup, events=events, backend=",".join(args.backend),
                 timeout_seconds=args.timeout or 0, labels=labels(args),
                 **job_hooks(args, len(groups), "perfctl submit"))
    if args.until_settled:
        _until_settled(args, job, groups)
    elif args.max_runs is not None:
        raise UsageError("perfctl submit: --max-runs bounds --until-settled, which is not given (-r sets the runs)")
    machines = [m.strip() for m in args.machines.split(",") if m.strip()]
    # a submission of its own id: sent again to another replica after a deadline, it is still done once
    response = call(connection_of(args), "SubmitJob",
                    pb.SubmitJobRequest(machines=machines, job=job, submit_id=str(uuid.uuid4())))
    code = write(SubmitReport(machines, response.job_ids), "table", console())
    if not args.wait:
        return code
    from perfctl.cli.listings import wait

    sys.stdout.flush()  # the job ids first, before anything the wait prints on stderr
    return wait(args, list(response.job_ids))


def _until_settled(args, job, groups: list[list[str]]) -> None:
    """Make ``job`` an --until-settled one: every command under one name (the first's), told apart by the
    label ab=A, ab=B, ... (docs/ab.md), so that `compare MACHINE@job=ID,ab=A MACHINE@job=ID,ab=B` pairs them."""
    from perfctl.v1 import fleet_pb2 as pb

    if len(groups) < 2:
        raise UsageError(f"perfctl submit: --until-settled compares commands: give two or more, separated by "
                         f"{SEPARATOR}")
    if SIDE_LABEL in job.labels:
        raise UsageError(f"perfctl submit: --label {SIDE_LABEL}=... is --until-settled's own (it tells the commands "
                         "apart)")
    rounds = args.max_runs or args.repeat
    if args.min_runs is None:
        args.min_runs = min(DEFAULT_MIN_RUNS, rounds)
    if args.min_runs > rounds:
        raise UsageError(f"perfctl submit: --min-runs {args.min_runs} is above the most rounds ({rounds})")
    name = args.name or os.path.basename(groups[0][0])
    for command in job.commands:
        command.name = name
    job.repetitions = rounds
    job.sequential.CopyFrom(pb.Sequential(margin=args.margin, confidence=args.confidence, metric=args.metric or "",
                                          min_rounds=args.min_runs))
