"""`perfctl report`: the HTML report of a comparison (the inputs and options of compare: files, or machines
whose runs the server holds), or of the fleet's audits (--machines). docs/report.md."""

from __future__ import annotations

from perfctl.cli.compare import check_output, comparison, inputs, request
from perfctl.cli.options import SIGNAL_EXIT, connection_of, exit_status, force_option, loudness
from perfctl.output import UsageError
from perfctl.report.html import write_report

COMMAND = "perfctl report"


def add_parser(sub) -> None:
    report = sub.add_parser("report", help="write the HTML report of a comparison, or of the fleet's audits",
                            description="One self-contained HTML file: the verdicts, a forest plot of every "
                                        "benchmark's ratio, per benchmark its runs, the machines side by side "
                                        "(docs/report.md). A and B as for compare: files or machine names.",
                            epilog=exit_status("0 no relevant slowdown (always, with --machines)",
                                               "3 a relevant slowdown of B", "4 no benchmark could be judged (as "
                                               "compare)", "2 bad usage or input, or a FILE that cannot or must "
                                               "not be written (docs/outputs.md)", SIGNAL_EXIT))
    inputs(report, inputs_required=False)
    report.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    force_option(report, "-o FILE")
    report.add_argument("--machines", action="store_true",
                        help="instead of A and B: every machine's audits over time and their drift (needs --server)")
    loudness(report, verbose="accepted", quiet="no line saying where the report went")


def run(args) -> int:
    if args.machines and (args.a or args.b):
        raise UsageError(f"{COMMAND}: --machines reports the whole fleet: give no A and B")
    if not args.machines and not (args.a and args.b):
        raise UsageError(f"{COMMAND}: give A and B (files or machines), or --machines")
    if args.machines:
        from perfctl.cli.audit import audit_history

        output = check_output("-o", args.output, args.force, [], connection_of(args), COMMAND)
        result = audit_history(args)
    else:
        asked = request(args, COMMAND, "-o", args.output)
        output, result = asked.output, comparison(asked)
    write_report(result, output, COMMAND, quiet=args.quiet)
    return result.exit_code()
