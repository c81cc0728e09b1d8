"""The `perfctl` command: argument parsing and wiring only; the work lives in agent/ and analysis/.

Exit codes (docs/stat.md): 0 every measured run exited 0; 1 some run failed, died of a signal or timed
out (all recorded); 2 bad usage or input, or an output that cannot be written (nothing was run, or
nothing more); 128 + N stopped by signal N: 130 SIGINT, 143 SIGTERM, 129 SIGHUP (the run in progress is
killed with its process tree, every finished run is written).

Everything a file, an agent or a server supplies is printed through perfctl/text.py: control characters
shown as escapes, rich markup shown as text.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys

from rich.console import Console

from perfctl.output import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    Interrupted,
    UsageError,
    _console,
    _say,
    exit_code_of,
    stop_on_signals,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage dump
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _int_at_least(minimum: int, maximum: int | None = None):
    """An argparse type: an integer >= minimum (and <= maximum, by default the wire's 32 bits), with a
    message that says which rule was broken."""
    maximum = MAX_OPTION_INT if maximum is None else maximum

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            rule = "cannot be negative" if minimum == 0 else f"must be at least {minimum}"
            raise argparse.ArgumentTypeError(f"{rule}, got {value}")
        if value > maximum:  # the wire's integers are 32 bits (runs, warmups) or 64 (seed)
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return parse


MAX_OPTION_INT = (1 << 32) - 1
_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)
# Linux never has more tasks than PID_MAX_LIMIT (2^22, include/linux/threads.h): a bigger map of tracked tasks
# follows nothing more and only asks the kernel for memory it may refuse.
_ebpf_tasks = _int_at_least(1, 1 << 22)


def _float_between(low: float, high: float, what: str, rule: str):
    """An argparse type: a float strictly between low and high."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r}") from None
        if not low < value < high:
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return parse


_probability = _float_between(0, 1, "number", "strictly between 0 and 1")
_share = _float_between(0, 1e6, "share", "a positive share of the wall time (0.05 is 5%)")


