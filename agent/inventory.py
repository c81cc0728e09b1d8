"""Machine inventory: what the machine is and every setting that changes what its counters say.

Recorded with every set of samples. ``checks()`` explains each item the way ``pyperf system show`` does:
the fact, why it matters for the counters, and the command that changes it.
"""

from __future__ import annotations

import errno
import glob
import gzip
import hashlib
import os
import re
import struct
from dataclasses import dataclass

from perfctl.agent import gate, tracefs
from perfctl.agent.machine import Cpu, Ebpf, Inventory, Kernel, Pmu, Tracefs
from perfctl.agent.perf_event import make_attr, perf_event_open


def read_text(path: str) -> str | None:
    """A small kernel file's content, stripped; None when it does not exist or cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpuinfo() -> Cpu:
    text = read_text("/proc/cpuinfo") or ""
    first = text.split("\n\n", 1)[0]
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}

    def number(key: str, base: int = 10) -> int | None:
        try:
            return int(fields[key], base)
        except (KeyError, ValueError):
            return None

    return Cpu(vendor=fields.get("vendor_id", os.uname().machine), model_name=fields.get("model name", ""),
               family=number("cpu family"), model=number("model"), stepping=number("stepping"),
               microcode=fields.get("microcode"), logical_cpus=os.cpu_count(),
               hypervisor="hypervisor" in fields.get("flags", "").split())


def _kernel_config() -> dict[str, str]:
    release = os.uname().release
    text = read_text(f"/boot/config-{release}")
    if text is None:
        try:
            with gzip.open("/proc/config.gz", "rt") as f:
                text = f.read()
        except OSError:
            text = ""
    return dict(re.findall(r"^(CONFIG_[A-Z0-9_]+)=(.*)$", text, re.M))


def _cmdline_value(cmdline: str, key: str) -> str | None:
    match = re.search(rf"(?:^|\s){re.escape(key)}=(\S+)", cmdline)
    return match.group(1) if match else None


def _tick_mode(config: dict[str, str], cmdline: str) -> str:
    if _cmdline_value(cmdline, "nohz_full"):
        return "nohz_full"
    if config.get("CONFIG_NO_HZ_FULL") == "y":
        return "NO_HZ_FULL kernel (no nohz_full CPUs)"
    if config.get("CONFIG_NO_HZ_IDLE") == "y" or config.get("CONFIG_NO_HZ") == "y":
        return "NO_HZ_IDLE"
    if config.get("CONFIG_HZ_PERIODIC") == "y":
        return "periodic"
    return "unknown"


def probe_pmu(cpu: Cpu) -> tuple[bool, str]:
    """Whether a hardware PMU counts instructions for this process, and why not."""
    try:
        fd = perf_event_open(make_attr(0, 1, "user", inherit=False, enable_on_exec=False), 0)
    except OSError as err:
        name = errno.errorcode.get(err.errno, str(err.errno))
        if err.errno == errno.ENOENT:
            if not os.path.isdir("/sys/bus/event_source/devices/cpu"):
                why = "the kernel registered no CPU PMU"
                if cpu.hypervisor:
                    why += " (virtual machine: the hypervisor does not expose a PMU)"
                return False, f"{why}; perf_event_open(instructions) -> {name}"
            return False, f"perf_event_open(instructions) -> {name}"
        return False, f"perf_event_open(instructions) -> {name}: {os.strerror(err.errno)}"
    os.close(fd)
    return True, "perf_event_open(instructions) succeeded"


def _governors() -> list[str]:
    base = "/sys/devices/system/cpu"
    found = set()
    for entry in sorted(os.listdir(base)):
        if re.fullmatch(r"cpu\d+", entry):
            value = read_text(f"{base}/{entry}/cpufreq/scaling_governor")
            if value:
                found.add(value)
    return sorted(found)


def _turbo() -> str | None:
    no_turbo = read_text("/sys/devices/system/cpu/intel_pstate/no_turbo")
    if no_turbo is not None:
        return "off" if no_turbo == "1" else "on"
    boost = read_text("/sys/devices/system/cpu/cpufreq/boost")
    if boost is not None:
        return "on" if boost == "1" else "off"
    return None


def machine_id() -> str:
    ident = read_text("/etc/machine-id") or os.uname().nodename
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def collect() -> Inventory:
    """This machine's inventory (its JSON form, Inventory.to_dict, is documented in docs/inventory.md)."""
    cpu = _cpuinfo()
    config = _kernel_config()
    cmdline = read_text("/proc/cmdline") or ""
    pmu_present, pmu_reason = probe_pmu(cpu)
    events, tracefs_state = tracefs.events_dir()
    hz = config.get("CONFIG_HZ")
    found_gate = gate.find_gate()
    return Inventory(
        machine_id=machine_id(),
        hostname=os.uname().nodename,
        arch=os.uname().machine,
        cpu=cpu,
        kernel=Kernel(release=os.uname().release, version=os.uname().version),
        hz=int(hz) if hz and hz.isdigit() else None,
        tick_mode=_tick_mode(config, cmdline),
        nohz_full_cpus=_cmdline_value(cmdline, "nohz_full"),
        isolated_cpus=read_text("/sys/devices/system/cpu/isolated") or "",
        pmu=Pmu(present=pmu_present, reason=pmu_reason),
        perf_event_paranoid=_int_or_none(read_text("/proc/sys/kernel/perf_event_paranoid")),
        aslr=_int_or_none(read_text("/proc/sys/kernel/randomize_va_space")),
        governors=tuple(_governors()),
        turbo=_turbo(),
        smt=read_text("/sys/devices/system/cpu/smt/control"),
        smt_active=read_text("/sys/devices/system/cpu/smt/active") == "1",
        nmi_watchdog=_int_or_none(read_text("/proc/sys/kernel/nmi_watchdog")),
        tracefs=Tracefs(available=events is not None, state=tracefs_state),
        euid=os.geteuid(),
        exec_gate=found_gate.description,
        exec_gate_fix=found_gate.fix,
        run_containment=_containment(),
        pointer_bits=struct.calcsize("P") * 8,
    )


