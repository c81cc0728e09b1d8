"""`perfctl compare`: is B faster, slower or equivalent to A? Two sample files read here, or two machines'
samples compared by the fleet server (docs/statistics.md).

One run goes forward once: the command line is read into a CompareRequest (``request``: every option
checked, each side a file or a machine) before anything is read or asked of a server; then both sides'
runs are got one way (``datasets``) and compared, or the server's comparison is asked for; then written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfctl.analysis.verdicts import FAIL_ON, FAMILIES
from perfctl.cli.options import (
    SIGNAL_EXIT,
    connection_of,
    connection_options,
    exit_status,
    force_option,
    interference,
    interference_options,
    loudness,
    non_negative_int,
    probability,
    verbosity,
)
from perfctl.exit_codes import EXIT_NO_VERDICT, EXIT_OK, EXIT_SLOWDOWN, meaning
from perfctl.output import UsageError, console
from perfctl.report import NORMAL, write
from perfctl.report.html import write_report

if TYPE_CHECKING:
    from perfctl.analysis.compare import Parameters
    from perfctl.client import Connection
    from perfctl.model import InterferencePolicy
    from perfctl.output_files import Output


def add_parser(sub) -> None:
    compare = sub.add_parser("compare", help="compare two sample files benchmark by benchmark",
                             description="Is B faster, slower or equivalent to A? Per benchmark and overall, "
                                         "with SPARC, the Speedup-Test and SPA (docs/statistics.md).",
                             epilog=exit_status(*map(meaning, (EXIT_OK, EXIT_SLOWDOWN, EXIT_NO_VERDICT)),
                                                "2 bad usage or input (a missing, "
                                                "empty or unknown file, no benchmark in common, an unreachable "
                                                "server)", f"{SIGNAL_EXIT} (docs/statistics.md)"))
    inputs(compare)
    compare.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    compare.add_argument("--html", metavar="FILE", help="also write the HTML report to FILE (docs/report.md)")
    force_option(compare, "--html FILE")
    loudness(compare, verbose="the details table shows the Speedup-Test's mean protocol too",
             quiet="with --format table: only the relevant slowdowns, or that nothing could be judged")


def inputs(command, inputs_required: bool = True) -> None:
    """What compare and report share: the two inputs (files or machines), the metric, the statistics'
    parameters, interference, and the server holding the machines' runs."""
    from perfctl.analysis.compare import Parameters
    from perfctl.analysis.multiple import METHODS
    from perfctl.formats import FORMATS
    from perfctl.model import DEFAULT_METRICS

    defaults = Parameters()  # the statistics' defaults, owned by analysis/compare.py

    command.add_argument("a", metavar="A", nargs=None if inputs_required else "?",
                         help="baseline samples (perfctl JSONL, hyperfine/pyperf/Google Benchmark/pytest-benchmark "
                              "JSON, perf stat CSV or JSON)")
    command.add_argument("b", metavar="B", nargs=None if inputs_required else "?",
                         help="candidate samples, same format")
    command.add_argument("--input-format", choices=FORMATS,
                         help="skip format detection")
    command.add_argument("--metric", action="append", metavar="METRIC",
                         help=f"metric(s) to compare (default: {', else '.join(DEFAULT_METRICS)})")
    command.add_argument("--alpha", type=probability, default=defaults.alpha,
                         help=f"family-wise risk (default {defaults.alpha})")
    command.add_argument("--confidence", type=probability, default=defaults.confidence,
                         help=f"confidence of intervals ({defaults.confidence})")
    command.add_argument("--proportion", type=probability, default=defaults.proportion,
                         help="SPA: the value that a proportion F of runs stay at or under "
                              f"(default {defaults.proportion})")
    command.add_argument("--margin", type=probability, default=defaults.margin,
                         help="equivalence margin delta: ratios in [1-delta, 1+delta] are equivalent "
                              f"({defaults.margin})")
    command.add_argument("--paired", action="store_true", help="runs were taken in rounds: pair them by index")
    command.add_argument("--family", choices=FAMILIES, default=defaults.family,
                         help=f"{defaults.family} (default): every verdict reads off its A/B interval, all intervals "
                              "Bonferroni-adjusted together; sparc: the paper's family of tests, intervals not "
                              "adjusted (docs/statistics.md)")
    command.add_argument("--correction", choices=METHODS, default=defaults.correction,
                         help="the correction of the Speedup-Test protocols over the benchmarks, and with --family "
                              f"sparc of its tests (default {defaults.correction}; the default family's intervals "
                              "are Bonferroni)")
    command.add_argument("--fail-on", choices=FAIL_ON, default=FAIL_ON[0],
                         help=f"which slowdown of B exits 3: {FAIL_ON[0]} (default: a difference shown and "
                              f"equivalence not) or {FAIL_ON[1]} (the interval lies entirely beyond the margin)")
    command.add_argument("--precision", type=probability, default=defaults.precision,
                         help=f"half-width wanted for the proportion of accelerated benchmarks ({defaults.precision})")
    command.add_argument("--seed", type=non_negative_int, default=defaults.seed, help="seed of the SPA speedup pairing")
    interference_options(command)
    command.add_argument("--pool", action="store_true",
                         help="pool runs of different executables, inputs or kernels under one benchmark name (by "
                              "default such a benchmark is left out and a note says what was mixed)")
    command.add_argument("--benchmark", action="append", metavar="NAME",
                         help="only these benchmarks (repeat the option for several)")
    fleet = command.add_argument_group(
        "machines on a server", "A and B may be MACHINE, MACHINE@job=ID or MACHINE@KEY=VALUE[,KEY=VALUE...] (runs "
        "carrying those labels, perfctl stat/submit --label; a comma not followed by KEY= belongs to the value); by "
        "default, for each benchmark, only the runs of the most recent job that ran it")
    fleet.add_argument("--since", type=instant, metavar="TIME",
                       help="only runs started at or after TIME: 2026-11-01 or 2026-11-01T12:00 (UTC), or an "
                            "age: 7d, 12h")
    fleet.add_argument("--until", type=instant, metavar="TIME", help="only runs started before TIME (as --since)")
    fleet.add_argument("--all-history", action="store_true",
                       help="every selected run, not only each benchmark's most recent job")
    connection_options(command, "server holding the machines' samples (when A and B are machine names)")