def _backends(text: str) -> tuple[str, ...]:
    from perfctl.model import parse_backends

    try:
        return parse_backends(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _interference_options(command) -> None:
    from perfctl.model import DEFAULT_INTERFERENCE_LIMIT

    command.add_argument("--interference-limit", type=_share, default=DEFAULT_INTERFERENCE_LIMIT, metavar="SHARE",
                         help="flag runs in which other tasks ran on the benchmark's CPUs for more than this share "
                              "of the run's wall time (ebpf backend; default 0.05)")
    command.add_argument("--exclude-interfered", action="store_true",
                         help="leave flagged runs out of the statistics (the output says how many)")
_seconds = _float_between(0, 1e7, "number of seconds", "a positive number of seconds")


def build_parser() -> argparse.ArgumentParser:
    from perfctl import __version__
    from perfctl.agent.runacct import DEFAULT_MAX_TASKS
    from perfctl.agent.runner import ENV_SIZE_STEP
    from perfctl.formats import FORMATS

    parser = _Parser(prog="perfctl", description="Hardware and software counter measurement with stated confidence.")
    parser.add_argument("--version", action="version", version=f"perfctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    stat = sub.add_parser("stat", help="run a command N times and count events per run",
                          description="Run CMD N times under controlled conditions and count events per run.",
                          epilog="exit status: 0 every measured run exited 0; 1 a run failed, died of a signal or "
                                 "timed out; 2 bad usage or input, or an output that cannot be written; 128+N "
                                 "stopped by signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP): the run in progress "
                                 "is killed with its process tree, finished runs are kept (docs/stat.md)")
    stat.add_argument("-r", "--repeat", type=_positive_int, default=10, metavar="N", help="measured runs (default 10)")
    stat.add_argument("--warmup", type=_non_negative_int, default=0, metavar="K",
                      help="warmup runs before the measured ones, recorded and flagged")
    stat.add_argument("-e", "--events", action="append", metavar="EVENTS",
                      help="comma-separated perf-style event names (default: the full default set)")
    stat.add_argument("--backend", type=_backends, default=("perf_event",), metavar="NAME[,NAME]",
                      help="perf_event (default), perf-stat, dbi, ebpf, or perf_event,ebpf (both count each run)")
    stat.add_argument("--ebpf-max-tasks", type=_ebpf_tasks, default=DEFAULT_MAX_TASKS, metavar="N",
                      help=f"tasks of the benchmark's tree the ebpf backend can follow at once ({DEFAULT_MAX_TASKS})")
    _interference_options(stat)
    stat.add_argument("--pin", type=_non_negative_int, metavar="CPU", help="pin the benchmark to this CPU")
    stat.add_argument("--timeout", type=_seconds, metavar="S", help="kill a run's whole process tree after S s")
    stat.add_argument("--user", metavar="USER", help="run the benchmark as USER (counters stay perfctl's)")
    stat.add_argument("--env-size", type=_positive_int, metavar="BYTES",
                      help="pad the benchmark's environment to exactly BYTES (default: the smallest multiple of "
                           f"{ENV_SIZE_STEP} that holds it)")
    stat.add_argument("--clean-env", action="store_true", help="pass only PATH, HOME, USER, LOGNAME, TERM, TZ, LANG=C")
    stat.add_argument("--keep-aslr", action="store_true", help="leave address-space randomization on")
    stat.add_argument("--name", help="benchmark name (default: the command's basename)")
    stat.add_argument("--show-output", action="store_true", help="let the benchmark write to the terminal")
    out = stat.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON Lines samples on stdout (summary on stderr)")
    out.add_argument("--csv", action="store_true", help="per-run CSV on stdout (summary on stderr)")
    stat.add_argument("-o", "--output", metavar="FILE", help="append JSON Lines samples to FILE")
    stat.add_argument("--no-progress", action="store_true", help="no progress bar")
    loudness = stat.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true",
                          help="each unsupported event with its reason, and the correction's sentence")
    loudness.add_argument("-q", "--quiet", action="store_true", help="no summary table: only failed runs and errors")
    stat.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")

    compare = sub.add_parser("compare", help="compare two sample files benchmark by benchmark",
                             description="Is B faster, slower or equivalent to A? Per benchmark and overall, "
                                         "with SPARC, the Speedup-Test and SPA (docs/statistics.md).")
    compare.add_argument("a", metavar="A",
                         help="baseline samples (perfctl JSONL, hyperfine/pyperf/Google Benchmark/pytest-benchmark "
                              "JSON, perf stat CSV or JSON)")
    compare.add_argument("b", metavar="B", help="candidate samples, same format")
    compare.add_argument("--input-format", choices=FORMATS,
                         help="skip format detection")
    compare.add_argument("--metric", action="append", metavar="METRIC",
                         help="metric(s) to compare "
                              "(default: instructions, else cycles, else task-clock, else wall-time)")
    compare.add_argument("--alpha", type=_probability, default=0.05, help="family-wise risk (default 0.05)")
    compare.add_argument("--confidence", type=_probability, default=0.95, help="confidence of intervals (0.95)")
    compare.add_argument("--proportion", type=_probability, default=0.5,
                         help="SPA: the value that a proportion F of runs stay at or under (default 0.5)")
    compare.add_argument("--margin", type=_probability, default=0.05,
                         help="equivalence margin delta: ratios in [1-delta, 1+delta] are equivalent (0.05)")
    compare.add_argument("--paired", action="store_true", help="runs were taken in rounds: pair them by index")
    compare.add_argument("--correction", choices=("holm", "bonferroni", "bh"), default="holm")
    compare.add_argument("--precision", type=_probability, default=0.05,
                         help="half-width wanted for the proportion of accelerated benchmarks (0.05)")
    compare.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the SPA speedup pairing")
    compare.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    _interference_options(compare)

    def connection_options(command, server_help: str) -> None:
        command.add_argument("--server", metavar="HOST:PORT", help=server_help)
        command.add_argument("--token-file", metavar="FILE", help="file holding this client's or agent's token")
        command.add_argument("--tls-ca", metavar="FILE", help="CA certificate that signed the server's certificate")
        command.add_argument("--tls-cert", metavar="FILE", help="own certificate, for mutual TLS")
        command.add_argument("--tls-key", metavar="FILE", help="own key, for mutual TLS")
        command.add_argument("--insecure", action="store_true", help="allow plaintext to a non-loopback address")

    compare.add_argument("--benchmark", action="append", metavar="NAME",
                         help="with machine names: only these benchmarks")
    connection_options(compare, "server holding the machines' samples (when A and B are machine names)")

    server = sub.add_parser("server", help="run the fleet server (gRPC, storage, metrics)")
    server.add_argument("--listen", default="127.0.0.1:7433", metavar="HOST:PORT")
    server.add_argument("--data-dir", metavar="DIR", help="SQLite database in DIR (the embedded default)")
    server.add_argument("--db", metavar="URL", help="a PostgreSQL URL instead, postgresql://user@host/db")
    server.add_argument("--tokens", required=True, metavar="FILE", help="tokens file (perfctl token add)")
    server.add_argument("--tls-cert", metavar="FILE")
    server.add_argument("--tls-key", metavar="FILE")
    server.add_argument("--tls-client-ca", metavar="FILE", help="require client certificates signed by this CA")
    server.add_argument("--insecure", action="store_true", help="allow plaintext on a non-loopback address")
    server.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here")
    server.add_argument("--grace", type=_seconds, default=10.0, help="seconds to drain in-flight batches on stop")
    server.add_argument("--decode-workers", type=_non_negative_int, default=max(1, min(4, (os.cpu_count() or 2) - 1)),
                        metavar="N", help="processes that decode and validate incoming batches (0: in the server)")

    agent = sub.add_parser("agent", help="run the agent daemon on a test machine")
    connection_options(agent, "the server to stream to")
    agent.add_argument("--name", required=True, help="this machine's name (its token must be for this name)")
    agent.add_argument("--spool", required=True, metavar="DIR", help="durable local spool directory")
    agent.add_argument("--allow", action="append", default=[], metavar="PATTERN",
                       help="executables this agent may run: a glob on the real path (* stays within a directory, "
                            "** crosses /); repeatable")
    agent.add_argument("--user", metavar="USER", help="run benchmarks as USER (required when the agent is root)")
    agent.add_argument("--workdir", default="/", metavar="DIR", help="benchmarks' working directory (/)")
    agent.add_argument("--audit-every", type=float, default=24.0, metavar="HOURS",
                       help="re-audit the counters this often (and at once when kernel or microcode changed); 0: never")
    agent.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here")

    token = sub.add_parser("token", help="add an agent or client token to a tokens file")
    token.add_argument("action", choices=("add",))
    token.add_argument("--file", required=True, metavar="FILE")
    role = token.add_mutually_exclusive_group(required=True)
    role.add_argument("--agent", metavar="NAME")
    role.add_argument("--client", metavar="NAME")

    submit = sub.add_parser("submit", help="ask machines to run a benchmark")
    connection_options(submit, "the fleet server")
    submit.add_argument("--machines", required=True, help="comma-separated machine names")
    submit.add_argument("-r", "--repeat", type=_positive_int, default=10, metavar="N")
    submit.add_argument("--warmup", type=_non_negative_int, default=0, metavar="K")
    submit.add_argument("--name", help="benchmark name (default: the command's basename)")
    submit.add_argument("-e", "--events", action="append", metavar="EVENTS")
    submit.add_argument("--backend", type=_backends, default=("perf_event",), metavar="NAME[,NAME]")
    submit.add_argument("--timeout", type=_seconds, metavar="S")
    submit.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS [::: CMD2 ARGS ...]")

    for name, text in (("machines", "list the fleet's machines"), ("jobs", "list jobs and their states")):
        listing = sub.add_parser(name, help=text)
        connection_options(listing, "the fleet server")
        listing.add_argument("--json", action="store_true")

    audit = sub.add_parser("audit", help="check this machine's counters against kernels with exact counts; "
                                         "'audit report': the fleet's audits from the server")
    audit.add_argument("action", nargs="?", choices=("report",), help="report: history, drift and spread")
    audit.add_argument("-r", "--repeat", type=_positive_int, default=5, metavar="N", help="runs per kernel (5)")
    audit.add_argument("--json", action="store_true")
    connection_options(audit, "the fleet server (audit report)")

    from perfctl import cache_cli

    cache_cli.add_parser(sub, _Parser)

    info = sub.add_parser("info", help="the machine inventory and what each item means for the counters")
    info.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    code = _run(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): the exit code still describes the command
        _quiet_stdout()
    except OSError as err:
        # what was still buffered; unflushed, Python would report it at exit with a traceback and status 120
        _quiet_stdout()
        _say(f"perfctl: cannot write the output: {err.strerror}")
        return code if code >= 128 else EXIT_USAGE
    return code


