"""The ``dbi`` backend: exact user-mode instruction counts from valgrind's exp-bbv tool
(``--instr-count-only=yes``), which counts a rep-prefixed instruction once, as hardware does, and also
reports the rep iterations and the fldcw instructions executed (../shared/notes/counter-artifacts.md,
section 2; docs/backends.md has the table of how DBI tools count rep).

It also gives cachegrind's simulated cache events (``--tool=cachegrind --cache-sim=yes``, analysis in
agent/cachegrind.py) and the cycle estimate iai-callgrind computes from them: a model, never a measurement.
One valgrind tool runs per run of the benchmark: exp-bbv when only its events are asked for, cachegrind when
only the cache events are, and both in turn (the benchmark runs twice, the run's exit and wall time are the
last's unless one failed) when both are: cachegrind's Ir is not exp-bbv's instruction count (it counts each
iteration of a rep-prefixed instruction, docs/backends.md), so ``instructions:u`` always comes from exp-bbv.

It is the reference of the audits and the instruction source on machines without a PMU, always labelled
``dbi``. Runs go through the same exec gate and controls as every backend; the gate execs valgrind, which
runs the benchmark as its guest, so valgrind's own start-up is in the wall time but never in the counts.
Valgrind computes x87 arithmetic in 64 bits: float code that compares for equality may take other paths.

Counts are every thread's, summed. Valgrind runs one guest thread at a time, but which one runs when is its
scheduler's choice, so a program whose threads spin or retry (a lock, a compare-and-swap loop) executes a
count that varies from run to run: ab's exact rule (analysis/ab.py) then sees a round that does not repeat
the first and hands over to the confidence sequence, as for any varying metric.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from perfctl.agent import cachegrind
from perfctl.agent.events import EventSpec
from perfctl.agent.machine import Inventory
from perfctl.agent.runner import Exit, RunControl, RunError, Runner
from perfctl.model import Reading

BACKEND = "dbi"
_BBV_SOURCE = "valgrind exp-bbv --instr-count-only=yes"
_TOTALS = {"instructions": re.compile(rb"Total instructions: (\d+)"),
           "rep-iterations": re.compile(rb"Total reps: (\d+)"),
           "fldcw-instructions": re.compile(rb"Total fldcw instructions: (\d+)")}
_NOT_RUN = b"cachegrind did not run: the benchmark failed under exp-bbv first"


def _reason(spec: EventSpec) -> str | None:
    if spec.name == "instructions":
        return None if spec.scope == "user" else "DBI sees user mode only: ask for instructions:u"
    if spec.kind == "dbi":
        return None
    return "the dbi backend counts only user instructions, rep iterations, fldcw instructions and cachegrind's " \
           "simulated cache events"


class DbiBackend:
    name = BACKEND
    names = (BACKEND,)

    def __init__(self, specs: list[EventSpec], inventory: Inventory):
        self._valgrind = shutil.which("valgrind")
        if self._valgrind is None:
            raise RunError("--backend dbi needs valgrind: apt-get install valgrind")
        self._specs = specs
        self._reasons = {spec.label: _reason(spec) for spec in specs}
        counted = [spec for spec in specs if self._reasons[spec.label] is None]
        self._cachegrind = any(spec.name in cachegrind.EVENTS for spec in counted)
        # exp-bbv runs also when nothing is counted: an unsupported-only run still runs the benchmark once
        self._bbv = not self._cachegrind or any(spec.name not in cachegrind.EVENTS for spec in counted)
        # An unlinked file (O_TMPFILE where the file system has it), mode 0600, that valgrind inherits as its
        # --log-fd: it writes there also as --user, and no other local user can open it to edit the totals
        # between the run and the read (a named 0666 file in /tmp could be). Cachegrind's summary goes to the
        # same log, so its out file is /dev/null: no named file anywhere.
        self._log = tempfile.TemporaryFile(prefix="perfctl-dbi-", suffix=".log")

    def support(self) -> dict[str, str | None]:
        return dict(self._reasons)

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        totals: dict[str, int] = {}
        logs: list[bytes] = []
        exit_ = None
        tools = [(flags, parse) for wanted, flags, parse in (
            (self._bbv, ["--tool=exp-bbv", "--instr-count-only=yes", "--bb-out-file=/dev/null"], _bbv_totals),
            (self._cachegrind, cachegrind.FLAGS, cachegrind.totals)) if wanted]
        for flags, parse in tools:
            if exit_ is not None and exit_.outcome != "ok":
                # a failed run stands: cachegrind would run a failing benchmark again
                logs.append(_NOT_RUN)
                break
            exit_, log = self._run(runner, argv, control, flags)
            logs.append(log)
            totals.update(parse(log))
        return exit_, [self._reading(spec, totals, logs[-1] if spec.name in cachegrind.EVENTS else logs[0])
                       for spec in self._specs]

    def _run(self, runner: Runner, argv: list[str], control: RunControl, flags: list[str]) -> tuple[Exit, bytes]:
        fd = self._log.fileno()
        os.ftruncate(fd, 0)  # each run's totals stand alone
        os.lseek(fd, 0, os.SEEK_SET)  # valgrind writes at the offset it shares with us
        # --vgdb=no: no gdbserver FIFOs in TMPDIR, which a killed valgrind (timeout, interrupt) would leave there
        target = [self._valgrind, *flags, "--vgdb=no", f"--log-fd={fd}", "--", *argv]
        with runner.started(argv, control, gate_target=target, pass_fds=(fd,)) as run:
            exit_ = run.release_and_wait()
        return exit_, os.pread(fd, os.fstat(fd).st_size, 0)

    def _reading(self, spec: EventSpec, totals: dict[str, int], log: bytes) -> Reading:
        source = cachegrind.SOURCE if spec.name in cachegrind.EVENTS else _BBV_SOURCE
        base = dict(event=spec.name, backend=BACKEND, scope=spec.scope, unit=spec.unit, source=source)
        reason = self._reasons[spec.label]
        if reason is not None:
            return Reading(**base, status="unsupported", reason=reason)
        if log == _NOT_RUN:
            return Reading(**base, status="error", reason=log.decode())
        if spec.name not in totals:
            last = [line for line in log.decode(errors="replace").splitlines() if line.strip()][-1:] or ["no output"]
            return Reading(**base, status="error", reason=f"valgrind printed no totals: {last[0][:300]}")
        return Reading(**base, status="ok", value=totals[spec.name])

    def close(self) -> None:
        self._log.close()


def _bbv_totals(log: bytes) -> dict[str, int]:
    """Each total summed over the threads: exp-bbv prints one "# Thread N" block of totals per thread that ran
    (the main thread's first), and a benchmark's count is all of its threads' work, as a process-wide counter's
    (perf stat counts every thread by default)."""
    return {name: sum(int(count) for count in found) for name, pattern in _TOTALS.items()
            if (found := pattern.findall(log))}