def instant(text: str) -> int:
    """A time on the command line as ns since the epoch: an ISO 8601 date or date and time (UTC unless it
    says its offset), or an age before now (30m, 12h, 7d, 2w)."""
    import argparse
    import datetime
    import re
    import time

    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if match:
        seconds = float(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match[2]]
        return _in_range(text, time.time_ns() - seconds * 1e9)
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a date and time (2026-11-01, 2026-11-01T12:00) "
                                         "nor an age (7d, 12h)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return _in_range(text, moment.timestamp() * 1e9)


def _in_range(text: str, ns: float) -> int:
    """A start time runs can have: ns since 1970 that fit the wire's int64 (until 2262)."""
    import argparse

    if not 0 <= ns < 2**63 - 2**10:
        raise argparse.ArgumentTypeError(f"{text!r} is outside the times runs have (1970 to 2262)")
    return int(ns)


@dataclass(frozen=True)
class FileSide:
    """A side naming a file: ``text`` as the user wrote it, the ``path`` it names, and the labels its runs
    must carry (FILE@KEY=VALUE, ``file_side``)."""

    text: str
    path: str
    labels: dict[str, str]


@dataclass(frozen=True)
class MachineSide:
    """A side naming a machine: ``text`` as the user wrote it, and the Selection of its stored runs the
    server takes (``selection``)."""

    text: str
    selection: object


@dataclass(frozen=True)
class CompareRequest:
    """One comparison as the command line asked for it, every option checked (``request``): the two sides
    (both files or both machines), the statistics' parameters and what the report is written with. The
    rest of the command reads this, never the argparse namespace."""

    command: str
    a: FileSide | MachineSide
    b: FileSide | MachineSide
    parameters: Parameters
    metrics: list[str] | None
    interference: InterferencePolicy
    input_format: str | None
    pool: bool
    benchmarks: tuple[str, ...]
    fail_on: str
    verbosity: int
    connection: Connection
    output: Output

    @property
    def machines(self) -> bool:
        return isinstance(self.a, MachineSide)