# Errors of writing to a full or failing destination (stdout redirected to /dev/full, a full disk): the
# user's to fix, so one line and exit 2 rather than a traceback.
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _run(argv: list[str] | None) -> int:
    command = "perfctl"
    try:
        args = build_parser().parse_args(argv)
        command = f"perfctl {args.command}"
        if args.command in _SERVING_COMMANDS:  # they stop their event loop on a signal instead
            return _dispatch(args)
        with stop_on_signals():
            return _dispatch(args)
    except UsageError as err:
        _say(str(err) if str(err).startswith("perfctl") else f"perfctl: {err}")
        return EXIT_USAGE
    except KeyboardInterrupt as err:
        _say(f"{command}: interrupted" + (f" ({err.name})" if isinstance(err, Interrupted) else ""))
        return exit_code_of(err)
    except OSError as err:
        if err.errno not in _OUTPUT_ERRNOS:
            raise
        _quiet_stdout()
        _say(f"{command}: cannot write the output: {err.strerror}")
    return EXIT_USAGE


_SERVING_COMMANDS = ("server", "agent")


def _dispatch(args) -> int:
    if args.command == "stat":
        return _stat(args)
    if args.command == "info":
        return _info(args)
    if args.command == "compare":
        return _compare(args)
    if args.command == "audit":
        return _audit(args)
    if args.command == "cache":
        from perfctl import cache_cli

        return cache_cli.run(args)
    from perfctl import fleet_cli

    return getattr(fleet_cli, args.command)(args)


