"""Parameter scans, as hyperfine takes them: `-P NAME MIN MAX [-D STEP]` and `-L NAME a,b,c` (several -L
give every combination). One benchmark per value, `{NAME}` replaced in every word of the command and of
the hooks (--prepare, --setup, --cleanup, as hyperfine does), named `NAME=value` after the benchmark's name
and labelled NAME=value in every sample (docs/stat.md, "Parameter scans"). `perfctl stat` and `perfctl ab`
add the options with :func:`scan_options` and run through :func:`each_point`; everything about a scan is
checked before anything runs."""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from decimal import Decimal

from perfctl.exit_codes import EXIT_NO_VERDICT, EXIT_OK, EXIT_RUN_FAILED, EXIT_SLOWDOWN, EXIT_USAGE
from perfctl.model import HOOKS, MAX_LABELS, label_problem

MAX_POINTS = 1000  # a scan of more values is more likely a typo (-P n 1 1000000) than a plan
# -P's numbers as a person writes them: ASCII digits, an optional sign and point, no exponent, no "_"
# (Python's Decimal takes 1e999999999, 1_0 and Arabic-Indic digits, which overflow or surprise), and few
# enough digits that MIN + i*STEP stays exact in Decimal's default 28-digit context.
_PLAIN_NUMBER = re.compile(r"-?[0-9]{1,12}(\.[0-9]{1,12})?\Z")


def scan_options(command) -> None:
    """-P/--parameter-scan, -D/--parameter-step-size and -L/--parameter-list, with hyperfine's meanings."""
    command.add_argument("-P", "--parameter-scan", nargs=3, metavar=("NAME", "MIN", "MAX"),
                         help="one benchmark per value of NAME from MIN to MAX (inclusive), {NAME} replaced in "
                              "the command and the hooks; integers, or decimals with -D (docs/stat.md)")
    command.add_argument("-D", "--parameter-step-size", metavar="STEP",
                         help="step of -P (default 1; may be a decimal, e.g. 0.5)")
    command.add_argument("-L", "--parameter-list", nargs=2, action="append", metavar=("NAME", "VALUES"),
                         help="one benchmark per comma-separated value of NAME, {NAME} replaced in the command "
                              f"and the hooks (repeatable: every combination; at most {MAX_POINTS} benchmarks)")


class StopScan(Exception):
    """Raised by a point's run, after it has reported its own end, when the values after it must not run: a
    hook failed (hyperfine stops the whole benchmark on a failing --setup, --prepare or --cleanup; the next
    value's hooks are the same commands and would fail alike). ``code``: the point's exit code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class ScanPoint:
    """One value of the scan (one per parameter): ``{"n": "1000"}``."""

    values: dict[str, str]

    @property
    def suffix(self) -> str:
        """What follows the benchmark's name: ``n=1000`` (``n=1000 mode=fast`` for several parameters)."""
        return " ".join(f"{name}={value}" for name, value in self.values.items())

    def substitute(self, words: list[str]) -> list[str]:
        """``words`` with every ``{NAME}`` replaced by its value, as hyperfine does in its command string."""
        out = []
        for word in words:
            for name, value in self.values.items():
                word = word.replace("{" + name + "}", value)
            out.append(word)
        return out