def selection(text: str, window, command: str):
    """One side naming a machine: MACHINE[@job=ID | @KEY=VALUE[,KEY=VALUE...]] with the time range and
    --all-history (``window``'s since, until and all_history), as the Selection the server takes
    (protos/perfctl/v1/fleet.proto)."""
    from perfctl.v1 import fleet_pb2 as pb

    machine, at, spec = text.partition("@")
    if not machine or (at and not spec):
        raise UsageError(f"{command}: {text!r}: expected MACHINE, MACHINE@job=ID or MACHINE@KEY=VALUE[,KEY=VALUE]")
    labels = _selected_labels(spec, machine, command)
    job_id = labels.pop("job", "")
    if window.since and window.until and window.since >= window.until:
        raise UsageError(f"{command}: --since must be before --until")
    return pb.Selection(machine=machine, job_id=job_id, labels=labels, since_ns=window.since or 0,
                        until_ns=window.until or 0, all_history=window.all_history)


def _selected_labels(spec: str, where: str, command: str) -> dict[str, str]:
    """The KEY=VALUE[,KEY=VALUE...] after a side's ``@``: a comma starts another label only where KEY=
    follows it (a value may hold commas: k=a,b)."""
    import re

    from perfctl.model import parse_labels

    try:
        return parse_labels(re.split(r",(?=[A-Za-z0-9_.-]{1,64}=)", spec) if spec else [], option=f"{where}@")
    except ValueError as err:
        raise UsageError(f"{command}: {err}") from None


def file_side(text: str, command: str) -> tuple[str, dict[str, str]]:
    """One side naming a file: FILE, or FILE@KEY=VALUE[,KEY=VALUE...] for the runs of a perfctl sample file
    that carry those labels (`perfctl ab` writes its commands' runs into one file as ab=A, ab=B, ...). A
    path that exists is always a file, '@' and all."""
    if os.path.exists(text) or "@" not in text:
        return text, {}
    for at in (i for i, char in enumerate(text) if char == "@"):
        path, spec = text[:at], text[at + 1:]
        if path and os.path.exists(path):
            if not spec:
                raise UsageError(f"{command}: {text!r}: expected FILE@KEY=VALUE[,KEY=VALUE]")
            return path, _selected_labels(spec, path, command)
    return text, {}


def request(args, command: str, option: str, path: str | None) -> CompareRequest:
    """The command line of compare or report (its output ``option`` naming ``path``) read once, in the order
    its refusals are said: each side's file and selectors, the output (``check_output``), the statistics'
    parameters, then each machine's selection. UsageError in one line; nothing is read or asked of a server
    before all of it holds."""
    from perfctl.analysis.compare import Parameters

    connection = connection_of(args)
    files = [FileSide(text, *file_side(text, command)) for text in (args.a, args.b)]
    output = check_output(option, path, args.force, files, connection, command)
    parameters = Parameters(alpha=args.alpha, confidence=args.confidence, proportion=args.proportion,
                            margin=args.margin, paired=args.paired, correction=args.correction,
                            precision=args.precision, seed=args.seed, family=args.family)
    try:
        parameters.validate()
    except ValueError as err:  # before any file is read or server called: one line, exit 2
        raise UsageError(f"{command}: {err}") from None
    # A and B name machines when a server is given and neither is a file
    if (args.server or os.environ.get("PERFCTL_SERVER")) and not any(map(os.path.exists, (args.a, args.b))):
        sides = [MachineSide(text, selection(text, args, command)) for text in (args.a, args.b)]
    else:
        sides = files
    metrics = [m.strip() for text in (args.metric or []) for m in text.split(",") if m.strip()] or None
    return CompareRequest(command, *sides, parameters, metrics, interference(args), args.input_format, args.pool,
                          tuple(args.benchmark or ()), args.fail_on, verbosity(args), connection, output)