def _containment() -> str:
    from perfctl.agent.run.cgroup import containment

    how, reason = containment()
    return "cgroup per run (cgroup.kill)" if how == "cgroup" else f"subreaper and /proc scan: {reason}"


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Check:
    """One environment item as `perfctl info` shows it and `perfctl audit` judges it.

    ``fix`` says how the setting is changed, on every row: the command that gives the better setting where
    one exists, else the command that changes it, else who can ("cannot be changed from software", "fixed by
    the hypervisor"); ``ok`` is False when the setting disturbs counting as it is (the audit degrades its
    verdict for it, and prints the fix). A suggestion alone (boot with nohz_full, isolate CPUs) leaves ``ok``
    True.
    """

    item: str
    value: str
    meaning: str
    fix: str | None = None
    ok: bool = True


def probe_ebpf() -> Ebpf:
    """Whether the ebpf backend can run here, found by loading it (agent/runacct.py): costs ~0.3 s the first
    time in a process, so `perfctl info` and the agent ask, not every `perfctl stat`."""
    from perfctl.agent import runacct

    try:
        acct = runacct.shared()
    except runacct.Unavailable as err:
        return Ebpf(available=False, reason=str(err))
    missing = sorted(set(acct.missing.values()))
    return Ebpf(available=True, reason="runacct loaded through libbpf (CO-RE, BTF tracepoints)" + (
        f"; this kernel lacks {', '.join(missing)}" if missing else ""))


def paranoid_ok(inv: Inventory) -> bool:
    """Whether perf_event_paranoid lets this process count what perfctl counts (tracepoints, kernel events):
    root always; others at level 1 or below. An unreadable level is not assumed to be fine."""
    paranoid = inv.perf_event_paranoid
    return inv.euid == 0 or (paranoid is not None and paranoid <= 1)


