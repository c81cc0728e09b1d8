"""`perfctl history` and `perfctl changes`: when did a benchmark get slower (issue 32; docs/history.md,
"Commands"). A history is read from perfctl JSON Lines files (perfctl/history_files.py) or asked of the
fleet server (perfctl/client.py ``history``); changes are listed and triaged on the server
(``list_changes``, ``update_change``). Both are rendered by perfctl/report/history.py."""

from __future__ import annotations

import argparse
import os
import time

from perfctl.cli.options import (
    SIGNAL_EXIT,
    connection_of,
    connection_options,
    duration,
    exit_status,
    force_option,
    loudness,
    positive_int,
    verbosity,
)
from perfctl.exit_codes import EXIT_SLOWDOWN
from perfctl.output import UsageError, console, say
from perfctl.report import write
from perfctl.text import visible

FORMATS = {"text": "table", "json": "json", "markdown": "markdown"}
STATE_CHOICES = ("new", "acknowledged", "false-positive", "fixed")  # "false positive" without the space to type
DEFAULT_LIMIT = 100  # changes listed (`changes --limit`, the fleet's open changes of `report --history`)
# Past the listing, the rest is still read to be counted (and its open regressions seen by the CI gate), page
# by page, keeping no row; this many at most, then "more than": every read of the client is bounded
COUNTED_PAST_LIMIT = 10_000


