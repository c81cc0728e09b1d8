"""perfctl(1), the man page, written in roff from the argparse parser itself (`perfctl completion man`), so
that it lists every command and option of this version with the help --help prints. docs/perfctl.1 is its
committed output (tests/test_i31_conventions.py checks that it is current and that groff renders it
without a warning): `man -l docs/perfctl.1`.
"""

from __future__ import annotations

import argparse
import re


def manpage(parser: argparse.ArgumentParser) -> str:
    from perfctl import __version__

    # no hyphenation, ragged right: option names and values are copied as printed
    lines = [f'.TH PERFCTL 1 "" "perfctl {__version__}" "User Commands"', ".nh", ".ad l", ".SH NAME",
             f"perfctl \\- {_roff(_lower_first(parser.description or ''))}", ".SH SYNOPSIS",
             ".B perfctl", "[\\fB\\-\\-version\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]", ".SH DESCRIPTION",
             _roff(parser.description or ""), "Every command takes \\fB\\-h\\fR for its own help; options are "
             "never abbreviated. The full manual is in the docs/ folder of perfctl's source.", ".SH COMMANDS"]
    for path, command, summary in _commands(parser):
        lines += _command(path, command, summary)
    lines += [".SH SEE ALSO", "\\fBperf\\fR(1), \\fBperf\\-stat\\fR(1), \\fBhyperfine\\fR(1)"]
    return "\n".join(lines) + "\n"


def help_text(action: argparse.Action) -> str:
    """An option's help as --help prints it (%(default)s and the like filled in), on one line."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return " ".join(argparse.HelpFormatter("perfctl")._expand_help(action).split())


def _commands(parser: argparse.ArgumentParser, path: str = "perfctl"):
    """(path, parser, one-line help) of every command and subcommand, in --help's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield f"{path} {name}", child, helps.get(name) or ""
                yield from _commands(child, f"{path} {name}")


def _command(path: str, command: argparse.ArgumentParser, summary: str) -> list[str]:
    usage = " ".join(command.format_usage().split())
    lines = [f'.SS "{_roff(path)}"', _roff(summary[:1].upper() + summary[1:] + ".") if summary else "",
             ".PP", _roff(usage.removeprefix("usage: "))]
    if command.description:
        lines += [".PP", _roff(command.description)]
    for action in command._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        lines += [".TP", _term(action), _roff(help_text(action)) or "\\&"]
    if command.epilog:
        lines += [".PP", _roff(command.epilog)]
    return [line for line in lines if line]


def _term(action: argparse.Action) -> str:
    """An option as `-r, --repeat N` (bold names, italic value), or a positional's name in italics."""
    metavar = action.metavar if isinstance(action.metavar, str) else None
    if not action.option_strings:
        return f"\\fI{_roff(metavar or action.dest)}\\fR"
    names = ", ".join(f"\\fB{_roff(o)}\\fR" for o in action.option_strings)
    if action.nargs == 0:
        return names
    value = metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    return f"{names} \\fI{_roff(value)}\\fR"


def _roff(text: str) -> str:
    """``text`` as roff text: backslashes and hyphens escaped, a line that would start with a control
    character ('.' or ') guarded, one paragraph per line; a comma without a space after it may break the
    line (\\:), or a list of choices would be one word wider than the page."""
    text = " ".join(text.split()).replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(",(?! )", ",\\\\:", text)
    return "\\&" + text if text[:1] in (".", "'") else text


def _lower_first(text: str) -> str:
    return (text[:1].lower() + text[1:]).rstrip(".")