def checks(inv: Inventory) -> list[Check]:
    """The one list of environment checks (Weaver & McKee section 5; pyperf system show): each item with what
    it means for the counters, the command that changes it, and whether it disturbs counting as it is.
    `perfctl info` shows them all; `perfctl audit` degrades its verdict for each one that is not ok."""
    cpu = inv.cpu
    # what only the machine's owner changes: the hypervisor on a virtual machine, else the hardware
    fixed = "fixed by the hypervisor" if cpu.hypervisor else "cannot be changed from software"
    out = [
        Check("cpu", f"{cpu.vendor} family {cpu.family} model {cpu.model} stepping {cpu.stepping} "
              f"({cpu.model_name})", "errata (fldcw, AMD 17h erratum 1291) are keyed by vendor/family/model",
              f"{fixed} (another machine)"),
        Check("microcode", str(cpu.microcode), "a microcode update can change counter behaviour; audits re-run",
              "fixed by the hypervisor" if cpu.hypervisor else
              "apt-get install intel-microcode (or amd64-microcode), then reboot"),
        Check("kernel", inv.kernel.release, "interrupt and fault handling (and their counter artifacts) "
              "depend on the kernel", "install and boot another kernel"),
    ]
    hz = inv.hz
    out.append(Check("HZ", str(hz) if hz else "unknown",
                     "timer interrupts arrive about HZ times per CPU-second; each can add one retired "
                     "user instruction", "boot a kernel built with another CONFIG_HZ"))
    tick = inv.tick_mode
    out.append(Check("tick mode", tick, "nohz_full CPUs take almost no timer interrupts while one task runs",
                     "the kernel command line's nohz_full=CPUS" if tick == "nohz_full"
                     else "boot with nohz_full=CPUS for interrupt-free runs"))
    pmu = inv.pmu
    out.append(Check("PMU", "present" if pmu.present else "absent", pmu.reason + (
        "" if pmu.present else "; instructions and cycles are reported unsupported, software events and "
        "tracepoints still count"), f"nothing to change ({fixed})" if pmu.present else
        "run on bare metal or enable vPMU passthrough"))
    paranoid_fine = paranoid_ok(inv)
    out.append(Check("perf_event_paranoid", str(inv.perf_event_paranoid),
                     "above 1, unprivileged users count only user-mode software events and no tracepoints",
                     f"sysctl kernel.perf_event_paranoid=N (now {inv.perf_event_paranoid}, fine for this user)"
                     if paranoid_fine else "sysctl kernel.perf_event_paranoid=1, or run as root", paranoid_fine))
    aslr = inv.aslr
    out.append(Check("ASLR (system)", {0: "off", 1: "partial", 2: "full"}.get(aslr, str(aslr)),
                     "perfctl turns ASLR off for each benchmark only (personality ADDR_NO_RANDOMIZE); "
                     "the system setting is left alone", "sysctl kernel.randomize_va_space=0|1|2 (perfctl needs "
                     "no change)"))
    governors = ", ".join(inv.governors) or "not exposed"
    scaling = bool(inv.governors) and inv.governors != ("performance",)
    out.append(Check("governor", governors, "frequency scaling changes cycles per second, not instructions",
                     "cpupower frequency-set -g performance" if scaling
                     else "cpupower frequency-set -g GOVERNOR" if inv.governors
                     else f"{fixed} (no cpufreq here)", not scaling))
    turbo = inv.turbo
    out.append(Check("turbo", turbo or "not exposed", "turbo makes time and cycles/second vary with temperature",
                     "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo" if turbo == "on"
                     else "echo 0 > /sys/devices/system/cpu/intel_pstate/no_turbo turns it on" if turbo
                     else f"{fixed} (no turbo control here)",
                     turbo != "on"))
    out.append(Check("SMT", f"{inv.smt or 'not exposed'} (active: {inv.smt_active})",
                     "a sibling thread shares the core and perturbs cycles and time",
                     "echo off > /sys/devices/system/cpu/smt/control" if inv.smt_active
                     else f"{fixed} (no SMT control here)" if inv.smt in (None, "notsupported", "notimplemented")
                     else "echo on|off > /sys/devices/system/cpu/smt/control",
                     not inv.smt_active))
    nmi = inv.nmi_watchdog
    out.append(Check("NMI watchdog", {0: "off", 1: "on"}.get(nmi, str(nmi)),
                     "the watchdog holds one hardware counter, leaving fewer before multiplexing starts",
                     "sysctl kernel.nmi_watchdog=0" if nmi == 1 else "sysctl kernel.nmi_watchdog=0|1", nmi != 1))
    out.append(Check("isolated CPUs", inv.isolated_cpus or "none",
                     "an isolated CPU (isolcpus=) runs only what is pinned to it: pin benchmarks there with --pin",
                     "the kernel command line's isolcpus=CPUS" if inv.isolated_cpus
                     else "boot with isolcpus=CPUS nohz_full=CPUS"))
    tracing = inv.tracefs
    # Timer interrupts add user instructions: they must be counted (tracefs) to be corrected, or avoided.
    out.append(Check("tracefs", "available" if tracing.available else "unavailable", tracing.state + (
        "" if tracing.available else "; timer and device interrupt counts are reported unsupported, so "
        "instructions cannot be corrected for them"),
        "nothing to change (umount /sys/kernel/tracing would lose the interrupt counts)" if tracing.available
        else "mount -t tracefs nodev /sys/kernel/tracing (as root)",
        tracing.available or tick == "nohz_full"))
    if inv.ebpf is not None:
        ebpf = inv.ebpf
        out.append(Check("eBPF", "available" if ebpf.available else "unavailable", ebpf.reason + (
            "; --backend perf_event,ebpf adds interrupt classes, user/kernel faults and interference per run"),
            "nothing to change (--backend chooses it)" if ebpf.available
            else "run as root on a kernel with BTF; ./deploy/setup.sh installs clang, bpftool and libbpf"))
    # The fix is the one agent/build.py gave for why the static gate is not in use: a compiler to install,
    # or an untrusted cache entry to remove; an inventory older than exec_gate_fix records no fix.
    out.append(Check("exec gate", inv.exec_gate, "how benchmarks wait for their counters before exec; the "
                     "static gate and sh count the same, the static one costs ~0.6 ms less per run and, with a "
                     "cgroup per run, lets perf_event open its counters once per measurement rather than for "
                     "every run (docs/stat.md, \"Per-run cost\")",
                     inv.exec_gate_fix or "nothing to change (perfctl builds and checks its gate itself)"))
    if inv.run_containment is not None:  # absent from inventories of older agents
        scan = not inv.run_containment.startswith("cgroup")
        out.append(Check("process trees", inv.run_containment, "what a benchmark leaves running (daemons too) "
                         "is killed after every run; a cgroup per run kills it in one step, a /proc scan can be "
                         "outrun by a benchmark that forks in a tight loop",
                         "run perfctl as root with cgroup v2 mounted, Linux 5.14 or later" if scan
                         else "nothing to change (the best perfctl has)"))
    throttles = [int(v) for v in (read_text(p) for p in glob.glob(
        "/sys/devices/system/cpu/cpu*/thermal_throttle/core_throttle_count")) if v and v.isdigit()]
    out.append(Check("thermal throttling", f"{sum(throttles)} events" if throttles else "not exposed",
                     "a throttled core runs slower mid-run", "improve cooling; rerun" if any(throttles)
                     else "cooling (nothing to change)" if throttles else f"{fixed} (not exposed here)",
                     not any(throttles)))
    meminfo = read_text("/proc/meminfo") or ""
    swap_total, swap_free = (next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith(key)), 0)
                             for key in ("SwapTotal:", "SwapFree:"))
    swapped = swap_total - swap_free
    out.append(Check("swap", f"{swapped // 1024} MiB used", "swapping adds major faults and time",
                     "swapoff -a, or free memory" if swapped else "swapoff -a keeps it at 0", swapped == 0))
    return out