def margin(text: str) -> float:
    """An argparse type: a margin as a percentage ("1%") or a share (0.01), strictly between 0 and 100%."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a margin (1% or 0.01): {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 100%, got {text}")
    return value


def labels_list(text: str) -> tuple[str, ...]:
    """--line LABEL[,LABEL]: the labels that name a line of development ("" for none)."""
    from perfctl.model import labels_problem

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    problem = labels_problem({name: "x" for name in names}, "--line")
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return names


def series_options(command) -> None:
    """What `perfctl history` and `perfctl report --history` share: which series, how ordered, how judged."""
    from perfctl.analysis.changepoints import HISTORY_MARGIN

    command.add_argument("--benchmark", metavar="NAME", help="only this benchmark's series")
    command.add_argument("--metric", metavar="METRIC",
                         help="the metric (default as compare: instructions, else cycles, else task-clock, else "
                              "wall-time)")
    command.add_argument("--line", type=labels_list, metavar="LABEL[,LABEL]",
                         help="files: the labels whose values name a line of development, one series each "
                              "(default branch; '' for none; a server's lines are its --history-line)")
    command.add_argument("--order-by", metavar="LABEL", action="append",
                         help="order the points by this numeric label (a build number) instead of the time their "
                              "runs started (files) or their jobs ended (server: the changes are then found for "
                              "this answer, without ids or triage)")
    command.add_argument("--margin", type=margin, metavar="SHARE",
                         help=f"files: report a change when its interval lies beyond this margin (default "
                              f"{HISTORY_MARGIN * 100:g}%%; 1%% or 0.01; a server's changes are read at its own)")
    command.add_argument("--every-difference", action="store_true",
                         help="files: also report the changes whose interval does not lie beyond the margin")
    connection_options(command, "the fleet server holding the machines' runs (for MACHINE)")


def add_parser(sub) -> None:
    history = sub.add_parser(
        "history", help="a benchmark's history: its jobs in order and where its level changed",
        description="Every job's median over time, and the changes of level found on them (E-divisive means, "
                    "each change confirmed on its jobs with compare's ratio, interval and verdict; "
                    "docs/history.md). From perfctl sample files that carry labels (a point per job, else per "
                    "commit label, else per file) or from the fleet server (MACHINE).",
        epilog=exit_status("0 shown", "2 bad usage or input (an unknown or unreadable file, samples without "
                           "labels, a bad --order-by, an unreachable server)", SIGNAL_EXIT))
    history.add_argument("sources", nargs="+", metavar="MACHINE[@KEY=VALUE,...]|FILE",
                         help="a machine on the server (its labels select the line), or perfctl sample files")
    series_options(history)
    history.add_argument("--format", choices=tuple(FORMATS), default="text")
    history.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE instead of stdout")
    force_option(history, "-o FILE")
    loudness(history, verbose="every point of every series (a long series is otherwise summarised by level)",
             quiet="only the headline")

    changes = sub.add_parser(
        "changes", help="list the fleet's changes of performance, or triage one (ack, reopen)",
        description="The changes the server found in its series (docs/history.md): benchmark, machine, metric, "
                    "before -> after, ratio with its interval, verdict, state. `perfctl changes ack ID` "
                    "acknowledges one (--note, --link; --false-positive), `perfctl changes reopen ID` makes "
                    "it new again.",
        epilog=exit_status("0 listed or updated", f"{EXIT_SLOWDOWN} with -q: a regression is open (state new)",
                           "2 bad usage, an unknown change, a server that cannot be reached or refuses, or with -q "
                           f"more than --limit + {COUNTED_PAST_LIMIT:,} changes (whether one is open is not known)",
                           SIGNAL_EXIT))
    changes.add_argument("action", nargs="?", choices=("ack", "reopen"), help="triage the change ID")
    changes.add_argument("change_id", nargs="?", metavar="ID", help="the change (its id, or a unique prefix)")
    changes.add_argument("--machine", metavar="NAME", help="only this machine's changes")
    changes.add_argument("--benchmark", metavar="NAME", help="only this benchmark's changes")
    changes.add_argument("--since", type=duration, metavar="DURATION",
                         help="only changes whose first job after them ended in the last DURATION (30d, 12h)")
    changes.add_argument("--state", action="append", choices=STATE_CHOICES,
                         help="only changes in this state (repeatable; false-positive for 'false positive')")
    changes.add_argument("--note", metavar="TEXT", help="with ack: why (kept with the change)")
    changes.add_argument("--link", metavar="URL", help="with ack: a bug or a pull request")
    changes.add_argument("--false-positive", action="store_true", help="with ack: the change is not real")
    changes.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, metavar="N",
                         help=f"list the newest N changes (default {DEFAULT_LIMIT}); up to {COUNTED_PAST_LIMIT:,} more "
                              "are counted, and -q still sees their open regressions")
    changes.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    connection_options(changes, "the fleet server")
    loudness(changes, verbose="each change's line, runs, p-value, note and link too",
             quiet=f"only the headline; exit {EXIT_SLOWDOWN} when a regression is open (for CI)")


def run(args) -> int:
    if args.command == "changes":
        return _changes(args)
    return _history(args)


def _history(args) -> int:
    from perfctl.report.history import HistoryReport

    command = "perfctl history"
    output = _output(args, command) if args.output else None
    args.order_by = order_label(args.order_by, command)
    history = read_sources(args, args.sources, command)
    report = HistoryReport(history, verbosity(args))
    if output is None:
        return write(report, FORMATS[args.format], console())
    from io import StringIO

    from rich.console import Console

    from perfctl.output import PIPED_WIDTH
    from perfctl.output_files import HISTORY_ENDS, replace

    # a file is laid out as piped output is, without a terminal's colours whatever stdout is
    target = Console(file=StringIO(), width=args.width or PIPED_WIDTH, color_system=None, force_terminal=False,
                     highlight=False, emoji=False)
    code = write(report, FORMATS[args.format], target)
    text = target.file.getvalue()
    if args.format != "json":  # signed, so that the next -o FILE knows it as perfctl's to replace
        text = text + ("" if text.endswith("\n") else "\n") + HISTORY_ENDS[FORMATS[args.format]]
    replace(output, text, command)
    return code


def _output(args, command: str):
    """-o FILE to write, checked (output_files.py: never an input, perfctl's own text, JSON or Markdown
    replaced, anything else only with --force); None for stdout itself (/dev/stdout), printed there as
    without -o."""
    from perfctl.cli.compare import check_output
    from perfctl.output_files import HISTORY, names_stdout

    if names_stdout(args.output):
        return None
    return check_output("-o", args.output, args.force, [], connection_of(args), command, args.sources,
                        kind=HISTORY)


def order_label(given: list[str] | None, command: str) -> str | None:
    """--order-by's one label (argparse appends each occurrence, so a second is seen, not silently kept)."""
    if not given:
        return None
    if len(given) > 1:
        raise UsageError(f"{command}: --order-by given {len(given)} times ({', '.join(map(visible, given))}): a "
                         "history is ordered by one label")
    if not given[0].strip():
        raise UsageError(f"{command}: --order-by \"\": give a label's name (--order-by build)")
    return given[0]


