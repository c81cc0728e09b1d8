"""`perfctl ab`: run two or more commands interleaved, round after round, until the comparison is settled
(docs/ab.md; the statistics: analysis/ab.py)."""

from __future__ import annotations

import argparse
import random
import time

from perfctl.analysis.verdicts import DEFAULT_CONFIDENCE, DEFAULT_FAIL_ON, DEFAULT_MARGIN, EXACT_ROUNDS, FAIL_ON
from perfctl.cli.around import (
    ClosedAfterRuns,
    around_options,
    check_shell,
    default_name,
    hooks_of,
    not_found,
    shell_command,
)
from perfctl.cli.measure import (
    OutputError,
    SampleOutputs,
    asked_metric,
    check_outputs,
    control_options,
    counted_metric,
    open_backend,
    prepare,
    write_summary,
)
from perfctl.cli.options import (
    SIGNAL_EXIT,
    command_of,
    duration,
    exit_status,
    interference,
    loudness,
    non_negative_int,
    positive_int,
    probability,
    verbosity,
)
from perfctl.cli.scan import StopScan, each_point, scan_options
from perfctl.exit_codes import EXIT_NO_VERDICT, EXIT_OK, EXIT_RUN_FAILED, EXIT_SLOWDOWN, meaning
from perfctl.model import (
    DEFAULT_METRICS,
    DETERMINISTIC_BACKENDS,
    SIDE_LABEL,
    side_letter,
)
from perfctl.output import Interrupted, UsageError, console, interactive, raise_received_stop, say, stdout_closed

SEPARATOR = ":::"
DEFAULT_MAX_RUNS = 1000
DEFAULT_MIN_RUNS = 5
MAX_COMMANDS = 26  # sides are lettered A to Z
LIVE_SECONDS = 0.25  # the live display is redrawn at most this often (a redraw is perfctl running between runs)


def confidence(text: str) -> float:
    """An argparse type: analysis/ab.py's confidence range, with the rule in the message."""
    from perfctl.analysis.ab import confidence_problem

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    problem = confidence_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def add_parser(sub) -> None:
    ab = sub.add_parser(
        "ab", help="run commands interleaved until the comparison is settled",
        description="Run CMD_A and CMD_B (and more, each compared with A) in rounds, in a random order within "
                    "each round, and stop as soon as the verdict is settled: B faster or slower by more than the "
                    "margin, a difference inside it, or equivalence. The verdict reads off an anytime-valid "
                    "confidence sequence, so stopping when it settles keeps the stated confidence (docs/ab.md).",
        epilog=exit_status(*map(meaning, (EXIT_OK, EXIT_SLOWDOWN, EXIT_NO_VERDICT, EXIT_RUN_FAILED)),
                           "2 bad usage or input, or an output that cannot or must not be written (docs/outputs.md)",
                           f"{SIGNAL_EXIT}: the run in progress is killed, finished runs are kept"))
    ab.add_argument("--margin", type=probability, default=DEFAULT_MARGIN,
                    help=f"equivalence margin: ratios in [1-margin, 1+margin] are equivalent ({DEFAULT_MARGIN})")
    ab.add_argument("--confidence", type=confidence, default=DEFAULT_CONFIDENCE,
                    help=f"that every verdict of the run is right, together ({DEFAULT_CONFIDENCE}; 0.5 to 0.999999999)")
    ab.add_argument("--metric", metavar="METRIC",
                    help=f"what is compared (default: {', else '.join(DEFAULT_METRICS)})")
    ab.add_argument("--max-runs", type=positive_int, default=DEFAULT_MAX_RUNS, metavar="N",
                    help=f"at most N measured runs of each command (default {DEFAULT_MAX_RUNS})")
    ab.add_argument("--max-time", type=duration, metavar="DURATION", help="stop after this long (90s, 15m, 2h)")
    ab.add_argument("--min-runs", type=positive_int, metavar="K",
                    help=f"no verdict is settled before K rounds (default {DEFAULT_MIN_RUNS}; {EXACT_ROUNDS} for a "
                         "count of --backend dbi, which repeats exactly; at most --max-runs)")
    ab.add_argument("--warmup", type=non_negative_int, default=0, metavar="K",
                    help="warmup runs of each command before the rounds, recorded and flagged")
    ab.add_argument("--seed", type=non_negative_int, metavar="S",
                    help="seed of the order within rounds (default: random; recorded in every sample)")
    ab.add_argument("--fail-on", choices=FAIL_ON, default=DEFAULT_FAIL_ON,
                    help="which slowdown exits 3: relevant (default: a difference shown, with B slower) or beyond "
                         "(the whole sequence below 1 - margin)")
    control_options(ab)
    scan_options(ab)
    around_options(ab)
    ab.add_argument("--name", help="benchmark name of every command's samples (default: the first command's "
                                   "basename); the commands are told apart by the label ab=A, ab=B, ...")
    ab.add_argument("--json", action="store_true", help="JSON Lines samples on stdout (summary on stderr)")
    ab.add_argument("--format", choices=("table", "json", "markdown", "csv"), default="table",
                    help="the summary's format (markdown: a GitHub table for a CI comment; csv: a row per command)")
    loudness(ab, quiet="no table: only slowdowns, failures and errors")
    ab.add_argument("cmd", nargs=argparse.REMAINDER, metavar=f"-- CMD_A ARGS {SEPARATOR} CMD_B ARGS [{SEPARATOR} ...]")


