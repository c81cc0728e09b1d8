"""What the commands that run benchmarks on this machine share (`perfctl stat`, `perfctl ab`): the run
controls' options, checking them before anything runs, the backend, and the sample outputs that write each
run as it ends (docs/stat.md)."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading

from perfctl.cli.options import (
    backends,
    int_at_least,
    interference_options,
    label_option,
    labels,
    non_negative_int,
    positive_int,
    seconds,
)
from perfctl.model import HOOKS, compared_metric
from perfctl.output import OUTPUT_ERRNOS, UsageError, quiet_stdout, say, stdout_closed
from perfctl.output_files import REPORT, SAMPLES, Output, OutputError, SampleFile, check

# Linux never has more tasks than PID_MAX_LIMIT (2^22, include/linux/threads.h): a bigger map of tracked tasks
# follows nothing more and only asks the kernel for memory it may refuse.
_ebpf_tasks = int_at_least(1, 1 << 22)


def control_options(command) -> None:
    """The events, backend and run controls (ASLR, environment, pinning, user, timeout), labels and the
    JSON Lines output: the options stat and ab take alike."""
    from perfctl.agent.runacct import DEFAULT_MAX_TASKS
    from perfctl.agent.runner import ENV_SIZE_STEP

    command.add_argument("-e", "--events", action="append", metavar="EVENTS",
                         help="comma-separated perf-style event names (default: the full default set)")
    command.add_argument("--backend", type=backends, default=("perf_event",), metavar="NAME[,NAME]",
                         help="perf_event (default), perf-stat, dbi, ebpf, or perf_event,ebpf (both count each run)")
    command.add_argument("--ebpf-max-tasks", type=_ebpf_tasks, default=DEFAULT_MAX_TASKS, metavar="N",
                         help="tasks of the benchmark's tree the ebpf backend can follow at once "
                              f"({DEFAULT_MAX_TASKS})")
    interference_options(command)
    command.add_argument("--pin", type=non_negative_int, metavar="CPU", help="pin the benchmark to this CPU")
    command.add_argument("--timeout", type=seconds, metavar="S", help="kill a run's whole process tree after S s")
    command.add_argument("--user", metavar="USER", help="run the benchmark as USER (counters stay perfctl's)")
    command.add_argument("--env-size", type=positive_int, metavar="BYTES",
                         help="pad the benchmark's environment to exactly BYTES (default: the smallest multiple of "
                              f"{ENV_SIZE_STEP} that holds it)")
    command.add_argument("--clean-env", action="store_true",
                         help="pass only PATH, HOME, USER, LOGNAME, TERM, TZ, LANG=C")
    command.add_argument("--keep-aslr", action="store_true", help="leave address-space randomization on")
    label_option(command)
    command.add_argument("--show-output", action="store_true", help="let the benchmark write to the terminal")
    command.add_argument("-o", "--output", metavar="FILE", help="append JSON Lines samples to FILE")
    command.add_argument("--no-progress", action="store_true", help="no progress display")


def prepare(args, command: str):
    """(event specs, RunControl, labels) from the options, or a UsageError naming ``command``: nothing has
    run and no file has been opened yet."""
    from perfctl.agent.events import DEFAULT_EVENTS, UnknownEvent, check_tracepoints, parse_events
    from perfctl.agent.runner import RunError, make_control

    sample_labels = labels(args)
    if args.backend == ("ebpf",) and args.events:
        raise UsageError(f"{command}: the ebpf backend counts a fixed set (docs/backends.md); -e names perf_event "
                         "events: use --backend perf_event,ebpf")
    try:
        specs = parse_events(args.events or list(DEFAULT_EVENTS))
        check_tracepoints(specs)
        control = make_control(env_size=args.env_size, clean_env=args.clean_env, aslr_off=not args.keep_aslr,
                               pin_cpu=args.pin, user=args.user, timeout_s=args.timeout,
                               show_output=args.show_output)
    except (UnknownEvent, RunError) as err:
        raise UsageError(f"{command}: {err}") from None
    return specs, control, sample_labels


def check_outputs(args, command: str, resolved: list[list[str]], control) -> None:
    """Refuse -o FILE and --html FILE (stat) before anything runs when either must not be written: the
    benchmark's executable or a file its arguments name (``resolved``: each command's argv as
    session.identify resolved it), the other output, or (-o) a file that is not perfctl's JSON Lines.
    The hooks' scripts and the files their words name are the user's too. The rules: perfctl/output_files.py,
    docs/outputs.md."""
    hooks = [(f"--{hook}", text) for hook in HOOKS for text in getattr(args, hook, None) or ()]
    check(command, [Output("-o", args.output, SAMPLES), html_output(args)],
          benchmarks=resolved, hooks=hooks, cwd=control.cwd, search_path=dict(control.env).get("PATH"))


def html_output(args) -> Output:
    """stat's --html FILE, as output_files checks and writes it (--force: replace a file not perfctl's)."""
    return Output("--html", getattr(args, "html", None), REPORT, force=getattr(args, "force", False))


def open_backend(args, specs, inventory, command: str, outputs: SampleOutputs):
    """The backend the options ask for (a fallback from ebpf is said once), or a UsageError, which closes
    ``outputs`` first (a file created for the samples goes again: nothing ran)."""
    from perfctl.agent import session
    from perfctl.agent.runner import RunError

    try:
        backend, fallback = session.open_backend(args.backend, specs, inventory, ebpf_max_tasks=args.ebpf_max_tasks)
    except RunError as err:
        outputs.close()
        raise UsageError(f"{command}: {err}") from None
    if fallback:
        say(f"{command}: {fallback}")
    return backend


class SampleOutputs:
    """Where each sample is written as its run ends: -o FILE (appended, output_files.SampleFile), JSON Lines
    or CSV on stdout. The machine's inventory line goes first, with the first sample and not before: a run
    that cannot start must leave -o FILE as it was. A file created here that received nothing is removed on
    close. check_outputs has refused, before, an -o FILE that must not be written."""

    def __init__(self, command: str, path: str | None, stdout: str | None = None):
        from perfctl.formats.csv import CsvWriter
        from perfctl.formats.jsonl_writer import JsonlWriter

        self.command, self.path, self.written = command, path, 0
        self.lost: str | None = None  # close()'s
        if stdout and stdout_closed():  # started with stdout closed (>&-): nothing could take the samples
            raise UsageError(f"{command}: stdout is closed; --{stdout} writes the samples there (use -o FILE)")
        self._writers = []  # (where it writes, writer): an output that fails is named in the message
        self._file = None
        jsonl = []  # one writer serializes each sample once for all of them; it names the one that fails
        if path:
            try:
                self._file = SampleFile(path, command)  # checked again on the file opened (output_files.py)
            except OSError as err:
                raise UsageError(f"{command}: cannot write {path}: {err.strerror}") from None
            jsonl.append((path, self._file))
        if stdout == "json":
            jsonl.append(("stdout", sys.stdout))
        if jsonl:
            self._writers.append(("samples", JsonlWriter(jsonl)))
        if stdout == "csv":
            try:
                self._writers.append(("stdout", CsvWriter(sys.stdout)))  # it writes the header line
            except OSError as err:
                raise self.failed(OutputError("stdout", err), 0) from None

    def recorder(self, inventory):
        """:meth:`write` of every sample with the machine's ``inventory``: a Measurement's ``record``."""
        return functools.partial(self.write, inventory=inventory)

    def write(self, sample, inventory) -> None:
        if self.written == 0:
            self._emit("write_machine", {**inventory.to_dict(), "audit": _audit_summary()})
        self._emit("write_sample", sample)
        self.written += 1

    def _emit(self, method: str, record) -> None:
        for where, writer in self._writers:
            try:
                getattr(writer, method)(record)
            except OSError as err:
                raise OutputError(where, err) from None

    def close(self) -> None:
        """The file closed; :attr:`lost` says, when samples were written to an -o FILE that is gone since
        (a hook removed or replaced it), that they are out of reach: cli/around.py ClosedAfterRuns makes it
        the command's error, as an -o FILE that cannot be written is (docs/outputs.md)."""
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            if self.written and self._file.moved():
                self.lost = (f"{self.command}: -o {self.path} is gone (removed or replaced during the runs: by a "
                             f"hook?); the {self.written} samples written there are lost")
        with contextlib.suppress(OSError):  # only a write that already failed and was reported leaves data here
            self._file.close()

    def failed(self, err: OutputError, runs: int) -> UsageError:
        """The one line for a sample output that cannot be written; stdout is silenced so that nothing
        buffered for it fails again on the way out."""
        if err.where == "stdout":
            quiet_stdout()
        if isinstance(err.error, BrokenPipeError):
            return UsageError(f"{self.command}: output pipe closed; measurement stopped")
        return UsageError(f"{self.command}: cannot write {err.where}: {err.error.strerror}; measurement stopped "
                          f"after {runs} measured runs")


