"""`perfctl compare`: is B faster, slower or equivalent to A? Two sample files read here, or two machines'
samples compared by the fleet server (docs/statistics.md)."""

from __future__ import annotations

import os

from perfctl.cli.options import (
    SIGNAL_EXIT,
    connection_options,
    exit_status,
    interference,
    interference_options,
    loudness,
    non_negative_int,
    probability,
    verbosity,
)
from perfctl.output import UsageError, console
from perfctl.report import write
from perfctl.report.html import check_target, write_report


def add_parser(sub) -> None:
    compare = sub.add_parser("compare", help="compare two sample files benchmark by benchmark",
                             description="Is B faster, slower or equivalent to A? Per benchmark and overall, "
                                         "with SPARC, the Speedup-Test and SPA (docs/statistics.md).",
                             epilog=exit_status("0 no relevant slowdown", "3 a relevant slowdown of B (with "
                                                "--fail-on beyond: a slowdown shown beyond the margin)",
                                                "4 no benchmark could be judged", "2 bad usage or input (a missing, "
                                                "empty or unknown file, no benchmark in common, an unreachable "
                                                "server)", f"{SIGNAL_EXIT} (docs/statistics.md)"))
    inputs(compare)
    compare.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    compare.add_argument("--html", metavar="FILE", help="also write the HTML report to FILE (docs/report.md)")
    loudness(compare, verbose="the details table shows the Speedup-Test's mean protocol too",
             quiet="with --format table: only the relevant slowdowns, or that nothing could be judged")


def inputs(command, inputs_required: bool = True) -> None:
    """What compare and report share: the two inputs (files or machines), the metric, the statistics'
    parameters, interference, and the server holding the machines' runs."""
    from perfctl.formats import FORMATS

    command.add_argument("a", metavar="A", nargs=None if inputs_required else "?",
                         help="baseline samples (perfctl JSONL, hyperfine/pyperf/Google Benchmark/pytest-benchmark "
                              "JSON, perf stat CSV or JSON)")
    command.add_argument("b", metavar="B", nargs=None if inputs_required else "?",
                         help="candidate samples, same format")
    command.add_argument("--input-format", choices=FORMATS,
                         help="skip format detection")
    command.add_argument("--metric", action="append", metavar="METRIC",
                         help="metric(s) to compare "
                              "(default: instructions, else cycles, else task-clock, else wall-time)")
    command.add_argument("--alpha", type=probability, default=0.05, help="family-wise risk (default 0.05)")
    command.add_argument("--confidence", type=probability, default=0.95, help="confidence of intervals (0.95)")
    command.add_argument("--proportion", type=probability, default=0.5,
                         help="SPA: the value that a proportion F of runs stay at or under (default 0.5)")
    command.add_argument("--margin", type=probability, default=0.05,
                         help="equivalence margin delta: ratios in [1-delta, 1+delta] are equivalent (0.05)")
    command.add_argument("--paired", action="store_true", help="runs were taken in rounds: pair them by index")
    command.add_argument("--family", choices=("simultaneous", "sparc"), default="simultaneous",
                         help="simultaneous (default): every verdict reads off its A/B interval, all intervals "
                              "Bonferroni-adjusted together; sparc: the paper's family of tests, intervals not "
                              "adjusted (docs/statistics.md)")
    command.add_argument("--correction", choices=("holm", "bonferroni", "bh"), default="holm",
                         help="the correction of the Speedup-Test protocols over the benchmarks, and with --family "
                              "sparc of its tests (default holm; the default family's intervals are Bonferroni)")
    command.add_argument("--fail-on", choices=("relevant", "beyond"), default="relevant",
                         help="which slowdown of B exits 3: relevant (default: a difference shown and equivalence "
                              "not) or beyond (the interval lies entirely beyond the margin)")
    command.add_argument("--precision", type=probability, default=0.05,
                         help="half-width wanted for the proportion of accelerated benchmarks (0.05)")
    command.add_argument("--seed", type=non_negative_int, default=0, help="seed of the SPA speedup pairing")
    interference_options(command)
    command.add_argument("--benchmark", action="append", metavar="NAME",
                         help="only these benchmarks (repeat the option for several)")
    connection_options(command, "server holding the machines' samples (when A and B are machine names)")


