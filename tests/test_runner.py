"""Controlled runs, observed from inside the benchmark: ASLR, environment size, stdin, pinning, user,
timeouts, crashes and leftovers."""

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import measure, needs_root, value

from perfctl.agent.runner import RunError, make_control

SH = "/bin/sh"


def _observe(tmp_path, script, runs=1, **control):
    out = tmp_path / "observed"
    out.unlink(missing_ok=True)
    samples = measure([SH, "-c", script.replace("OUT", str(out))], ["page-faults"], runs=runs, **control)
    return samples, out.read_text().splitlines()


def test_aslr_is_off_for_the_benchmark_only(tmp_path):
    _, stacks = _observe(tmp_path, 'grep "\\[stack\\]" /proc/$$/maps >> OUT', runs=3)
    assert len(stacks) == 3 and len(set(stacks)) == 1, stacks
    _, randomized = _observe(tmp_path, 'grep "\\[stack\\]" /proc/$$/maps >> OUT', runs=4, aslr_off=False)
    assert len(set(randomized)) > 1, randomized
    # perfctl itself keeps its randomized layout: the personality is set for the spawn only.
    with open("/proc/self/personality") as f:
        assert int(f.read(), 16) & 0x0040000 == 0


@pytest.mark.parametrize("size", [1500, 4096, 10000])
def test_environment_has_exactly_the_configured_size(tmp_path, size):
    samples, lines = _observe(tmp_path, "wc -c < /proc/$$/environ > OUT", env_size=size, clean_env=True)
    assert int(lines[0]) == size == samples[0].environment.env_bytes


def test_environment_too_large_for_the_size_is_refused():
    with pytest.raises(RunError, match="--env-size"):
        make_control(env_size=100, base_env={"BIG": "x" * 200})


def test_stdin_is_dev_null(tmp_path):
    _, lines = _observe(tmp_path, "readlink /proc/$$/fd/0 > OUT")
    assert lines == ["/dev/null"]


def test_pinning_restricts_the_benchmark_to_one_cpu(tmp_path):
    cpu = max(os.sched_getaffinity(0))
    samples, lines = _observe(tmp_path, "grep Cpus_allowed_list /proc/$$/status > OUT", pin_cpu=cpu)
    assert lines[0].split()[-1] == str(cpu)
    assert samples[0].environment.pinned_cpu == cpu


def test_pinning_to_a_cpu_we_do_not_have_is_refused():
    with pytest.raises(RunError, match="--pin 4096"):
        make_control(pin_cpu=4096)


@needs_root
def test_run_as_user_runs_the_benchmark_unprivileged_and_still_counts():
    # pytest's own tmp_path sits under a mode-700 directory the user cannot enter.
    shared = tempfile.mkdtemp(prefix="perfctl-user-")
    os.chmod(shared, 0o777)
    samples, lines = _observe(Path(shared), "id -u > OUT", user="nobody", cwd=shared)
    assert lines == [str(__import__("pwd").getpwnam("nobody").pw_uid)]
    assert value(samples[0], "page-faults") > 0
    assert samples[0].environment.user == "nobody"


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] in "ZX"
    except FileNotFoundError:
        return True


def test_timeout_kills_the_whole_tree_and_records_the_run(tmp_path):
    pids = tmp_path / "pids"
    script = f"sleep 30 & echo $! >> {pids}; setsid sleep 30 & echo $! >> {pids}; sleep 30"
    start = time.monotonic()
    sample = measure([SH, "-c", script], ["page-faults"], timeout_s=0.5)[0]
    assert time.monotonic() - start < 10
    assert sample.outcome == "timeout" and sample.exit_status is None
    assert 0.5e9 <= sample.wall_ns < 5e9
    time.sleep(0.2)
    for pid in map(int, pids.read_text().split()):
        assert _dead(pid), f"descendant {pid} survived the timeout"


def test_processes_left_behind_in_the_group_are_killed(tmp_path):
    pids = tmp_path / "pids"
    sample = measure([SH, "-c", f"sleep 30 & echo $! > {pids}"], ["page-faults"])[0]
    assert sample.outcome == "ok"
    time.sleep(0.2)
    assert _dead(int(pids.read_text()))


def test_crash_is_recorded_with_its_signal():
    sample = measure([SH, "-c", "kill -SEGV $$"], ["page-faults"])[0]
    assert (sample.outcome, sample.signal, sample.exit_status) == ("signal", 11, None)


def test_nonzero_exit_is_recorded_with_the_last_stderr_line():
    sample = measure([SH, "-c", "echo first >&2; echo boom >&2; exit 3"], ["page-faults"])[0]
    assert (sample.outcome, sample.exit_status, sample.stderr_tail) == ("failed", 3, "boom")


def test_many_children_are_counted_and_reaped():
    sample = measure([SH, "-c", "for i in $(seq 300); do /bin/true & done; wait"], ["page-faults", "task-clock"])[0]
    assert sample.outcome == "ok"
    assert value(sample, "page-faults") >= 300 * 20


def test_warmups_are_recorded_and_flagged():
    samples = measure(["/bin/true"], ["page-faults"], runs=2, warmups=1)
    assert [(s.run_index, s.warmup) for s in samples] == [(0, True), (1, False), (2, False)]
    assert len({s.uuid for s in samples}) == 3
    assert len({s.benchmark for s in samples}) == 1


def _gates():
    from perfctl.agent import gate

    built = gate.find_gate()
    assert built.static, built.description  # setup installs gcc, so the static gate must build
    return {"static": built, "sh": gate.Gate(gate.sh_gate(), "sh", False)}


@pytest.mark.parametrize("name", ["static", "sh"])
def test_gate_exits_125_without_running_anything_when_never_released(tmp_path, name):
    marker = tmp_path / "ran"
    result = subprocess.run([*_gates()[name].prefix, "/bin/touch", str(marker)], stdin=subprocess.DEVNULL)
    assert result.returncode == 125 and not marker.exists()


@pytest.mark.parametrize("options, message", [(["-x", "1"], "unknown option"), (["-u", "abc"], "expected a number"),
                                              (["-C", "/nonexistent"], "working directory")])
def test_static_gate_refuses_bad_options_with_126(options, message):
    result = subprocess.run([*_gates()["static"].prefix, *options, "--", "/bin/true"], input=b"\n",
                            capture_output=True)
    assert result.returncode == 126 and message in result.stderr.decode()


def test_static_and_sh_gates_count_the_same(programs):
    from perfctl.agent import inventory, session
    from perfctl.agent.events import parse_events
    from perfctl.agent.runner import Runner

    inv = inventory.collect()
    counts = {}
    for name, prefix in _gates().items():
        backend = session.make_backend("perf_event", parse_events(["page-faults"]), inv)
        runner = Runner(prefix)
        try:
            plan = session.Plan([str(programs / "pagetouch"), "500"], 3, 0, make_control())
            counts[name] = {value(s, "page-faults") for s in session.run(plan, backend, runner, "test")}
        finally:
            backend.close()
            runner.close()
    assert counts["static"] == counts["sh"] and len(counts["static"]) == 1, counts


def test_default_environment_size_is_the_next_multiple_of_4096():
    small = make_control(base_env={"A": "1"})
    big = make_control(base_env={"BIG": "x" * 5000})
    assert small.env_bytes == 4096 and big.env_bytes == 8192