def machine_named(sources: list[str], args) -> bool:
    """Whether the sources name a machine on a server (one source, a server given, no such file)."""
    return (len(sources) == 1 and not os.path.exists(sources[0].partition("@")[0] or sources[0])
            and bool(args.server or os.environ.get("PERFCTL_SERVER")))


def read_sources(args, sources: list[str], command: str) -> dict:
    """The history dict of ``sources``: a machine's series from the server, or the files' (one-line
    UsageError when there is none)."""
    from perfctl.history_files import DEFAULT_LINE, HistoryError, read_history

    if machine_named(sources, args):
        given = [option for option, value in (("--line", args.line), ("--margin", args.margin),
                                              ("--every-difference", args.every_difference or None)) if value]
        if given:  # the server found its changes as it was configured: say so rather than ignore them
            raise UsageError(f"{command}: {', '.join(given)} shape a history read from files; a server's series "
                             "and changes are its own (perfctl server --history-line)")
        machine, labels = _machine(sources[0], command)
        history = served(args, command, "history", machine, labels, benchmark=args.benchmark, metric=args.metric,
                         **({"order_by": args.order_by} if args.order_by else {}))
        if not history["series"]:  # a name the server does not know, or no ended job of it: say which
            _known(args, machine, command)
            what = " ".join(f"{name} {visible(value)!r}" for name, value in (
                ("benchmark", args.benchmark), ("metric", args.metric)) if value)
            raise UsageError(f"{command}: no series of {visible(sources[0])!r}{' with ' + what if what else ''}: "
                             "no ended job measured it (perfctl benchmarks --machine M lists what is stored)")
        left_out = sum(series.get("points_without_order") or 0 for series in history["series"])
        if args.order_by and left_out and not any(series["points"] for series in history["series"]):
            # every point left out: a label whose values are not numbers (commit hashes), said as the mistake
            raise UsageError(f"{command}: --order-by {visible(args.order_by)}: none of the {left_out:,} points has "
                             "a numeric value of it; --order-by takes a label whose values are numbers, such as a "
                             "build id")
        return history
    try:
        return read_history(sources, benchmark=args.benchmark, metric=args.metric,
                            line=DEFAULT_LINE if args.line is None else args.line, order_by=args.order_by,
                            margin=args.margin, every_difference=args.every_difference)
    except HistoryError as err:
        hint = ""
        if len(sources) == 1 and not os.path.exists(sources[0]):  # perhaps a machine, without a server to ask
            hint = " (a machine's history needs --server HOST:PORT or PERFCTL_SERVER)"
        raise UsageError(f"{command}: {visible(str(err))}{hint}") from None


def _known(args, machine: str, command: str) -> None:
    from perfctl.cli.remote import answering, known_machine

    if not machine.strip():
        raise UsageError(f"{command}: --machine: give a machine's name")
    with answering(command):
        known_machine(connection_of(args), machine, command)