def check_output(option: str, path: str | None, force: bool, files: list[FileSide], connection: Connection,
                 command: str, sources: list[str] = (), kind: str | None = None):
    """The report's FILE as an output_files.Output, to write it with. Refused before anything is read or
    asked of a server when it must not be written (perfctl/output_files.py): one of the inputs, found as the
    file each side names once its ``@selectors`` are taken off (`compare F@ab=A F@ab=B --html F` names F
    three times), or one of ``sources`` (history's files), a file read to reach a server (--token-file,
    --tls-ca, --tls-cert, --tls-key, the config file: client.files_read), or an existing file that is not
    perfctl's output of ``kind`` (default its HTML report) without --force."""
    from perfctl.client import files_read
    from perfctl.output_files import REPORT, Output, check

    output = Output(option, path, kind or REPORT, force=force)
    check(command, [output], inputs=[(side.text, side.path) for side in files] + [(s, s) for s in sources]
          + files_read(connection))
    return output


def run(args) -> int:
    asked = request(args, "perfctl compare", "--html", args.html)
    if asked.machines and not args.html:  # the server compares its stored runs itself
        return write(_compared_by_server(asked), args.format, console())
    report = comparison(asked)
    code = write(report, args.format, console())
    if args.html:
        write_report(report, asked.output, asked.command, quiet=asked.verbosity < NORMAL)
    return code


def comparison(asked: CompareRequest):
    """The CompareReport of A and B, compared here: each side's runs as a Dataset (``datasets``), paired
    and compared (the HTML report draws every run, which the server's answer does not carry)."""
    from perfctl.dataset import DatasetError
    from perfctl.pairing import PairingError
    from perfctl.report.compare import compare_report

    try:
        a, b = datasets(asked)
        labels = tuple(f"machine {side.text}" if asked.machines else side.text for side in (asked.a, asked.b))
        return compare_report(a, b, asked.metrics, asked.parameters, labels, asked.verbosity, asked.fail_on,
                              workers=split_tests)
    except (DatasetError, PairingError) as err:
        raise UsageError(f"{asked.command}: {err}") from None


def datasets(asked: CompareRequest) -> tuple:
    """The one way to a side's runs: both sides as Datasets ready to pair, files read here or two
    machines' selected runs fetched from the server; benchmarks whose runs mix builds left out (--pool:
    kept), and only the --benchmark ones. DatasetError, PairingError, UsageError."""
    from perfctl.dataset import unmix
    from perfctl.pairing import select

    a, b = _fetched(asked) if asked.machines else _read(asked)
    a, b = unmix(a, asked.pool), unmix(b, asked.pool)
    if asked.benchmarks and not asked.machines:  # the server sends only the benchmarks asked for
        select(list(asked.benchmarks), a, b)
    return a, b


def _read(asked: CompareRequest) -> list:
    """Both files' runs, each side's selection of them, and no run on both sides."""
    from perfctl.formats import read_dataset
    from perfctl.parallel import Forked

    side_a, side_b = asked.a, asked.b
    if side_a.path == side_b.path and not os.path.isfile(side_a.path):
        # a pipe gives its content once: the second side would wait for a writer that never comes
        raise UsageError(f"{asked.command}: {side_a.path} is not a regular file and can be read only once; copy "
                         "it to a file to compare two selections of it")
    _same_file_refused(asked)
    # B read in a child on another core while A is read here (perfctl/parallel.py)
    with Forked(read_dataset, side_b.path, asked.input_format, asked.interference, side_b.labels,
                worth=_worth_two(side_a.path, side_b.path)) as reading_b:
        a = read_dataset(side_a.path, asked.input_format, asked.interference, side_a.labels)
        b = reading_b.result()
    return _apart(a, b, asked)


def _same_file_refused(asked: CompareRequest) -> None:
    """Refuse one file (its device and inode: a symlink, a hard link or ./x are the file) read whole, or with
    the same selection, on both sides, in any format: its runs compared with themselves say nothing
    (hyperfine, Google Benchmark, perf stat, pyperf and pytest-benchmark files gave equivalence, exit 0).
    The first half of the one rule "a run is A's or B's, not both"; the second, run by run for files whose
    runs carry a uuid, is ``_apart``. Two selections of one file (F@ab=A F@ab=B) are two sets of runs."""
    side_a, side_b = asked.a, asked.b
    try:
        same = os.path.samefile(side_a.path, side_b.path)
    except OSError:  # a side that cannot be read is said by its reader, in its words
        return
    if same and side_a.labels == side_b.labels:
        raise UsageError(f"{asked.command}: A and B are the same file ({side_a.text} and {side_b.text}): a run "
                         "compared with itself says nothing; name two files, or two selections of one "
                         "(FILE@KEY=VALUE)")


