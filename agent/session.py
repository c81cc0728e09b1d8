"""A measurement: warmups then N runs of one benchmark with one backend, each run yielding a Sample.

Samples are yielded as each run ends, so the caller can write them at once and nothing measured is lost
when the measurement is interrupted.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from perfctl.agent.events import EventSpec
from perfctl.agent.runner import Exit, RunControl, RunError, Runner, resolve_command
from perfctl.model import BACKENDS, Benchmark, Environment, Reading, Sample

_MAX_HASHED_INPUT = 256 << 20


class Backend(Protocol):
    """What every counter backend offers; one module per backend implements it."""

    name: str
    names: tuple[str, ...]  # the backends whose readings a run carries (Sample.backends)

    def support(self) -> dict[str, str | None]: ...

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]: ...

    def close(self) -> None: ...


BACKEND_NAMES = BACKENDS


def make_backend(name: str, specs: list[EventSpec], inventory: dict, *, ebpf_max_tasks: int | None = None) -> Backend:
    """The backend registry: the only place that maps a backend name to its module. ``ebpf`` raises
    runacct.Unavailable when eBPF cannot run here (open_backend falls back)."""
    if name == "perf_event":
        from perfctl.agent.perf_event import PerfEventBackend

        return PerfEventBackend(specs, inventory)
    if name == "perf-stat":
        from perfctl.agent.perf_stat import PerfStatBackend

        return PerfStatBackend(specs, inventory)
    if name == "dbi":
        from perfctl.agent.dbi import DbiBackend

        return DbiBackend(specs, inventory)
    if name == "ebpf":
        from perfctl.agent.ebpf import EbpfBackend

        return EbpfBackend(ebpf_max_tasks)  # None: runacct's default
    raise RunError(f"unknown backend {name!r} (available: {', '.join(BACKEND_NAMES)})")


def open_backend(names: tuple[str, ...], specs: list[EventSpec], inventory: dict, *,
                 ebpf_max_tasks: int | None = None) -> tuple[Backend, str | None]:
    """The backend for a --backend list (model.parse_backends checked it): one backend, or perf_event and
    ebpf counting the same runs. When eBPF cannot run here, the second value says why, once, and the
    measurement goes on with perf_event alone."""
    from perfctl.agent.runacct import Unavailable

    if "ebpf" not in names:
        return make_backend(names[0], specs, inventory), None
    try:
        tracker = make_backend("ebpf", specs, inventory, ebpf_max_tasks=ebpf_max_tasks)
    except Unavailable as err:
        return make_backend("perf_event", specs, inventory), f"ebpf unavailable: {err}; measuring with perf_event alone"
    if names == ("ebpf",):
        return tracker, None
    return Combined(make_backend("perf_event", specs, inventory), tracker), None


class Combined:
    """Two backends counting one run: the primary starts it, the tracker is armed with its pid through the
    runner before the benchmark leaves the gate. Readings are labelled by their backend."""

    def __init__(self, primary: Backend, tracker) -> None:
        self._primary, self._tracker = primary, tracker
        self.name = primary.name
        self.names = (*primary.names, *tracker.names)

    def support(self) -> dict[str, str | None]:
        support = dict(self._primary.support())
        for label, reason in self._tracker.support().items():
            support[label if label not in support else f"{label}@{self._tracker.name}"] = reason
        return support

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]:
        with runner.watching(self._tracker.arm):
            exit_, readings = self._primary.measure(runner, argv, control)
        return exit_, [*readings, *self._tracker.collect()]

    def close(self) -> None:
        self._primary.close()
        self._tracker.close()


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_digest(args: list[str], cwd: str) -> str:
    """Digest of the benchmark's input: its arguments, and the content of those that name regular files.

    stdin is always /dev/null, so arguments and the files they name are the input a run can see.
    """
    digest = hashlib.sha256()
    for arg in args:
        digest.update(arg.encode(errors="surrogateescape") + b"\0")
        path = os.path.join(cwd, arg)
        try:
            if os.path.isfile(path) and os.path.getsize(path) <= _MAX_HASHED_INPUT:
                digest.update(_sha256_file(path).encode())
        except OSError:
            continue
    return digest.hexdigest()


def identify(argv: list[str], control: RunControl, name: str | None = None) -> tuple[list[str], Benchmark]:
    """Resolve the command (a RunError if it cannot run) and name the benchmark."""
    path = dict(control.env).get("PATH")
    executable = resolve_command(argv[0], path)
    try:
        exe_digest = _sha256_file(executable)
    except OSError as err:
        raise RunError(f"cannot read {executable}: {err.strerror}") from None
    bench = Benchmark(name=name or os.path.basename(argv[0]), argv=tuple(argv), executable=executable,
                      executable_sha256=exe_digest, input_digest=input_digest(argv[1:], control.cwd))
    return [executable, *argv[1:]], bench


@dataclass(frozen=True)
class Plan:
    argv: list[str]
    runs: int
    warmups: int
    control: RunControl
    name: str | None = None
    job_id: str | None = None


def _uuids() -> Iterator[str]:
    """Random (version 4) UUIDs from one getrandom() per 256: a call per run cost ~0.1 ms on these VMs."""
    while True:
        pool = os.urandom(16 * 256)
        for offset in range(0, len(pool), 16):
            yield str(uuid.UUID(bytes=pool[offset:offset + 16], version=4))


def environment_of(control: RunControl) -> Environment:
    return Environment(aslr_off=control.aslr_off, env_bytes=control.env_bytes, pinned_cpu=control.pin_cpu,
                       user=control.user_name, cwd=control.cwd)


def measure_once(backend: Backend, runner: Runner, resolved: list[str], bench: Benchmark, control: RunControl,
                 environment: Environment, *, run_index: int, warmup: bool, sample_uuid: str, machine_id: str,
                 job_id: str | None = None, corrector=None) -> Sample:
    """One controlled run of a resolved command, as a Sample; ``corrector`` (agent/audit.py make_corrector)
    adds corrected instruction counts beside the raw ones."""
    exit_, readings = backend.measure(runner, resolved, control)
    if corrector is not None:
        readings = corrector(readings)
    return Sample(
        uuid=sample_uuid, machine_id=machine_id, benchmark=bench, job_id=job_id, run_index=run_index,
        warmup=warmup, start_time_ns=exit_.start_time_ns, wall_ns=exit_.wall_ns, outcome=exit_.outcome,
        exit_status=exit_.exit_status, signal=exit_.signal, environment=environment, readings=tuple(readings),
        backends=backend.names, stderr_tail=exit_.stderr_tail if exit_.outcome != "ok" else None,
        max_rss_kib=exit_.max_rss_kib)


def run(plan: Plan, backend: Backend, runner: Runner, machine_id: str, corrector=None,
        identified: tuple[list[str], Benchmark] | None = None) -> Iterator[Sample]:
    """Yield one Sample per run: ``plan.warmups`` flagged warmups, then ``plan.runs`` measured runs.
    ``identified`` is identify()'s result when the caller already has it (hashing is not free)."""
    if plan.runs < 1:
        raise RunError(f"the number of runs must be at least 1, got {plan.runs}")
    if plan.warmups < 0:
        raise RunError(f"the number of warmup runs cannot be negative, got {plan.warmups}")
    resolved, bench = identified or identify(plan.argv, plan.control, plan.name)
    environment = environment_of(plan.control)
    uuids = _uuids()
    for index in range(plan.warmups + plan.runs):
        yield measure_once(backend, runner, resolved, bench, plan.control, environment, run_index=index,
                           warmup=index < plan.warmups, sample_uuid=next(uuids), machine_id=machine_id,
                           job_id=plan.job_id, corrector=corrector)
