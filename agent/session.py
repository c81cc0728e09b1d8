"""A measurement: warmups then N runs of one benchmark with one backend, each run yielding a Sample.

Samples are yielded as each run ends, so the caller can write them at once and nothing measured is lost
when the measurement is interrupted.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from perfctl.agent.events import EventSpec
from perfctl.agent.machine import Inventory
from perfctl.agent.runner import Exit, RunControl, RunError, Runner, resolve_command
from perfctl.model import BACKENDS, Benchmark, Environment, Reading, Sample

_MAX_HASHED_INPUT = 256 << 20
HASH_SECONDS = 30.0  # for all of a command's input files; 256 MiB take ~1 s


class Backend(Protocol):
    """What every counter backend offers; one module per backend implements it."""

    name: str
    names: tuple[str, ...]  # the backends whose readings a run carries (Sample.backends)

    def support(self) -> dict[str, str | None]: ...

    def measure(self, runner: Runner, argv: list[str], control: RunControl) -> tuple[Exit, list[Reading]]: ...

    def close(self) -> None: ...


BACKEND_NAMES = BACKENDS


def make_backend(name: str, specs: list[EventSpec], inventory: Inventory, *,
                 ebpf_max_tasks: int | None = None) -> Backend:
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


def open_backend(names: tuple[str, ...], specs: list[EventSpec], inventory: Inventory, *,
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


def _file_digest(path: str, limit: int | None = None) -> str | None:
    """sha256 of a regular file's content; ``size-mtime:SIZE:MTIME_NS`` instead when it is larger than
    ``limit`` bytes; None when ``path`` is not a regular file. OSError when it cannot be read.

    Only regular files are opened, without following a symlink swapped in after the path was resolved, and
    non-blocking, so a FIFO or device put in its place cannot block the caller; the descriptor must be the
    file that was checked. At most the size stat reported is read: pseudo-files (procfs, sysfs, tracefs)
    report 0 or 4096 and are read no further, whatever their reads would produce.
    """
    real = os.path.realpath(path)
    checked = os.stat(real)
    if not stat.S_ISREG(checked.st_mode):
        return None
    if limit is not None and checked.st_size > limit:
        return f"size-mtime:{checked.st_size}:{checked.st_mtime_ns}"
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            return None
        digest = hashlib.sha256()
        remaining = opened.st_size
        while remaining > 0:
            block = os.read(fd, min(1 << 20, remaining))
            if not block:
                break
            digest.update(block)
            remaining -= len(block)
        return digest.hexdigest()
    finally:
        os.close(fd)


def input_digest(args: list[str], cwd: str) -> str:
    """Digest of the benchmark's input: its arguments, and the content of those that name regular files.

    stdin is always /dev/null, so arguments and the files they name are the input a run can see. A file
    above _MAX_HASHED_INPUT bytes counts by its size and modification time (``size-mtime:`` in the digested
    text says so); a file that cannot be read (for --user: that user may not read it) counts by its path
    alone, as does anything that is not a regular file.
    """
    digest = hashlib.sha256()
    for arg in args:
        digest.update(arg.encode(errors="surrogateescape") + b"\0")
        try:
            content = _file_digest(os.path.join(cwd, arg), _MAX_HASHED_INPUT)
        except (OSError, ValueError):  # ValueError: a NUL in the argument, never a path
            continue
        if content is not None:
            digest.update(content.encode())
    return digest.hexdigest()


_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}
_libc = ctypes.CDLL(None, use_errno=True)


def _become_for_files(uid: int, gid: int, groups: list[int]) -> None:
    """Make the calling thread (only: raw syscalls, not glibc's all-thread setgroups) open files as uid,
    gid and groups. A fsuid other than 0 also drops the capabilities that bypass file permissions."""
    number = _SYS_SETGROUPS.get(os.uname().machine)
    if number is None:
        raise RunError(f"cannot check file permissions for --user on {os.uname().machine}")
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if _libc.syscall(number, len(groups), array) != 0:
        raise RunError(f"setgroups for --user failed: {os.strerror(ctypes.get_errno())}")
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    # setfs*id return the previous value and no error: call again to read the value now in force
    if _libc.setfsuid(uid) != uid or _libc.setfsgid(gid) != gid:
        raise RunError("could not switch to --user's file permissions to read the benchmark's inputs")


def _digest_inputs(args: list[str], control: RunControl) -> str:
    """input_digest in a thread of its own, as --user when the control has one (so a client learns nothing
    of files that user cannot read), and at most HASH_SECONDS: a thread blocked in the kernel is left
    behind, the caller gets a RunError. The thread's credentials end with it."""
    result: dict[str, object] = {}

    def work() -> None:
        try:
            if control.user_ids is not None and os.geteuid() == 0:
                _become_for_files(*control.user_ids)
            result["digest"] = input_digest(args, control.cwd)
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            result["error"] = err

    thread = threading.Thread(target=work, name="perfctl-input-digest", daemon=True)
    thread.start()
    thread.join(HASH_SECONDS)
    if thread.is_alive():
        raise RunError(f"reading the benchmark's input files took more than {HASH_SECONDS:.0f} s; "
                       "is an argument a file on a stalled filesystem?")
    if "error" in result:
        raise result["error"]
    return result["digest"]


# The executable_sha256 of a command not identified yet: its program is made by its --setup (identify's
# ``after_setup``); Measurement identifies it after that setup ran, before its first run, so no sample has it
NOT_YET = "not-yet: made by --setup"


def identify(argv: list[str], control: RunControl, name: str | None = None, *,
             executable: str | None = None, after_setup: bool = False) -> tuple[list[str], Benchmark]:
    """Resolve the command (a RunError if it cannot run) and name the benchmark. ``executable``: the
    command's program already located (the agent's allowlisted real path), run instead of argv[0].
    ``after_setup``: the command has a --setup, which may build its program (hyperfine's documented use), so
    a program not found yet is no error here: the Benchmark's digests are NOT_YET, and agent/measurement.py
    identifies it once the setup ran."""
    path = dict(control.env).get("PATH")
    try:
        executable = resolve_command(executable or argv[0], path)
    except RunError:
        if not after_setup:
            raise
        return list(argv), Benchmark(name=name or os.path.basename(argv[0]), argv=tuple(argv), executable=argv[0],
                                     executable_sha256=NOT_YET, input_digest=NOT_YET)
    try:
        exe_digest = _file_digest(executable)
    except OSError as err:
        raise RunError(f"cannot read {executable}: {err.strerror}") from None
    if exe_digest is None:
        raise RunError(f"not an executable file (not a regular file): {executable}")
    bench = Benchmark(name=name or os.path.basename(argv[0]), argv=tuple(argv), executable=executable,
                      executable_sha256=exe_digest, input_digest=_digest_inputs(argv[1:], control))
    return [executable, *argv[1:]], bench


def files_seen(resolved: list[str], cwd: str) -> tuple:
    """What stat(2) says of the program and of each argument's file (device, inode, size, modification
    time; None where there is none): the cheap check of whether a hook changed a command's identity since
    it was identified (agent/measurement.py), before hashing it again."""
    seen = []
    for index, arg in enumerate(resolved):
        try:
            found = os.stat(arg if index == 0 else os.path.join(cwd, arg))
            seen.append((found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns))
        except (OSError, ValueError):  # ValueError: a NUL in the argument, never a path
            seen.append(None)
    return tuple(seen)


@dataclass(frozen=True)
class Plan:
    argv: list[str]
    runs: int
    warmups: int
    control: RunControl
    name: str | None = None
    job_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # carried by every sample (model.labels_problem)


def uuids() -> Iterator[str]:
    """Random (version 4, RFC 9562 section 5.4) UUIDs in their text form, from one getrandom() per 256: a
    call per run cost ~0.1 ms on these VMs. Formatted here rather than by uuid.UUID: its import (platform)
    cost ~3 ms of every start and its constructor a few us a run."""
    while True:
        pool = bytearray(os.urandom(16 * 256))
        for offset in range(0, len(pool), 16):
            pool[offset + 6] = pool[offset + 6] & 0x0F | 0x40  # version 4
            pool[offset + 8] = pool[offset + 8] & 0x3F | 0x80  # variant 10xx
            text = pool[offset:offset + 16].hex()
            yield f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def environment_of(control: RunControl) -> Environment:
    return Environment(aslr_off=control.aslr_off, env_bytes=control.env_bytes, pinned_cpu=control.pin_cpu,
                       user=control.user_name, cwd=control.cwd)


@dataclass(frozen=True)
class RunContext:
    """What every run of one measurement shares: the backend that counts it, the runner that starts it, its
    controls, and what each of its samples records of them (the environment, the machine, the job)."""

    backend: Backend
    runner: Runner
    control: RunControl
    environment: Environment
    machine_id: str
    job_id: str | None = None

    @classmethod
    def of(cls, backend: Backend, runner: Runner, control: RunControl, machine_id: str,
           job_id: str | None = None) -> RunContext:
        return cls(backend, runner, control, environment_of(control), machine_id, job_id)


@dataclass(frozen=True)
class Command:
    """One command as it is measured: its argv as identify resolved it, its Benchmark, the labels every
    sample of it carries (`perfctl stat --label`, a job's, ab's side; checked by the caller:
    model.labels_problem) and its corrector (agent/corrections.py make_corrector), which adds corrected
    instruction counts beside the raw ones."""

    resolved: list[str]
    bench: Benchmark
    labels: dict[str, str] = field(default_factory=dict)
    corrector: Callable[[list[Reading]], list[Reading]] | None = None


def measure_once(context: RunContext, command: Command, *, run_index: int, warmup: bool, sample_uuid: str,
                 extra: dict | None = None) -> Sample:
    """One controlled run of ``command``, as a Sample; ``extra`` joins the sample's extra (`perfctl ab`'s
    round, order and seed)."""
    exit_, readings = context.backend.measure(context.runner, command.resolved, context.control)
    if command.corrector is not None:
        readings = command.corrector(readings)
    return Sample(
        uuid=sample_uuid, machine_id=context.machine_id, benchmark=command.bench, job_id=context.job_id,
        run_index=run_index, warmup=warmup, start_time_ns=exit_.start_time_ns, wall_ns=exit_.wall_ns,
        outcome=exit_.outcome, exit_status=exit_.exit_status, signal=exit_.signal, environment=context.environment,
        readings=tuple(readings), backends=context.backend.names,
        stderr_tail=exit_.stderr_tail if exit_.outcome != "ok" else None, max_rss_kib=exit_.max_rss_kib,
        # only when there were any: a run that cleaned up after itself carries nothing extra
        extra={**(extra or {}), **({"outlived": exit_.outlived} if exit_.outlived else {})},
        labels=dict(command.labels))


def run(plan: Plan, backend: Backend, runner: Runner, machine_id: str, corrector=None,
        identified: tuple[list[str], Benchmark] | None = None) -> Iterator[Sample]:
    """Yield one Sample per run: ``plan.warmups`` flagged warmups, then ``plan.runs`` measured runs.
    ``identified`` is identify()'s result when the caller already has it (hashing is not free)."""
    if plan.runs < 1:
        raise RunError(f"the number of runs must be at least 1, got {plan.runs}")
    if plan.warmups < 0:
        raise RunError(f"the number of warmup runs cannot be negative, got {plan.warmups}")
    resolved, bench = identified or identify(plan.argv, plan.control, plan.name)
    context = RunContext.of(backend, runner, plan.control, machine_id, plan.job_id)
    command = Command(resolved, bench, plan.labels, corrector)
    sample_uuids = uuids()
    for index in range(plan.warmups + plan.runs):
        yield measure_once(context, command, run_index=index, warmup=index < plan.warmups,
                           sample_uuid=next(sample_uuids))
