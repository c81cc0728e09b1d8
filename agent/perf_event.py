"""The ``perf_event`` backend: perf_event_open(2) through ctypes, counters scoped to the runs' cgroup and
opened once (cgroup counting), or per task with inherit + enable_on_exec, opened for each run (per-run
counting).

Cgroup counting, used wherever the runner has a cgroup of its own for the runs and the static gate
(Runner.counting_cgroup) and the kernel opens cgroup counters (root, a cgroup v2 hierarchy, where the
perf_event controller always is): each event is opened once per CPU with PERF_FLAG_PID_CGROUP on the
runner's cgroup, software events and tracepoints as one group per CPU read in one read(2)
(PERF_FORMAT_GROUP), hardware and raw events alone (so that one PMU event multiplexed out never takes the
others with it). Every run reads them before and after; the difference is the run. The cgroup is empty
between runs: the gate blocks outside it and moves itself in as its last step before execve (gate.c -J), so
the count starts there rather than midway through the exec. What that adds: the end of the gate's write
to cgroup.procs and the first half of the execve (the kernel enables enable_on_exec counters in
begin_new_exec, after the new program is read and the old address space dropped), and at the other end
the exit after perf_event_exit_task (where a task counter stops) up to the process's last switch off the
CPU: ~0.1 ms of task-clock a run here (measured in docs/stat.md, bounded by tests/test_perf_event.py), and
whatever interrupt or preemption lands in that window. Page faults are those of the per-task counters.
The last switch off the CPU is a context switch a task counter never sees, one per exiting task. So each
CPU also has a dummy software event whose ring buffer receives the cgroup's side-band records
(PERF_RECORD_EXIT per exiting task, PERF_RECORD_COMM with COMM_EXEC per exec; _Sideband): the exits are
subtracted from context-switches, and a run without an exec is "never enabled (the benchmark did not
exec)", as a task counter's enable_on_exec says. Children are counted because they are born in the cgroup,
as inherit counts them. One set of counters serves every command measured with the same runner (`perfctl
ab` alternates commands): no cost per command. Opening a set costs a few ms, once per backend and runner; a
run costs one group read per CPU before and one after, and the side-band headers, instead of opening and
closing a counter per event (~80 and ~45 µs each on these VMs). See docs/stat.md, "Per-run cost".

Per-run counting (no cgroup of its own for the runs: not root, no cgroup v2, a kernel without cgroup.kill;
the sh gate; cgroup counters refused): the benchmark is started blocked in the exec gate
(agent/run/reaping.py); one counter per event is attached to the gate's pid with ``inherit`` (children are
counted) and ``enable_on_exec`` (counting starts at the benchmark's own exec, not in the gate); the gate
is released; after the exit the counters are read with ``read_format`` TOTAL_TIME_ENABLED |
TOTAL_TIME_RUNNING so multiplexing is visible. ``PerfEventBackend.counting`` says which is in use and why.

Tracepoints cost ~40 ms to open when no other counter holds them (the kernel registers the probe), so
the backend keeps one disabled counter per tracepoint open on itself for its whole lifetime
(../shared/notes/counter-artifacts.md, section 3).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import mmap
import os
import queue
import struct
import threading
from dataclasses import dataclass

from perfctl.agent import tracefs
from perfctl.agent.events import TYPE_HARDWARE, TYPE_RAW, TYPE_SOFTWARE, TYPE_TRACEPOINT, EventSpec
from perfctl.agent.machine import Inventory
from perfctl.agent.runner import Exit, RunControl, Runner
from perfctl.model import Reading, counted_reading, ok_fields
from perfctl.supervise import supervised_thread

BACKEND = "perf_event"

_NR_PERF_EVENT_OPEN = 298  # x86_64
_PERF_FLAG_FD_CLOEXEC = 1 << 3
_FORMAT_TIMES = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
_FORMAT_GROUP = 8  # PERF_FORMAT_GROUP
_PERF_FLAG_PID_CGROUP = 1 << 2
# Cgroup counting's side-band records (struct perf_event_mmap_page, struct perf_event_header): a dummy
# software event with attr.task (PERF_RECORD_FORK/EXIT), attr.comm and attr.comm_exec (PERF_RECORD_COMM,
# misc COMM_EXEC at an exec); see _Sideband.
_SW_DUMMY = 9  # PERF_COUNT_SW_DUMMY
_COMM, _TASK, _COMM_EXEC = 9, 13, 24  # bit positions in perf_event_attr's flag word
_RECORD_COMM, _RECORD_EXIT = 3, 4
_MISC_COMM_EXEC = 1 << 13
_PAGE = mmap.PAGESIZE
# data pages per CPU (a power of two): a record is 32-40 bytes, a process makes three (fork, exec, exit),
# so a run can start ~500 processes per CPU before its exits are lost (and said to be)
SIDEBAND_PAGES = 16
_MMAP_DATA_HEAD, _MMAP_DATA_OFFSET = 1024, 1040
_U64, _MMAP_DATA, _RECORD_HEADER = struct.Struct("=Q"), struct.Struct("=QQ"), struct.Struct("=IHH")
_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5
_SW_CONTEXT_SWITCHES = 3  # PERF_COUNT_SW_CONTEXT_SWITCHES
# bit positions in perf_event_attr's flag word (linux/perf_event.h)
_DISABLED, _INHERIT, _EXCLUDE_USER, _EXCLUDE_KERNEL, _EXCLUDE_HV, _ENABLE_ON_EXEC = 0, 1, 4, 5, 6, 12

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def make_attr(type_: int, config: int, scope: str, *, inherit: bool, enable_on_exec: bool,
              disabled: bool = True, read_format: int = _FORMAT_TIMES) -> bytes:
    flags = (1 << _DISABLED) if disabled else 0
    if inherit:
        flags |= 1 << _INHERIT
    if enable_on_exec:
        flags |= 1 << _ENABLE_ON_EXEC
    if scope == "user":
        flags |= (1 << _EXCLUDE_KERNEL) | (1 << _EXCLUDE_HV)
    elif scope == "kernel":
        flags |= (1 << _EXCLUDE_USER) | (1 << _EXCLUDE_HV)
    head = struct.pack("=IIQQQQQ", type_, _ATTR_SIZE, config, 0, 0, read_format, flags)
    return head.ljust(_ATTR_SIZE, b"\0")


_SIDEBAND_ATTR = struct.pack("=IIQQQQQ", TYPE_SOFTWARE, _ATTR_SIZE, _SW_DUMMY, 0, 0, 0,
                             (1 << _COMM) | (1 << _TASK) | (1 << _COMM_EXEC)).ljust(_ATTR_SIZE, b"\0")


def perf_event_open(attr: bytes, pid: int, cpu: int = -1, group: int = -1, flags: int = 0) -> int:
    """Open one counter; raises OSError with the kernel's errno. With PERF_FLAG_PID_CGROUP in ``flags``,
    ``pid`` is a descriptor of a cgroup directory."""
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_NR_PERF_EVENT_OPEN, buf, ctypes.c_int(pid), ctypes.c_int(cpu), ctypes.c_int(group),
                       ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC | flags))
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
        return Opener(spec, unsupported="counted only by the dbi backend (valgrind): --backend dbi")
    if spec.kind == "store":
        config, what = _store_encoding(cpu_vendor, cpu_family)
        if config is None:
            return Opener(spec, unsupported=what)
        return Opener(spec, TYPE_RAW, config, source=what)
    tracepoint, reason = tracefs.first_available(spec.tracepoints)
    if tracepoint is None:
        return Opener(spec, unsupported=reason)
    return Opener(spec, TYPE_TRACEPOINT, tracefs.tracepoint_id(tracepoint), source=tracepoint)


def reading_from_counts(opener: Opener, backend: str, value: int, enabled: int, running: int,
                        fields: dict | None = None) -> Reading:
    """Turn a counter's raw triple into a Reading; multiplexed values keep the raw count and get a scaled one.
    ``fields``: the opener's model.ok_fields, where the caller keeps them (a run's hot path)."""
    spec = opener.spec
    if 0 < running == enabled:  # nearly every reading: built directly, without the keyword dict below
        if fields is not None:
            return counted_reading(fields, value, enabled, running)
        return Reading(event=spec.name, backend=backend, scope=spec.scope, unit=spec.unit, source=opener.source,
                       value=value, time_enabled=enabled, time_running=running, status="ok")
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


def online_cpus() -> list[int]:
    """The CPUs online now (/sys/devices/system/cpu/online, e.g. ``0-3,6``): where cgroup counters open."""
    with open("/sys/devices/system/cpu/online") as f:
        text = f.read().strip()
    cpus: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


class _Sideband:
    """One CPU's side-band records for a cgroup: a dummy software event with ``task``, ``comm`` and
    ``comm_exec`` set writes PERF_RECORD_EXIT for every task of the cgroup that exits on that CPU and
    PERF_RECORD_COMM (misc COMM_EXEC) for every exec, into a ring buffer mapped read-only. Read-only makes
    the kernel overwrite the oldest records instead of dropping new ones, so a run that wrote more than the
    buffer holds is known from data_head alone and never miscounted. Only the 8-byte headers are read."""

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, (1 + SIDEBAND_PAGES) * _PAGE, mmap.MAP_SHARED, mmap.PROT_READ)
        data_offset, data_size = _MMAP_DATA.unpack_from(self._map, _MMAP_DATA_OFFSET)
        self._offset, self._size = data_offset or _PAGE, data_size or SIDEBAND_PAGES * _PAGE
        self._seen = self._head()

    def _head(self) -> int:
        return _U64.unpack_from(self._map, _MMAP_DATA_HEAD)[0]

    def take(self) -> tuple[int, int, bool]:
        """(execs, exits, whether records were overwritten unread) since the last call."""
        head = self._head()
        position, self._seen = self._seen, head
        if head - position > self._size:
            return 0, 0, True
        execs = exits = 0
        records, offset, size = self._map, self._offset, self._size
        while position < head:
            kind, misc, length = _RECORD_HEADER.unpack_from(records, offset + position % size)
            if kind == _RECORD_EXIT:
                exits += 1
            elif kind == _RECORD_COMM and misc & _MISC_COMM_EXEC:
                execs += 1
            position += length
        return execs, exits, False

    def close(self) -> None:
        self._map.close()


class CgroupCounters:
    """The supported events of ``openers`` counted for everything in one cgroup, opened once per CPU.

    :meth:`read` returns running totals over all CPUs; the difference of two is what ran in the cgroup in
    between (the module docstring says what a run's difference includes); :meth:`tasks` the execs and exits
    since its last call, from one side-band ring buffer per CPU. Per CPU, software events and tracepoints
    form one group read with one read(2); a hardware or raw event is a counter of its own. Raises OSError
    (the kernel's errno) when a counter cannot be opened, after closing those it opened.
    """

    def __init__(self, openers: list[Opener], cgroup_path: str) -> None:
        self._fds: list[int] = []
        # (Runner.starts, what read() returned) when the last run ended, its side-band taken: where the next
        # run starts if the runner started nothing since (PerfEventBackend.measure): a read and a take a run less
        self.resting: tuple[int, list[int]] | None = None
        self._groups: list[tuple[int, struct.Struct]] = []  # (leader fd, layout of its group read)
        self._singles: list[tuple[int, int]] = []  # (fd, opener index)
        self._sidebands: list[_Sideband] = []
        self._openers = openers
        grouped = [i for i, o in enumerate(openers)
                   if o.unsupported is None and o.attr_type in (TYPE_SOFTWARE, TYPE_TRACEPOINT)]
        alone = [i for i, o in enumerate(openers)
                 if o.unsupported is None and o.attr_type not in (TYPE_SOFTWARE, TYPE_TRACEPOINT)]
        self._grouped = grouped
        cgroup_fd = os.open(cgroup_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for cpu in online_cpus():
                leader = -1
                for i in grouped:
                    o = openers[i]
                    fd = self._open(make_attr(o.attr_type, o.config, o.spec.scope, inherit=False, enable_on_exec=False,
                                              disabled=False, read_format=_FORMAT_TIMES | _FORMAT_GROUP),
                                    cgroup_fd, cpu, leader)
                    leader = fd if leader == -1 else leader
                if grouped:
                    self._groups.append((leader, struct.Struct(f"={3 + len(grouped)}Q")))
                for i in alone:
                    o = openers[i]
                    self._singles.append((self._open(make_attr(o.attr_type, o.config, o.spec.scope, inherit=False,
                                                               enable_on_exec=False, disabled=False),
                                                     cgroup_fd, cpu, -1), i))
                self._sidebands.append(_Sideband(self._open(_SIDEBAND_ATTR, cgroup_fd, cpu, -1)))
        except BaseException:
            self.close()
            raise
        finally:
            os.close(cgroup_fd)

    def _open(self, attr: bytes, cgroup_fd: int, cpu: int, group: int) -> int:
        fd = perf_event_open(attr, cgroup_fd, cpu, group, _PERF_FLAG_PID_CGROUP)
        self._fds.append(fd)
        return fd

    def read(self) -> list[int]:
        """Running totals over all CPUs: [time enabled, time running, then one value per grouped event
        (``grouped`` order)] when there are grouped events, then (value, time enabled, time running) of each
        lone counter, flat; the difference of two reads is what ran in the cgroup in between (:meth:`triples`
        sorts it out)."""
        totals: list[int] = []
        for leader, layout in self._groups:
            counts = layout.unpack(os.read(leader, layout.size))[1:]
            totals = list(counts) if not totals else [a + b for a, b in zip(totals, counts)]
        for fd, _ in self._singles:
            totals += read_counter(fd)
        return totals

    def tasks(self) -> tuple[int, int, bool]:
        """(execs, exits, whether some were lost) in the cgroup since the last call, over all CPUs."""
        execs = exits = 0
        lost = False
        for sideband in self._sidebands:
            cpu_execs, cpu_exits, cpu_lost = sideband.take()
            execs, exits, lost = execs + cpu_execs, exits + cpu_exits, lost or cpu_lost
        return execs, exits, lost

    def triples(self, counts: list[int]) -> list[tuple[int, int, int]]:
        """Per opener (value, time_enabled, time_running) of a difference of two reads; an opener that is not
        counted gets (0, 0, 0)."""
        triples = [(0, 0, 0)] * len(self._openers)
        at = 0
        if self._groups:
            enabled, running = counts[:2]
            for i, value in zip(self._grouped, counts[2:]):
                triples[i] = (value, enabled, running)
            at = 2 + len(self._grouped)
        for _, i in self._singles:
            value, single_enabled, single_running = counts[at:at + 3]
            previous = triples[i]
            triples[i] = (previous[0] + value, previous[1] + single_enabled, previous[2] + single_running)
            at += 3
        return triples

    def close(self) -> None:
        for sideband in self._sidebands:
            sideband.close()
        self._sidebands.clear()
        for fd in reversed(self._fds):
            os.close(fd)
        self._fds.clear()
        self._groups.clear()
        self._singles.clear()


class PerfEventBackend:
    """Counts events with perf_event_open; see the module docstring for the protocol. ``cgroup_counting``
    False: per-run counting always (the tests compare the two)."""

    name = BACKEND
    names = (BACKEND,)

    def __init__(self, specs: list[EventSpec], inventory: Inventory, *, cgroup_counting: bool = True):
        cpu = inventory.cpu
        self._openers: list[Opener] = []
        self._keepers: list[int] = []
        self._closer: _Closer | None = None  # started with the first per-run measurement
        # per runner cgroup path: its counters, or why they cannot be used (then: per-run counting)
        self._cgroup_counters: dict[str, CgroupCounters | str] = {}
        self._cgroup_counting = cgroup_counting
        self.per_run_reason: str | None = None if cgroup_counting else "cgroup counting turned off"
        self._context_switches = [i for i, spec in enumerate(specs) if spec.kind == "software"
                                  and spec.config == _SW_CONTEXT_SWITCHES]
        for spec in specs:
            opener = resolve(spec, cpu.vendor, cpu.family)
            if opener.unsupported is None:
                opener = self._probe(opener)
            self._openers.append(opener)
        # the same (frozen) reading for every run: an unsupported event stays so for the backend's lifetime
        self._unsupported = {i: unsupported_reading(o, BACKEND) for i, o in enumerate(self._openers)
                             if o.unsupported is not None}
        self._ok_fields = [ok_fields(o.spec.name, BACKEND, o.spec.scope, o.spec.unit, o.source) for o in self._openers]
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

    def counting(self, runner: Runner) -> str:
        """How runs with ``runner`` are counted: "cgroup", or "per run: " and why not by cgroup."""
        counters = self._counters_for(runner)
        return "cgroup" if counters is not None else f"per run: {self.per_run_reason}"

    def _counters_for(self, runner: Runner) -> CgroupCounters | None:
        """The cgroup counters of ``runner``'s cgroup, opened on first use; None (the reason in
        per_run_reason) where cgroup counting cannot be used."""
        if not self._cgroup_counting:
            return None
        cgroup, why = runner.counting_cgroup()
        if cgroup is None:
            self.per_run_reason = why
            return None
        counters = self._cgroup_counters.get(cgroup.path)
        if counters is None:
            try:
                cgroup.procs_fd()
                counters = CgroupCounters(self._openers, cgroup.path)
            except OSError as err:
                counters = f"cgroup counters cannot be opened on {cgroup.path}: {err.strerror}"
            self._cgroup_counters[cgroup.path] = counters
        if isinstance(counters, str):
            self.per_run_reason = counters
            return None
        self.per_run_reason = None
        return counters

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        counters = self._counters_for(runner)
        if counters is None:
            return self._measure_per_run(runner, argv, control)
        resting, counters.resting = counters.resting, None
        before = resting[1] if resting is not None and resting[0] == runner.starts else None
        # from the gate's loop (agent/run/looped.py LoopedGate) where the caller chose it, else a gate of its own
        with runner.started(argv, control, join_cgroup=True, loop=True) as run:
            if before is None:
                counters.tasks()  # nothing should be pending; whatever is, is not this run's
                before = counters.read()
            exit_ = run.release_and_wait()
            after = counters.read()
            execs, exits, lost = counters.tasks()
        # the cgroup is empty now (the run's leftovers were killed and reaped) and stays so until the runner
        # starts something else: nothing is counted meanwhile, not even time, so these totals are where the
        # next run starts if the runner starts nothing before it (Runner.starts)
        counters.resting = (runner.starts, after)
        counts = counters.triples([a - b for a, b in zip(after, before)])
        if execs == 0 and not lost:  # the gate failed before or at its exec: what it did is not the benchmark's
            counts = [(0, 0, 0)] * len(counts)
        elif not lost:
            for i in self._context_switches:
                # each exiting task's last switch off the CPU, which a task counter never sees (module docstring)
                value, enabled, running = counts[i]
                counts[i] = (max(0, value - exits), enabled, running)
        readings = [self._unsupported[i] if i in self._unsupported else
                    reading_from_counts(opener, BACKEND, *counts[i], self._ok_fields[i])
                    for i, opener in enumerate(self._openers)]
        if lost:
            for i in self._context_switches:
                if i not in self._unsupported:
                    readings[i] = dataclasses.replace(readings[i], status="error", reason=(
                        f"more processes started and ended than {SIDEBAND_PAGES} pages per CPU of side-band records "
                        "hold: the run's exits, whose last switches are not its own, are unknown"))
        return exit_, readings

    def _measure_per_run(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        fds: list[tuple[Opener, int | None, str | None]] = []
        try:
            with runner.started(argv, control) as run:
                for opener in self._openers:
                    if opener.unsupported is not None:
                        fds.append((opener, None, None))
                        continue
                    attr = make_attr(opener.attr_type, opener.config, opener.spec.scope, inherit=True,
                                     enable_on_exec=True)
                    try:
                        fds.append((opener, perf_event_open(attr, run.pid), None))
                    except OSError as err:
                        fds.append((opener, None, explain_errno(err.errno, opener.spec)))
                if self._closer is None:
                    self._closer = _Closer()
                self._closer.wait_idle()  # nothing of perfctl's runs beside the benchmark
                exit_ = run.release_and_wait()
                return exit_, [self._read(opener, fd, failure) for opener, fd, failure in fds]
        finally:
            opened = [fd for _, fd, _ in fds if fd is not None]
            if self._closer is None:  # the spawn failed before any counter was opened
                for fd in opened:
                    os.close(fd)
            else:
                self._closer.close_later(opened)

    def _read(self, opener: Opener, fd: int | None, failure: str | None) -> Reading:
        if fd is None:
            if failure is None:
                return unsupported_reading(opener, BACKEND)
            spec = opener.spec
            return Reading(event=spec.name, backend=BACKEND, scope=spec.scope, unit=spec.unit, status="error",
                           reason=failure)
        return reading_from_counts(opener, BACKEND, *read_counter(fd))

    def close(self) -> None:
        for counters in self._cgroup_counters.values():
            if isinstance(counters, CgroupCounters):
                counters.close()
        self._cgroup_counters.clear()
        if self._closer is not None:
            self._closer.finish()
            self._closer = None
        for fd in self._keepers:
            os.close(fd)
        self._keepers.clear()


class _Closer:
    """Closes finished counters on a background thread.

    Releasing an inherited perf event costs ~25 µs in the kernel, ~0.2 ms for a run's set; os.close drops
    the GIL, so the next run's spawn and counter opens overlap the last run's teardown. The next benchmark
    is released only once the teardown is done (wait_idle), so it never shares the machine with it. The
    thread runs under the supervisor (perfctl/supervise.py): a close that fails is logged and the thread goes
    on, and each set is marked done however it ended, so wait_idle never waits for a thread that died.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=supervised_thread, args=("counter closer", self._work, self._finished),
                                        name="perfctl-counter-closer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (fds := self._queue.get()) is not None:
            try:
                for fd in fds:
                    os.close(fd)
            finally:
                self._queue.task_done()
        self._finished.set()

    def wait_idle(self) -> None:
        self._queue.join()

    def close_later(self, fds: list[int]) -> None:
        self._queue.put(fds)

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
