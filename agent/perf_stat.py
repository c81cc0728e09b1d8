"""The ``perf-stat`` backend: the same measurement through ``perf stat -x,`` (Debian linux-perf).

A cross-check of the perf_event backend and a fallback. The exec gate execs ``perf stat -x, -o FILE -e ...
-- CMD``, so ASLR, the environment, pinning and the timeout apply exactly as for perf_event; perf itself
forks the benchmark and counts from its exec. perf's start-up is inside the wall time (it is not inside the
counts). perf stat 6.1 exits 0 when the benchmark dies of a signal and reports it only through
psignal(3) on stderr ("CMD: Segmentation fault"); that line is mapped back to the signal number.

The same tracepoints are held registered as in the perf_event backend, so perf's per-run opens stay cheap.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import tempfile

from perfctl.agent.events import EventSpec
from perfctl.agent.machine import Inventory
from perfctl.agent.perf_event import Opener, PerfEventBackend, reading_from_counts
from perfctl.agent.runner import Exit, RunControl, RunError, Runner
from perfctl.model import SCOPE_SUFFIX, Reading

BACKEND = "perf-stat"
_MSEC_UNITS = {"msec": 1_000_000}
_SIGNAL_BY_TEXT = {signal.strsignal(s): int(s) for s in signal.Signals if signal.strsignal(s)}


def perf_event_name(opener: Opener) -> str | None:
    """How perf(1) spells the event; None when it cannot be asked for."""
    spec = opener.spec
    if opener.unsupported is not None and spec.kind in ("store", "tracepoint", "dbi"):
        return None
    if spec.kind == "tracepoint":
        return opener.source
    suffix = SCOPE_SUFFIX[spec.scope]
    if spec.kind in ("raw", "store"):
        return f"r{opener.config:x}{suffix}"
    return spec.name + suffix


def parse_csv(text: str) -> dict[str, tuple[str, str, str, str]]:
    """perf stat -x, lines -> {event: (value, unit, run time ns, percent running)}."""
    rows = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 5:
            continue
        rows[fields[2]] = (fields[0], fields[1], fields[3], fields[4])
    return rows


class PerfStatBackend:
    name = BACKEND
    names = (BACKEND,)

    def __init__(self, specs: list[EventSpec], inventory: Inventory):
        self._perf = shutil.which("perf")
        if self._perf is None:
            raise RunError("--backend perf-stat needs perf(1): apt-get install linux-perf")
        # The kernel-side probe gives the reasons perf(1) does not print, and keeps tracepoints registered.
        self._probe = PerfEventBackend(specs, inventory)
        self._openers = self._probe.openers
        self._names = [perf_event_name(o) for o in self._openers]
        fd, self._output = tempfile.mkstemp(prefix="perfctl-perf-stat-", suffix=".csv")
        os.close(fd)

    def support(self) -> dict[str, str | None]:
        return self._probe.support()

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        if control.user is not None:
            raise RunError("--user is not available with --backend perf-stat: perf(1) would have to run as the "
                           "user and could not open the tracepoints; use the perf_event backend")
        events = [arg for name in self._names if name for arg in ("-e", name)]
        target = [self._perf, "stat", "-x,", "--no-big-num", "-o", self._output, *events, "--", *argv]
        with runner.started(argv, control, gate_target=target) as run:
            exit_ = run.release_and_wait()
        exit_ = self._signal_from_psignal(exit_, argv[0])
        with open(self._output) as f:
            rows = parse_csv(f.read())
        return exit_, [self._reading(opener, name, rows) for opener, name in zip(self._openers, self._names)]

    @staticmethod
    def _signal_from_psignal(exit_: Exit, argv0: str) -> Exit:
        if exit_.timed_out or exit_.exit_status != 0 or not exit_.stderr_tail:
            return exit_
        prefix = f"{argv0}: "
        if exit_.stderr_tail.startswith(prefix):
            number = _SIGNAL_BY_TEXT.get(exit_.stderr_tail[len(prefix):])
            if number is not None:
                return dataclasses.replace(exit_, exit_status=None, signal=number)
        return exit_

    def _reading(self, opener: Opener, name: str | None, rows: dict) -> Reading:
        spec = opener.spec
        base = dict(event=spec.name, backend=BACKEND, scope=spec.scope, unit=spec.unit, source=opener.source)
        row = rows.get(name) if name else None
        if row is None:
            reason = opener.unsupported or "perf stat printed no line for this event"
            status = "unsupported" if opener.unsupported else "error"
            return Reading(**base, status=status, reason=reason)
        value, unit, run_time, percent = row
        if value.startswith("<not supported>"):
            return Reading(**base, status="unsupported",
                           reason=f"perf stat: <not supported> ({opener.unsupported or 'no reason given'})")
        if value.startswith("<not counted>"):
            return Reading(**base, status="error", reason="perf stat: <not counted>")
        count = round(float(value) * _MSEC_UNITS.get(unit, 1))
        running = int(float(run_time)) if run_time else 0
        share = float(percent) / 100 if percent else 1.0
        enabled = round(running / share) if share > 0 else running
        return reading_from_counts(opener, BACKEND, count, enabled, running)

    def close(self) -> None:
        self._probe.close()
        try:
            os.unlink(self._output)
        except OSError:
            pass
