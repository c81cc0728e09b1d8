"""The ``perf_event`` backend: perf_event_open(2) through ctypes, per task, inherit + enable_on_exec.

Per run: the benchmark is started blocked in the exec gate (agent/runner.py); one counter per event is
attached to the gate's pid with ``inherit`` (children are counted) and ``enable_on_exec`` (counting starts
at the benchmark's own exec, not in the gate); the gate is released; after the exit the counters are read
with ``read_format`` TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING so multiplexing is visible.

Tracepoints cost ~40 ms to open when no other counter holds them (the kernel registers the probe), so
the backend keeps one disabled counter per tracepoint open on itself for its whole lifetime
(../shared/notes/counter-artifacts.md, section 3).
"""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import struct
import threading
from dataclasses import dataclass

from perfctl.agent import tracefs
from perfctl.agent.events import TYPE_HARDWARE, TYPE_RAW, TYPE_SOFTWARE, TYPE_TRACEPOINT, EventSpec
from perfctl.agent.machine import Inventory
from perfctl.agent.runner import Exit, RunControl, Runner
from perfctl.model import Reading

BACKEND = "perf_event"

_NR_PERF_EVENT_OPEN = 298  # x86_64
_PERF_FLAG_FD_CLOEXEC = 1 << 3
_FORMAT_TIMES = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5
# bit positions in perf_event_attr's flag word (linux/perf_event.h)
_DISABLED, _INHERIT, _EXCLUDE_USER, _EXCLUDE_KERNEL, _EXCLUDE_HV, _ENABLE_ON_EXEC = 0, 1, 4, 5, 6, 12

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def make_attr(type_: int, config: int, scope: str, *, inherit: bool, enable_on_exec: bool) -> bytes:
    flags = 1 << _DISABLED
    if inherit:
        flags |= 1 << _INHERIT
    if enable_on_exec:
        flags |= 1 << _ENABLE_ON_EXEC
    if scope == "user":
        flags |= (1 << _EXCLUDE_KERNEL) | (1 << _EXCLUDE_HV)
    elif scope == "kernel":
        flags |= (1 << _EXCLUDE_USER) | (1 << _EXCLUDE_HV)
    head = struct.pack("=IIQQQQQ", type_, _ATTR_SIZE, config, 0, 0, _FORMAT_TIMES, flags)
    return head.ljust(_ATTR_SIZE, b"\0")


def perf_event_open(attr: bytes, pid: int, cpu: int = -1) -> int:
    """Open one counter; raises OSError with the kernel's errno."""
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_NR_PERF_EVENT_OPEN, buf, ctypes.c_int(pid), ctypes.c_int(cpu), ctypes.c_int(-1),
                       ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def read_counter(fd: int) -> tuple[int, int, int]:
    """(value, time_enabled, time_running) of a counter opened with _FORMAT_TIMES."""
    return struct.unpack("=QQQ", os.read(fd, 24))


def paranoid_level() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def explain_errno(err: int, spec: EventSpec) -> str:
    """Why the kernel refused a counter, in words a user can act on."""
    name = errno.errorcode.get(err, str(err))
    if err == errno.ENOENT and spec.kind in ("hardware", "raw", "store"):
        return f"no hardware PMU counts this event here ({name}); see `perfctl info` for why"
    if err in (errno.EACCES, errno.EPERM):
        return (f"not permitted ({name}) at perf_event_paranoid={paranoid_level()}; run as root or "
                "lower it with sysctl kernel.perf_event_paranoid")
    if err == errno.EOPNOTSUPP:
        return f"the PMU cannot count this event in this mode ({name})"
    if err == errno.EMFILE:
        return f"too many open files ({name}); raise `ulimit -n`"
    return f"perf_event_open failed: {os.strerror(err)} ({name})"


@dataclass(frozen=True)
class Opener:
    """How one spec is opened on this machine, or why it cannot be."""

    spec: EventSpec
    attr_type: int = 0
    config: int = 0
    source: str | None = None
    unsupported: str | None = None


def _store_encoding(cpu_vendor: str, family: int) -> tuple[int | None, str]:
    # Intel MEM_INST_RETIRED.ALL_STORES (event 0xD0, umask 0x82) exists from Sandy Bridge on; AMD has no
    # retired-store event that counts each store exactly once.
    if cpu_vendor == "GenuineIntel" and family == 6:
        return 0x82D0, "MEM_INST_RETIRED.ALL_STORES (r82d0)"
    return None, f"no exact retired-store event is known for {cpu_vendor} family {family}"


def resolve(spec: EventSpec, cpu_vendor: str, cpu_family: int) -> Opener:
    """Map a spec to perf_event_attr type/config on this machine (tracepoint ids come from tracefs)."""
    if spec.kind == "hardware":
        return Opener(spec, TYPE_HARDWARE, spec.config)
    if spec.kind == "software":
        return Opener(spec, TYPE_SOFTWARE, spec.config)
    if spec.kind == "raw":
        return Opener(spec, TYPE_RAW, spec.config)
    if spec.kind == "dbi":
        return Opener(spec, unsupported="counted only by the dbi backend (valgrind exp-bbv): --backend dbi")
    if spec.kind == "store":
        config, what = _store_encoding(cpu_vendor, cpu_family)
        if config is None:
            return Opener(spec, unsupported=what)
        return Opener(spec, TYPE_RAW, config, source=what)
    tracepoint, reason = tracefs.first_available(spec.tracepoints)
    if tracepoint is None:
        return Opener(spec, unsupported=reason)
    return Opener(spec, TYPE_TRACEPOINT, tracefs.tracepoint_id(tracepoint), source=tracepoint)


