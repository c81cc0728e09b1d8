"""Loader of runacct.bpf.c: builds it (once per kernel BTF), loads and attaches it once per process, and
per run only arms it with the benchmark's pid and reads its counters back.

The object's layout is checked against :data:`SLOTS` and :data:`STATE` at load: an object built from
another perfctl's source is refused with a message rather than read wrongly.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass

from perfctl.agent.build import BuildError, build_bpf, open_artifact
from perfctl.agent.libbpf import BPF_NOEXIST, BpfError, BpfObject, kernel_tracepoints

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runacct.bpf.c")
OBJECT_ENV = "PERFCTL_EBPF_OBJECT"  # a prebuilt object to load instead of building SOURCE (operators, tests)
DEFAULT_MAX_TASKS = 8192

# enum ra_slot of runacct.bpf.c, in order
SLOTS = ("gen", "timer", "tick_user", "tick_kernel", "device", "ipi_reschedule", "ipi_call", "softirq",
         "fault_user", "fault_kernel", "switch_out", "switch_in", "preempt", "on_cpu_ns", "off_cpu_ns",
         "other_ns", "other_tasks", "forks", "untracked", "missed")
STATE = struct.Struct("=QQQQq")  # struct ra_state: gen, active, start_ns, end_ns, live
_PID = struct.Struct("=I")
_TASK = bytes(8)  # struct ra_task, off_since = 0

# program -> the BTF tracepoint it needs; the scheduler's are required, the others only lose their counts
REQUIRED = {"on_exec": "sched_process_exec", "on_fork": "sched_process_fork", "on_exit": "sched_process_exit",
            "on_switch": "sched_switch"}
OPTIONAL = {"on_timer": "local_timer_entry", "on_timer_exit": "local_timer_exit",
            "on_device_irq": "irq_handler_entry", "on_reschedule_ipi": "reschedule_entry",
            "on_call_function_ipi": "call_function_entry", "on_call_function_single_ipi": "call_function_single_entry",
            "on_softirq": "softirq_entry", "on_fault_user": "page_fault_user", "on_fault_kernel": "page_fault_kernel"}


class Unavailable(Exception):
    """Why eBPF accounting cannot run here; one line, said once."""


@dataclass(frozen=True)
class RunCounts:
    """One run's counters summed over CPUs, and whether the benchmark's exec was seen."""

    slots: dict[str, int]
    started: bool


def object_path() -> str:
    """The object to load: $PERFCTL_EBPF_OBJECT, or runacct.bpf.c built for this kernel."""
    given = os.environ.get(OBJECT_ENV)
    if given:
        if not os.path.isfile(given):
            raise Unavailable(f"{OBJECT_ENV}={given}: no such file")
        return given
    try:
        path, _ = build_bpf(SOURCE, "runacct.bpf.o")
    except BuildError as err:
        raise Unavailable(str(err)) from None
    return path


def _load(path: str, **options) -> BpfObject:
    """``path`` loaded and attached; a cached object through the descriptor agent/build.py checked (ours,
    not writable by others, content as recorded when built), so the checked bytes are the loaded ones. An
    object named by $PERFCTL_EBPF_OBJECT is the operator's choice and loaded as it is."""
    if os.environ.get(OBJECT_ENV):
        return BpfObject(path, **options)
    descriptor = open_artifact(path)
    try:
        return BpfObject(f"/proc/self/fd/{descriptor}", shown_as=path, **options)
    finally:
        os.close(descriptor)  # libbpf has read the object by the time it is loaded


def _privilege_problem() -> str | None:
    if os.geteuid() == 0:
        return None
    with open("/proc/self/status") as f:
        caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    cap_bpf, cap_perfmon, cap_sys_admin = 39, 38, 21
    effective = int(caps, 16)
    if effective & (1 << cap_sys_admin) or (effective & (1 << cap_bpf) and effective & (1 << cap_perfmon)):
        return None
    return f"loading BPF programs needs root (or CAP_BPF and CAP_PERFMON); running as uid {os.geteuid()}"