def scan_points(args, command: str) -> list[ScanPoint]:
    """The scan's points from the options, in order (-P ascending, -L as given, the last -L varying
    fastest), or [] without a scan; UsageError in one line before anything runs for a bad scan: MIN above
    MAX, a step that is not positive, a NAME the command does not use or given twice, more than
    MAX_POINTS benchmarks."""
    from perfctl.output import UsageError

    scan, step, lists = args.parameter_scan, args.parameter_step_size, args.parameter_list or []
    if step is not None and scan is None:
        raise UsageError(f"{command}: -D/--parameter-step-size needs -P/--parameter-scan")
    if scan is not None and lists:  # hyperfine refuses them together too
        raise UsageError(f"{command}: -P/--parameter-scan and -L/--parameter-list exclude each other")
    axes: list[tuple[str, list[str]]] = []
    if scan is not None:
        axes.append((scan[0], _range(command, *scan, step)))
    for name, values in lists:
        given = values.split(",")
        empty = next((i for i, value in enumerate(given) if not value), None)
        if empty is not None:  # "echo n=" would run as a benchmark of its own, the value lost
            raise UsageError(f"{command}: -L {name} {values!r}: value {empty + 1} is empty")
        twice = next((value for i, value in enumerate(given) if value in given[:i]), None)
        if twice is not None:  # two benchmarks of one name: compare would pool them, the report plot one
            raise UsageError(f"{command}: -L {name}: value {twice!r} given twice")
        axes.append((name, given))
    seen: set[str] = set()
    # the hooks take the values too, as hyperfine's --prepare, --setup and --cleanup do
    words = " ".join([*args.cmd, *(hook for hooks in _hooks(args).values() for hook in hooks)])
    for name, values in axes:
        option = "-P" if scan is not None else "-L"
        # the name and each value become a label NAME=value (model.py label_problem owns what one is): a
        # name holding "=" would split there (-L n=x 1 labelled n: x=1)
        problem = label_problem(name, "")
        if problem:
            raise UsageError(f"{command}: {option} {name!r}: the parameter's name: {problem}")
        for value in values:
            problem = label_problem(name, value)
            if problem:
                raise UsageError(f"{command}: {option} {name} {value!r}: {problem}")
        if name in seen:
            raise UsageError(f"{command}: {option} {name}: parameter given twice")
        seen.add(name)
        if "{" + name + "}" not in words:
            raise UsageError(f"{command}: {option} {name}: neither the command nor a hook uses {{{name}}}")
    if axes and len(axes) + len(set(args.label)) > MAX_LABELS:  # without a scan: --label's own check
        raise UsageError(f"{command}: {len(axes)} parameters and {len(set(args.label))} --label give more than "
                         f"{MAX_LABELS} labels per sample")
    count = 1
    for _, values in axes:
        count *= len(values)
    if count > MAX_POINTS:
        raise UsageError(f"{command}: the parameter scan gives {count} benchmarks, at most {MAX_POINTS}")
    if not axes:  # the product of no axes is one empty point: no scan is none
        return []
    names = [name for name, _ in axes]
    return [ScanPoint(dict(zip(names, combination))) for combination in itertools.product(*(v for _, v in axes))]


def _range(command: str, name: str, low: str, high: str, step: str | None) -> list[str]:
    """MIN, MIN+STEP, ... up to MAX inclusive, in exact decimal arithmetic (0.1 steps do not drift)."""
    from perfctl.output import UsageError

    def number(text: str, what: str) -> Decimal:
        if not _PLAIN_NUMBER.match(text):
            raise UsageError(f"{command}: -P {name}: {what} is not a plain decimal number (like 3, -2 or 0.25; "
                             f"at most 12 digits either side of the point): {text[:40]!r}")
        value = Decimal(text)
        if step is None and value != value.to_integral_value():  # hyperfine: decimals need a step
            raise UsageError(f"{command}: -P {name}: {what} {text} is not an integer (decimals need -D STEP)")
        return value

    start, end = number(low, "MIN"), number(high, "MAX")
    delta = Decimal(1) if step is None else number(step, "-D STEP")
    if start > end:
        raise UsageError(f"{command}: -P {name}: MIN {low} is above MAX {high}")
    if delta <= 0:
        raise UsageError(f"{command}: -D {step}: the step must be positive")
    count = int((end - start) / delta) + 1
    if count > MAX_POINTS:
        raise UsageError(f"{command}: the parameter scan gives {count} benchmarks, at most {MAX_POINTS}")
    return [_shown(start + i * delta) for i in range(count)]


def _shown(value: Decimal) -> str:
    """A value as the command gets it: 3 for an integer, 0.5 for a decimal (never 5E-1)."""
    return str(value.quantize(1)) if value == value.to_integral_value() else format(value.normalize(), "f")