def _compare_parameters(args):
    from perfctl.analysis.compare import Parameters

    parameters = Parameters(alpha=args.alpha, confidence=args.confidence, proportion=args.proportion,
                            margin=args.margin, paired=args.paired, correction=args.correction,
                            precision=args.precision, seed=args.seed)
    try:
        parameters.validate()
    except ValueError as err:  # before any file is read or server called: one line, exit 2
        raise UsageError(f"perfctl compare: {err}") from None
    return parameters


def _interference(args):
    from perfctl.model import InterferencePolicy

    return InterferencePolicy(args.interference_limit, args.exclude_interfered)


def _compare(args) -> int:
    from perfctl import compare_report
    from perfctl.formats import DatasetError, read_dataset
    from perfctl.pairing import PairingError

    metrics = [m.strip() for text in (args.metric or []) for m in text.split(",") if m.strip()] or None
    server_given = args.server or os.environ.get("PERFCTL_SERVER")
    if server_given and not os.path.exists(args.a) and not os.path.exists(args.b):
        from perfctl import fleet_cli

        return fleet_cli.compare_machines(args, metrics, _compare_parameters(args))
    try:
        a = read_dataset(args.a, args.input_format, _interference(args))
        b = read_dataset(args.b, args.input_format, _interference(args))
        return compare_report.compare_datasets(a, b, metrics, _compare_parameters(args), args.format, _console(),
                                               (args.a, args.b))
    except (DatasetError, PairingError) as err:
        raise UsageError(f"perfctl compare: {err}") from None


AUDIT_EXIT = {"trusted": 0, "no-PMU": 0, "degraded": 3, "untrusted": 4}


def _audit(args) -> int:
    """Exit 0 trusted or no-PMU (what could not be checked is listed), 3 degraded, 4 untrusted."""
    if args.action == "report":
        from perfctl import fleet_cli

        return fleet_cli.audit_report(args)
    from perfctl.agent.audit import run_audit, save_latest
    from perfctl.agent.build import BuildError

    try:
        report = run_audit(args.repeat)
    except BuildError as err:
        message = f"perfctl audit: cannot build the calibration kernels: {err}"
        if args.json:  # a script reading stdout gets a document either way
            print(json.dumps({"error": message, "complete": False}))
        raise UsageError(message) from None
    try:
        kept = save_latest(report)
    except OSError as err:
        kept = None
        _say(f"perfctl audit: could not keep the report for corrections: {err.strerror}")
    if report["complete"]:
        code = AUDIT_EXIT[report["verdict"]]
    else:
        code = 128 + signal.Signals[report["interrupted_by"]]
        _say(f"perfctl audit: interrupted ({report['interrupted_by']}): partial report"
             + (f" kept in {kept}" if kept else "") + "; corrections keep using the last complete audit")
    if args.json:
        print(json.dumps(report, indent=2, allow_nan=False))
        return code
    from rich.table import Table

    console = _console()
    console.print(f"audit {report['audit_id']} of {report['hostname']}: [bold]{report['verdict']}[/bold] "
                  f"({report['runs']} runs per kernel, backends {', '.join(report['backends'])}, "
                  f"{report['seconds']} s)")
    table = Table(title="kernels", title_justify="left")
    for column in ("kernel", "backend", "expected instructions", "CV", "exact (dbi) / median excess", "page faults",
                   "timer interrupts"):
        table.add_column(column)
    for k in report["kernels"]:
        detail = ("yes" if k.get("exact") else "NO") if k["backend"] == "dbi" else str(k.get("median_excess") or "-")
        cv = "-" if k["cv"] is None else f"{k['cv']:.2e}"
        table.add_row(k["kernel"], k["backend"], f"{k['expected']:,}", cv, detail, str(k.get("page_faults") or "-"),
                      str(k.get("interrupts") if k.get("interrupts") is not None else "-"))
    console.print(table)
    if report["fit"]:
        fit = report["fit"]
        console.print(f"fit: a = {fit['a']:.3f} {fit['a_interval']} per page fault, b = {fit['b']:.3f} "
                      f"{fit['b_interval']} per interrupt, intercept {fit['intercept']:.1f}", highlight=False)
    console.print(f"fldcw erratum: k = {report['erratum']['k_fldcw']} ({report['erratum']['note']})", highlight=False)
    for reason in report["reasons"]:
        console.print(f"reason: {reason}", markup=False, highlight=False)
    for item in report["not_checked"]:
        console.print(f"not checked: {item}", markup=False, highlight=False)
    for check in report["checks"]:
        if not check["ok"]:
            console.print(f"fix {check['item']}: {check['fix']}", markup=False, highlight=False)
    return code


