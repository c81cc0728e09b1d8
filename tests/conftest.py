"""Shared fixtures and helpers: the example programs built from examples/, probes that decide what this machine
can count, a way to run the real `perfctl` command and read what it says (one_line), fleets of real servers and
agents (fleet_in, fleet, module_fleet) and a server called with grpc stubs (server, served), sample files made by
hand (sample_record, jsonl_file) and names that would drive a terminal (HOSTILE)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from perfctl.agent import inventory, tracefs

ROOT = Path(__file__).resolve().parent.parent

# pytest loads readline, which exports COLUMNS (80 without a terminal) into the environment every perfctl
# started here inherits: unset, the commands lay out piped output as a user's pipe or CI log gets it
# (perfctl/output.py: 100 columns). A test that is about the width sets it itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
    os.unsetenv(_name)


@pytest.fixture(scope="session")
def programs(tmp_path_factory) -> Path:
    """examples/*.c compiled into a fresh directory (independent of deploy/setup.sh's build)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler: deploy/setup.sh installs gcc")
    out = tmp_path_factory.mktemp("programs")
    os.chmod(out, 0o755)
    sources = sorted((ROOT / "examples").glob("*.c"))
    assert sources, f"no example sources in {ROOT / 'examples'}"
    for source in sources:
        subprocess.run([cc, "-O2", "-o", str(out / source.stem), str(source)], check=True)
    return out


def tracepoint_reason() -> str | None:
    """Why tracepoint counters cannot open here, or None when they can."""
    events, state = tracefs.events_dir()
    if events is None:
        return state
    if os.geteuid() != 0 and open("/proc/sys/kernel/perf_event_paranoid").read().strip() not in ("-1", "0"):
        return "tracepoint counters need root or perf_event_paranoid <= 0"
    return None


def pmu_reason() -> str | None:
    present, reason = inventory.probe_pmu(inventory._cpuinfo())
    return None if present else reason


def ebpf_reason() -> str | None:
    """Why the ebpf backend cannot load here (agent/runacct.py says), or None when it can."""
    probed = inventory.probe_ebpf()
    return None if probed.available else probed.reason


needs_tracepoints = pytest.mark.skipif(tracepoint_reason() is not None, reason=f"probe: {tracepoint_reason()}")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="probe: euid is not 0 (run-as-user needs root)")
needs_pmu = pytest.mark.skipif(pmu_reason() is not None, reason=f"probe: {pmu_reason()}")
needs_no_pmu = pytest.mark.skipif(pmu_reason() is None, reason="probe: this machine has a PMU")
needs_ebpf = pytest.mark.skipif(ebpf_reason() is not None, reason=f"probe: {ebpf_reason()}")


TRACE_PIPE = "/sys/kernel/tracing/trace_pipe"  # a pseudo file whose read never ends


@pytest.fixture
def shared_dir():
    """A directory every user may enter (pytest's tmp_path is under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="perfctl-shared-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def bench_module(name: str):
    """bench/NAME.py imported as a module (the benchmarks are scripts, not a package), for the tests that
    check their simulations and figures."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


def perfctl(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Run the real command line, as a user would."""
    return subprocess.run([sys.executable, "-m", "perfctl", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


_INVENTORY = None


def measure(argv, events, runs=1, backend="perf_event", warmups=0, **control):
    """Measure through the library API with real counters; returns the Samples. ``backend`` is a --backend
    value ("perf_event,ebpf" too)."""
    from perfctl.agent import session
    from perfctl.agent.events import parse_events
    from perfctl.agent.runner import Runner, make_control
    from perfctl.model import parse_backends

    global _INVENTORY
    _INVENTORY = _INVENTORY or inventory.collect()
    counters, fallback = session.open_backend(parse_backends(backend), parse_events(events), _INVENTORY)
    assert fallback is None, fallback
    runner = Runner()
    try:
        plan = session.Plan([str(a) for a in argv], runs, warmups, make_control(**control))
        return list(session.run(plan, counters, runner, _INVENTORY.machine_id))
    finally:
        counters.close()
        runner.close()


def pmu_as_if(inv):
    """``inv`` as if a PMU were present: make_corrector's decisions, no counter read."""
    import dataclasses

    from perfctl.agent.machine import Pmu

    return dataclasses.replace(inv, pmu=Pmu(present=True, reason="as if"))


def audit_document(inv, **fields) -> dict:
    """A complete audit report of ``inv``'s machine in its JSON form (a=b=1), with ``fields`` replaced."""
    from perfctl.agent import errata

    fit = {"a": 1.0, "b": 1.0, "intercept": 0.0, "a_interval": [1.0, 1.0], "b_interval": [1.0, 1.0],
           "intercept_interval": [0.0, 0.0], "residual_scale": 0.0, "n": 20, "confidence": 0.95, "set_aside": 0,
           "method": "as if"}
    erratum = {**errata.DEFAULT.__dict__, "models": None}
    return {"audit_id": "c" * 8, "machine_id": inv.machine_id, "hostname": inv.hostname, "time_ns": time.time_ns(),
            "seconds": 1.0, "kernel": inv.kernel.release, "microcode": inv.cpu.microcode, "aslr": "as if",
            "verdict": "trusted", "reasons": [], "complete": True, "interrupted_by": None, "not_checked": [],
            "backends": ["perf_event"], "fit": fit, "erratum": erratum, "kernels": [], "checks": [], "runs": 5,
            **fields}


def read_records(path) -> list[dict]:
    """Every record of a perfctl JSON Lines file in order (the machine's, the samples'): one JSON object per
    line, as perfctl's readers take them (formats/jsonl.py read_dataset). A torn line fails the test."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sample_of(record: dict):
    """The Sample a sample record holds (a line of perfctl's JSON Lines, or the wire's dict of one:
    perfctl/wire.py proto_to_dict), for a test that compares it with what was measured or sends it again.
    perfctl itself never reads records back into Samples (read_dataset reads the dicts)."""
    from perfctl.model import Benchmark, Environment, Reading, Sample

    fields = {key: item for key, item in record.items() if key != "type"}
    bench, environment = fields.pop("benchmark"), fields.pop("environment")
    return Sample(benchmark=Benchmark(**{**bench, "argv": tuple(bench["argv"])}),
                  environment=Environment(**environment),
                  readings=tuple(Reading(**reading) for reading in fields.pop("readings")),
                  backends=tuple(fields.pop("backends")), labels=dict(fields.pop("labels", None) or {}), **fields)


# A name from a file, an agent or another client that would drive a terminal or rich if shown raw, and how
# perfctl shows it (perfctl/text.py visible: ESC as \\x1b).
ESC = "\x1b"
HOSTILE = "evil\x1b[2J\x1b]0;owned\x07[bold red]x[/]\u202eab\nforged"
HOSTILE_SHOWN = "evil\\x1b[2J\\x1b]0;owned\\x07[bold red]x[/]\\u202eab\\nforged"


def sample_record(name="bench", run_index=0, wall_ns=1_000_000, instructions=1000, **changes):
    """A perfctl JSON Lines sample record as `perfctl stat` writes it (docs/samples.md)."""
    record = {
        # a uuid per benchmark and run: a uuid met twice is one run (docs/samples.md, "The identity of a run")
        # and values: two files of other values are other runs, a run on both sides of a compare is refused
        "type": "sample", "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{run_index}/{wall_ns}/{instructions}")),
        "machine_id": "0123456789abcdef",
        "benchmark": {"name": name, "argv": ["/bin/true"], "executable": "/bin/true",
                      "executable_sha256": "a" * 64, "input_digest": "b" * 64},
        "job_id": None, "run_index": run_index, "warmup": False, "start_time_ns": 1_700_000_000_000_000_000,
        "wall_ns": wall_ns, "outcome": "ok", "exit_status": 0, "signal": None,
        "environment": {"aslr_off": True, "env_bytes": 4096, "pinned_cpu": None, "user": "root", "cwd": "/"},
        "readings": [
            {"event": "instructions", "backend": "perf_event", "scope": "user", "status": "ok", "unit": "count",
             "value": instructions, "time_enabled": 10, "time_running": 10},
            {"event": "cycles", "backend": "perf_event", "scope": "user", "status": "multiplexed", "unit": "count",
             "value": 500, "time_enabled": 10, "time_running": 5, "scaled": 1000.0, "reason": "counted 50%"},
            {"event": "branches", "backend": "perf_event", "scope": "user", "status": "unsupported",
             "unit": "count", "reason": "no PMU"},
        ],
        "backends": ["perf_event"], "stderr_tail": None, "max_rss_kib": 1000, "schema_version": 1, "extra": {},
    }
    record.update(changes)
    return record


def jsonl_file(path, records):
    """A perfctl JSON Lines file at ``path``: a machine line, then ``records``; its path as a string."""
    lines = [json.dumps({"type": "machine", "machine_id": "0123456789abcdef"})]
    lines += [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def sample_records(name="bench", n=6, base=1000):
    """``n`` runs of ``name`` (sample_record) whose instructions count up from ``base``."""
    return [sample_record(name, run_index=i, wall_ns=1_000_000 + 1000 * i, instructions=base + i) for i in range(n)]


def one_line(result: subprocess.CompletedProcess, prefix: str = "", *, code: int | None = None) -> str:
    """The one line a command wrote on stderr, perfctl's rule for every error a user can cause (no
    traceback), having checked the exit code ``code`` and that the line starts with ``prefix`` when given."""
    if code is not None:
        assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def value(sample, label):
    reading = sample.reading(label)
    assert reading is not None, f"no reading {label}"
    assert reading.status == "ok", f"{label}: {reading.status} ({reading.reason})"
    return reading.value


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server (Debian's), private to the test session."""
    from fleet import Postgres, postgres_reason

    reason = postgres_reason()
    if reason:
        pytest.skip(reason)
    cluster = Postgres()
    yield cluster
    cluster.stop()


@contextlib.contextmanager
def fleet_in(directory, hosts: int = 0):
    """Servers and agents as real processes (tests/fleet.py) in ``directory``, each stopped at the end of the
    block however it ends: the one way tests start a fleet (the fixtures below, a test that starts several).
    ``hosts``: a server host and that many agent hosts as network namespaces (fleet.NetworkLab), the fleet's
    ``network``, deleted once the fleet has stopped."""
    from fleet import Fleet, NetworkLab

    started = Fleet(directory)
    started.network = NetworkLab(hosts) if hosts else None
    try:
        yield started
    finally:
        try:
            started.stop_all()
        finally:
            if started.network is not None:
                started.network.close()


@pytest.fixture
def fleet(tmp_path):
    """A fleet (fleet_in) for one test."""
    with fleet_in(tmp_path) as started:
        yield started


@pytest.fixture(scope="module")
def module_fleet(tmp_path_factory):
    """A fleet (fleet_in) shared by a module's tests: its server fixture fills one server once."""
    with fleet_in(tmp_path_factory.mktemp("fleet")) as started:
        yield started


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A `perfctl server` (fleet.start_server, SQLite) shared by a module's tests that only make calls with grpc
    stubs (fleet.Server); box-a and box-b registered."""
    from fleet import start_server

    with fleet_in(tmp_path_factory.mktemp("server")) as started:
        running = start_server(started)
        running.register("box-a")
        running.register("box-b")
        yield running


@pytest.fixture
def served(database_url, fleet):
    """A `perfctl server` on each database (database_url: SQLite, PostgreSQL) with the machine "box" registered:
    (the fleet, the server's address, its QueryService stub, the client's call metadata)."""
    from fleet import server_database_args, start_server

    fleet.agent_token("box")  # before the server reads the tokens file
    running = start_server(fleet, db_args=server_database_args(database_url))
    try:
        running.register("box")
        yield fleet, running.address, running.query, running.client_md
    finally:
        running.channel.close()


@pytest.fixture(scope="module")
def measured():
    """Real samples of /bin/true (page-faults, task-clock) as the wire carries them."""
    from perfctl import wire

    return [wire.sample_to_proto(s) for s in measure(["/bin/true"], ["page-faults", "task-clock"], runs=6)]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        from perfctl.server.storage import database_url as url

        return url(str(tmp_path / "data"), None)
    return request.getfixturevalue("postgres").new_database()


def processes_with(*needles: str) -> list[int]:
    """Live processes (other than this one) whose command line holds every needle: how a test finds the
    processes of a benchmark it gave a unique argument, wherever they were reparented."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command_line = f.read()
        except OSError:
            continue
        if int(entry) != os.getpid() and all(needle.encode() in command_line for needle in needles):
            found.append(int(entry))
    return found


def signal_when(process: subprocess.Popen, ready, signum: int, what: str, *, settle: float = 0.0,
                timeout: float = 60) -> tuple[str, str]:
    """Send ``signum`` to ``process`` once ``ready()`` holds (then ``settle`` s more: into the work) and
    return its (stdout, stderr). Fails if ``what`` does not happen within ``timeout`` s; the process never
    outlives the call."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert time.monotonic() < deadline and process.poll() is None, f"{what} did not happen"
            time.sleep(0.005)
        time.sleep(settle)
        process.send_signal(signum)
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def stat_lines(tmp_path_factory):
    """One real `perfctl stat` file: its machine line and a sample line, the template of the files tests make."""
    path = tmp_path_factory.mktemp("stat") / "true.jsonl"
    result = perfctl("stat", "-r", "2", "-o", str(path), "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    machine = next(line for line in lines if line["type"] == "machine")
    sample = next(line for line in lines if line["type"] == "sample")
    assert any(r["event"] == "page-faults" and r["status"] == "ok" for r in sample["readings"])
    return machine, sample


@pytest.fixture
def ab_file(tmp_path) -> Path:
    """One file holding two labelled sides, as `perfctl ab -o` writes it."""
    path = tmp_path / "F.jsonl"
    for side in ("A", "B"):
        result = perfctl("stat", "-r", "5", "-e", "task-clock", "--no-progress", "--name", "true", "--label",
                         f"ab={side}", "-o", str(path), "--", "/bin/true")
        assert result.returncode == 0, result.stderr
    return path


def stored_long_ago(url: str, days: float, machine: str | None = None) -> None:
    """Stands for runs the server stored ``days`` ago: sets the server-stamped receipt (samples.received_ns,
    and series.received_ns, the latest receipt of each series) of the stored runs (of ``machine``, or all)
    with SQL. Retention deletes a run only once it is old by its start AND by its receipt (Storage.prune), and
    a test cannot wait for days: the runs it ages by their start are aged by their receipt with this."""
    from sqlalchemy import create_engine, text

    received = time.time_ns() - int(days * 86400e9)
    which = " WHERE machine = (SELECT id FROM machines WHERE name = :machine)" if machine is not None else ""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE samples SET received_ns = :received{which}"),
                         {"received": received, "machine": machine})
            conn.execute(text(f"UPDATE series SET received_ns = :received{which}"),
                         {"received": received, "machine": machine})
    finally:
        engine.dispose()


def read_terminal(fd: int) -> bytes:
    """Everything written to a pty's other end until it is closed (EIO once the writer closed it)."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)