def each_point(args, command: str, run_one, programs=lambda words: words[:1]) -> int:
    """``run_one(args, None)`` for the command as given, or ``run_one(args, point)`` once per point of the
    scan with the command's and the hooks' words substituted, the benchmark named ``NAME NAME=value``
    (--name, else the basename of the first word as typed, as without a scan) and labelled NAME=value.
    ``programs(words)``: the programs among a command's words (ab: each command's first); every point's are
    checked to run before the first point runs. The exit code of the most serious point; a signal stops
    the scan at once. Each point is its own benchmark: its verdict or table holds on its own."""
    from perfctl.cli.around import default_name
    from perfctl.cli.options import command_of
    from perfctl.output import UsageError, say

    points = scan_points(args, command)
    if not points:
        return run_one(args, None)
    if getattr(args, "csv", False):  # stat's per-run CSV has no benchmark column: the values would mix
        raise UsageError(f"{command}: --csv cannot tell a scan's values apart (no benchmark column); use --json "
                         "or -o FILE, whose samples carry the value as a label")
    form = getattr(args, "format", None)
    if form in ("json", "csv"):  # a document per value, each with its header, would not be one document
        raise UsageError(f"{command}: --format {form} takes one comparison, not a scan; -o FILE keeps every "
                         f"value's samples and `perfctl compare FILE@ab=A FILE@ab=B --format {form}` judges them "
                         "in one document")
    taken = {text.partition("=")[0] for text in args.label}
    clash = next((name for name in points[0].values if name in taken), None)
    if clash is not None:
        raise UsageError(f"{command}: --label {clash}=...: {clash} is a parameter of the scan (its samples are "
                         "labelled with its value)")
    _check_programs(args, command, points, programs)
    worst = EXIT_OK
    for index, point in enumerate(points):
        each = copy.copy(args)
        each.cmd = point.substitute(args.cmd)
        for hook, commands in _hooks(args).items():
            setattr(each, hook, point.substitute(commands))
        # named after the words as typed (bench-{cc}, not bench-gcc): every point shares the base name that
        # makes the points one scan in compare's report (report/scanplot.py)
        each.name = f"{args.name or default_name(args, command_of(args))} {point.suffix}"
        each.label = [*args.label, *(f"{name}={value}" for name, value in point.values.items())]
        try:
            code = run_one(each, point)
        except StopScan as stop:
            left = len(points) - index - 1
            if left:
                say(f"{command}: the scan stops at {point.suffix} (a hook failed); {left} later "
                    f"value{'s' if left > 1 else ''} not run")
            return max(worst, stop.code, key=_seriousness)
        if code > 128:  # stopped by a signal: the rest of the scan does not run
            return code
        worst = max(worst, code, key=_seriousness)
    return worst


def _check_programs(args, command: str, points: list[ScanPoint], programs) -> None:
    """A UsageError, as the point's own run would give it (cli/around.py not_found), for the first point
    whose program cannot run (``-L v a,b -- ./prog-{v}`` without prog-b): found before any point runs, not
    midway with the values before it measured and stat's --html of the scan never written; and -o or --html
    naming a file a point's arguments name, as check_outputs refuses it for one command. Resolved only
    (agent/run/control.py resolve_command), not hashed: each point's run identifies its command again."""
    from perfctl.agent.run.control import resolve_command
    from perfctl.agent.runner import RunError
    from perfctl.cli.around import not_found
    from perfctl.cli.measure import check_outputs, prepare
    from perfctl.cli.options import command_of

    if args.shell or getattr(args, "setup", None):  # the shell: the first point's run checks it; --setup may build it
        return
    _, control, _ = prepare(args, command)  # the PATH the runs get (--clean-env's included)
    path = dict(control.env).get("PATH")
    for point in points:
        words = point.substitute(command_of(args))
        resolved = dict.fromkeys(programs(words))
        for program in resolved:
            try:
                resolved[program] = resolve_command(program, path)
            except RunError as err:
                raise not_found(f"{command}: {point.suffix}", err, words, args) from None
        # -o and --html must not be a file a later value's arguments name (-L f a.txt,b.txt -o b.txt): refused
        # now, not after the values before it wrote their samples
        check_outputs(args, f"{command}: {point.suffix}", [[resolved.get(word) or word for word in words]], control)


def _hooks(args) -> dict[str, list[str]]:
    """The hooks given (cli/around.py hook_options), by option: {"prepare": [CMD, ...], ...}."""
    return {hook: getattr(args, hook) for hook in HOOKS if getattr(args, hook, None)}


# most serious first, as perfctl/exit_codes.py outcome_exit orders them
_SERIOUSNESS = (EXIT_RUN_FAILED, EXIT_USAGE, EXIT_SLOWDOWN, EXIT_NO_VERDICT, EXIT_OK)


def _seriousness(code: int) -> int:
    return -_SERIOUSNESS.index(code) if code in _SERIOUSNESS else -len(_SERIOUSNESS)
