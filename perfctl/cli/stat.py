"""`perfctl stat`: run a command N times and count events per run (docs/stat.md)."""

from __future__ import annotations

import argparse
import contextlib
import os

from perfctl.cli.measure import (
    ClosingMeanwhile,
    OutputError,
    SampleOutputs,
    check_outputs,
    control_options,
    html_output,
    open_backend,
    prepare,
    write_summary,
)
from perfctl.cli.options import (
    SIGNAL_EXIT,
    command_of,
    exit_status,
    force_option,
    interference,
    loudness,
    non_negative_int,
    positive_int,
    verbosity,
)
from perfctl.output import Interrupted, UsageError, console, interactive, raise_received_stop, say, stdout_closed


def add_parser(sub) -> None:
    stat = sub.add_parser("stat", help="run a command N times and count events per run",
                          description="Run CMD N times under controlled conditions and count events per run.",
                          epilog=exit_status("0 every measured run exited 0", "1 a run failed, died of a signal or "
                                             "timed out", "2 bad usage or input, or an output that cannot or "
                                             "must not be written (docs/outputs.md)", f"{SIGNAL_EXIT}: the run "
                                             "in progress is killed with its process tree, finished runs are "
                                             "kept (docs/stat.md)"))
    stat.add_argument("-r", "--repeat", type=positive_int, default=10, metavar="N", help="measured runs (default 10)")
    stat.add_argument("--warmup", type=non_negative_int, default=0, metavar="K",
                      help="warmup runs before the measured ones, recorded and flagged")
    control_options(stat)
    stat.add_argument("--name", help="benchmark name (default: the command's basename)")
    out = stat.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON Lines samples on stdout (summary on stderr)")
    out.add_argument("--csv", action="store_true", help="per-run CSV on stdout (summary on stderr)")
    stat.add_argument("--format", choices=("table", "markdown"), default="table",
                      help="the summary's format: a table, or a GitHub Markdown table (for a CI comment)")
    stat.add_argument("--html", metavar="FILE", help="also write the HTML report of the runs to FILE "
                                                     "(docs/report.md)")
    force_option(stat, "--html FILE")
    loudness(stat, verbose="each unsupported event with its reason, and the correction's sentence",
             quiet="no summary table: only failed runs and errors")
    stat.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")


def run(args) -> int:
    from perfctl.agent import inventory, session
    from perfctl.agent.measurement import Measurement, Rounds
    from perfctl.agent.runner import RunError
    from perfctl.report.stat import StatReport, StatSummary

    cmd = command_of(args)
    if not cmd:
        raise UsageError("perfctl stat: no command given (usage: perfctl stat [options] -- CMD ARGS)")
    specs, control, sample_labels = prepare(args, "perfctl stat")  # before anything runs or any file is opened
    try:
        # bad commands fail here, before any file is touched; identified once (it hashes the executable and inputs)
        identified = session.identify(cmd, control, args.name)
    except RunError as err:
        raise UsageError(f"perfctl stat: {err}") from None

    machine_readable = args.json or args.csv
    if not machine_readable and stdout_closed():  # the summary goes there: it would be lost without a word
        raise UsageError("perfctl stat: stdout is closed; the summary is written there (-o FILE keeps the samples)")
    summary_console = console(stderr=machine_readable)
    check_outputs(args, "perfctl stat", [identified[0]], control)  # before anything runs or is written
    outputs = SampleOutputs("perfctl stat", args.output, "json" if args.json else "csv" if args.csv else None)

    inv = inventory.collect()
    backend = open_backend(args, specs, inv, "perfctl stat", outputs)
    measurement = Measurement(backend, control, inv.machine_id, record=outputs.recorder(inv))
    summary = StatSummary(interference=interference(args), no_pmu_events=frozenset(
        () if inv.pmu.present else (s.label for s in specs if s.kind in ("hardware", "raw", "store"))))
    total = args.warmup + args.repeat
    # a hidden bar is not made: rich's progress costs every start its import, and every run ~10 us
    progress = None if args.no_progress or args.quiet or not interactive(stderr=True) else _progress(total)
    stopped_by: Interrupted | None = None
    closing = None
    try:
        try:
            corrector, summary.correction_note = measurement.correct(inv, identified, specs)
            measurement.add(identified, sample_labels, corrector)
            with progress or contextlib.nullcontext():
                task = progress.add_task(f"{os.path.basename(cmd[0])}", total=total) if progress else None
                raise_received_stop()  # a stop whose Interrupted was lost on the way ends the runs here
                for warmup, run_index, which in Rounds(1, args.warmup).order(args.repeat):
                    summary.add(measurement.measure(which, run_index=run_index, warmup=warmup))
                    if progress:
                        progress.advance(task)
                    raise_received_stop()
        finally:
            # a second signal is ignored (output.stop_on_signals): it must not cut the cleanup short
            closing = ClosingMeanwhile(backend)
            measurement.close()
            outputs.close()
    except Interrupted as signalled:
        stopped_by = signalled
    except RunError as err:
        raise UsageError(f"perfctl stat: {err}") from None
    except OutputError as err:
        raise outputs.failed(err, summary.runs) from None

    title = f"perfctl stat: {' '.join(cmd)}  ({summary.runs} runs" + (
        f", {summary.warmups} warmups" if summary.warmups else "") + f", backend {'+'.join(backend.names)})"
    report = StatReport(summary, title, verbosity(args), stopped_by, inventory=inv)
    code = write_summary(report, args.format, summary_console, "perfctl stat", stopped_by)
    if args.html and summary.runs + summary.warmups:
        from perfctl.report.html import write_report

        write_report(report, html_output(args), "perfctl stat", quiet=args.quiet)
    if stopped_by is not None:
        where = f"; samples are in {args.output}" if args.output and summary.runs + summary.warmups else ""
        say(f"perfctl: interrupted after {summary.runs} measured runs ({stopped_by.name}){where}")
    closing.join()
    return code


def _progress(total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console(stderr=True), transient=True)
