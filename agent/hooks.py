"""The commands run around a benchmark's runs, hyperfine's options: ``--prepare`` before every run (dropping
caches), ``--setup`` once per command before its first run, ``--cleanup`` once per command after its last
(docs/stat.md, "Set-up around runs").

Each runs through ``/bin/sh -c`` as perfctl's own user, in the benchmark's working directory, outside the
counted interval: the counters of a run open on its gate, which starts after its prepare has ended. Their
runs are not samples. A hook that does not exit 0 raises HookFailed; the measurement stops there, keeping
every sample already recorded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

HOOK_SHELL = "/bin/sh"


class HookFailed(Exception):
    """A --prepare, --setup or --cleanup command did not exit 0; the message names the hook, its exit status
    (or signal) and the command."""


@dataclass(frozen=True)
class Hooks:
    """The hooks of each command measured (index as Measurement.add gives it): ``prepare``, ``setup`` and
    ``cleanup`` hold one command (or None) per command. ``show_output``: their output goes to perfctl's stderr
    (stdout may carry the samples), else nowhere."""

    prepare: tuple[str | None, ...]
    setup: tuple[str | None, ...]
    cleanup: tuple[str | None, ...]
    cwd: str
    show_output: bool = False

    @classmethod
    def of(cls, commands: int, cwd: str, show_output: bool, **given: list[str] | None) -> Hooks | None:
        """The hooks of ``commands`` commands from the options (``prepare=``, ``setup=``, ``cleanup=``: the
        commands given, in order): one given applies to every command, as many as commands one each, as
        hyperfine takes them. None when none is given; ValueError naming the option when the count fits
        neither."""
        per_command = {}
        for name in ("prepare", "setup", "cleanup"):
            values = given.get(name) or []
            if len(values) not in (0, 1, commands):
                raise ValueError(f"--{name} given {len(values)} times: give it once (for every command) or "
                                 f"once per command ({commands})")
            per_command[name] = tuple(values) * commands if len(values) == 1 else tuple(values) or (None,) * commands
        if not any(any(hooks) for hooks in per_command.values()):
            return None
        return cls(**per_command, cwd=cwd, show_output=show_output)

    def run(self, hook: str, which: int) -> None:
        """Run command ``which``'s ``hook`` ("prepare", "setup", "cleanup"), if it has one; HookFailed unless
        it exits 0."""
        command = getattr(self, hook)[which]
        if command is None:
            return
        output = sys.stderr if self.show_output else subprocess.DEVNULL
        try:
            # a session of its own: a stop signal that ends perfctl while the hook runs kills the hook's whole
            # group (a pipeline's every process), not only the shell
            process = subprocess.Popen([HOOK_SHELL, "-c", command], stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=output, cwd=self.cwd, start_new_session=True)
        except OSError as err:
            raise HookFailed(f"--{hook} could not start ({err.strerror}): {command}") from None
        try:
            returncode = process.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        if returncode != 0:
            status = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
            raise HookFailed(f"--{hook} failed ({status}): {command}")
