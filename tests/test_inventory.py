import json
import platform

import pytest
from conftest import perfctl

from perfctl.agent import inventory


def _config_hz():
    try:
        text = open(f"/boot/config-{platform.release()}").read()
    except OSError:
        import gzip
        text = gzip.open("/proc/config.gz", "rt").read()
    return int(next(line.split("=")[1] for line in text.splitlines() if line.startswith("CONFIG_HZ=")))


def test_inventory_reads_the_machine():
    inv = inventory.collect()
    assert inv.hz == _config_hz()
    assert inv.perf_event_paranoid == int(open("/proc/sys/kernel/perf_event_paranoid").read())
    assert inv.aslr == int(open("/proc/sys/kernel/randomize_va_space").read())
    assert inv.kernel.release == platform.release()
    cpuinfo = open("/proc/cpuinfo").read()
    assert f"vendor_id\t: {inv.cpu.vendor}" in cpuinfo
    assert inv.machine_id == inventory.collect().machine_id
    assert isinstance(inv.pmu.present, bool) and inv.pmu.reason


def test_the_inventory_json_keeps_its_keys_and_reads_back():
    """to_dict is the document of every sample file's first line and of the agent's MachineInfo: the
    documented keys in their order, ebpf only where probed; from_dict reads it back to the same inventory."""
    import dataclasses

    from perfctl.agent.machine import Ebpf, Inventory

    inv = inventory.collect()
    document = json.loads(json.dumps(inv.to_dict()))
    assert list(document) == ["type", "inventory_version", "machine_id", "hostname", "arch", "cpu", "kernel", "hz",
                              "tick_mode", "nohz_full_cpus", "isolated_cpus", "pmu", "perf_event_paranoid", "aslr",
                              "governors", "turbo", "smt", "smt_active", "nmi_watchdog", "tracefs", "euid",
                              "exec_gate", "exec_gate_fix", "run_containment", "pointer_bits"]
    assert document["cpu"]["vendor"] == inv.cpu.vendor and document["pmu"]["present"] is inv.pmu.present
    assert Inventory.from_dict(document) == inv
    probed = dataclasses.replace(inv, ebpf=Ebpf(available=False, reason="no BTF"))
    assert probed.to_dict()["ebpf"] == {"available": False, "reason": "no BTF"}
    assert Inventory.from_dict(probed.to_dict()) == probed
    older = {k: v for k, v in document.items() if k not in ("run_containment", "exec_gate_fix")}
    assert Inventory.from_dict(older).run_containment is None  # an older agent's: checks() leaves the row out
    assert "process trees" not in {c.item for c in inventory.checks(Inventory.from_dict(older))}
    with pytest.raises(ValueError, match="no pmu"):
        Inventory.from_dict({k: v for k, v in document.items() if k != "pmu"})


def test_every_check_explains_itself():
    items = {c.item: c for c in inventory.checks(inventory.collect())}
    for name in ("cpu", "microcode", "kernel", "HZ", "tick mode", "PMU", "perf_event_paranoid", "ASLR (system)",
                 "governor", "turbo", "SMT", "NMI watchdog", "isolated CPUs", "tracefs"):
        assert items[name].meaning, name


def test_perfctl_info_prints_the_inventory():
    result = perfctl("info")
    assert result.returncode == 0 and "perf_event_paranoid" in result.stdout and "PMU" in result.stdout
    parsed = json.loads(perfctl("info", "--json").stdout)
    assert parsed["type"] == "machine" and parsed["hz"] == _config_hz()
