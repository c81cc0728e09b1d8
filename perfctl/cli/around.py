"""What stat and ab take from hyperfine about how a command is run: ``--shell[=SHELL]`` (the command runs as
``SHELL -c 'CMD'``, and stat measures the shell's own cost), the hint when a single argument looks like a
shell command, and the hooks around the runs, ``--prepare``, ``--setup``, ``--cleanup`` (agent/hooks.py runs
them). docs/stat.md, "Shell commands" and "Set-up around runs"."""

from __future__ import annotations

import os
import shlex

from perfctl.output import UsageError, say

DEFAULT_SHELL = "/bin/sh"  # hyperfine's default on Unix
# Runs of the shell with an empty command before the benchmark's, whose medians are its cost (hyperfine times
# 50 and takes their mean; a median of 10 is as steady against a slow first run, at a fifth of the cost).
SHELL_COST_RUNS = 10
# What in a single argument means a shell command line rather than a program's path.
SHELL_SYNTAX = ("|", ";", "&&", "||", ">", "<", "$(", "`", "*", " ")


def around_options(command) -> None:
    """--shell and the hooks, for stat and ab alike (each hook once for every command, or in ab once per
    command, in order, as hyperfine takes them)."""
    command.add_argument("--shell", nargs="?", const=DEFAULT_SHELL, metavar="SHELL",
                         help=f"run the command as SHELL -c 'CMD' (default {DEFAULT_SHELL}); stat measures the "
                              "shell's own cost and prints, under the table, the medians of wall-time, "
                              "task-clock, instructions and page faults less it")
    hook_options(command, "sh -c", " (e.g. dropping caches)")


def hook_options(command, how: str, example: str = "") -> None:
    """--prepare, --setup and --cleanup; ``how`` says how CMD runs (stat and ab: sh -c; a fleet job: its
    words, no shell, its program allowed by the agent)."""
    command.add_argument("--prepare", action="append", metavar="CMD",
                         help=f"run CMD ({how}) before every run, not counted{example}")
    command.add_argument("--setup", action="append", metavar="CMD",
                         help=f"run CMD ({how}) once per command before its first run, not counted")
    command.add_argument("--cleanup", action="append", metavar="CMD",
                         help=f"run CMD ({how}) once per command after its last run, not counted")


def shown(args, cmd: list[str]) -> str:
    """A command as a summary's title shows it: a --shell command line quoted, as the shell gets it."""
    return shlex.join(cmd) if args.shell else " ".join(cmd)


def check_shell(args, command: str) -> None:
    """A UsageError naming ``command`` for a --shell that cannot be meant: an empty SHELL (--shell=), a SHELL
    with shell syntax (argparse took the command line for --shell's value: ``--shell 'CMD'`` without ``--``),
    or --shell with the dbi backend, where valgrind counts the process it starts and not those it forks or
    execs (no --trace-children): the shell alone."""
    if args.shell is None:
        return
    if not args.shell.strip():  # --shell= would otherwise run the command without any shell, quietly
        raise UsageError(f"{command}: --shell= names no shell: give one (--shell=/bin/bash), or --shell alone for "
                         f"{DEFAULT_SHELL}")
    if any(mark in args.shell for mark in SHELL_SYNTAX):
        raise UsageError(f"{command}: --shell took {args.shell!r} as the shell to run: put -- before the command "
                         f"({command} --shell -- 'CMD'), or give the shell as --shell=SHELL")
    if "dbi" in args.backend:
        raise UsageError(f"{command}: --shell with --backend dbi would count the shell alone (valgrind does not "
                         "follow the programs the shell starts): run the program without --shell")


def shell_command(args, words: list[str]) -> list[str]:
    """The argv a command's words run as: themselves, or with --shell ``SHELL -c 'WORDS'``."""
    return [args.shell, "-c", " ".join(words)] if args.shell else words


def default_name(args, words: list[str]) -> str:
    """A benchmark's default name: its program's basename (under --shell, the command line's first word, or
    the shell's for an empty line)."""
    if not args.shell:
        return os.path.basename(words[0])
    return os.path.basename((" ".join(words).split() or [args.shell])[0])


