"""What the commands' parsers share: the parser class, argparse types with messages that say which rule was
broken, and the option groups several commands take (-q/-v, interference, a fleet server's connection)."""

from __future__ import annotations

import argparse
import re

# every command that can be stopped says so in --help: the signal policy of perfctl/output.py
from perfctl.exit_codes import SIGNAL_MEANING as SIGNAL_EXIT  # noqa: F401 - re-exported
from perfctl.output import UsageError
from perfctl.report import NORMAL, QUIET, VERBOSE

MAX_OPTION_INT = (1 << 32) - 1


class Parser(argparse.ArgumentParser):
    """perfctl's parsers: no prefix abbreviations (`--rep` for `--repetitions` would change meaning the day
    a second option starts so), one-line errors, and a "did you mean" for a mistyped command, option or
    value (difflib's closest match)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, not a usage dump
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def _check_value(self, action, value):
        if action.choices is None or value in action.choices:
            return
        choices = [str(c) for c in action.choices]
        if isinstance(action, argparse._SubParsersAction):
            raise UsageError(f"{self.prog}: no command {value!r}" + _did_you_mean(str(value), choices, self.prog))
        raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {', '.join(choices)})"
                                     + _did_you_mean(str(value), choices, None))

    def unrecognized(self, words: list[str]):
        """The error for words no option of this parser takes, with the closest option to the first."""
        first = words[0].split("=", 1)[0]
        # compared without their dashes: every long option shares "--", which made --bogus "close" to --verbose
        options = {o.lstrip("-"): o for action in self._actions for o in action.option_strings if o.startswith("--")}
        prefixed = [o for name, o in options.items() if name.startswith(first.lstrip("-"))]
        hint = ("" if not first.startswith("--") else f"; did you mean {prefixed[0]!r}?" if prefixed
                else _did_you_mean(first.lstrip("-"), list(options), None).replace("'", "'--", 1))
        self.error(f"unrecognized arguments: {' '.join(words)}{hint}")


def _did_you_mean(word: str, choices: list[str], prog: str | None) -> str:
    """"; did you mean 'stat'?" for the closest of ``choices``; with ``prog``, its --help when none is close."""
    import difflib

    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if match:
        return f"; did you mean {match[0]!r}?"
    return f" (see {prog} --help)" if prog else ""


def exit_status(*codes: str) -> str:
    """The epilog of a command's --help: its exit codes, as found in its code and docs/*.md."""
    return "exit status: " + "; ".join(codes)


def int_at_least(minimum: int, maximum: int | None = None):
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


positive_int, non_negative_int = int_at_least(1), int_at_least(0)


def float_between(low: float, high: float, what: str, rule: str):
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


probability = float_between(0, 1, "number", "strictly between 0 and 1")
share = float_between(0, 1e6, "share", "a positive share of the wall time (0.05 is 5%)")
seconds = float_between(0, 1e7, "number of seconds", "a positive number of seconds")


def backends(text: str) -> tuple[str, ...]:
    from perfctl.model import parse_backends

    try:
        return parse_backends(text)
    except ValueError as err:
        unknown = [n for n in text.split(",") if n.strip() and n.strip() not in backends.completions]
        hint = _did_you_mean(unknown[0].strip(), list(backends.completions), None) if unknown else ""
        raise argparse.ArgumentTypeError(f"{err}{hint}") from None


def _backend_names() -> tuple[str, ...]:
    from perfctl.model import BACKENDS

    return (*BACKENDS, "perf_event,ebpf")


backends.completions = _backend_names()  # what shell completion offers (perfctl/cli/completion.py)


def loudness(command, verbose: str = "more details", quiet: str = "only errors and failures") -> None:
    """-v/--verbose and -q/--quiet, which exclude each other; every command takes them."""
    group = command.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", help=verbose)
    group.add_argument("-q", "--quiet", action="store_true", help=quiet)
    command.add_argument("--width", type=int_at_least(40, 1000), metavar="COLUMNS",
                         help="lay tables and text out for this many columns (default: the terminal's, or "
                              "$COLUMNS, or 100 when output is not a terminal)")