def commands(words: list[str]) -> list[list[str]]:
    """The commands between ``:::`` separators."""
    groups, current = [], []
    for word in words:
        if word == SEPARATOR:
            groups.append(current)
            current = []
        else:
            current.append(word)
    groups.append(current)
    return groups


def run(args) -> int:
    # a scan: one A/B comparison per value, each command given the same value, each with its own verdict
    return each_point(args, "perfctl ab", _run_one,
                      programs=lambda words: [group[0] for group in commands(words) if group])


def _run_one(args, point) -> int:  # the point is in args already (cli/scan.py)
    from perfctl.agent import inventory, session
    from perfctl.agent.hooks import HookFailed
    from perfctl.agent.measurement import (
        ComparedRounds,
        Measurement,
        Rounds,
        RunFailed,
        Sequential,
        SequentialRule,
        Unusable,
    )
    from perfctl.agent.runner import RunError
    from perfctl.failures import rounds_stopped
    from perfctl.report.ab import AbReport, AbResult, Side

    check_shell(args, "perfctl ab")
    groups = commands(command_of(args))
    if len(groups) >= 2 and not all(groups):
        empty = next(i for i, group in enumerate(groups) if not group)
        raise UsageError(f"perfctl ab: command {empty + 1} of {len(groups)} is empty (nothing before, between or "
                         f"after the {SEPARATOR} separators)")
    if len(groups) < 2:
        raise UsageError(f"perfctl ab: need two commands (usage: perfctl ab [options] -- CMD_A ARGS {SEPARATOR} "
                         "CMD_B ARGS)")
    if len(groups) > MAX_COMMANDS:
        raise UsageError(f"perfctl ab: at most {MAX_COMMANDS} commands, got {len(groups)}")
    if args.min_runs is not None and args.min_runs > args.max_runs:
        raise UsageError(f"perfctl ab: --min-runs {args.min_runs} is above --max-runs {args.max_runs}")
    specs, control, sample_labels = prepare(args, "perfctl ab")
    if SIDE_LABEL in sample_labels:
        raise UsageError(f"perfctl ab: --label {SIDE_LABEL}=... is perfctl ab's own (it tells the commands apart)")
    metric = asked_metric(args.metric, specs, "perfctl ab")
    sides = [Side(side_letter(i), shell_command(args, words)) for i, words in enumerate(groups)]
    name = args.name or default_name(args, groups[0])
    hooks = hooks_of(args, len(sides), control, "perfctl ab")
    identified = []
    for side, words in zip(sides, groups):
        try:
            identified.append(session.identify(side.argv, control, name,  # its --setup may build it
                                               after_setup=bool(hooks and hooks.setup[len(identified)])))
        except RunError as err:
            raise not_found("perfctl ab", err, words, args) from None

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    result = AbResult(sides, {}, metric or "", args.margin, args.confidence, seed, "max-runs", output=args.output)
    if not args.json and stdout_closed():  # the summary goes there: it would be lost without a word
        raise UsageError("perfctl ab: stdout is closed; the summary is written there (-o FILE keeps the samples)")
    summary_console = console(stderr=args.json)
    check_outputs(args, "perfctl ab", [resolved for resolved, _ in identified], control)
    outputs = SampleOutputs("perfctl ab", args.output, "json" if args.json else None)
    inv = inventory.collect()
    backend = open_backend(args, specs, inv, "perfctl ab", outputs)
    metric = counted_metric(metric, backend, outputs, "perfctl ab")
    result.metric = metric
    if args.min_runs is None:  # a deterministic backend's own count settles at the exact rule's rounds (docs/ab.md)
        exact = set(args.backend) <= set(DETERMINISTIC_BACKENDS) and metric in backend.support()
        args.min_runs = min(EXACT_ROUNDS if exact else DEFAULT_MIN_RUNS, args.max_runs)
    # the rule owns --min-runs: a comparison is never settled before it, however the rounds end (docs/ab.md)
    sequential = Sequential(SequentialRule(metric, args.margin, args.confidence, args.min_runs), len(sides))
    suite = sequential.suite
    measurement = Measurement(backend, control, inv.machine_id, record=outputs.recorder(inv), hooks=hooks)
    policy = interference(args)
    compared = ComparedRounds(measurement, Rounds(len(sides), args.warmup, seed), sequential, seed,
                              max_rounds=args.max_runs, max_seconds=args.max_time,
                              excluded=lambda samples: policy.exclude and any(
                                  policy.flags(s.readings, s.wall_ns) for s in samples))
    live = _live(args)
    stopped_by: Interrupted | None = None
    hook_failed = False
    closed = ClosedAfterRuns(measurement, backend, outputs, "perfctl ab")

    def measured(which: int, sample) -> None:
        if sample.warmup:
            sides[which].warmups += 1
        else:
            sides[which].runs += 1
            if sample.outcome != "ok":  # a failed run's time is the failure's, not the command's (stat's rule)
                sides[which].failed += 1
                raise_received_stop()
                return
            value = sample.metric_value(metric)  # each command's own runs, in the metric's unit
            if value is not None:
                sides[which].values.append(value)
                sides[which].unit = sample.metric_unit(metric)
        raise_received_stop()  # a stop whose Interrupted was lost on the way ends the rounds here

    def rounded() -> None:
        result.rounds, result.excluded_rounds = compared.rounds, compared.excluded_rounds
        live.show(suite, sides, result, args, compared.started)

    try:
        with closed:  # --cleanup runs at its end; its failure does not hide a signal's or a run's
            for side, ident in zip(sides, identified):
                corrector, _ = measurement.correct(inv, ident, specs)
                measurement.add(ident, {**sample_labels, SIDE_LABEL: side.label}, corrector)
            with live:
                result.stop = compared.run(measured, rounded)
    except Interrupted as signalled:
        stopped_by, result.stop = signalled, "interrupted"
    except RunFailed as failed:
        result.stop, result.failure = "failed", rounds_stopped(sides[failed.which].label, failed.sample)
    except HookFailed as failed:
        result.stop, result.failure = "failed", f"perfctl ab: {failed}"
        hook_failed = True
    except Unusable as unusable:
        result.stop, result.failure = "unusable", f"perfctl ab: {unusable}"
    except RunError as err:
        raise UsageError(f"perfctl ab: {err}") from None
    except OutputError as err:
        raise outputs.failed(err, sum(side.runs for side in sides)) from None
    result.rounds, result.excluded_rounds = compared.rounds, compared.excluded_rounds

    result.settlements = {sides[i].label: settlement for i, settlement in suite.settlements().items()}
    result.to_settle = {sides[i].label: suite.comparisons[i].rounds_to_settle() for i in suite.undecided()}
    if outputs.written == 0:
        result.output = None
    report = AbReport(result, args.fail_on, verbosity(args), stopped_by)
    code = write_summary(report, args.format, summary_console, "perfctl ab", stopped_by)
    if stopped_by is not None:
        where = f"; samples are in {args.output}" if result.output else ""
        say(f"perfctl: interrupted after {result.rounds} rounds ({stopped_by.name}){where}")
    closed.closing.join()
    if hook_failed and point is not None:  # the scan's later values would run the same failing hook
        raise StopScan(code)
    return code