def not_found(command: str, err, words: list[str], args) -> UsageError:
    """The UsageError for a command that cannot run (session.identify's RunError); a single argument with
    shell syntax, run without --shell, gets the hint of how to run it as a shell command."""
    message = f"{command}: {err}"
    if not args.shell and len(words) == 1 and any(mark in words[0] for mark in SHELL_SYNTAX):
        message += f"; {words[0]!r} looks like a shell command: use --shell, or sh -c {words[0]!r}"
    return UsageError(message)


def hooks_of(args, commands: int, control, command: str):
    """The hooks the options give (agent/hooks.Hooks), None without any, or a UsageError naming ``command``."""
    from perfctl.agent.hooks import Hooks

    try:
        return Hooks.of(commands, control.cwd, control.show_output, prepare=args.prepare, setup=args.setup,
                        cleanup=args.cleanup)
    except ValueError as err:
        raise UsageError(f"{command}: {err}") from None


def job_hooks(args, commands: int, command: str) -> dict[str, list[str]]:
    """A fleet job's hooks from the options (fleet.proto Job's prepare, setup, cleanup), checked as the server
    and the agent will (how many, each split into words without a shell: perfctl/model.py job_hook_words), or
    a UsageError naming ``command``. Whether each program is allowed only the agent knows."""
    from perfctl.agent.hooks import Hooks
    from perfctl.model import HOOKS, job_hook_words

    given = {hook: getattr(args, hook) or [] for hook in HOOKS}
    try:
        Hooks.of(commands, "/", False, **given)
        for hook, values in given.items():
            for value in values:
                try:
                    job_hook_words(value)
                except ValueError as err:
                    raise ValueError(f"--{hook} {value}: {err}") from None
    except ValueError as err:
        raise UsageError(f"{command}: {err}") from None
    return given


def measure_shell_cost(args, measurement, control, command: str):
    """The shell's own cost (report/stat.ShellCost): SHELL_COST_RUNS runs of ``SHELL -c ''`` before the
    benchmark's, through the same backend and gate, not samples. A UsageError when the shell cannot run or
    its empty command fails."""
    from perfctl.agent import session
    from perfctl.agent.runner import RunError
    from perfctl.failures import describe_failure
    from perfctl.report.stat import ShellCost, StatSummary

    try:
        which = measurement.add(session.identify([args.shell, "-c", ""], control))
    except RunError as err:
        raise UsageError(f"{command}: --shell {args.shell}: {err}") from None
    runs = StatSummary()
    for run_index in range(SHELL_COST_RUNS):
        sample = measurement.measure_unrecorded(which, run_index=run_index)
        if sample.outcome != "ok":
            raise UsageError(f"{command}: --shell {args.shell} with an empty command failed: "
                             f"{describe_failure(sample)}")
        runs.add(sample)
    return ShellCost(args.shell, runs)


class ClosedAfterRuns:
    """The end of stat's and ab's runs, however they end: ``measurement.close()`` (--cleanup runs there) while
    the backend closes on a thread (``closing``: join it before returning), then the sample outputs.

    A --cleanup that fails while something else is already ending the runs (a stop signal's Interrupted, a
    failed run, an output error) does not replace it: that decides the exit (128+N for a signal: a scan stops
    on it, cli/scan.py), and the cleanup's failure is said on its own line. Only when nothing else failed does
    its HookFailed end the command."""

    def __init__(self, measurement, backend, outputs, command: str):
        self.measurement, self.backend, self.outputs, self.command = measurement, backend, outputs, command
        self.closing = None

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        from perfctl.agent.hooks import HookFailed
        from perfctl.cli.measure import ClosingMeanwhile

        # a second signal is ignored (output.stop_on_signals): it must not cut the cleanup short
        self.closing = ClosingMeanwhile(self.backend)
        try:
            self.measurement.close()
        except HookFailed as failed:
            if error is None:
                raise
            say(f"{self.command}: {failed}")
        finally:
            self.outputs.close()
        if error is None and self.outputs.lost:  # the samples are out of reach: no success to report
            raise UsageError(self.outputs.lost)
        return False