def force_option(command, what: str) -> None:
    """--force: replace ``what`` when it exists and is not perfctl's own output of that kind, which perfctl
    otherwise refuses (perfctl/output_files.py rule 5: it may be a file the benchmark reads without naming
    it). An input, the benchmark or a file its arguments name stays refused."""
    command.add_argument("--force", action="store_true",
                         help=f"replace {what} even when it exists and is not perfctl's own output (inputs, "
                              "the benchmark and the files its arguments name are refused all the same; "
                              "docs/outputs.md)")


def verbosity(args) -> int:
    """QUIET, NORMAL or VERBOSE (perfctl/report), from -q/-v."""
    return QUIET if args.quiet else VERBOSE if args.verbose else NORMAL


def interference_options(command) -> None:
    from perfctl.model import DEFAULT_INTERFERENCE_LIMIT

    command.add_argument("--interference-limit", type=share, default=DEFAULT_INTERFERENCE_LIMIT, metavar="SHARE",
                         help="flag runs in which other tasks ran on the benchmark's CPUs for more than this share "
                              "of the run's wall time (ebpf backend; default 0.05)")
    command.add_argument("--exclude-interfered", action="store_true",
                         help="leave flagged runs out of the statistics (the output says how many)")


def interference(args):
    from perfctl.model import InterferencePolicy

    return InterferencePolicy(args.interference_limit, args.exclude_interfered)


def label_option(command, what: str = "every sample written") -> None:
    """Repeatable --label KEY=VALUE (commit, branch, build); labels(args) reads and checks them."""
    command.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                         help=f"label {what} with KEY=VALUE (repeatable; keys 1-64 of A-Z a-z 0-9 _ . -, values "
                              "printable, up to 256 characters; at most 32 labels; docs/samples.md)")


def labels(args) -> dict[str, str]:
    """The --label options as one mapping (perfctl/model.py parse_labels); UsageError in one line naming the
    command, the option's text and the broken rule."""
    from perfctl.model import parse_labels

    try:
        return parse_labels(args.label)
    except ValueError as err:
        raise UsageError(f"perfctl {getattr(args, 'command', '')}".rstrip() + f": {err}") from None



_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([^0-9\s.]*)", re.ASCII)
# m is minutes, as in sleep(1), systemd and timeout(1): `--retain 6m` keeps runs six minutes. A month (or a
# year) has no fixed length, and "m" for months is a misreading waiting to happen: only days are taken for
# long spans (180d), and the message says so (docs/operations.md)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
DURATION_UNITS = "seconds, or a number with s, m or min (minutes), h or d (days)"
MAX_DURATION_S = 10 * 366 * 86400


def duration(text: str) -> float:
    """An argparse type: a positive duration, in seconds or with a unit: 90, 90s, 15m (minutes), 2h, 180d;
    at most ten years (a --retain of years is still a number, an overflow is not). Months and years are
    refused (not a fixed length; m is minutes): the message names days instead."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration ({DURATION_UNITS}): {text!r}")
    if match[2] not in _UNIT_SECONDS:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}, unknown unit {match[2]!r} ({DURATION_UNITS}; "
                                         "months and years are not a fixed length: give days, e.g. 180d)")
    seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
    if not 0 < seconds <= MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be a positive duration of at most ten years, got {text}")
    return seconds


def connection_options(command, server_help: str) -> None:
    command.add_argument("--server", metavar="HOST:PORT", help=server_help)
    command.add_argument("--token-file", metavar="FILE", help="file holding this client's or agent's token")
    command.add_argument("--tls-ca", metavar="FILE", help="CA certificate that signed the server's certificate")
    command.add_argument("--tls-cert", metavar="FILE", help="own certificate, for mutual TLS")
    command.add_argument("--tls-key", metavar="FILE", help="own key, for mutual TLS")
    command.add_argument("--insecure", action="store_true", help="allow plaintext to a non-loopback address")


def connection_of(args):
    """The server options (``connection_options``) as the client's Connection (perfctl/client.py), with the
    command's name: what perfctl/client.py and cli/remote.py take, never the namespace."""
    from perfctl.client import Connection

    return Connection(args.command, args.server, args.token_file, args.tls_ca, args.tls_cert, args.tls_key,
                      args.insecure)


def command_of(args) -> list[str]:
    """CMD ARGS after an optional ``--``."""
    return args.cmd[1:] if args.cmd[:1] == ["--"] else list(args.cmd)