def _parameters(args, command: str):
    from perfctl.analysis.compare import Parameters

    parameters = Parameters(alpha=args.alpha, confidence=args.confidence, proportion=args.proportion,
                            margin=args.margin, paired=args.paired, correction=args.correction,
                            precision=args.precision, seed=args.seed, family=args.family)
    try:
        parameters.validate()
    except ValueError as err:  # before any file is read or server called: one line, exit 2
        raise UsageError(f"{command}: {err}") from None
    return parameters


def _metrics(args) -> list[str] | None:
    return [m.strip() for text in (args.metric or []) for m in text.split(",") if m.strip()] or None


def _machines(args) -> bool:
    """A and B name machines (a server is given and neither is a file)."""
    server_given = args.server or os.environ.get("PERFCTL_SERVER")
    return bool(server_given) and not os.path.exists(args.a) and not os.path.exists(args.b)


def run(args) -> int:
    if args.html:
        check_target(args.html, "perfctl compare", (args.a, args.b))
    defaults = args.family == "simultaneous" and args.fail_on == "relevant"  # what the server's Compare knows
    if _machines(args) and not args.html and defaults:  # the server compares its stored runs itself
        return _compare_machines(args, _metrics(args), _parameters(args, "perfctl compare"))
    report = comparison(args, "perfctl compare")
    code = write(report, args.format, console())
    if args.html:
        write_report(report, args.html, "perfctl compare", quiet=args.quiet, inputs=(args.a, args.b))
    return code


def comparison(args, command: str):
    """The CompareReport of A and B: files read here, or two machines' runs fetched from the server and
    compared here (the HTML report draws every run, which the server's answer does not carry)."""
    from perfctl import client, security
    from perfctl.formats import DatasetError, read_dataset
    from perfctl.pairing import PairingError
    from perfctl.report.compare import compare_report

    parameters = _parameters(args, command)
    try:
        if _machines(args):
            a, b = client.machine_datasets(args, (args.a, args.b), args.benchmark or [], interference(args))
            labels = (f"machine {args.a}", f"machine {args.b}")
        else:
            a = read_dataset(args.a, args.input_format, interference(args))
            b = read_dataset(args.b, args.input_format, interference(args))
            labels = (args.a, args.b)
            if args.benchmark:
                _select(args.benchmark, a, b)
        return compare_report(a, b, _metrics(args), parameters, labels, verbosity(args), args.fail_on)
    except (DatasetError, PairingError, client.ClientError, security.SecurityError) as err:
        raise UsageError(f"{command}: {err}") from None


def _select(names: list[str], *datasets) -> None:
    """Keep only the benchmarks named (--benchmark) in files; a name in neither file is an error."""
    from perfctl.formats import DatasetError

    missing = [n for n in names if not any(n in d.benchmarks for d in datasets)]
    if missing:
        raise DatasetError(f"no benchmark named {', '.join(map(repr, missing))} in A or B")
    for dataset in datasets:
        dataset.benchmarks = {n: bench for n, bench in dataset.benchmarks.items() if n in names}


def _compare_machines(args, metrics, parameters) -> int:
    from perfctl.cli.remote import call
    from perfctl.report.compare import ServerCompareReport
    from perfctl.v1 import fleet_pb2 as pb

    request = pb.CompareRequest(machine_a=args.a, machine_b=args.b, benchmarks=args.benchmark or [],
                                metrics=metrics or [], alpha=parameters.alpha, confidence=parameters.confidence,
                                proportion=parameters.proportion, margin=parameters.margin, paired=parameters.paired,
                                correction=parameters.correction, precision=parameters.precision,
                                seed=parameters.seed, format=args.format,
                                interference_limit=args.interference_limit,
                                exclude_interfered=args.exclude_interfered)
    response = call(args, "Compare", request)
    if response.exit_code == 2:
        raise UsageError(response.output.strip().replace("\n", " "))
    return write(ServerCompareReport(response.output, response.exit_code, verbosity(args)), args.format, console())
