"""`perfctl stat`: run a command N times and count events per run (docs/stat.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from perfctl.cli.around import (
    DEFAULT_SHELL,
    ClosedAfterRuns,
    around_options,
    check_shell,
    default_name,
    hooks_of,
    measure_shell_cost,
    not_found,
    shell_command,
    shown,
)
from perfctl.cli.measure import (
    OutputError,
    SampleOutputs,
    asked_metric,
    check_outputs,
    control_options,
    counted_metric,
    html_output,
    open_backend,
    prepare,
    write_summary,
)
from perfctl.cli.options import (
    SIGNAL_EXIT,
    command_of,
    duration,
    exit_status,
    force_option,
    interference,
    loudness,
    non_negative_int,
    positive_int,
    verbosity,
)
from perfctl.cli.scan import StopScan, each_point, scan_options
from perfctl.exit_codes import EXIT_RUN_FAILED
from perfctl.model import WALL_TIME
from perfctl.output import Interrupted, UsageError, console, interactive, raise_received_stop, say, stdout_closed

DEFAULT_REPEAT = 10
# with --until-precise -r is a budget: hyperfine's run count for a 1 ms command in 3 s, enough for ±1% at a
# CV of ~5% (docs/stat.md)
DEFAULT_PRECISE_REPEAT = 1000


def precision(text: str) -> float:
    """An argparse type: a relative precision as a percentage, "1%" or "1" (0.01), between 0 and 100."""
    try:
        value = float(text.strip().removesuffix("%")) / 100
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (e.g. 1%)") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be above 0% and below 100%, got {text}")
    return value


def add_parser(sub) -> None:
    stat = sub.add_parser("stat", help="run a command N times and count events per run",
                          description="Run CMD N times under controlled conditions and count events per run.",
                          epilog=exit_status("0 every measured run exited 0", "1 a run failed, died of a signal or "
                                             "timed out", "2 bad usage or input, or an output that cannot or "
                                             "must not be written (docs/outputs.md)", f"{SIGNAL_EXIT}: the run "
                                             "in progress is killed with its process tree, finished runs are "
                                             "kept (docs/stat.md)"))
    stat.add_argument("-r", "--repeat", type=positive_int, metavar="N",
                      help=f"measured runs (default {DEFAULT_REPEAT}; with --until-precise the most, default "
                           f"{DEFAULT_PRECISE_REPEAT})")
    # stat's precision target (docs/stat.md, "How many runs"): one block, so that merges stay simple
    stat.add_argument("--until-precise", type=precision, metavar="PCT",
                      help="run until the median's 95%% confidence sequence is within ±PCT of it (1%%), or -r or "
                           "--max-time ends the runs first")
    stat.add_argument("--metric", metavar="METRIC", help=f"the metric --until-precise watches (default {WALL_TIME})")
    stat.add_argument("--max-time", type=duration, metavar="DURATION",
                      help="stop the measured runs after this long (90s, 15m)")
    stat.add_argument("--warmup", type=non_negative_int, default=0, metavar="K",
                      help="warmup runs before the measured ones, recorded and flagged")
    control_options(stat)
    scan_options(stat)
    around_options(stat)
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
    reports: list = []  # (point, StatReport) of each value of a scan: one HTML report plots them all
    code = each_point(args, "perfctl stat", lambda each, point: _run_one(each, point, reports))
    if args.html and reports:  # a scan stopped by a signal still reports the values it measured
        from perfctl.report.html import write_report
        from perfctl.report.stat_scan import ScanReport

        write_report(ScanReport(reports, " ".join(command_of(args))), html_output(args), "perfctl stat",
                     quiet=args.quiet)
    return code


def _run_one(args, point, reports: list) -> int:
    from perfctl.agent import inventory, session
    from perfctl.agent.hooks import HookFailed
    from perfctl.agent.measurement import Measurement, Rounds
    from perfctl.agent.runner import RunError
    from perfctl.report.stat import StatReport, StatSummary, runs_word

    check_shell(args, "perfctl stat")
    words = command_of(args)
    if not words:
        # `--shell ./prog` without --: argparse took the command for --shell's optional value
        taken = args.shell not in (None, DEFAULT_SHELL)
        took = f"; --shell took {args.shell!r} as the shell to run" if taken else ""
        raise UsageError(f"perfctl stat: no command given{took} (usage: perfctl stat [options] -- CMD ARGS, "
                         "perfctl stat --shell -- 'CMD')")
    cmd = shell_command(args, words)
    specs, control, sample_labels = prepare(args, "perfctl stat")  # before anything runs or any file is opened
    hooks = hooks_of(args, 1, control, "perfctl stat")
    if args.metric is not None and args.until_precise is None:
        raise UsageError("perfctl stat: --metric is what --until-precise watches; give --until-precise too")
    metric = asked_metric(args.metric, specs, "perfctl stat") or WALL_TIME
    if args.repeat is None:
        args.repeat = DEFAULT_REPEAT if args.until_precise is None else DEFAULT_PRECISE_REPEAT
    try:
        # bad commands fail here, before any file is touched; identified once (it hashes the executable and inputs)
        identified = session.identify(cmd, control, args.name or default_name(args, words),
                                      after_setup=bool(hooks and hooks.setup[0]))  # --setup may build it
    except RunError as err:
        raise not_found("perfctl stat", err, words, args) from None

    machine_readable = args.json or args.csv
    if not machine_readable and stdout_closed():  # the summary goes there: it would be lost without a word
        raise UsageError("perfctl stat: stdout is closed; the summary is written there (-o FILE keeps the samples)")
    summary_console = console(stderr=machine_readable)
    check_outputs(args, "perfctl stat", [identified[0]], control)  # before anything runs or is written
    outputs = SampleOutputs("perfctl stat", args.output, "json" if args.json else "csv" if args.csv else None)

    inv = inventory.collect()
    backend = open_backend(args, specs, inv, "perfctl stat", outputs)
    if args.until_precise is not None:  # a metric no run can count would run the whole budget for nothing
        metric = counted_metric(metric, backend, outputs, "perfctl stat")
    measurement = Measurement(backend, control, inv.machine_id, record=outputs.recorder(inv), hooks=hooks)
    summary = StatSummary(interference=interference(args), no_pmu_events=frozenset(
        () if inv.pmu.present else (s.label for s in specs if s.kind in ("hardware", "raw", "store"))))
    total = args.warmup + args.repeat
    budget = RunBudget(args.until_precise, metric, args.max_time)
    # a hidden bar is not made: rich's progress costs every start its import, and every run ~10 us
    progress = None if args.no_progress or args.quiet or not interactive(stderr=True) else _progress(total)
    stopped_by: Interrupted | None = None
    hook_failed: HookFailed | None = None
    closed = ClosedAfterRuns(measurement, backend, outputs, "perfctl stat")
    try:
        with closed:  # --cleanup runs at its end; its failure does not hide a signal's or a run's
            corrector, summary.correction_note = measurement.correct(inv, identified, specs)
            measurement.add(identified, sample_labels, corrector)
            if args.shell:
                summary.shell = measure_shell_cost(args, measurement, control, "perfctl stat")
                budget.less(summary.shell)
            extra = {"shell": summary.shell.record()} if summary.shell else None
            with progress or contextlib.nullcontext():
                task = progress.add_task(f"{os.path.basename(cmd[0])}", total=total) if progress else None
                raise_received_stop()  # a stop whose Interrupted was lost on the way ends the runs here
                for warmup, run_index, which in Rounds(1, args.warmup).order(args.repeat):
                    if not warmup:
                        budget.start()
                    sample = measurement.measure(which, run_index=run_index, warmup=warmup, extra=extra)
                    summarized = summary.add(sample)
                    if progress:
                        progress.advance(task)
                    raise_received_stop()
                    if not warmup and budget.done(sample, summarized):
                        break
    except Interrupted as signalled:
        stopped_by = signalled
    except HookFailed as failed:
        hook_failed = failed
    except RunError as err:
        raise UsageError(f"perfctl stat: {err}") from None
    except OutputError as err:
        raise outputs.failed(err, summary.runs) from None

    summary.precision_note = budget.note(args.repeat, stopped_by is not None)
    title = f"perfctl stat: {shown(args, cmd)}  ({summary.runs} {runs_word(summary.runs)}" + (
        f", {summary.warmups} warmups" if summary.warmups else "") + f", backend {'+'.join(backend.names)})"
    report = StatReport(summary, title, verbosity(args), stopped_by, inventory=inv)
    code = write_summary(report, args.format, summary_console, "perfctl stat", stopped_by)
    if args.html and point is not None:  # a value without runs stays in the scan's report, said so
        reports.append((point, report))
    elif args.html and summary.runs + summary.warmups:
        from perfctl.report.html import write_report

        write_report(report, html_output(args), "perfctl stat", quiet=args.quiet)
    if stopped_by is not None:
        where = f"; samples are in {args.output}" if args.output and summary.runs + summary.warmups else ""
        say(f"perfctl: interrupted after {summary.runs} measured runs ({stopped_by.name}){where}")
    closed.closing.join()
    if hook_failed is not None:
        where = f"; samples are in {args.output}" if args.output and summary.runs + summary.warmups else ""
        say(f"perfctl stat: {hook_failed}; stopped after {summary.runs} measured runs{where}")
        if point is not None:  # the scan's later values would run the same failing hook
            raise StopScan(EXIT_RUN_FAILED)
        return EXIT_RUN_FAILED
    return code


class RunBudget:
    """When stat's measured runs stop before -r: --until-precise's target reached (analysis/precision.py),
    or --max-time spent. ``start`` before each measured run, ``done`` after it; ``note`` says how the runs
    ended."""

    def __init__(self, target: float | None, metric: str, max_time: float | None):
        self.metric, self.max_time, self.ended = metric, max_time, None
        self.failed_run: int | None = None
        self.precise = None
        if target is not None:  # imported only then: analysis/ab.py is not every stat's start-up cost
            from perfctl.analysis.precision import MedianPrecision

            self.precise = MedianPrecision(target)
        self.state, self.unit = None, "ns"
        self.shell: float | None = None  # --shell: the shell's median of the metric, taken off each run's value
        self._started: float | None = None

    def less(self, shell) -> None:
        """Watch each run's value less the shell's median of the metric (report/stat.ShellCost), as the
        summary's medians less the shell's are: the target is then relative to the command's own cost. A
        constant shift moves the sequence's ends with the median, so its coverage is unchanged."""
        self.shell = shell.subtracted(self.metric)

    def start(self) -> None:
        """Before a measured run: the time budget counts from the first one's start (warmups are not the
        measurement's)."""
        if self._started is None:
            self._started = time.monotonic()

    def done(self, sample, summarized: bool) -> bool:
        """After a measured run: whether the runs stop here. Only a run the table summarizes counts toward the
        target (``summarized``: not failed, not left out by --exclude-interfered)."""
        if self.precise is not None and sample.outcome != "ok":
            # the target is a precision of the command's cost; a failing command has none to reach, and
            # running out the budget (1000 runs by default) would only repeat the failure (docs/stat.md)
            self.ended, self.failed_run = "failed", sample.run_index
            return True
        if self.precise is not None and summarized:
            value = sample.metric_value(self.metric)
            if value is not None:
                self.unit = sample.metric_unit(self.metric)
                self.state = self.precise.add(value - (self.shell or 0.0))
                if self.state.reached:
                    self.ended = "reached"
                    return True
        if self.max_time is not None and time.monotonic() - self._started >= self.max_time:
            self.ended = "max-time"
            return True
        return False

    def note(self, repeat: int, interrupted: bool = False) -> str:
        """The line under the table: whether --until-precise's target was reached, in how many runs."""
        from perfctl.units import percent, quantity

        if self.precise is None:
            return "--max-time reached before the -r runs" if self.ended == "max-time" else ""
        target = f"±{self.precise.target * 100:g}%"
        watched = self.metric if self.shell is None else f"{self.metric} less the shell's median"
        target = f"{target} of the median {watched}"
        s = self.state
        if self.ended == "failed":
            runs = "" if s is None else f" after {s.runs} summarized runs"
            return (f"precision {target} not reached: run {self.failed_run} failed{runs}; --until-precise stops at "
                    "a failed run (a failing command has no cost to know precisely)")
        if s is None:
            return f"precision {target} not reached: no run the table summarizes counted it"
        unit = self.unit
        ends = ("-" if s.low is None else quantity(s.low, unit), "-" if s.high is None else quantity(s.high, unit))
        sequence = f"{percent(s.confidence)} confidence sequence [{ends[0]}, {ends[1]}]"
        if s.reached and s.low == s.high == s.median:  # an exact count: every run the same, 0 included
            return (f"precision {target} reached after {s.runs} runs: every run counted exactly "
                    f"{quantity(s.median, unit)}, {sequence} (±0%)")
        if s.reached:
            return (f"precision {target} reached after {s.runs} runs: median {quantity(s.median, unit)}, "
                    f"{sequence} (±{s.relative:.2%})")
        why = ("interrupted" if interrupted else "--max-time reached" if self.ended == "max-time"
               else f"-r {repeat} reached")
        if s.median <= 0 and s.low is not None and s.high is not None:
            # a relative precision of a median of 0 (or below, less the shell's) is no precision at all
            now = f"{sequence}, around a median of {quantity(s.median, unit)}: no relative precision is reached"
            return f"precision {target} not reached ({why}): after {s.runs} runs the {now}"
        now = "unbounded" if s.relative == float("inf") else f"±{s.relative:.2%}"
        return f"precision {target} not reached ({why}): after {s.runs} runs the {sequence} is {now}"


def _progress(total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console(stderr=True), transient=True)
