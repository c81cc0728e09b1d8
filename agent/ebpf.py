"""The ``ebpf`` backend: what perf_event counters alone cannot tell, from agent/runacct.bpf.c.

Per run: interrupts that landed while the benchmark's tasks were on a CPU, by class, with the scheduler
ticks split by the mode they interrupted; page faults split into user and kernel faults; context switches,
preemptions, on- and off-CPU time; interference (time other tasks ran on the CPUs the benchmark ran on,
and how many tasks those were). The benchmark's whole tree is followed through forks.

Alone (``--backend ebpf``) it starts the benchmark itself; with perf_event (``--backend perf_event,ebpf``)
it is armed through the runner when perf_event starts the run (session.Combined), so both count the same
run. The BPF object is loaded once per process (runacct.shared); a run only updates the tracked pid.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfctl.agent import runacct
from perfctl.agent.runner import Exit, RunControl, Runner
from perfctl.model import SCOPE_SUFFIX, Reading

BACKEND = "ebpf"


@dataclass(frozen=True)
class Measure:
    event: str
    scope: str
    unit: str
    slot: str
    programs: tuple[str, ...]  # the programs whose tracepoints feed it


_SCHED = ("on_switch",)
# slots a switch without its sched_switch event leaves unknown (_unreported): what and when it switched from
NEEDS_EVERY_SWITCH = frozenset({"on_cpu_ns", "off_cpu_ns", "other_ns", "other_tasks", "preempt"})
MEASURES = (
    Measure("timer-interrupts", "all", "count", "timer", ("on_timer",)),
    Measure("timer-ticks", "user", "count", "tick_user", ("on_timer", "on_timer_exit")),
    Measure("timer-ticks", "kernel", "count", "tick_kernel", ("on_timer", "on_timer_exit")),
    Measure("device-interrupts", "all", "count", "device", ("on_device_irq",)),
    Measure("ipi-reschedule", "all", "count", "ipi_reschedule", ("on_reschedule_ipi",)),
    Measure("ipi-call-function", "all", "count", "ipi_call", ("on_call_function_ipi", "on_call_function_single_ipi")),
    Measure("softirqs", "all", "count", "softirq", ("on_softirq",)),
    Measure("page-faults", "user", "count", "fault_user", ("on_fault_user",)),
    Measure("page-faults", "kernel", "count", "fault_kernel", ("on_fault_kernel",)),
    Measure("context-switches", "all", "count", "switch_out", _SCHED),
    Measure("context-switches-in", "all", "count", "switch_in", _SCHED),
    Measure("preemptions", "all", "count", "preempt", _SCHED),
    Measure("on-cpu-time", "all", "ns", "on_cpu_ns", _SCHED),
    Measure("off-cpu-time", "all", "ns", "off_cpu_ns", _SCHED),
    Measure("interference-time", "all", "ns", "other_ns", _SCHED),
    Measure("interference-tasks", "all", "count", "other_tasks", _SCHED),
    Measure("tasks", "all", "count", "forks", ("on_fork",)),
)


def _label(measure: Measure) -> str:
    return measure.event + SCOPE_SUFFIX[measure.scope]


class EbpfBackend:
    """Per-run accounting by runacct; raises runacct.Unavailable when eBPF cannot run here."""

    name = BACKEND
    names = (BACKEND,)

    def __init__(self, max_tasks: int | None = None) -> None:
        self._acct = runacct.shared(max_tasks or runacct.DEFAULT_MAX_TASKS)
        self._armed = False

    def support(self) -> dict[str, str | None]:
        return {_label(m): self._missing(m) for m in MEASURES}

    def _missing(self, measure: Measure) -> str | None:
        absent = [self._acct.missing[p] for p in measure.programs if p in self._acct.missing]
        return f"this kernel has no BTF tracepoint {', '.join(absent)}" if absent else None

    def arm(self, pid: int) -> None:
        """Follow ``pid`` (blocked in the exec gate) and its descendants from its exec on."""
        self._acct.arm(pid)
        self._armed = True

    def collect(self) -> list[Reading]:
        """The readings of the run armed last (after its process tree was reaped)."""
        counts = self._acct.read() if self._armed else None
        self._armed = False
        return self.readings_of(counts)

    def readings_of(self, counts: runacct.RunCounts | None) -> list[Reading]:
        """One run's readings from its counts (None: the run was never armed)."""
        problem = _problem(counts, self._acct.max_tasks)
        unreported = _unreported(counts)
        readings = []
        for measure in MEASURES:
            base = dict(event=measure.event, backend=BACKEND, scope=measure.scope, unit=measure.unit,
                        source="ebpf runacct")
            missing = self._missing(measure)
            if missing:
                readings.append(Reading(**base, status="unsupported", reason=missing))
                continue
            value = None
            if counts is not None:  # "tasks": the benchmark itself plus every fork and thread it made
                value = counts.slots[measure.slot] + (1 if measure.slot == "forks" else 0)
            if problem:
                readings.append(Reading(**base, status="error", value=value, reason=problem))
            elif unreported and measure.slot in NEEDS_EVERY_SWITCH:
                readings.append(Reading(**base, status="error", value=value, reason=unreported))
            else:
                readings.append(Reading(**base, status="ok", value=value))
        return readings

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        with runner.started(argv, control) as run:
            self.arm(run.pid)
            exit_ = run.release_and_wait()
            return exit_, self.collect()

    def close(self) -> None:
        """Nothing to release per backend: the loaded object serves the whole process (runacct.shared)."""


def _unreported(counts: runacct.RunCounts | None) -> str | None:
    """Why this run's on-CPU, off-CPU and interference times and its preemptions are unknown, or None. The
    kernel here sometimes runs a context switch without its sched_switch event (ftrace's own sched_switch
    event misses it too; about one run of /bin/sleep 0.01 in 500 with other processes busy on this VM's 2
    CPUs). runacct.bpf.c counts such a switch from the task's state, and in the slot "missed"; when it
    happened, and what ran before it, is not known."""
    missed = counts.slots["missed"] if counts is not None else 0
    if not missed:
        return None
    return (f"the kernel ran {missed} of the benchmark's context switches without reporting them (no sched_switch "
            "event): they are counted, but when they happened is unknown, so this run's on-CPU, off-CPU and "
            "interference times and preemptions are not")


def _problem(counts: runacct.RunCounts | None, max_tasks: int) -> str | None:
    """Why this run's eBPF counts are not the benchmark's whole story, or None."""
    if counts is None or not counts.started:
        return "the benchmark never started (no exec was seen)"
    untracked = counts.slots["untracked"]
    if untracked:
        return (f"{untracked} tasks of the benchmark's tree were not followed (the map of {max_tasks} tracked "
                "tasks was full): counts cover only part of the tree; raise --ebpf-max-tasks")
    return None
