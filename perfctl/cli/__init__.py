"""The `perfctl` command: one module per command, each only parsing its options, calling agent/, analysis/
or the client, and handing the results to perfctl/report/.

Exit codes: every command lists its own in its --help epilog (stat's in docs/stat.md: 0 every measured run
exited 0; 1 some run failed; 2 bad usage or input, or an output that cannot be written; 128 + N stopped by
signal N: 130 SIGINT, 143 SIGTERM, 129 SIGHUP, the run in progress killed with its process tree, every
finished run written).

Everything a file, an agent or a server supplies is printed through perfctl/text.py: control characters
shown as escapes, rich markup shown as text.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

# Nothing heavier at the top: the console script and `python -m perfctl` import this module before entry()
# can hold the stop signals (output.hold_stops_at_start); argparse, the options (rich) and each command's
# module are imported after, in _run, where a stop signal is only remembered.
from perfctl.output import (
    EXIT_USAGE,
    OUTPUT_ERRNOS,
    Interrupted,
    UsageError,
    exit_code_of,
    hold_stops_at_start,
    quiet_stdout,
    reopen_closed_stdout,
    say,
    set_width,
    stop_on_signals,
)

if TYPE_CHECKING:
    import argparse

# the order of `perfctl --help`: each command's module in perfctl/cli/, with add_parser(sub) and run(args)
COMMANDS = {"stat": "stat", "ab": "ab", "compare": "compare", "report": "report", "server": "server",
            "agent": "agent", "token": "token", "submit": "submit", "machines": "listings", "jobs": "listings",
            "benchmarks": "listings", "history": "history", "changes": "history",
            "audit": "audit", "cache": "cache", "info": "info", "completion": "completion",
            "prune": "prune"}
_SERVING_COMMANDS = ("server", "agent")  # they stop their event loop on a signal instead


def _module(command: str):
    """The module of a command (a key of COMMANDS), imported now."""
    return _cli_module(COMMANDS[command])


def _cli_module(name: str):
    import importlib

    return importlib.import_module(f"perfctl.cli.{name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with ``command``, of that one alone. A command imports only its own
    module and what it uses: importing every command's module (numpy for ab, grpc for the fleet's) took
    ~0.1 s of each start, and a perfctl stat of 1000 short runs took ~2 s in all (bench/stat_rate.py)."""
    from perfctl import __version__
    from perfctl.cli.options import Parser

    parser = Parser(prog="perfctl", description="Hardware and software counter measurement with stated confidence.")
    parser.add_argument("--version", action="version", version=f"perfctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    parser.commands = sub.choices  # each command's own parser, by name
    names = [command] if command is not None else COMMANDS
    for module in dict.fromkeys(COMMANDS[name] for name in names):  # machines, jobs and benchmarks are one module
        _cli_module(module).add_parser(sub)
    return parser


def entry() -> None:
    """The `perfctl` command (and ``python -m perfctl``): main(), then out without tearing the interpreter
    down. Freeing numpy's, scipy's and rich's modules at exit took ~80 ms of every command, more after a
    comparison of 100,000 runs (bench/compare_speed.py). The exit handlers still run (logging, temporary
    files) and the output is flushed by main(); a process with other threads still running exits the usual
    way, which waits for them. A stop signal before the command's own handlers are in place stops it as
    soon as they are (output.hold_stops_at_start): one line, 128 + N, whenever it comes."""
    hold_stops_at_start()
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter's own exit runs first
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    reopen_closed_stdout()
    code = _run(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): the exit code still describes the command
        quiet_stdout()
    except OSError as err:
        # what was still buffered; unflushed, Python would report it at exit with a traceback and status 120
        quiet_stdout()
        say(f"perfctl: cannot write the output: {err.strerror}")
        return code if code >= 128 else EXIT_USAGE
    return code


def _run(argv: list[str] | None) -> int:
    command = "perfctl"
    try:
        words = sys.argv[1:] if argv is None else argv
        # the completion script is made from every command's parser
        alone = words[0] if words and words[0] in COMMANDS and words[0] != "completion" else None
        if words and words[0].startswith("-") and words[0] not in ("-h", "--help", "--version"):
            # argparse would say only that a command is required
            raise UsageError(f"perfctl: unknown option {words[0]} before the command (see perfctl --help)")
        parser = build_parser(alone)
        args, unknown = parser.parse_known_args(words)
        if unknown:  # said by the command's parser: its name, and its --help
            parser.commands[args.command].unrecognized(unknown)
        command = f"perfctl {args.command}"
        if args.command in _SERVING_COMMANDS:  # a stop stays held until their handlers take it
            return _dispatch(args, parser)
        with stop_on_signals():
            return _dispatch(args, parser)
    except UsageError as err:
        say(str(err) if str(err).startswith("perfctl") else f"perfctl: {err}")
        return EXIT_USAGE
    except KeyboardInterrupt as err:
        say(f"{command}: interrupted" + (f" ({err.name})" if isinstance(err, Interrupted) else ""))
        return exit_code_of(err)
    except BrokenPipeError:
        # the reader left before the output was written (`| true`): silent, as a tool killed by SIGPIPE
        quiet_stdout()
        return 128 + signal.SIGPIPE
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS:
            raise
        quiet_stdout()
        say(f"{command}: cannot write the output: {err.strerror}")
    return EXIT_USAGE


def _dispatch(args, parser: argparse.ArgumentParser) -> int:
    set_width(getattr(args, "width", None))  # --width: every console of the command is laid out for it
    if args.command == "completion":  # the script is generated from the parser itself
        return _module("completion").run(args, parser)
    return _module(args.command).run(args)
