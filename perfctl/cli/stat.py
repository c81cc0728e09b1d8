"""`perfctl stat`: run a command N times and count events per run (docs/stat.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from perfctl.cli.options import (
    SIGNAL_EXIT,
    backends,
    command_of,
    exit_status,
    int_at_least,
    interference,
    interference_options,
    label_option,
    labels,
    loudness,
    non_negative_int,
    positive_int,
    seconds,
    verbosity,
)
from perfctl.output import OUTPUT_ERRNOS, Interrupted, UsageError, console, interactive, quiet_stdout, say
from perfctl.report import write
from perfctl.report.html import check_target, write_report

# Linux never has more tasks than PID_MAX_LIMIT (2^22, include/linux/threads.h): a bigger map of tracked tasks
# follows nothing more and only asks the kernel for memory it may refuse.
_ebpf_tasks = int_at_least(1, 1 << 22)


def add_parser(sub) -> None:
    from perfctl.agent.runacct import DEFAULT_MAX_TASKS
    from perfctl.agent.runner import ENV_SIZE_STEP

    stat = sub.add_parser("stat", help="run a command N times and count events per run",
                          description="Run CMD N times under controlled conditions and count events per run.",
                          epilog=exit_status("0 every measured run exited 0", "1 a run failed, died of a signal or "
                                             "timed out", "2 bad usage or input, or an output that cannot be "
                                             "written", f"{SIGNAL_EXIT}: the run in progress is killed with its "
                                             "process tree, finished runs are kept (docs/stat.md)"))
    stat.add_argument("-r", "--repeat", type=positive_int, default=10, metavar="N", help="measured runs (default 10)")
    stat.add_argument("--warmup", type=non_negative_int, default=0, metavar="K",
                      help="warmup runs before the measured ones, recorded and flagged")
    stat.add_argument("-e", "--events", action="append", metavar="EVENTS",
                      help="comma-separated perf-style event names (default: the full default set)")
    stat.add_argument("--backend", type=backends, default=("perf_event",), metavar="NAME[,NAME]",
                      help="perf_event (default), perf-stat, dbi, ebpf, or perf_event,ebpf (both count each run)")
    stat.add_argument("--ebpf-max-tasks", type=_ebpf_tasks, default=DEFAULT_MAX_TASKS, metavar="N",
                      help=f"tasks of the benchmark's tree the ebpf backend can follow at once ({DEFAULT_MAX_TASKS})")
    interference_options(stat)
    stat.add_argument("--pin", type=non_negative_int, metavar="CPU", help="pin the benchmark to this CPU")
    stat.add_argument("--timeout", type=seconds, metavar="S", help="kill a run's whole process tree after S s")
    stat.add_argument("--user", metavar="USER", help="run the benchmark as USER (counters stay perfctl's)")
    stat.add_argument("--env-size", type=positive_int, metavar="BYTES",
                      help="pad the benchmark's environment to exactly BYTES (default: the smallest multiple of "
                           f"{ENV_SIZE_STEP} that holds it)")
    stat.add_argument("--clean-env", action="store_true", help="pass only PATH, HOME, USER, LOGNAME, TERM, TZ, LANG=C")
    stat.add_argument("--keep-aslr", action="store_true", help="leave address-space randomization on")
    stat.add_argument("--name", help="benchmark name (default: the command's basename)")
    label_option(stat)
    stat.add_argument("--show-output", action="store_true", help="let the benchmark write to the terminal")
    out = stat.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON Lines samples on stdout (summary on stderr)")
    out.add_argument("--csv", action="store_true", help="per-run CSV on stdout (summary on stderr)")
    stat.add_argument("-o", "--output", metavar="FILE", help="append JSON Lines samples to FILE")
    stat.add_argument("--html", metavar="FILE", help="also write the HTML report of the runs to FILE "
                                                     "(docs/report.md)")
    stat.add_argument("--no-progress", action="store_true", help="no progress bar")
    loudness(stat, verbose="each unsupported event with its reason, and the correction's sentence",
             quiet="no summary table: only failed runs and errors")
    stat.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")


def run(args) -> int:
    from perfctl.agent import inventory, session
    from perfctl.agent.events import DEFAULT_EVENTS, UnknownEvent, parse_events
    from perfctl.agent.runner import RunError, Runner, make_control
    from perfctl.formats.csv import CsvWriter
    from perfctl.formats.jsonl import JsonlWriter
    from perfctl.report.stat import StatReport, StatSummary

    cmd = command_of(args)
    if not cmd:
        raise UsageError("perfctl stat: no command given (usage: perfctl stat [options] -- CMD ARGS)")
    sample_labels = labels(args)  # a bad label ends here, before anything runs or any file is opened
    if args.backend == ("ebpf",) and args.events:
        raise UsageError("perfctl stat: the ebpf backend counts a fixed set (docs/backends.md); -e names perf_event "
                         "events: use --backend perf_event,ebpf")
    try:
        specs = parse_events(args.events or list(DEFAULT_EVENTS))
        _check_tracepoints(specs)
        control = make_control(env_size=args.env_size, clean_env=args.clean_env, aslr_off=not args.keep_aslr,
                               pin_cpu=args.pin, user=args.user, timeout_s=args.timeout,
                               show_output=args.show_output)
        plan = session.Plan(argv=cmd, runs=args.repeat, warmups=args.warmup, control=control, name=args.name,
                            labels=sample_labels)
        # bad commands fail here, before any file is touched; identified once (it hashes the executable and inputs)
        identified = session.identify(plan.argv, control, plan.name)
    except (UnknownEvent, RunError) as err:
        raise UsageError(f"perfctl stat: {err}") from None

    machine_readable = args.json or args.csv
    summary_console = console(stderr=machine_readable)
    if args.html:
        check_target(args.html, "perfctl stat", [args.output] if args.output else [])
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
        say(f"perfctl stat: {fallback}")
    runner = Runner()
    summary = StatSummary(interference=interference(args), no_pmu_events=frozenset(
        () if inv.pmu.present else (s.label for s in specs if s.kind in ("hardware", "raw", "store"))))
    total = args.warmup + args.repeat
    progress = _progress(total, args.no_progress or args.quiet or not interactive(stderr=True))
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
                for sample in session.run(plan, backend, runner, inv.machine_id, corrector, identified):
                    if summary.runs + summary.warmups == 0:
                        # with the first sample, not before: a run that cannot start is a usage error that
                        # must leave -o FILE as it was
                        _emit(writers, "write_machine", {**inv.to_dict(), "audit": _audit_summary()})
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
    report = StatReport(summary, title, verbosity(args), stopped_by, inventory=inv)
    try:
        code = write(report, "table", summary_console)
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS or stopped_by is not None:
            raise
        quiet_stdout()
        raise UsageError(f"perfctl stat: cannot write the summary: {err.strerror}") from None
    if args.html and summary.runs + summary.warmups:
        write_report(report, args.html, "perfctl stat", quiet=args.quiet, inputs=[args.output] if args.output else [])
    if stopped_by is not None:
        where = f"; samples are in {args.output}" if args.output and summary.runs + summary.warmups else ""
        say(f"perfctl: interrupted after {summary.runs} measured runs ({stopped_by.name}){where}")
    return code


def _audit_summary() -> dict:
    """The machine's latest complete audit, recorded beside its inventory in the samples' first line (the
    report shows its verdict and age beside the other side's): verdict, id and time, or why there is none."""
    from perfctl.agent.audit import load_latest

    latest, why = load_latest()
    if latest is None:
        return {"verdict": None, "why": why}
    return {"verdict": latest.verdict, "audit_id": latest.audit_id, "time_ns": latest.time_ns}


class _OutputError(Exception):
    """A sample could not be written to ``where`` (a full disk, /dev/full, a closed pipe)."""

    def __init__(self, where: str, error: OSError):
        super().__init__(f"{where}: {error}")
        self.where, self.error = where, error


def _output_failed(err: _OutputError, runs: int) -> UsageError:
    """The one line for a sample output that cannot be written; stdout is silenced so that nothing buffered
    for it fails again on the way out."""
    if err.where == "stdout":
        quiet_stdout()
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
                    console=console(stderr=True), transient=True, disable=disabled)
