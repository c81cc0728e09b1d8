"""`perfctl submit`: ask machines of the fleet to run a benchmark (the server queues one job per machine),
and with --wait wait for the jobs to end (perfctl/cli/listings.py owns the wait)."""

from __future__ import annotations

import argparse
import os
import sys

from perfctl.cli.options import (
    SIGNAL_EXIT,
    backends,
    command_of,
    connection_options,
    exit_status,
    label_option,
    labels,
    loudness,
    non_negative_int,
    positive_int,
    seconds,
)
from perfctl.output import UsageError, console
from perfctl.report import write


def add_parser(sub) -> None:
    from perfctl.cli.listings import wait_exit_codes, wait_options

    submit = sub.add_parser("submit", help="ask machines to run a benchmark",
                            epilog=exit_status("0 queued: one line per machine with its job id (with --wait: and "
                                               "every job done)", *wait_exit_codes(
                                                   "2 bad usage, an unknown event or label, or a server that "
                                                   "cannot be reached or refuses the job"), SIGNAL_EXIT))
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
    wait_options(submit, "every job is")
    loudness(submit, verbose="accepted (the job ids are all there is to say)",
             quiet="the job ids, and with --wait only the jobs that failed or were refused")
    submit.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS [::: CMD2 ARGS ...]")


def run(args) -> int:
    from perfctl.agent.events import UnknownEvent, parse_events
    from perfctl.cli.remote import call
    from perfctl.report.fleet import SubmitReport
    from perfctl.v1 import fleet_pb2 as pb

    groups, current = [], []
    for word in command_of(args):
        if word == ":::":
            groups.append(current)
            current = []
        else:
            current.append(word)
    groups.append(current)
    if not all(groups):
        raise UsageError("perfctl submit: no command given (usage: perfctl submit --machines A,B -- CMD ARGS)")
    if args.name and len(groups) > 1:
        raise UsageError("perfctl submit: --name names one command; several commands are named after their programs")
    try:
        events = [spec.label for spec in parse_events(args.events)] if args.events else []
    except UnknownEvent as err:
        raise UsageError(f"perfctl submit: {err}") from None
    if args.wait_timeout is not None and not args.wait:
        raise UsageError("perfctl submit: --wait-timeout bounds --wait, which is not given")
    job = pb.Job(commands=[pb.Command(name=args.name or os.path.basename(g[0]), argv=g) for g in groups],
                 repetitions=args.repeat, warmups=args.warmup, events=events, backend=",".join(args.backend),
                 timeout_seconds=args.timeout or 0, labels=labels(args))
    machines = [m.strip() for m in args.machines.split(",") if m.strip()]
    response = call(args, "SubmitJob", pb.SubmitJobRequest(machines=machines, job=job))
    code = write(SubmitReport(machines, response.job_ids), "table", console())
    if not args.wait:
        return code
    from perfctl.cli.listings import wait

    sys.stdout.flush()  # the job ids first, before anything the wait prints on stderr
    return wait(args, list(response.job_ids))
