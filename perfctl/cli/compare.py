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


def add_parser(sub) -> None:
    from perfctl.formats import FORMATS

    compare = sub.add_parser("compare", help="compare two sample files benchmark by benchmark",
                             description="Is B faster, slower or equivalent to A? Per benchmark and overall, "
                                         "with SPARC, the Speedup-Test and SPA (docs/statistics.md).",
                             epilog=exit_status("0 no relevant slowdown", "3 a relevant slowdown of B",
                                                "4 no benchmark could be judged", "2 bad usage or input (a missing, "
                                                "empty or unknown file, no benchmark in common, an unreachable "
                                                "server)", f"{SIGNAL_EXIT} (docs/statistics.md)"))
    compare.add_argument("a", metavar="A",
                         help="baseline samples (perfctl JSONL, hyperfine/pyperf/Google Benchmark/pytest-benchmark "
                              "JSON, perf stat CSV or JSON)")
    compare.add_argument("b", metavar="B", help="candidate samples, same format")
    compare.add_argument("--input-format", choices=FORMATS,
                         help="skip format detection")
    compare.add_argument("--metric", action="append", metavar="METRIC",
                         help="metric(s) to compare "
                              "(default: instructions, else cycles, else task-clock, else wall-time)")
    compare.add_argument("--alpha", type=probability, default=0.05, help="family-wise risk (default 0.05)")
    compare.add_argument("--confidence", type=probability, default=0.95, help="confidence of intervals (0.95)")
    compare.add_argument("--proportion", type=probability, default=0.5,
                         help="SPA: the value that a proportion F of runs stay at or under (default 0.5)")
    compare.add_argument("--margin", type=probability, default=0.05,
                         help="equivalence margin delta: ratios in [1-delta, 1+delta] are equivalent (0.05)")
    compare.add_argument("--paired", action="store_true", help="runs were taken in rounds: pair them by index")
    compare.add_argument("--correction", choices=("holm", "bonferroni", "bh"), default="holm")
    compare.add_argument("--precision", type=probability, default=0.05,
                         help="half-width wanted for the proportion of accelerated benchmarks (0.05)")
    compare.add_argument("--seed", type=non_negative_int, default=0, help="seed of the SPA speedup pairing")
    compare.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    interference_options(compare)
    compare.add_argument("--benchmark", action="append", metavar="NAME",
                         help="with machine names: only these benchmarks")
    connection_options(compare, "server holding the machines' samples (when A and B are machine names)")
    loudness(compare, verbose="accepted (the table already shows every detail)",
             quiet="with --format table: only the relevant slowdowns, or that nothing could be judged")


def _parameters(args):
    from perfctl.analysis.compare import Parameters

    parameters = Parameters(alpha=args.alpha, confidence=args.confidence, proportion=args.proportion,
                            margin=args.margin, paired=args.paired, correction=args.correction,
                            precision=args.precision, seed=args.seed)
    try:
        parameters.validate()
    except ValueError as err:  # before any file is read or server called: one line, exit 2
        raise UsageError(f"perfctl compare: {err}") from None
    return parameters


def run(args) -> int:
    from perfctl.formats import DatasetError, read_dataset
    from perfctl.pairing import PairingError
    from perfctl.report.compare import compare_report

    metrics = [m.strip() for text in (args.metric or []) for m in text.split(",") if m.strip()] or None
    server_given = args.server or os.environ.get("PERFCTL_SERVER")
    if server_given and not os.path.exists(args.a) and not os.path.exists(args.b):
        return _compare_machines(args, metrics, _parameters(args))
    try:
        a = read_dataset(args.a, args.input_format, interference(args))
        b = read_dataset(args.b, args.input_format, interference(args))
        report = compare_report(a, b, metrics, _parameters(args), (args.a, args.b), verbosity(args))
    except (DatasetError, PairingError) as err:
        raise UsageError(f"perfctl compare: {err}") from None
    return write(report, args.format, console())


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
