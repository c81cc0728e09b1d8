"""The commands run around a benchmark's runs, hyperfine's options: ``--prepare`` before every run (dropping
caches), ``--setup`` once per command before its first run, ``--cleanup`` once per command after its last
(docs/stat.md, "Set-up around runs").

For stat and ab each runs through ``/bin/sh -c`` as perfctl's own user, in the benchmark's working directory.
In a fleet job (agent/daemon.py) a hook is never given to a shell: it is split into words (perfctl/model.py
job_hook_words) and its program passes the agent's allowlist as the job's commands do, then runs as the job's
user, in its clean environment and working directory, within the job's --timeout (docs/operations.md,
"Jobs"). Either way it runs outside the counted interval: the counters of a run open on its gate, which
starts after its prepare has ended. Their runs are not samples. A hook that does not exit 0 raises
HookFailed; the measurement stops there, keeping every sample already recorded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from perfctl.model import HOOKS
from perfctl.text import visible

HOOK_SHELL = "/bin/sh"
# The process groups of the hooks running now: a stopped agent kills them (kill_hooks), as it kills its run.
# The lock and the flag close the window between a hook's start and its entry here: a hook started after a
# stop is killed at once, not left running past it.
live_hooks: set[int] = set()
_live_lock = threading.Lock()
_stopped = False
SETPRIV = "/usr/bin/setpriv"  # util-linux, essential on Debian: a job's hook drops to its user (Hooks._as_job)


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
    # A fleet job's hooks: each hook's (real executable, words), its program allowlisted by the agent; they run
    # without a shell under ``control`` (its user, environment and timeout). None: /bin/sh -c as perfctl's user.
    programs: Mapping[str, tuple[str, tuple[str, ...]]] | None = None
    control: object | None = None  # agent/runner.RunControl, with programs

    @classmethod
    def of(cls, commands: int, cwd: str, show_output: bool, *, programs=None, control=None,
           **given: list[str] | None) -> Hooks | None:
        """The hooks of ``commands`` commands from the options (``prepare=``, ``setup=``, ``cleanup=``: the
        commands given, in order): one given applies to every command, as many as commands one each, as
        hyperfine takes them. None when none is given; ValueError naming the option when the count fits
        neither. ``programs`` and ``control``: a fleet job's (the fields' comments)."""
        per_command = {}
        for name in HOOKS:
            values = given.get(name) or []
            if len(values) not in (0, 1, commands):
                raise ValueError(f"--{name} given {len(values)} times: give it once (for every command) or "
                                 f"once per command ({commands})")
            per_command[name] = tuple(values) * commands if len(values) == 1 else tuple(values) or (None,) * commands
        if not any(any(hooks) for hooks in per_command.values()):
            return None
        return cls(**per_command, cwd=cwd, show_output=show_output, programs=programs, control=control)

    def run(self, hook: str, which: int) -> None:
        """Run command ``which``'s ``hook`` ("prepare", "setup", "cleanup"), if it has one; HookFailed unless
        it exits 0."""
        command = getattr(self, hook)[which]
        if command is None:
            return
        output = sys.stderr if self.show_output else subprocess.DEVNULL
        if self.programs is None:
            executable, argv, how = HOOK_SHELL, [HOOK_SHELL, "-c", command], {}
        else:
            executable, argv = self._as_job(*self.programs[command])
            how = {"env": dict(self.control.env)}
        try:
            # a session of its own: a stop signal that ends perfctl while the hook runs kills the hook's whole
            # group (a pipeline's every process), not only the shell
            process = subprocess.Popen(argv, executable=executable, stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=output, cwd=self.cwd, start_new_session=True, **how)
        except OSError as err:
            raise HookFailed(f"--{hook} could not start ({err.strerror}): {visible(command)}") from None
        timeout = getattr(self.control, "timeout_s", None)
        with _live_lock:
            live_hooks.add(process.pid)
            if _stopped:
                _killpg(process.pid)
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill(process)
            raise HookFailed(f"--{hook} timed out after {timeout:g} s (the job's --timeout): "
                             f"{visible(command)}") from None
        except BaseException:
            self._kill(process)
            raise
        finally:
            live_hooks.discard(process.pid)
        if returncode != 0:
            status = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
            raise HookFailed(f"--{hook} failed ({status}): {visible(command)}")

    def _as_job(self, executable: str, words: tuple[str, ...]) -> tuple[str, list[str]]:
        """(executable, argv) that run a fleet job's hook as its runs are run: as the job's user. Not Popen's
        user=: a change of user makes CPython fork rather than vfork, and in the agent a forked child runs
        gRPC's fork handlers, which crash it (SIGSEGV in its event engine) before its exec; setpriv(1) changes
        user after a vfork, as the static gate does for the runs (agent/run/spawn.py)."""
        if self.control.user_ids is None:
            return executable, list(words)
        uid, gid, groups = self.control.user_ids
        return SETPRIV, [SETPRIV, f"--reuid={uid}", f"--regid={gid}",
                         f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups", "--",
                         executable, *words[1:]]

    @staticmethod
    def _kill(process: subprocess.Popen) -> None:
        _killpg(process.pid)
        process.wait()


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def kill_hooks() -> None:
    """Kill every hook running now with its process group; safe from another thread (how a stopped agent ends
    a job's hook as it ends its run: the hook then fails, and the agent, stopping, resumes the job later, its
    setup again included). A hook that starts after it is killed at once: a stop is never held up by a
    --cleanup, which is bounded only by the job's --timeout, past the agent's stop limit."""
    global _stopped
    with _live_lock:
        _stopped = True  # a hook that starts from now on (a cleanup during the stop) is killed as it starts
        for pid in live_hooks:
            _killpg(pid)
