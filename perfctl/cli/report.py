"""`perfctl report`: the HTML report of a comparison (the inputs and options of compare: files, or machines
whose runs the server holds), of the fleet's audits (--machines), or of a performance history (--history:
a machine's series on the server, or labelled sample files; docs/history.md). docs/report.md."""

from __future__ import annotations

from perfctl.cli.compare import check_output, comparison, inputs, request
from perfctl.cli.history import DEFAULT_LIMIT, labels_list
from perfctl.cli.options import SIGNAL_EXIT, connection_of, exit_status, force_option, loudness, positive_int
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
    report.add_argument("--history", nargs="+", metavar="MACHINE[@KEY=VALUE,...]|FILE",
                        help="instead of A and B: the history of a machine's series on the server (with the fleet's "
                             "open changes) or of labelled sample files, every job's median and spread with the "
                             "changes marked (docs/history.md); --margin then defaults to 1%%")
    report.add_argument("--line", type=labels_list, metavar="LABEL[,LABEL]",
                        help="with --history of files: the labels naming a line of development (default branch)")
    report.add_argument("--order-by", metavar="LABEL", action="append",
                        help="with --history: order the points by this numeric label (on a server, the changes are "
                             "then found for this page, without ids or triage)")
    report.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"with --history of a machine: list the fleet's newest N open changes (default "
                             f"{DEFAULT_LIMIT}); the page counts the rest")
    report.add_argument("--every-difference", action="store_true",
                        help="with --history: also the changes whose interval does not lie beyond the margin")
    # compare's margin unless --history (HISTORY_MARGIN): None tells that none was given
    report.set_defaults(margin=None)
    loudness(report, verbose="accepted", quiet="no line saying where the report went")


def run(args) -> int:
    if args.history:
        return _history(args)
    if args.margin is None:
        from perfctl.analysis.compare import Parameters

        args.margin = Parameters().margin
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


def _history(args) -> int:
    """The page of --history's series: read as `perfctl history` reads them (cli/history.py)."""
    from perfctl.cli.history import machine_named, order_label, read_sources
    from perfctl.report.history import HistoryReport

    if args.machines or args.a or args.b:
        raise UsageError(f"{COMMAND}: --history reports a history: give no A and B and no --machines")
    if (args.metric and len(args.metric) > 1) or (args.benchmark and len(args.benchmark) > 1):
        raise UsageError(f"{COMMAND}: --history draws one metric of every benchmark, or of one: give --metric "
                         "and --benchmark at most once")
    output = check_output("-o", args.output, args.force, [], connection_of(args), COMMAND, args.history)
    args.metric = args.metric[0] if args.metric else None
    args.benchmark = args.benchmark[0] if args.benchmark else None
    args.order_by = order_label(args.order_by, COMMAND)
    history = read_sources(args, args.history, COMMAND)
    fleet = unlisted = None
    if machine_named(args.history, args):
        from perfctl.cli.history import listed_changes

        fleet, unlisted = listed_changes(args, COMMAND, args.limit, states=("new",))
    write_report(HistoryReport(history, fleet_changes=fleet, unlisted=unlisted), output, COMMAND,
                 quiet=args.quiet)
    return 0
