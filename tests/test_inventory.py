import json
import platform

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
    assert inv["hz"] == _config_hz()
    assert inv["perf_event_paranoid"] == int(open("/proc/sys/kernel/perf_event_paranoid").read())
    assert inv["aslr"] == int(open("/proc/sys/kernel/randomize_va_space").read())
    assert inv["kernel"]["release"] == platform.release()
    cpuinfo = open("/proc/cpuinfo").read()
    assert f"vendor_id\t: {inv['cpu']['vendor']}" in cpuinfo
    assert inv["machine_id"] == inventory.collect()["machine_id"]
    assert isinstance(inv["pmu"]["present"], bool) and inv["pmu"]["reason"]


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
