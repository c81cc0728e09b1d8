"""What every perfctl command shares for its output: exit codes, the usage error, one-line messages on
stderr and the console tables are printed on. cli, cache_cli and fleet_cli import it from here, so none of
them needs another."""

from __future__ import annotations

import os
import sys

from rich.console import Console

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _say(line: str) -> None:
    """One unwrapped line on stderr: messages a user (or a script) must be able to grep. They quote names
    from files and servers, so control characters are shown, never sent to the terminal."""
    from perfctl.text import visible

    print(visible(line.replace("\n", " ")), file=sys.stderr, flush=True)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """A reader that stopped early (`| head`) loses the rest of the table, nothing else: rich's default
        would exit 1, which here means "a run failed", so the exit code keeps describing the measurement."""
        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), (sys.stderr if self.stderr else sys.stdout).fileno())


def _console(stderr: bool = False) -> Console:
    """Wide enough for the tables when output goes to a file or pipe (rich would assume 80 columns)."""
    stream = sys.stderr if stderr else sys.stdout
    return _Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 150)
