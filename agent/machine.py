"""The machine inventory's types: what the machine is and every setting that changes what its counters say.

agent/inventory.py collects them (``collect``) and explains them (``checks``); ``Inventory.to_dict`` is the
JSON form that opens every sample file and that the agent sends the server (docs/inventory.md). Kept apart
from the collection so the counter backends, which the collection itself uses to probe the PMU, can name it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

INVENTORY_VERSION = 1


@dataclass(frozen=True)
class Cpu:
    """/proc/cpuinfo's first processor: errata are keyed by vendor, family and model."""

    vendor: str
    model_name: str
    family: int | None
    model: int | None
    stepping: int | None
    microcode: str | None
    logical_cpus: int | None
    hypervisor: bool


@dataclass(frozen=True)
class Kernel:
    release: str
    version: str


@dataclass(frozen=True)
class Pmu:
    """Whether a hardware PMU counts instructions for this process, and why not (probe_pmu)."""

    present: bool
    reason: str


@dataclass(frozen=True)
class Tracefs:
    """Whether tracepoints (timer and device interrupts) can be counted, and the mount's state."""

    available: bool
    state: str


@dataclass(frozen=True)
class Ebpf:
    """Whether the ebpf backend loads here (probe_ebpf), and why not."""

    available: bool
    reason: str


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """What the machine is and every setting that changes what its counters say (docs/inventory.md).

    ``to_dict`` is its JSON form: the first line of every sample file and the agent's MachineInfo, whose
    keys are in the order of these fields. ``run_containment`` and ``exec_gate_fix`` are None in the
    inventory of an older agent, which did not record them; ``ebpf`` is set only where it was probed
    (`perfctl info`), and absent from the JSON otherwise.
    """

    type: str = "machine"
    inventory_version: int = INVENTORY_VERSION
    machine_id: str
    hostname: str
    arch: str
    cpu: Cpu
    kernel: Kernel
    hz: int | None
    tick_mode: str
    nohz_full_cpus: str | None
    isolated_cpus: str
    pmu: Pmu
    perf_event_paranoid: int | None
    aslr: int | None
    governors: tuple[str, ...]
    turbo: str | None
    smt: str | None
    smt_active: bool
    nmi_watchdog: int | None
    tracefs: Tracefs
    euid: int
    exec_gate: str
    exec_gate_fix: str | None = None
    run_containment: str | None = None
    pointer_bits: int
    ebpf: Ebpf | None = None

    def to_dict(self) -> dict:
        """The JSON document (json.dumps-ready) with today's keys in today's order."""
        document = asdict(self)
        document["governors"] = list(self.governors)
        if self.run_containment is None:
            del document["run_containment"]
        if self.ebpf is None:
            del document["ebpf"]
        return document

    @classmethod
    def from_dict(cls, document: dict) -> Inventory:
        """An inventory read back from its JSON form (a sample file's first line, `perfctl info --json`);
        ValueError names what is missing or of the wrong shape."""
        if not isinstance(document, dict) or document.get("type") != "machine":
            raise ValueError("not a machine inventory (no \"type\": \"machine\")")
        try:
            ebpf = document.get("ebpf")
            return cls(**{name: document[name] for name in _PLAIN_FIELDS},
                       exec_gate_fix=document.get("exec_gate_fix"),
                       run_containment=document.get("run_containment"),
                       cpu=Cpu(**document["cpu"]), kernel=Kernel(**document["kernel"]), pmu=Pmu(**document["pmu"]),
                       tracefs=Tracefs(**document["tracefs"]), governors=tuple(document["governors"]),
                       ebpf=None if ebpf is None else Ebpf(**ebpf))
        except KeyError as err:
            raise ValueError(f"the inventory has no {err.args[0]}") from None
        except TypeError as err:  # a section that is not an object, or has other fields
            raise ValueError(f"the inventory is not shaped as perfctl writes it: {err}") from None


# the fields from_dict copies as they are (the nested ones and those older agents lack are built apart)
_PLAIN_FIELDS = ("type", "inventory_version", "machine_id", "hostname", "arch", "hz", "tick_mode", "nohz_full_cpus",
                 "isolated_cpus", "perf_event_paranoid", "aslr", "turbo", "smt", "smt_active", "nmi_watchdog",
                 "euid", "exec_gate", "pointer_bits")