def _audit_summary() -> dict:
    """The machine's latest complete audit, recorded beside its inventory in the samples' first line (the
    report shows its verdict and age beside the other side's): verdict, id and time, or why there is none."""
    from perfctl.agent.audit_report import load_latest

    latest, why = load_latest()
    if latest is None:
        return {"verdict": None, "why": why}
    return {"verdict": latest.verdict, "audit_id": latest.audit_id, "time_ns": latest.time_ns}


def write_summary(report, fmt: str, console, command: str, stopped_by) -> int:
    """The summary after the runs, and the exit code; an output that cannot take it (a full disk, a closed
    terminal) is one line, unless a signal already stopped the command (its code wins)."""
    from perfctl.report import write

    try:
        return write(report, fmt, console)
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS or stopped_by is not None:
            raise
        quiet_stdout()
        raise UsageError(f"{command}: cannot write the summary: {err.strerror}") from None


class ClosingMeanwhile:
    """``backend.close()`` on a thread while the command cleans up and prints its summary; ``join()`` before
    the command returns (it re-raises what the close raised).

    The last close of a tracepoint counter waits for the kernel's grace periods (perf_trace_event_unreg,
    tracepoint_synchronize_unregister): ~40 ms per tracepoint here, ~80 ms of every stat and ab with the
    default events, in which this process only waits. No run is in progress any more, so nothing measured
    shares the machine with it.
    """

    def __init__(self, backend) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._close, args=(backend,), name="perfctl-backend-close",
                                        daemon=True)
        self._thread.start()

    def _close(self, backend) -> None:
        try:
            backend.close()
        except BaseException as err:  # raised again in join(), in the command's own thread
            self._error = err

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def asked_metric(asked: str | None, specs, command: str) -> str | None:
    """The --metric asked for (ab's, stat's --until-precise), checked against the events measured
    (``instructions`` is ``instructions:u``, as in compare); None: the default, chosen by the command."""
    from perfctl.model import WALL_TIME, metric_label

    if asked is None:
        return None
    measured = {spec.label for spec in specs}
    label = metric_label(asked, measured)
    if label is None:
        raise UsageError(f"{command}: --metric {asked!r} is not measured (measured: {WALL_TIME}, "
                         f"{', '.join(sorted(measured))}; -e adds events)")
    return label


def counted_metric(asked: str | None, backend, outputs, command: str) -> str:
    """The metric the runs stop on (ab's verdict, stat's --until-precise), among what the opened ``backend``
    counts here (model.py compared_metric); a UsageError before any run when it is not counted, the backend
    and the outputs closed (nothing is written)."""
    try:
        return compared_metric(asked, backend.support())
    except ValueError as err:
        outputs.close()
        backend.close()
        raise UsageError(f"{command}: --metric {asked}: {err}; choose another --metric") from None
    except UsageError:
        outputs.close()
        backend.close()
        raise
