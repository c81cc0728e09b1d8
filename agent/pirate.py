"""Cache Pirating on this machine (thesis Paper III): the native Pirate (pirate.c, built like the exec gate)
pinned to one CPU holds P bytes of the shared cache while the Target runs pinned to another.

Two ways to sweep the sizes:
- ``sweep`` (any machine): the Target runs whole, once per size per round, sizes cycled round by round (ABC
  ABC, not AAA BBB, so slow drifts hit every size alike); before each run the Pirate walks its new size twice
  with the Target not yet started (its warm-up, III.3.3). The Target's metrics are per-run counters: wall
  time and task-clock everywhere, instructions and cycles where a PMU counts them.
- ``dynamic_sweep`` (machines with a PMU): one Target run, the Pirate's size cycled every interval, the
  Target's instructions and cycles read per interval (CPI per size), with warm-up pauses: when the Pirate
  grows, the Target is stopped (SIGSTOP to its process group) until the Pirate has walked its new size;
  when the Pirate shrinks, the Pirate is stopped while the Target runs one unmeasured interval.
The Pirate's fetch ratio (LLC misses per line it touched) is read from a counter on the Pirate's own task
where the machine has one (``cache-misses``); elsewhere each point is marked unverified and the output says
why (analysis/pirate.py keeps the rule).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass

from perfctl.agent.build import BuildError, build_static
from perfctl.agent.events import parse_events
from perfctl.agent.machine import Inventory
from perfctl.agent.perf_event import explain_errno, make_attr, perf_event_open, read_counter, resolve
from perfctl.agent.runner import RunError
from perfctl.analysis.pirate import PiratePoint, check_sizes

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pirate.c")
CFLAGS = ("-O2", "-static")
_CONTROL = struct.Struct("=4Q")  # size, passes, lines, stop (pirate.c)
PERF_EVENT_IOC_ENABLE = 0x2400


def llc_bytes() -> tuple[int | None, str]:
    """The last-level cache's size from sysfs, and where it came from (or why it is unknown)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = None
    try:
        for entry in sorted(e for e in os.listdir(base) if e.startswith("index")):
            with open(os.path.join(base, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
            size = int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text)
            if kind in ("Unified", "Data") and (best is None or level > best[0]):
                best = (level, size, entry)
    except (OSError, ValueError, KeyError) as err:
        return None, f"cannot read {base}: {err}"
    if best is None:
        return None, f"no cache described in {base}"
    return best[1], f"L{best[0]} from {base}/{best[2]}"


class Pirate:
    """The running Pirate: pinned, sized through its control file, stopped on close."""

    def __init__(self, max_bytes: int, cpu: int) -> None:
        try:
            binary, _ = build_static(SOURCE, CFLAGS, "pirate")
        except BuildError as err:
            raise RunError(f"cannot build the Pirate: {err}") from None
        fd, self._path = tempfile.mkstemp(prefix="perfctl-pirate-")
        try:
            os.write(fd, bytes(_CONTROL.size))
            self._map = mmap.mmap(fd, _CONTROL.size)
            self.process = subprocess.Popen([binary, str(max_bytes), self._path], stdin=subprocess.DEVNULL)
        except BaseException:  # an error or an interrupt before close() could be called: leave no file
            os.unlink(self._path)
            raise
        finally:
            os.close(fd)
        self.max_bytes = max_bytes
        try:
            os.sched_setaffinity(self.process.pid, {cpu})
        except BaseException:
            self.close()
            raise

    def state(self) -> tuple[int, int, int]:
        size, passes, lines, _ = _CONTROL.unpack(self._map[:_CONTROL.size])
        return size, passes, lines

    def resize(self, size: int, warm_passes: int = 2, timeout_s: float = 30.0) -> None:
        """Set the working set and wait until it has been walked ``warm_passes`` times at that size."""
        self._map[0:8] = struct.pack("=Q", min(size, self.max_bytes))
        _, start, _ = self.state()
        deadline = time.monotonic() + timeout_s
        while self.state()[1] < start + warm_passes + 1:  # +1: the pass in progress may be of the old size
            if self.process.poll() is not None:
                raise RunError(f"the Pirate exited with status {self.process.returncode}")
            if time.monotonic() > deadline:
                raise RunError(f"the Pirate did not walk {size} bytes {warm_passes} times in {timeout_s:.0f} s")
            time.sleep(0.0005)

    def close(self) -> None:
        """Ask the Pirate to stop; kill it if it has not within 5 s, or at once on an interrupt (which then
        goes on); the control file goes in every case."""
        try:
            self._map[24:32] = struct.pack("=Q", 1)
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        except KeyboardInterrupt:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self._map.close()
            os.unlink(self._path)


class FetchCounter:
    """LLC misses of the Pirate's task (perf_event ``cache-misses``), or why none can be counted."""

    def __init__(self, pid: int, inventory: Inventory) -> None:
        spec = parse_events(["cache-misses:u"])[0]
        opener = resolve(spec, inventory.cpu.vendor, inventory.cpu.family)
        self.fd, self.reason = None, None
        try:
            self.fd = perf_event_open(make_attr(opener.attr_type, opener.config, "user", inherit=False,
                                                enable_on_exec=False), pid)
        except OSError as err:
            self.reason = explain_errno(err.errno, spec)
            return
        fcntl.ioctl(self.fd, PERF_EVENT_IOC_ENABLE)

    def read(self) -> int | None:
        return None if self.fd is None else read_counter(self.fd)[0]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


@dataclass(frozen=True)
class SweepResult:
    points: list[PiratePoint]
    metric: str
    unverified_reason: str | None  # why the Pirate's fetch ratio could not be read, when it could not
    llc_source: str


def sweep(measure_target, sizes: list[int], cache_bytes: int, llc_source: str, rounds: int, pirate_cpu: int,
          inventory: Inventory, metric: str) -> SweepResult:
    """Static sweep: ``measure_target()`` runs the Target once and returns the metric's value (None for a
    failed run). Sizes are cycled round by round; the Pirate warms each new size before the Target starts."""
    check_sizes(sizes, cache_bytes)
    points = {size: PiratePoint(size, cache_bytes) for size in sizes}
    pirate = Pirate(max(max(sizes), 4096), pirate_cpu)
    counter = None
    try:
        counter = FetchCounter(pirate.process.pid, inventory)
        for _ in range(rounds):
            for size in sizes:
                pirate.resize(size)
                misses_before, (_, _, lines_before) = counter.read(), pirate.state()
                value = measure_target()
                misses_after, (_, _, lines_after) = counter.read(), pirate.state()
                if value is None:
                    continue
                touched = lines_after - lines_before
                fetch = None if misses_before is None or touched <= 0 else (misses_after - misses_before) / touched
                points[size].values.append(value)
                points[size].pirate_fetch_ratios.append(fetch)
    finally:
        _close(counter, pirate)
    return SweepResult(list(points.values()), metric, counter.reason, llc_source)


def dynamic_sweep(start_target, sizes: list[int], cache_bytes: int, llc_source: str, pirate_cpu: int,
                  inventory: Inventory, interval_s: float = 0.05) -> SweepResult:
    """Dynamic sweep of one Target run (PMU needed): ``start_target()`` returns (pid, read_counts, wait)
    where read_counts() gives the Target's (instructions, cycles) so far and wait() reaps it (None while it
    still runs). CPI per interval is credited to the size the Pirate held during it."""
    check_sizes(sizes, cache_bytes)
    points = {size: PiratePoint(size, cache_bytes) for size in sizes}
    pirate = Pirate(max(max(sizes), 4096), pirate_cpu)
    counter = None
    try:
        counter = FetchCounter(pirate.process.pid, inventory)
        pid, read_counts, poll = start_target()
        current = index = 0
        while poll() is None:
            size = sizes[index % len(sizes)]
            if size > current:  # the Pirate grows: the Target waits while it warms its new lines
                _signal_group(pid, signal.SIGSTOP)
                pirate.resize(size)
                _signal_group(pid, signal.SIGCONT)
            elif size < current:  # the Target's share grows: it warms up alone, unmeasured
                pirate.resize(size, warm_passes=0)
                os.kill(pirate.process.pid, signal.SIGSTOP)
                time.sleep(interval_s / 2)
                os.kill(pirate.process.pid, signal.SIGCONT)
            current = size
            instructions0, cycles0 = read_counts()
            misses0, (_, _, lines0) = counter.read(), pirate.state()
            time.sleep(interval_s)
            instructions1, cycles1 = read_counts()
            misses1, (_, _, lines1) = counter.read(), pirate.state()
            if instructions1 > instructions0:
                points[size].values.append((cycles1 - cycles0) / (instructions1 - instructions0))
                touched = lines1 - lines0
                points[size].pirate_fetch_ratios.append(
                    None if misses0 is None or touched <= 0 else (misses1 - misses0) / touched)
            index += 1
    finally:
        _close(counter, pirate)
    return SweepResult(list(points.values()), "CPI", counter.reason, llc_source)


def _close(counter: FetchCounter | None, pirate: Pirate) -> None:
    """Cleanup of both sweeps, also on KeyboardInterrupt (perfctl's signal policy raises one): the Pirate
    is stopped and its control file removed even if closing the counter fails."""
    try:
        if counter is not None:
            counter.close()
    finally:
        pirate.close()


def _signal_group(pid: int, sig: int) -> None:
    """The benchmark leads its own session and process group (agent/run/reaping.py): stop or continue all of it."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def kill_group(pid: int) -> None:
    _signal_group(pid, signal.SIGCONT)
    _signal_group(pid, signal.SIGKILL)


def measure_command(resolved, bench, control, sizes: list[int], cache_bytes: int, llc_source: str, rounds: int,
                    pirate_cpu: int, inventory: Inventory) -> SweepResult:
    """The static sweep of a command: ``rounds`` runs of the Target per size, each counted by perf_event
    (task-clock everywhere; instructions and cycles where a PMU counts them, and then cycles is the metric)."""
    from perfctl.agent import session
    from perfctl.agent.runner import Runner

    pmu = inventory.pmu.present
    events = ["task-clock"] + (["instructions:u", "cycles:u"] if pmu else [])
    metric = "cycles:u" if pmu else "task-clock"
    backend = session.make_backend("perf_event", parse_events(events), inventory)
    runner = Runner()
    context = session.RunContext.of(backend, runner, control, inventory.machine_id)
    target = session.Command(resolved, bench)

    def measure_target():
        sample = session.measure_once(context, target, run_index=0, warmup=False, sample_uuid="pirate")
        reading = sample.reading(metric)
        return reading.value if sample.outcome == "ok" and reading and reading.status == "ok" else None

    try:
        return sweep(measure_target, sizes, cache_bytes, llc_source, rounds, pirate_cpu, inventory, metric)
    finally:
        backend.close()
        runner.close()


def measure_command_dynamic(resolved, control, sizes: list[int], cache_bytes: int, llc_source: str,
                            pirate_cpu: int, inventory: Inventory) -> SweepResult:
    """The dynamic sweep of a command: one Target run with live instruction and cycle counters (PMU
    machines only), reaped by a thread while ``dynamic_sweep`` cycles the Pirate's size."""
    import threading

    from perfctl.agent.runner import Runner

    runner = Runner()
    fds = []
    outcome: dict = {}
    try:
        with runner.started(resolved, control) as gated:  # killed on the way out unless it ran to its end
            waiter = threading.Thread(target=lambda: outcome.setdefault("exit", gated.release_and_wait()),
                                      daemon=True)
            try:
                for spec in parse_events(["instructions:u", "cycles:u"]):
                    opener = resolve(spec, inventory.cpu.vendor, inventory.cpu.family)
                    fds.append(perf_event_open(make_attr(opener.attr_type, opener.config, "user", inherit=True,
                                                         enable_on_exec=True), gated.pid))

                def start_target():
                    waiter.start()
                    return gated.pid, lambda: tuple(read_counter(fd)[0] for fd in fds), lambda: outcome.get("exit")

                return dynamic_sweep(start_target, sizes, cache_bytes, llc_source, pirate_cpu, inventory)
            finally:
                if waiter.is_alive():  # an error mid-run: end the Target; the waiter reaps it
                    kill_group(gated.pid)
                    waiter.join()
    finally:
        for fd in fds:
            os.close(fd)
        runner.close()