def _live(args):
    """The live display on a terminal (stderr), else one that shows nothing."""
    disabled = args.no_progress or args.quiet or not interactive(stderr=True)
    return _NoLive() if disabled else _Live()


class _NoLive:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def show(self, suite, sides, result, args, started) -> None:
        pass


class _Live(_NoLive):
    """Redrawn by hand, at most every LIVE_SECONDS (rich's own refresh would run a thread beside the runs)."""

    def __init__(self):
        from rich.live import Live

        self._console = console(stderr=True)
        self._live = Live(console=self._console, auto_refresh=False, transient=True)
        self._shown = 0.0

    def __enter__(self):
        self._live.__enter__()
        return self

    def __exit__(self, *exc):
        return self._live.__exit__(*exc)

    def show(self, suite, sides, result, args, started) -> None:
        from rich.text import Text

        from perfctl.report.ab import live_line

        now = time.monotonic()
        if now - self._shown < LIVE_SECONDS:
            return
        self._shown = now
        # the drawing takes what the numbers and the verdict leave of the terminal's width
        width = max(10, min(60, self._console.width - 80))
        lines = [live_line(sides[i].label, settlement, width) for i, settlement in suite.settlements().items()]
        left = f"round {result.rounds}, {args.max_runs - result.rounds} rounds left"
        if args.max_time is not None:
            left += f", {max(0.0, args.max_time - (now - started)):.0f} s left"
        self._live.update(Text("\n".join([f"perfctl ab: {result.metric}; {left}", *lines])), refresh=True)