def _info(args) -> int:
    from perfctl.agent import inventory

    inv = inventory.collect()
    inv["ebpf"] = inventory.probe_ebpf()
    if args.json:
        print(json.dumps(inv, indent=2))
        return EXIT_OK
    from rich.table import Table

    from perfctl.text import cell

    table = Table(title=cell(f"{inv['hostname']} (machine id {inv['machine_id']})"), title_justify="left")
    for column in ("item", "value", "what it means for the counters", "to change it"):
        table.add_column(column, overflow="fold")
    for check in inventory.checks(inv):
        table.add_row(*map(cell, (check.item, check.value, check.meaning, check.fix or "")))
    _console().print(table)
    return EXIT_OK


def _stat(args) -> int:
    from perfctl.agent import inventory, session
    from perfctl.agent.events import DEFAULT_EVENTS, UnknownEvent, parse_events
    from perfctl.agent.runner import RunError, Runner, make_control
    from perfctl.formats.csv import CsvWriter
    from perfctl.formats.jsonl import JsonlWriter
    from perfctl.stat_report import NORMAL, QUIET, VERBOSE, StatSummary, render

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("perfctl stat: no command given (usage: perfctl stat [options] -- CMD ARGS)")
    if args.backend == ("ebpf",) and args.events:
        raise UsageError("perfctl stat: the ebpf backend counts a fixed set (docs/backends.md); -e names perf_event "
                         "events: use --backend perf_event,ebpf")
    try:
        specs = parse_events(args.events or list(DEFAULT_EVENTS))
        _check_tracepoints(specs)
        control = make_control(env_size=args.env_size, clean_env=args.clean_env, aslr_off=not args.keep_aslr,
                               pin_cpu=args.pin, user=args.user, timeout_s=args.timeout,
                               show_output=args.show_output)
        plan = session.Plan(argv=cmd, runs=args.repeat, warmups=args.warmup, control=control, name=args.name)
        # bad commands fail here, before any file is touched; identified once (it hashes the executable and inputs)
        identified = session.identify(plan.argv, control, plan.name)
    except (UnknownEvent, RunError) as err:
        raise UsageError(f"perfctl stat: {err}") from None

    machine_readable = args.json or args.csv
    summary_console = _console(stderr=machine_readable)
    writers = []  # (where it writes, writer): an output that fails is named in the message
    output = None
    if args.output:
        created = not os.path.lexists(args.output)
        try:
            output = open(args.output, "a", encoding="utf-8")
        except OSError as err:
            raise UsageError(f"perfctl stat: cannot write {args.output}: {err.strerror}") from None
        writers.append((args.output, JsonlWriter(output)))
    if args.json:
        writers.append(("stdout", JsonlWriter(sys.stdout)))
    elif args.csv:
        try:
            writers.append(("stdout", CsvWriter(sys.stdout)))  # it writes the header line
        except OSError as err:
            raise _output_failed(_OutputError("stdout", err), 0) from None

    inv = inventory.collect()
    try:
        backend, fallback = session.open_backend(args.backend, specs, inv, ebpf_max_tasks=args.ebpf_max_tasks)
    except RunError as err:
        raise UsageError(f"perfctl stat: {err}") from None
    if fallback:
        _say(f"perfctl stat: {fallback}")
    runner = Runner()
    summary = StatSummary(interference=_interference(args), no_pmu_events=frozenset(
        () if inv["pmu"]["present"] else (s.label for s in specs if s.kind in ("hardware", "raw", "store"))))
    total = args.warmup + args.repeat
    progress = _progress(total, args.no_progress or not sys.stderr.isatty())
    stopped_by: Interrupted | None = None
    try:
        try:
            corrector = None
            if backend.name == "perf_event":
                from perfctl.agent.audit import make_corrector

                corrector, summary.correction_note = make_corrector(inv, *identified, control, runner, specs,
                                                                    ebpf="ebpf" in backend.names)
            with progress:
                task = progress.add_task(f"{os.path.basename(cmd[0])}", total=total)
                for sample in session.run(plan, backend, runner, inv["machine_id"], corrector, identified):
                    if summary.runs + summary.warmups == 0:
                        # with the first sample, not before: a run that cannot start is a usage error that
                        # must leave -o FILE as it was
                        _emit(writers, "write_machine", inv)
                    _emit(writers, "write_sample", sample)
                    summary.add(sample)
                    progress.advance(task)
        finally:
            # a second signal is ignored (output.stop_on_signals): it must not cut the cleanup short
            backend.close()
            runner.close()
            if output is not None:
                try:
                    output.close()
                except OSError:  # only a write that already failed and was reported leaves data here
                    pass
                if created and summary.runs + summary.warmups == 0:
                    _remove_if_empty(args.output)  # opened early to fail fast; nothing came to write
    except Interrupted as signalled:
        stopped_by = signalled
    except RunError as err:
        raise UsageError(f"perfctl stat: {err}") from None
    except _OutputError as err:
        raise _output_failed(err, summary.runs) from None

    title = f"perfctl stat: {' '.join(cmd)}  ({summary.runs} runs" + (
        f", {summary.warmups} warmups" if summary.warmups else "") + f", backend {'+'.join(backend.names)})"
    try:
        render(summary, summary_console, title, QUIET if args.quiet else VERBOSE if args.verbose else NORMAL)
    except OSError as err:
        if err.errno not in _OUTPUT_ERRNOS or stopped_by is not None:
            raise
        _quiet_stdout()
        raise UsageError(f"perfctl stat: cannot write the summary: {err.strerror}") from None
    if stopped_by is not None:
        where = f"; samples are in {args.output}" if args.output and summary.runs + summary.warmups else ""
        _say(f"perfctl: interrupted after {summary.runs} measured runs "
             f"({stopped_by.name}){where}")
        return stopped_by.exit_code
    return EXIT_OK if summary.all_ok else EXIT_RUN_FAILED