def reading_from_counts(opener: Opener, backend: str, value: int, enabled: int, running: int) -> Reading:
    """Turn a counter's raw triple into a Reading; multiplexed values keep the raw count and get a scaled one."""
    spec = opener.spec
    base = dict(event=spec.name, backend=backend, scope=spec.scope, unit=spec.unit, source=opener.source,
                value=value, time_enabled=enabled, time_running=running)
    if enabled == 0:
        return Reading(**base, status="error", reason="counter was never enabled (the benchmark did not exec)")
    if running == 0:
        return Reading(**base, status="error", reason="counter was never scheduled on the PMU (multiplexed out)")
    if running < enabled:
        return Reading(**base, status="multiplexed", scaled=value * enabled / running,
                       reason=f"counted {running / enabled:.1%} of the time; scaled value is an estimate")
    return Reading(**base, status="ok")


def unsupported_reading(opener: Opener, backend: str) -> Reading:
    spec = opener.spec
    return Reading(event=spec.name, backend=backend, scope=spec.scope, unit=spec.unit, source=opener.source,
                   status="unsupported", reason=opener.unsupported)


class PerfEventBackend:
    """Counts events per task with perf_event_open; see the module docstring for the protocol."""

    name = BACKEND
    names = (BACKEND,)

    def __init__(self, specs: list[EventSpec], inventory: Inventory):
        cpu = inventory.cpu
        self._openers: list[Opener] = []
        self._keepers: list[int] = []
        self._closer = _Closer()
        for spec in specs:
            opener = resolve(spec, cpu.vendor, cpu.family)
            if opener.unsupported is None:
                opener = self._probe(opener)
            self._openers.append(opener)

    def _probe(self, opener: Opener) -> Opener:
        """Open the counter once on ourselves: an unsupported event is known before the first run.

        A tracepoint's probe counter is kept open, disabled, for the backend's lifetime so the kernel keeps
        the tracepoint registered and per-run opens stay cheap.
        """
        attr = make_attr(opener.attr_type, opener.config, opener.spec.scope, inherit=False, enable_on_exec=False)
        try:
            fd = perf_event_open(attr, 0)
        except OSError as err:
            return Opener(opener.spec, opener.attr_type, opener.config, opener.source,
                          unsupported=explain_errno(err.errno, opener.spec))
        if opener.attr_type == TYPE_TRACEPOINT:
            self._keepers.append(fd)
        else:
            os.close(fd)
        return opener

    @property
    def openers(self) -> list[Opener]:
        """Each requested event as resolved and probed on this machine, in request order."""
        return list(self._openers)

    def support(self) -> dict[str, str | None]:
        """Label -> None when countable here, else the reason it is not."""
        return {o.spec.label: o.unsupported for o in self._openers}

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        gated = runner.start(argv, control)
        fds: list[tuple[Opener, int | None, str | None]] = []
        try:
            for opener in self._openers:
                if opener.unsupported is not None:
                    fds.append((opener, None, None))
                    continue
                attr = make_attr(opener.attr_type, opener.config, opener.spec.scope, inherit=True, enable_on_exec=True)
                try:
                    fds.append((opener, perf_event_open(attr, gated.pid), None))
                except OSError as err:
                    fds.append((opener, None, explain_errno(err.errno, opener.spec)))
            self._closer.wait_idle()  # nothing of perfctl's runs beside the benchmark
            exit_ = gated.release_and_wait()
            return exit_, [self._read(opener, fd, failure) for opener, fd, failure in fds]
        finally:
            gated.kill()
            self._closer.close_later([fd for _, fd, _ in fds if fd is not None])

    def _read(self, opener: Opener, fd: int | None, failure: str | None) -> Reading:
        if fd is None:
            if failure is None:
                return unsupported_reading(opener, BACKEND)
            spec = opener.spec
            return Reading(event=spec.name, backend=BACKEND, scope=spec.scope, unit=spec.unit, status="error",
                           reason=failure)
        return reading_from_counts(opener, BACKEND, *read_counter(fd))

    def close(self) -> None:
        self._closer.finish()
        for fd in self._keepers:
            os.close(fd)
        self._keepers.clear()


class _Closer:
    """Closes finished counters on a background thread.

    Releasing an inherited perf event costs ~25 µs in the kernel, ~0.2 ms for a run's set; os.close drops
    the GIL, so the next run's spawn and counter opens overlap the last run's teardown. The next benchmark
    is released only once the teardown is done (wait_idle), so it never shares the machine with it.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="perfctl-counter-closer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (fds := self._queue.get()) is not None:
            for fd in fds:
                os.close(fd)
            self._queue.task_done()

    def wait_idle(self) -> None:
        self._queue.join()

    def close_later(self, fds: list[int]) -> None:
        self._queue.put(fds)

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