def _apart(a, b, asked: CompareRequest) -> list:
    """A and B without a run on both sides (RunIdentity.shared decides which side loses it; that side is
    read again without it, and its note says how many were left out). A run compared with itself would
    count as two sides: `compare F@ab=A F@ab=A` gave equivalence [1.000, 1.000], and a file holding A's runs
    and B's, compared with A, put A's runs into B too. The same runs on both sides are refused."""
    from perfctl.dataset import RunIdentity
    from perfctl.formats import read_dataset

    left_out = RunIdentity.shared(a.runs, b.runs)
    if left_out is None:
        raise UsageError(f"{asked.command}: A and B are the same {len(a.runs)} runs (every sample of {asked.a.text} "
                         f"has its uuid in {asked.b.text} and the other way round): a run compared with itself "
                         "says nothing")
    read_again = []
    for dataset, side, out in ((a, asked.a, left_out[0]), (b, asked.b, left_out[1])):
        if out and not os.path.isfile(side.path):
            raise UsageError(f"{asked.command}: {len(out)} runs of {side.path} are also the other side's (same "
                             "uuid), and it can be read only once to leave them out; copy it to a file")
        read_again.append(read_dataset(side.path, asked.input_format, asked.interference, side.labels,
                                       frozenset(out)) if out else dataset)
    return read_again


def _fetched(asked: CompareRequest) -> list:
    """The two machines' selected runs, fetched from the server as datasets (the client, and gRPC with it,
    is imported here: a comparison of files never pays for it)."""
    from perfctl import client, security

    try:
        return client.machine_datasets(asked.connection, (asked.a.selection, asked.b.selection),
                                       list(asked.benchmarks), asked.interference)
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"{asked.command}: {err}") from None


# Below this much to read (~6,000 runs), a second process saves less than it costs to start.
PARALLEL_READ_BYTES = 4 << 20
# Fewer benchmarks than this are compared in one process: a fork and the pickled results cost more than
# half of their tests (~1 ms each at 50 runs a side).
SPLIT_MIN = 64


def split_tests(function, keys) -> list:
    """The map-like ``workers`` of analysis/compare.py for the command line, which runs no other thread (a
    server's gRPC threads a fork would not copy): half of the benchmarks' tests in a forked child."""
    from perfctl.parallel import halves

    return halves(function, keys, at_least=SPLIT_MIN)


def _worth_two(path_a: str, path_b: str) -> bool:
    """Whether A and B are read in two processes: two regular files with enough to read. A pipe is copied
    to a temporary file before it is read (perfctl/formats), which a child killed early would leave."""
    try:
        sizes = [os.path.getsize(path) if os.path.isfile(path) else None for path in (path_a, path_b)]
    except OSError:
        return False
    return None not in sizes and sum(sizes) > PARALLEL_READ_BYTES


def _compared_by_server(asked: CompareRequest):
    """The server's comparison of two machines' stored runs, returned as data and rendered here."""
    from perfctl import results
    from perfctl.analysis.ab import Replay
    from perfctl.cli.remote import call
    from perfctl.pairing import Compared
    from perfctl.report.compare import from_compared
    from perfctl.v1 import fleet_pb2 as pb

    p = asked.parameters
    wanted = pb.CompareRequest(a=asked.a.selection, b=asked.b.selection, benchmarks=asked.benchmarks,
                               metrics=asked.metrics or [], alpha=p.alpha, confidence=p.confidence,
                               proportion=p.proportion, margin=p.margin, paired=p.paired, correction=p.correction,
                               precision=p.precision, seed=p.seed, family=p.family, pool=asked.pool,
                               interference_limit=asked.interference.limit,
                               exclude_interfered=asked.interference.exclude)
    response = call(asked.connection, "Compare", wanted)
    try:
        result = results.loads(response.comparison_json, Compared)
        sequential = results.loads(response.sequential_json, Replay) if response.sequential_json else None
    except results.ResultError as err:
        raise UsageError(f"{asked.command}: the server's answer is not a comparison: {err}") from None
    return from_compared(result, asked.verbosity, asked.fail_on, sequential)