class RunAccounting:
    """runacct loaded and attached; :meth:`arm` before a run's exec, :meth:`read` after its exit."""

    def __init__(self, max_tasks: int = DEFAULT_MAX_TASKS) -> None:
        problem = _privilege_problem()
        if problem:
            raise Unavailable(problem)
        try:
            present = kernel_tracepoints(set(REQUIRED.values()) | set(OPTIONAL.values()))
        except BpfError as err:
            raise Unavailable(str(err)) from None
        missing = sorted(tp for tp in REQUIRED.values() if tp not in present)
        if missing:
            raise Unavailable(f"this kernel has no BTF tracepoint {', '.join(missing)} "
                              "(needed to follow the benchmark)")
        self.missing = {program: tp for program, tp in OPTIONAL.items() if tp not in present}
        self.max_tasks = max_tasks
        path = object_path()
        try:
            self._object = _load(path, skip=set(self.missing), max_entries={"tracked": max_tasks})
        except (BpfError, BuildError) as err:
            raise Unavailable(str(err)) from None
        try:
            self._state, self._tracked, self._counters = (self._object.map(name) for name in ("state", "tracked",
                                                                                             "counters"))
            self._cpus = BpfObject.possible_cpus()
            if self._counters.value_size != 8 * len(SLOTS) or self._state.value_size != STATE.size:
                raise BpfError(f"{path} was built from another version of runacct.bpf.c (its maps' layout "
                               "differs); rebuild it from this perfctl's agent/runacct.bpf.c")
        except BpfError as err:
            self._object.close()  # a foreign object must not stay attached
            raise Unavailable(str(err)) from None
        self._stride = (self._counters.value_size + 7) // 8 * 8
        self._gen = 0

    def arm(self, pid: int) -> None:
        """Track ``pid`` (blocked in the exec gate) from its exec on; forget the previous run."""
        self._gen += 1
        self._state.update(_PID.pack(0), STATE.pack(self._gen, 0, 0, 0, 1))
        for key in self._tracked.keys(_PID.size):  # tasks of an earlier run still dying
            self._tracked.delete(key)
        self._tracked.update(_PID.pack(pid), _TASK, BPF_NOEXIST)

    def read(self) -> RunCounts:
        state = self._state.lookup(_PID.pack(0), STATE.size)
        gen, _, start_ns, _, _ = STATE.unpack(state)
        raw = self._counters.lookup(_PID.pack(0), self._stride * self._cpus)
        # one row per possible CPU; rows of an older run are stale (numpy would cost more to import than this)
        width = self._stride // 8
        values = struct.unpack(f"={width * self._cpus}Q", raw)
        rows = [values[cpu * width:cpu * width + len(SLOTS)] for cpu in range(self._cpus)]
        totals = [sum(column) for column in zip(*(row for row in rows if row[0] == self._gen))] or [0] * len(SLOTS)
        totals[0] = self._gen
        return RunCounts(dict(zip(SLOTS, totals)), started=start_ns != 0 and gen == self._gen)

    def close(self) -> None:
        self._object.close()


_shared: dict[int, RunAccounting | Unavailable] = {}
_shared_lock = threading.Lock()


def shared(max_tasks: int = DEFAULT_MAX_TASKS) -> RunAccounting:
    """The process's one loaded runacct, loaded on first use and kept for the process's lifetime (an agent
    loads it once, not per job). A failure is remembered too: the same Unavailable is raised again, so
    callers say it once and the kernel is not asked again."""
    with _shared_lock:
        if max_tasks not in _shared:
            for other in _shared.values():
                if isinstance(other, RunAccounting):
                    other.close()
            _shared.clear()
            try:
                _shared[max_tasks] = RunAccounting(max_tasks)
            except Unavailable as err:
                _shared[max_tasks] = err
        loaded = _shared[max_tasks]
        if isinstance(loaded, Unavailable):
            raise loaded
        return loaded
