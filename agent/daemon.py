"""The agent daemon: registers its machine, runs the jobs the server sends, streams every sample.

Durability: each sample goes to the spool (agent/spool.py) before it is sent, in the same transaction as
its job's progress; batches are deleted from the spool only when acked (the server acks after commit); after
a reconnect or a restart every unacked sample is sent again (the server stores a uuid once). A job's run k
has the uuid uuid5(job, k), so even a run repeated after a crash cannot be stored twice. Reconnection backs
off exponentially with jitter. Measurement runs in a worker thread; no os.fork() anywhere (benchmarks start
through posix_spawn), so the gRPC threads are safe.

Security: the agent runs only commands that match its local allowlist both as named (lexically, before the
filesystem is looked at: a refusal tells a client nothing it did not say) and as their real executable
(symlinks resolved), as argv (no shell), as the configured unprivileged user, in a clean fixed-size
environment. The allowlist is checked before any file a job names is opened; the job's input files are then
read with that user's permissions, regular files only, bounded in size and time (agent/session.py identify).

A job leaves 'queued' for the agent's own state 'preparing' before it is prepared; an agent that finds a job
still 'preparing' when it starts died preparing it, and fails it rather than trying again forever. A full
spool disk pauses measuring (the connection stays) until a write succeeds again; a damaged spool (SpoolError)
stops the agent, and run_agent raises that one error.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import re
import shutil
import threading
import time
import uuid as uuid_module
from dataclasses import dataclass, field

import grpc
from prometheus_client import Counter, Gauge

from perfctl import __version__, security, wire
from perfctl.agent import inventory, session
from perfctl.agent.events import DEFAULT_EVENTS, UnknownEvent, parse_events
from perfctl.agent.jobs import Delivery
from perfctl.agent.runner import RunError, Runner, make_control
from perfctl.agent.spool import Spool, SpoolError, SpoolFull
from perfctl.agent.spool_gauge import track_pending
from perfctl.model import BACKENDS, default_metric, labels_problem, metric_label, parse_backends
from perfctl.output import STOP_SIGNALS
from perfctl.report.stat import describe_failure, rounds_stopped
from perfctl.supervise import Backoff, supervised, supervised_thread
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc
from perfctl.wire import job_run_uuid

log = logging.getLogger("perfctl.agent")

SPOOLED = Counter("perfctl_agent_samples_spooled_total", "Samples measured and written to the spool")
ACKED = Counter("perfctl_agent_samples_acked_total", "Samples acked by the server")
BATCHES_PENDING = Gauge("perfctl_agent_batches_pending", "Batches sent and not yet acked")
CONNECTED = Gauge("perfctl_agent_connected", "1 while registered with the server")
SPOOL_FULL = Gauge("perfctl_agent_spool_full", "1 while the spool's filesystem is full (measuring paused)")
WINDOW = 4  # batches in flight
SPOOL_RETRY_MAX = 8.0  # seconds between tries of a spool write while its disk is full
LINGER = 0.05  # seconds to let a batch fill once samples arrive: fewer, larger commits on the server


@dataclass
class AgentConfig:
    server: str
    name: str
    spool_dir: str
    token: str
    allow: list[str]
    user: str | None
    tls: security.TlsFiles = field(default_factory=security.TlsFiles)
    insecure: bool = False
    workdir: str = "/"
    audit_every_hours: float = 24.0
    backoff_max: float = 30.0
    batch_max: int = 500


_GLOB_CHARACTERS = re.compile(r"[*?\[]")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """An --allow pattern as a regular expression for re.fullmatch: ``**`` matches any characters, ``/``
    included; ``*`` any characters within one path component; ``?`` one character other than ``/``;
    ``[...]`` one character of a class as in fnmatch (``[!...]`` negates), never ``/``.

    fnmatch's ``*`` also matches ``/``, so ``/opt/bench/*`` allowed every program below /opt/bench,
    whatever directory (or symlink to /) was made there.
    """
    out, i, n = [], 0, len(pattern)
    while i < n:
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            while i < n and pattern[i] == "*":
                i += 1
            continue
        char = pattern[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = i + (pattern[i:i + 1] == "!")
            end += pattern[end:end + 1] == "]"  # a ] right after [ or [! is a member, as in fnmatch
            end = pattern.find("]", end)
            if end < 0:
                out.append(re.escape(char))  # no closing ]: a literal [, as in fnmatch
                continue
            members = pattern[i:end]
            negate = members.startswith("!")
            members = "".join("\\" + c if c in "\\[]&~|^" else c for c in members[negate:])
            out.append(f"(?!/)[{'^' if negate else ''}{members}]")
            i = end + 1
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


def resolve_pattern(pattern: str) -> str:
    """The pattern with its directories before the first wildcard resolved (os.path.realpath), as the
    executable is: ``/bin/*`` allows /bin/true where /bin is a symlink to /usr/bin. A pattern without
    wildcards is resolved whole: allowing a symlink allows the file it names."""
    parts = pattern.split("/")
    literal = next((k for k, part in enumerate(parts) if _GLOB_CHARACTERS.search(part)), len(parts))
    if literal == len(parts):
        return os.path.realpath(pattern)
    head = os.path.realpath("/".join(parts[:literal]) or "/")
    return head.rstrip("/") + "/" + "/".join(parts[literal:])


def matches(path: str, patterns: list[str]) -> bool:
    """Whether the path, as it is (nothing resolved here), matches one of the patterns as written or with
    their directories resolved (resolve_pattern), by glob_regex's rules."""
    return any(glob_regex(form).fullmatch(path) for pattern in patterns
               for form in dict.fromkeys((pattern, resolve_pattern(pattern))))


def allowed(executable: str, patterns: list[str]) -> bool:
    """Whether the executable's real path (symlinks resolved: a symlink to / in an allowed directory
    must not open every program) matches one of the patterns (glob_regex's rules)."""
    return matches(os.path.realpath(executable), patterns)


class NotAllowed(Exception):
    """A job's program is outside the agent's --allow patterns; the message names it as the client did."""


def allowed_program(argv0: str, patterns: list[str], path: str | None, workdir: str) -> str:
    """The real path of a job's program, checked against the allowlist: NotAllowed when it is outside,
    RunError when it is inside but missing.

    The program as the client named it is judged first, lexically (made absolute against ``workdir``,
    normalised with os.path.normpath; a bare name is looked up in the clean environment's PATH, whose
    directories are public): when no pattern matches it, the refusal repeats it as given and nothing of the
    filesystem was looked at, so a client learns neither whether a path exists nor where a symlink points
    (the agent is root). Only then is its real path resolved and judged too; that refusal does not name
    the target either, and "not found" is said only of a path inside the allowlist.
    """
    refusal = NotAllowed(f"{argv0} is not allowed by this agent's --allow patterns")
    if "\0" in argv0:  # never a path
        raise refusal
    if "/" in argv0:
        named = os.path.normpath(os.path.join(workdir, argv0))
    else:
        directories = [os.path.normpath(os.path.join(workdir, entry or "."))
                       for entry in (path if path is not None else os.defpath).split(os.pathsep)]
        if not any(matches(os.path.join(directory, argv0), patterns) for directory in directories):
            raise refusal
        found = shutil.which(argv0, path=os.pathsep.join(directories))
        if found is None:
            raise RunError(f"command not found in PATH: {argv0}")
        named = os.path.normpath(found)
    if not matches(named, patterns):
        raise refusal
    real = os.path.realpath(named)
    if not matches(real, patterns):
        raise refusal
    if not os.path.exists(real):
        raise RunError(f"command not found: {argv0}")
    return real


SIDE_LABEL = "ab"  # an --until-settled job's commands are labelled ab=A, ab=B, ... as `perfctl ab` labels them


def job_order(job_id: str, warmups: int, rounds: int, commands: int, shuffled: bool) -> list[tuple[bool, int, int]]:
    """The runs of a job as (warmup, run_index, command): warmups first, then rounds in which every command
    runs once (ABAB, not AABB). An --until-settled job's rounds are in a random order seeded by the job id,
    so a restarted agent (and run k's uuid5(job, k)) meets the same order."""
    order = [(True, w, c) for w in range(warmups) for c in range(commands)]
    rng = random.Random(int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big"))
    for r in range(rounds):
        members = list(range(commands))
        if shuffled:
            rng.shuffle(members)
        order += [(False, warmups + r, c) for c in members]
    return order


@dataclass(frozen=True)
class SequentialRule:
    metric: str
    margin: float
    confidence: float
    min_rounds: int


def _sequential_rule(job, support: dict[str, str | None]) -> tuple[SequentialRule | None, str | None]:
    """An --until-settled job's rule, checked again here (the server may be older or hostile), or why not."""
    from perfctl.analysis.ab import confidence_problem

    spec = job.sequential
    if len(job.commands) < 2:
        return None, "--until-settled needs at least two commands"
    if not 0 < spec.margin < 1:
        return None, "--until-settled: margin must be strictly between 0 and 1"
    problem = confidence_problem(spec.confidence)
    if problem:
        return None, f"--until-settled: {problem}"
    if SIDE_LABEL in job.labels:
        return None, f"the label {SIDE_LABEL} is the --until-settled job's own"
    counted = {label for label, reason in support.items() if reason is None}
    metric = metric_label(spec.metric, counted) if spec.metric else default_metric(counted)
    if metric is None:
        return None, f"--until-settled: metric {spec.metric!r} is not counted by the job here"
    return SequentialRule(metric, spec.margin, spec.confidence, min(spec.min_rounds, job.repetitions)), None


class _Rounds:
    """An --until-settled job's decision, kept as its runs are measured: the metric values of each round's
    runs (those measured before a restart come from the spool), fed to the sequential comparison
    (analysis/ab.py) once a round is whole. A round with a run that did not count the metric is left out."""

    def __init__(self, rule: SequentialRule, order, commands: int, values: dict[int, float]):
        from perfctl.analysis.ab import SequentialSuite

        self.rule, self.order, self.values = rule, order, dict(values)
        self.suite = SequentialSuite(commands, rule.margin, rule.confidence, rule.min_rounds)
        self.rounds = self.left_out = 0
        self._members: dict[int, list[int]] = {}
        for index, (warmup, run_index, _) in enumerate(order):
            if not warmup:
                self._members.setdefault(run_index, []).append(index)

    def value(self, sample) -> float | None:
        value = sample.metric_value(self.rule.metric) if sample.outcome == "ok" else None
        return value if value is not None and value > 0 else None

    def replay(self, next_index: int) -> str | None:
        """Decide on the rounds measured before a restart; the job's end message if they settled it."""
        for members in self._members.values():
            if members[-1] < next_index:
                settled = self._round(members)
                if settled:
                    return settled
        return None

    def measured(self, index: int, value: float | None) -> str | None:
        """Run ``index`` gave ``value``; the job's end message if its round settled the job."""
        if value is not None:
            self.values[index] = value
        members = self._members.get(self.order[index][1])
        return self._round(members) if members and members[-1] == index else None

    def _round(self, members: list[int]) -> str | None:
        if all(i in self.values for i in members):
            self.suite.add_round({self.order[i][2]: self.values[i] for i in members})
            self.rounds += 1
        else:
            self.left_out += 1
        if not self.suite.undecided():  # each settled (from min_rounds on) or not alike: more rounds change nothing
            return self.summary(settled=True)
        return None

    def summary(self, settled: bool) -> str:
        head = f"{'settled' if not self.suite.unsettled() else 'not alike'} after {self.rounds} rounds" if settled \
            else f"not settled after {self.rounds} rounds (the runs asked for are done)"
        parts = []
        for i, s in self.suite.settlements().items():
            interval = "-" if s.low is None or s.high is None else f"[{s.low:.4f}, {s.high:.4f}]"
            verdict = s.verdict.value if s.alike else f"not alike (a change seen at round {s.change.seen_at})"
            parts.append(f"{chr(ord('A') + i)}: {verdict}{', ' + s.beyond if s.beyond else ''}, "
                         f"A/{chr(ord('A') + i)} {'-' if s.ratio is None else f'{s.ratio:.4f}'} {interval}")
        left = f"; {self.left_out} rounds left out (a run did not count {self.rule.metric})" \
            if self.left_out else ""
        return f"{head} on {self.rule.metric}: " + "; ".join(parts) + left


class Agent:
    def __init__(self, config: AgentConfig, spool: Spool | None = None):
        self.config = config
        self.spool = track_pending(spool or Spool(config.spool_dir))  # the gauge follows it, connected or not
        self.inventory = inventory.collect()
        self.stopping = threading.Event()
        self._job_wakeup = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._new_samples: asyncio.Event | None = None
        self._backends: dict[tuple, session.Backend] = {}
        self._said: set[str] = set()
        self._backends_lock = threading.Lock()
        self._runner = Runner()
        self._current_job: str | None = None
        self._spool_full = False
        self._spool_full_lock = threading.Lock()
        self._spool_error: SpoolError | None = None
        self.backoff, self.heartbeat_s = 0.5, float(config.backoff_max)

    # --- the measurement worker (a thread) ---

    def _notify_sender(self) -> None:
        if self._loop is not None and self._new_samples is not None:
            self._loop.call_soon_threadsafe(self._new_samples.set)

    def _backend(self, names: str, events: tuple[str, ...]) -> session.Backend:
        """The backend for a job's backend list (e.g. "perf_event,ebpf"), made once per list and events.
        Why eBPF cannot run here is logged once; such jobs are measured with perf_event alone."""
        key = (names, events)
        with self._backends_lock:  # the network side asks too (_machine_info)
            return self._open_backend(key)

    def _open_backend(self, key: tuple[str, tuple[str, ...]]) -> session.Backend:
        names, events = key
        if key not in self._backends:
            try:
                parsed = parse_backends(names)
            except ValueError as err:
                raise RunError(str(err)) from None
            backend, note = session.open_backend(parsed, parse_events(list(events)), self.inventory)
            if note and note not in self._said:
                self._said.add(note)
                log.warning("%s", note)
            self._backends[key] = backend
        return self._backends[key]

    def _audit_due(self) -> str | None:
        """Why the machine should be audited now (never audited, microcode or kernel changed, schedule)."""
        if self.config.audit_every_hours <= 0:
            return None
        fingerprint = f"{self.inventory.kernel.release} {self.inventory.cpu.microcode}"
        last = self.spool.meta("audit_time_ns")
        if last is None:
            return "never audited"
        if self.spool.meta("audit_fingerprint") != fingerprint:
            return "kernel or microcode changed"
        if time.time_ns() - int(last) > self.config.audit_every_hours * 3600e9:
            return "scheduled"
        return None

    def _audit(self, why: str) -> None:
        import json

        from perfctl.agent.audit import run_audit

        log.info("auditing the counters (%s)", why)
        try:
            report = run_audit()
        except Exception as err:  # noqa: BLE001 - an audit that cannot run must not stop the jobs
            log.error("audit failed: %s", err)
            report = None
        fingerprint = f"{self.inventory.kernel.release} {self.inventory.cpu.microcode}"
        meta = {"audit_time_ns": str(time.time_ns()), "audit_fingerprint": fingerprint}
        if report is None:
            self._spool_write(self.spool.add_audit, str(uuid_module.uuid4()), "", {**meta, "audit_failed": "1"})
            return
        self._spool_write(self.spool.add_audit, report.audit_id, json.dumps(report.to_dict()), meta)
        try:
            from perfctl.agent.audit import save_latest

            save_latest(report)
        except OSError as err:
            log.warning("could not keep the audit for corrections: %s", err)
        log.info("audit %s: %s", report.audit_id, report.verdict)

    def _spool_write(self, write, *args, **kwargs) -> bool:
        """A spool write from the worker, waiting (backing off to SPOOL_RETRY_MAX s) while the spool's disk is
        full: the job pauses, the connection stays, nothing spooled is lost. False if the agent stopped."""
        delay = 1.0
        while True:
            try:
                write(*args, **kwargs)
            except SpoolFull as err:
                self._spool_is_full(err)
                if self.stopping.wait(delay):
                    return False
                delay = min(delay * 2, SPOOL_RETRY_MAX)
                self._release_wal()
                continue
            self._spool_has_space()
            return True

    def _release_wal(self) -> None:
        """Before a write is tried again on a full disk: the space the spool's WAL holds, given back."""
        try:
            self.spool.release_wal()
        except SpoolFull:
            pass  # still no room to checkpoint into; the write tried next says so

    def _spool_is_full(self, err: SpoolFull) -> None:
        with self._spool_full_lock:
            if self._spool_full:
                return  # said once per episode, not per retry
            self._spool_full = True
        SPOOL_FULL.set(1)
        log.error("%s; measuring paused until the spool's filesystem has space again (retrying every few s)", err)

    def _spool_has_space(self) -> None:
        with self._spool_full_lock:
            if not self._spool_full:
                return
        # a write the spool's reserve let through (a job's record, an ack) does not mean a sample can be
        if not self.spool.room_for_samples():
            return
        with self._spool_full_lock:
            if not self._spool_full:
                return
            self._spool_full = False
        SPOOL_FULL.set(0)
        log.info("the spool is writable again; measuring resumed")

    def _spool_damaged(self, err: SpoolError) -> None:
        """A spool that cannot be trusted stops the agent, worker and network side; run() raises the error
        (perfctl agent: one line, exit 2)."""
        with self._spool_full_lock:
            if self._spool_error is None:
                self._spool_error = err
        self.stop()

    def worker(self) -> None:
        """The measurement thread, restarted after any failure but a damaged spool (perfctl/supervise.py)."""
        try:
            supervised_thread("measurement worker", self._work_until_stopped, self.stopping, logger=log,
                              fatal=(SpoolError,))
        except SpoolError as err:
            self._spool_damaged(err)

    def _work_until_stopped(self) -> None:
        while not self.stopping.is_set():
            self._work()

    def _work(self) -> None:
        why = self._audit_due()
        if why:
            self._audit(why)
        jobs = self.spool.unfinished_jobs()
        if not jobs:
            self._job_wakeup.wait(1.0)
            self._job_wakeup.clear()
            return
        for job_id in jobs:
            if self.stopping.is_set():
                break
            try:
                self._run_job(job_id)
            except SpoolError:
                raise
            except RunError as err:  # a run cannot start as asked (perf-stat with --user): the job's reason
                log.error("job %s failed: %s", job_id, err)
                self._spool_write(self.spool.set_job_state, job_id, "failed", str(err)[:1000])
            except Exception as err:  # noqa: BLE001 - a bug in one job must not stop the agent's worker
                log.exception("job %s failed", job_id)
                self._spool_write(self.spool.set_job_state, job_id, "failed",
                                  f"agent error: {type(err).__name__}: {err}"[:1000])
            finally:
                self._current_job = None
                self._notify_sender()

    def _prepare(self, job_id: str, job: pb.Job):
        """Control, commands and backend of a job, or the (state, message) that ends it. Every program is
        checked against the allowlist (allowed_program) before anything opens a file a job names. The job's
        labels are checked here too (the server may be hostile or older): they go into every sample."""
        problem = labels_problem(job.labels)
        if problem:
            return "refused", problem
        control = make_control(clean_env=True, user=self.config.user, cwd=self.config.workdir,
                               timeout_s=job.timeout_seconds or None)
        path = dict(control.env).get("PATH")
        programs = []
        for command in job.commands:
            argv = list(command.argv)
            if not argv:
                return "failed", "a command without a program"
            try:
                real = allowed_program(argv[0], self.config.allow, path, self.config.workdir)
            except NotAllowed as err:
                return "refused", str(err)
            programs.append((argv, command.name or None, real))
        if job.HasField("sequential"):  # one benchmark name, the commands told apart by the label ab
            programs = [(argv, programs[0][1], real) for argv, _, real in programs]
        commands = [session.identify(argv, control, name, executable=real) for argv, name, real in programs]
        backend = self._backend(job.backend or "perf_event", tuple(job.events) or DEFAULT_EVENTS)
        rule = None
        if job.HasField("sequential"):
            rule, problem = _sequential_rule(job, backend.support())
            if problem:
                return "refused", problem
        corrector = None
        if backend.name == "perf_event" and len(commands) == 1:
            from perfctl.agent.audit import make_corrector

            corrector, statement = make_corrector(self.inventory, commands[0][0], commands[0][1], control, self._runner,
                                                  parse_events(list(job.events) or list(DEFAULT_EVENTS)),
                                                  ebpf="ebpf" in backend.names)
            if statement:
                log.info("job %s: %s", job_id, statement)
        return control, commands, backend, corrector, rule

    def _run_job(self, job_id: str) -> None:
        spec, next_index, state = self.spool.job(job_id)
        job = pb.Job.FromString(spec)
        if state == "preparing":
            # The agent stopped (killed, crashed, hung) preparing this job: again could end so, on every restart.
            self._spool_write(self.spool.set_job_state, job_id, "failed",
                              "the agent stopped while preparing this job; not tried again")
            return
        # Out of 'queued'/'running' before anything that could block, so a restart cannot loop on this job.
        if not self._spool_write(self.spool.set_job_state, job_id, "preparing", report=False):
            return
        self._current_job = job_id
        try:
            prepared = self._prepare(job_id, job)
        except (RunError, UnknownEvent) as err:
            prepared = ("failed", str(err))
        if len(prepared) == 2:
            self._spool_write(self.spool.set_job_state, job_id, *prepared)
            return
        if self.stopping.is_set():  # a clean stop: this job starts again with the agent
            self._spool_write(self.spool.set_job_state, job_id, state, report=False)
            return
        control, commands, backend, corrector, rule = prepared
        order = job_order(job_id, job.warmups, job.repetitions, len(commands), shuffled=rule is not None)
        if not self._spool_write(self.spool.set_job_state, job_id, "running"):
            return
        self._notify_sender()
        environment = session.environment_of(control)
        labels = [dict(job.labels) for _ in commands]
        rounds = None
        if rule is not None:
            labels = [{**job.labels, SIDE_LABEL: chr(ord("A") + c)} for c in range(len(commands))]
            rounds = _Rounds(rule, order, len(commands), self.spool.round_values(job_id))
            done = rounds.replay(next_index)
            if done:  # the agent stopped between the deciding run and the job's end
                self._spool_write(self.spool.set_job_state, job_id, "done", done)
                return
        stored = set(job.stored_runs)  # a retried job: these runs reached the server before it was lost
        failure = ""  # how a measured run failed: the first this agent saw (one before a restart may have, too)
        for index in range(next_index, len(order)):
            if self.stopping.is_set():
                return
            if index in stored:
                continue
            warmup, run_index, which = order[index]
            resolved, bench = commands[which]
            sample_uuid = job_run_uuid(job_id, index)
            sample = session.measure_once(backend, self._runner, resolved, bench, control, environment,
                                          run_index=run_index, warmup=warmup, sample_uuid=sample_uuid,
                                          machine_id=self.inventory.machine_id, job_id=job_id,
                                          corrector=corrector, labels=labels[which])
            if self.stopping.is_set():  # a run the stop cut short measures nothing: it runs again at restart
                return
            if sample.outcome != "ok" and not warmup and not failure:
                failure = f"; a measured run that failed: {describe_failure(sample)}"
            value = rounds.value(sample) if rounds is not None and not warmup else None
            # While the disk is full the measured run waits here; if the agent stops meanwhile, the run
            # (whose index was not advanced) is measured again, under the same uuid.
            if not self._spool_write(self.spool.add_sample, sample_uuid,
                                     wire.sample_to_proto(sample).SerializeToString(), job_id, index + 1, value):
                return
            SPOOLED.inc()
            self._notify_sender()
            if rounds is not None and sample.outcome != "ok":  # the rounds stop at it, as ab's do (warmup or not)
                stopped = rounds_stopped(labels[which][SIDE_LABEL], sample)
                self._spool_write(self.spool.set_job_state, job_id, "failed", stopped)
                return
            settled = rounds.measured(index, value) if rounds is not None else None
            if settled:
                self._spool_write(self.spool.set_job_state, job_id, "done", settled)
                return
        self._spool_write(self.spool.set_job_state, job_id, "done",
                          (rounds.summary(settled=False) if rounds is not None else
                           f"{len(order) - len(stored)} runs" + (f" ({len(stored)} stored before the retry)"
                                                                if stored else "")) + failure)

    # --- the network side (asyncio) ---

    def _machine_info(self) -> pb.MachineInfo:
        import json

        backend = self._backend("perf_event,ebpf", DEFAULT_EVENTS)  # loads eBPF now, once, if it can run here
        usable = [name for name in BACKENDS if name != "ebpf" or name in backend.names]
        info = pb.MachineInfo(name=self.config.name, machine_id=self.inventory.machine_id,
                              inventory_json=json.dumps(self.inventory.to_dict()), backends=usable,
                              agent_version=__version__)
        for label, reason in backend.support().items():
            info.events.add(event=label, supported=reason is None, reason=reason or "")
        if "ebpf" not in backend.names:
            info.events.add(event="ebpf", supported=False, reason=next(iter(self._said), "ebpf unavailable"))
        return info

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._new_samples = asyncio.Event()
        worker = threading.Thread(target=self.worker, name="perfctl-measure", daemon=True)
        worker.start()
        try:  # a bug in the connection's tasks: logged, counted, connected again (perfctl/supervise.py)
            await supervised("agent connection", self._connect_until_stopped, logger=log, stopping=self.stopping,
                             backoff=Backoff(most=self.config.backoff_max))
        finally:
            # whatever ends the network side ends the worker before run_agent closes the spool under it (a
            # stop signal has done so already: its run's tree is not killed a second time meanwhile)
            if not self.stopping.is_set():
                self.stop()
            worker.join(timeout=5)
        if self._spool_error is not None:
            raise self._spool_error

    async def _connect_until_stopped(self) -> None:
        """Connected to a server until the agent stops; of several (--server A,B), the next in turn after each
        lost connection; the spool holds what was not acked meanwhile. A reconnect waits at most heartbeat_s, the
        interval the server last gave (3 per lease): a live agent's lease holds once any server answers again."""
        metadata = (("authorization", f"Bearer {self.config.token}"),)
        info = self._machine_info()
        servers = security.split_servers(self.config.server)
        turn = 0
        while not self.stopping.is_set():
            server = servers[turn % len(servers)]
            turn += 1
            channel = security.channel(server, self.config.tls, self.config.insecure,
                                       options=[("grpc.keepalive_time_ms", 10000), ("grpc.keepalive_timeout_ms", 5000),
                                                ("grpc.keepalive_permit_without_calls", 1),
                                                ("grpc.http2.max_pings_without_data", 0)])
            try:
                stub = rpc.AgentServiceStub(channel)
                response = await stub.Register(pb.RegisterRequest(machine=info), metadata=metadata, timeout=5)
                log.info("registered with %s as %s", server, self.config.name)
                CONNECTED.set(1)
                self.backoff, self.heartbeat_s = 0.5, response.heartbeat_seconds or 10
                delivery = Delivery(self.spool, lambda: self._current_job, self._spool_write_async, self._job_wakeup)
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._send(stub, metadata, min(response.max_batch_samples or 500,
                                                                     self.config.batch_max)))
                    group.create_task(delivery.heartbeat(stub, metadata, self.heartbeat_s))
                    group.create_task(delivery.watch(stub, metadata))
                    group.create_task(self._report(stub, metadata))
                    group.create_task(self._until_stopped())
            except* grpc.aio.AioRpcError as group_error:
                for err in group_error.exceptions:
                    log.warning("server %s: %s: %s", server, err.code().name, err.details())
            except* _Stopped:
                pass
            except* _StreamEnded as group_error:
                log.warning("server %s: %s", server, group_error.exceptions[0])
            except* SpoolError as group_error:
                self._spool_damaged(group_error.exceptions[0])
            finally:
                CONNECTED.set(0)
                BATCHES_PENDING.set(0)
                await channel.close()
            if not self.stopping.is_set():
                delay = min(self.backoff * (0.5 + random.random()), self.heartbeat_s)
                log.info("reconnecting in %.1f s", delay)
                await self._sleep(delay)
                self.backoff = min(self.backoff * 2, self.config.backoff_max, self.heartbeat_s)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the agent is asked to stop."""
        deadline = time.monotonic() + seconds
        while not self.stopping.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, deadline - time.monotonic()))

    async def _spool_write_async(self, write, *args):
        """_spool_write for the network side: waits without blocking the event loop, so heartbeats go on
        while the disk is full. The write's result; _Stopped if the agent stopped meanwhile."""
        delay = 1.0
        while True:
            try:
                result = await asyncio.to_thread(write, *args)
            except SpoolFull as err:
                self._spool_is_full(err)
                await self._sleep(delay)
                if self.stopping.is_set():
                    raise _Stopped from None
                delay = min(delay * 2, SPOOL_RETRY_MAX)
                await asyncio.to_thread(self._release_wal)
                continue
            self._spool_has_space()
            return result

    async def _until_stopped(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(0.2)
        raise _Stopped

    async def _send(self, stub, metadata, max_batch: int) -> None:
        call = stub.StreamSamples(metadata=metadata)
        in_flight: dict[int, list[int]] = {}
        window = asyncio.Semaphore(WINDOW)

        async def read_acks() -> None:
            try:
                async for ack in call:
                    seqs = in_flight.pop(ack.sequence, [])
                    await self._spool_write_async(self.spool.acked, seqs)
                    ACKED.inc(len(seqs))
                    BATCHES_PENDING.set(len(in_flight))
                    window.release()
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    seqs = in_flight.get(wire.refused_batch(err), [])
                    await self._spool_write_async(self.spool.reject, seqs, err.details() or "invalid")
                    log.error("server refused %d samples as invalid (kept in the spool's rejected table): %s",
                              len(seqs), err.details())
                raise
            finally:
                # a sender waiting for room in a full window would wait forever once no ack can come
                # (the heartbeats and job watch may well go on): every slot freed, it wakes and sees the end
                for _ in range(WINDOW):
                    window.release()

        def ended() -> _StreamEnded:
            """The call's error, if it ended with one (AioRpcError, raised); else that it ended."""
            reader.result()
            return _StreamEnded("the server closed the sample stream")

        reader = asyncio.create_task(read_acks())
        last_seq, sequence = 0, 0
        try:
            while True:
                if reader.done():
                    raise ended()
                rows = await asyncio.to_thread(self.spool.pending, last_seq, max_batch)
                if not rows:
                    self._new_samples.clear()
                    try:
                        await asyncio.wait_for(self._new_samples.wait(), 1.0)
                        await asyncio.sleep(LINGER)
                    except TimeoutError:
                        pass
                    continue
                await window.acquire()
                if reader.done() or call.done():
                    # the stream ended while this waited (the server went away): the reader has, or is about
                    # to have, the call's error; writing would raise InvalidStateError, which killed the agent
                    await asyncio.wait([reader])
                    raise ended()
                sequence += 1
                in_flight[sequence] = [seq for seq, _ in rows]
                last_seq = rows[-1][0]
                BATCHES_PENDING.set(len(in_flight))
                await call.write(pb.SampleBatch(sequence=sequence,
                                                samples=[pb.Sample.FromString(payload) for _, payload in rows]))
        finally:
            reader.cancel()
            call.cancel()

    async def _report(self, stub, metadata) -> None:
        while True:
            for job_id, state, message, runs in await asyncio.to_thread(self.spool.unreported):
                if state in ("done", "failed") and await asyncio.to_thread(self.spool.runs_unsent, job_id):
                    # a job ends on the server once its runs are stored there: whoever waits for it
                    # (perfctl submit --wait) then compares every run, not those acked so far
                    continue
                try:
                    await stub.ReportJob(pb.JobReport(job_id=job_id, state=state, message=message, samples=runs),
                                         metadata=metadata, timeout=10)
                except grpc.aio.AioRpcError as err:
                    if err.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                        raise
                    log.warning("server refused the report of job %s (%s); not sent again", job_id, err.details())
                await self._spool_write_async(self.spool.mark_reported, job_id, state)
            for audit_id, report in await asyncio.to_thread(self.spool.unreported_audits):
                if report:
                    await stub.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report), metadata=metadata,
                                           timeout=10)
                await self._spool_write_async(self.spool.mark_audit_reported, audit_id)
            await asyncio.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM, SIGINT, SIGHUP: the run in progress is killed with its process tree (perfctl's signal
        policy) and not recorded; the job resumes at that run, under the same uuid, when the agent restarts."""
        self.stopping.set()
        self._job_wakeup.set()
        self._runner.kill_running()


class _Stopped(Exception):
    pass


class _StreamEnded(Exception):
    """The sample stream ended without an error while the connection stood: reconnect, and every batch not
    acked is sent again."""


async def run_agent(config: AgentConfig, spool: Spool | None = None) -> None:
    """Run the agent until it is stopped (SIGTERM, SIGINT, SIGHUP: perfctl/output.py STOP_SIGNALS). A spool
    found damaged meanwhile stops it and is raised as the one SpoolError, never inside an ExceptionGroup."""
    agent = Agent(config, spool)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, agent.stop)
    try:
        await agent.run()
    finally:
        agent.spool.close()