class _OutputError(Exception):
    """A sample could not be written to ``where`` (a full disk, /dev/full, a closed pipe)."""

    def __init__(self, where: str, error: OSError):
        super().__init__(f"{where}: {error}")
        self.where, self.error = where, error


def _output_failed(err: _OutputError, runs: int) -> UsageError:
    """The one line for a sample output that cannot be written; stdout is silenced so that nothing buffered
    for it fails again on the way out."""
    if err.where == "stdout":
        _quiet_stdout()
    if isinstance(err.error, BrokenPipeError):
        return UsageError("perfctl stat: output pipe closed; measurement stopped")
    return UsageError(f"perfctl stat: cannot write {err.where}: {err.error.strerror}; measurement stopped after "
                      f"{runs} measured runs")


def _emit(writers, method: str, record) -> None:
    for where, writer in writers:
        try:
            getattr(writer, method)(record)
        except OSError as err:
            raise _OutputError(where, err) from None


def _remove_if_empty(path: str) -> None:
    with contextlib.suppress(OSError):
        if os.stat(path).st_size == 0:
            os.unlink(path)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null once writing to it failed: what is still buffered, or printed on the way
    out, must not fail again (or be reported at exit with a traceback)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _check_tracepoints(specs) -> None:
    """A misspelt tracepoint is a usage error, not an 'unsupported' row (when tracefs can tell)."""
    from perfctl.agent import tracefs
    from perfctl.agent.events import UnknownEvent, missing_tracepoints

    events, _ = tracefs.events_dir()
    if events is None:
        return
    missing = missing_tracepoints(specs, lambda tp: os.path.isdir(os.path.join(events, *tp.split(":", 1))))
    if missing:
        raise UnknownEvent(f"unknown tracepoint {missing[0]} (not in {events})")


def _progress(total: int, disabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=True, disable=disabled)