def _machine(text: str, command: str) -> tuple[str, dict]:
    from perfctl.cli.compare import _selected_labels

    machine, at, spec = text.partition("@")
    if not machine or (at and not spec):
        raise UsageError(f"{command}: {visible(text)!r}: expected MACHINE or MACHINE@KEY=VALUE[,KEY=VALUE]")
    return machine, _selected_labels(spec, machine, command)


def served(args, command: str, method: str, *positional, **keywords):
    """perfctl/client.py's ``method`` called with the command's connection; errors as one line
    (cli/remote.py's ``answering``)."""
    from perfctl import client
    from perfctl.cli.remote import answering

    with answering(command):
        return getattr(client, method)(connection_of(args), *positional, **keywords)


def listed_changes(args, command: str, limit: int, **filters):
    """The newest ``limit`` of the server's changes (client.list_changes, which pages), and what is left out
    (report/history.py Unlisted): counted on, page by page, for at most COUNTED_PAST_LIMIT more, keeping only
    their states and their open regressions (named in the headline, seen by the CI gate)."""
    from collections import Counter
    from itertools import islice

    from perfctl import client
    from perfctl.cli.remote import answering
    from perfctl.report.history import Unlisted, open_regressions

    with answering(command):
        changes = client.list_changes(connection_of(args), **filters)
        rows = list(islice(changes, limit))
        states, regressions, count = Counter(), [], 0
        for row in changes:
            if count == COUNTED_PAST_LIMIT:
                return rows, Unlisted(count, states, tuple(regressions), capped=True)
            count += 1
            states[row["state"]] += 1
            regressions += open_regressions([row])
    return rows, Unlisted(count, states, tuple(regressions))


def _changes(args) -> int:
    from perfctl.report.history import ChangesReport, ChangeUpdated, open_regressions

    command = "perfctl changes"
    fmt = FORMATS[args.format]
    triage = any((args.note is not None, args.link is not None, args.false_positive))
    if args.action is None:
        if args.change_id is not None:
            raise UsageError(f"{command}: {visible(args.change_id)!r}: say what to do with it: perfctl changes ack "
                             "ID, or reopen ID")
        if triage:
            raise UsageError(f"{command}: --note, --link and --false-positive go with ack ID")
        states = tuple(state.replace("-", " ") for state in args.state or ())
        since_ns = time.time_ns() - int(args.since * 1e9) if args.since else 0
        rows, unlisted = listed_changes(args, command, args.limit, machine=args.machine, benchmark=args.benchmark,
                                        since_ns=since_ns, states=states)
        if args.machine is not None and not rows:  # none, or a name the server does not know: say which
            _known(args, args.machine, command)
        if args.quiet and unlisted.capped and not open_regressions(rows) and not unlisted.regressions:
            raise UsageError(f"{command}: {len(rows) + unlisted.count:,} changes and more: -q cannot tell whether a "
                             "regression is open among the rest; narrow with --machine, --benchmark, --since or "
                             "--state new")
        if unlisted.count and fmt == "json":  # the array stays the rows; the cut is said beside it
            say(f"{command}: {unlisted.words()}; --limit to see them")
        return write(ChangesReport(rows, verbosity(args), gate=args.quiet, unlisted=unlisted), fmt, console())
    if not args.change_id or not args.change_id.strip():
        raise UsageError(f"{command} {args.action}: give the change's ID (perfctl changes lists them)")
    if any((args.machine, args.benchmark, args.since, args.state)):
        raise UsageError(f"{command} {args.action}: --machine, --benchmark, --since and --state select a listing, "
                         "not a change to triage")
    if args.action == "reopen":
        if triage:
            raise UsageError(f"{command} reopen: --note, --link and --false-positive go with ack")
        state = "new"
    else:
        state = "false positive" if args.false_positive else "acknowledged"
    row = served(args, command, "update_change", args.change_id.strip(), state=state, note=args.note,
                  link=args.link)
    return write(ChangeUpdated(row), fmt if fmt != "markdown" else "table", console())
