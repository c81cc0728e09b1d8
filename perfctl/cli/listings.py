"""`perfctl machines` and `perfctl jobs`: the fleet's machines and jobs, from the server."""

from __future__ import annotations

from perfctl.cli.options import SIGNAL_EXIT, connection_options, exit_status, loudness, verbosity
from perfctl.output import console
from perfctl.report import write

LISTINGS = {"machines": ("list the fleet's machines", "only machines disconnected or whose latest audit failed"),
            "jobs": ("list jobs and their states", "only failed and refused jobs")}


def add_parser(sub) -> None:
    for name, (text, quiet) in LISTINGS.items():
        listing = sub.add_parser(name, help=text, epilog=exit_status(
            "0 listed", "2 bad usage, or a server that cannot be reached or refuses the query", SIGNAL_EXIT))
        connection_options(listing, "the fleet server")
        listing.add_argument("--json", action="store_true")
        loudness(listing, verbose="accepted (every column is always shown)", quiet=quiet)


def run(args) -> int:
    from perfctl.cli.remote import call
    from perfctl.report.fleet import JobsReport, MachinesReport
    from perfctl.v1 import fleet_pb2 as pb

    if args.command == "machines":
        report = MachinesReport(call(args, "ListMachines", pb.ListMachinesRequest()).machines, verbosity(args))
    else:
        report = JobsReport(call(args, "GetJobs", pb.GetJobsRequest()).jobs, verbosity(args))
    return write(report, "json" if args.json else "table", console())
