"""The agent daemon: registers its machine, runs the jobs the server sends, streams every sample.

A job is received and handed over: its programs are checked against the allowlist (agent/allowlist.py), its
commands identified, and its runs measured as `perfctl stat` and `perfctl ab` measure theirs
(agent/measurement.py: the same runner start, correction and rounds). The connection to the server is the
uplink's (agent/uplink.py).

Durability: each sample goes to the spool (agent/spool.py) before it is sent, in the same transaction as
its job's progress; batches are deleted from the spool only when acked (the server acks after commit); after
a reconnect or a restart every unacked sample is sent again (the server stores a uuid once). A job's run k
has the uuid uuid5(job, k), so even a run repeated after a crash cannot be stored twice. Measurement runs in
a worker thread; no os.fork() anywhere (benchmarks start through posix_spawn), so the gRPC threads are safe.

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
import faulthandler
import logging
import threading
import time
import uuid as uuid_module
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from perfctl import __version__, security, wire
from perfctl.agent import inventory, session
from perfctl.agent.allowlist import NotAllowed, allowed_program
from perfctl.agent.events import DEFAULT_EVENTS, UnknownEvent, check_tracepoints, parse_events
from perfctl.agent.hooks import HookFailed, Hooks, kill_hooks
from perfctl.agent.measurement import Measurement, SequentialRule, SettlingRounds, Unusable, job_order
from perfctl.agent.runner import RunError, Runner, make_control
from perfctl.agent.spool import GroupCommit, Spool, SpooledRun, SpoolError, SpoolFull
from perfctl.agent.spool_gauge import track_pending
from perfctl.agent.uplink import SPOOL_RETRY_MAX, Uplink
from perfctl.failures import describe_failure, rounds_stopped
from perfctl.model import (
    BACKENDS,
    HOOKS,
    SIDE_LABEL,
    compared_metric,
    job_hook_words,
    labels_problem,
    parse_backends,
    side_letter,
)
from perfctl.output import STOP_SIGNALS, take_stop_held_at_start
from perfctl.supervise import Backoff, supervised, supervised_thread
from perfctl.v1 import fleet_pb2 as pb
from perfctl.wire import job_run_uuid

log = logging.getLogger("perfctl.agent")

# A stop takes well under a second (the run in progress is killed, the held runs committed, the connection
# closed: at most 0.5 s in 25 stops of a busy machine). One still going after this long is a bug: the log gets
# every thread's stack, to find it, and the process ends as a kill -9 would end it (the spool loses nothing
# committed; the runs held are measured again), so that no stop needs a SIGKILL from whoever asked for it.
STOP_LIMIT_S = 12.0
SPOOLED = Counter("perfctl_agent_samples_spooled_total", "Samples measured and written to the spool")
SPOOL_FULL = Gauge("perfctl_agent_spool_full", "1 while the spool's filesystem is full (measuring paused)")


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


class _JobEnds(Exception):
    """A job ends before its runs: (state, message) as the spool records it."""


def _job_hooks(job, control, allow: list[str], workdir: str) -> Hooks | None:
    """The job's --prepare/--setup/--cleanup (agent/hooks.py), None without any. Each is split into words,
    never given to a shell, and its program passes the allowlist as the job's commands do (allowed_program,
    before any file is looked at): _JobEnds "refused" naming the hook otherwise, checked again here (the
    server may be older or hostile). RunError when an allowed program is missing."""
    programs, path = {}, dict(control.env).get("PATH")
    for hook in HOOKS:
        for command in getattr(job, hook):
            try:
                words = job_hook_words(command)
                programs[command] = (allowed_program(words[0], allow, path, workdir), tuple(words))
            except (ValueError, NotAllowed) as err:
                raise _JobEnds("refused", f"--{hook} {command}: {err}") from None
    try:
        return Hooks.of(len(job.commands), control.cwd, False, programs=programs, control=control,
                        **{hook: list(getattr(job, hook)) for hook in HOOKS})
    except ValueError as err:
        raise _JobEnds("refused", str(err)) from None


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
    try:
        metric = compared_metric(spec.metric or None, support)
    except ValueError:
        return None, f"--until-settled: metric {spec.metric!r} is not counted by the job here"
    return SequentialRule(metric, spec.margin, spec.confidence, min(spec.min_rounds, job.repetitions)), None


class Agent:
    def __init__(self, config: AgentConfig, spool: Spool | None = None):
        self.config = config
        self.spool = track_pending(spool or Spool(config.spool_dir))  # the gauge follows it, connected or not
        self.inventory = inventory.collect()
        self.stopping = threading.Event()
        self.job_wakeup = threading.Event()
        self._uplink: Uplink | None = None  # made by run(), on its event loop
        self._loop: asyncio.AbstractEventLoop | None = None  # run()'s
        self._backends: dict[tuple, session.Backend] = {}
        self._said: set[str] = set()
        self._backends_lock = threading.Lock()
        self._runner = Runner()
        self._encoder = wire.SampleEncoder()  # the worker's alone
        self.current_job: str | None = None  # the job the worker measures now (the heartbeats name it)
        self._spool_full = False
        self._spool_full_lock = threading.Lock()
        self._spool_error: SpoolError | None = None

    # --- the measurement worker (a thread) ---

    def _notify_sender(self) -> None:
        if self._uplink is not None:
            self._uplink.samples_spooled()

    def _backend(self, names: str, events: tuple[str, ...]) -> session.Backend:
        """The backend for a job's backend list (e.g. "perf_event,ebpf"), made once per list and events.
        Why eBPF cannot run here is logged once; such jobs are measured with perf_event alone."""
        key = (names, events)
        with self._backends_lock:  # the network side asks too (machine_info)
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
            from perfctl.agent.audit_report import save_latest

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
                self.spool_is_full(err)
                if self.stopping.wait(delay):
                    return False
                delay = min(delay * 2, SPOOL_RETRY_MAX)
                self.release_wal()
                continue
            self.spool_has_space()
            return True

    def release_wal(self) -> None:
        """Before a write is tried again on a full disk: the space the spool's WAL holds, given back."""
        try:
            self.spool.release_wal()
        except SpoolFull:
            pass  # still no room to checkpoint into; the write tried next says so

    def spool_is_full(self, err: SpoolFull) -> None:
        with self._spool_full_lock:
            if self._spool_full:
                return  # said once per episode, not per retry
            self._spool_full = True
        SPOOL_FULL.set(1)
        log.error("%s; measuring paused until the spool's filesystem has space again (retrying every few s)", err)

    def spool_has_space(self) -> None:
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

    def spool_damaged(self, err: SpoolError) -> None:
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
            self.spool_damaged(err)

    def _work_until_stopped(self) -> None:
        while not self.stopping.is_set():
            self._work()

    def _work(self) -> None:
        why = self._audit_due()
        if why:
            self._audit(why)
        jobs = self.spool.unfinished_jobs()
        if not jobs:
            self.job_wakeup.wait(1.0)
            self.job_wakeup.clear()
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
                self.current_job = None
                self._notify_sender()

    def _prepare(self, job_id: str, job: pb.Job) -> tuple[Measurement, SequentialRule | None]:
        """The job handed over: its Measurement (agent/measurement.py, as `perfctl stat` and `perfctl ab` make
        theirs) and its stopping rule (None: every run asked for runs); _JobEnds when it cannot run. Every
        program is checked against the allowlist (allowed_program) before anything opens a file a job names.
        The job's labels are checked here too (the server may be hostile or older): they go into every sample."""
        problem = labels_problem(job.labels)
        if problem:
            raise _JobEnds("refused", problem)
        control = make_control(clean_env=True, user=self.config.user, cwd=self.config.workdir,
                               timeout_s=job.timeout_seconds or None)
        path = dict(control.env).get("PATH")
        programs = []
        for command in job.commands:
            argv = list(command.argv)
            if not argv:
                raise _JobEnds("failed", "a command without a program")
            try:
                real = allowed_program(argv[0], self.config.allow, path, self.config.workdir)
            except NotAllowed as err:
                raise _JobEnds("refused", str(err)) from None
            programs.append((argv, command.name or None, real))
        hooks = _job_hooks(job, control, self.config.allow, self.config.workdir)
        if job.HasField("sequential"):  # one benchmark name, the commands told apart by the label ab
            programs = [(argv, programs[0][1], real) for argv, _, real in programs]
        specs = parse_events(list(job.events) or list(DEFAULT_EVENTS))
        try:  # as stat and ab check them: a misspelt tracepoint is refused, not an 'unsupported' reading
            check_tracepoints(specs)
        except UnknownEvent as err:
            raise _JobEnds("refused", str(err)) from None
        identified = [session.identify(argv, control, name, executable=real) for argv, name, real in programs]
        backend = self._backend(job.backend or "perf_event", tuple(job.events) or DEFAULT_EVENTS)
        rule = None
        if job.HasField("sequential"):
            rule, problem = _sequential_rule(job, backend.support())
            if problem:
                raise _JobEnds("refused", problem)
        measurement = Measurement(backend, control, self.inventory.machine_id, job_id=job_id, runner=self._runner,
                                  hooks=hooks)
        for which, ident in enumerate(identified):  # each command its own corrector, as ab's sides have
            corrector, statement = measurement.correct(self.inventory, ident, specs)
            if statement:
                log.info("job %s: %s", job_id, statement)
            labels = dict(job.labels) if rule is None else {**job.labels, SIDE_LABEL: side_letter(which)}
            measurement.add(ident, labels, corrector)
        return measurement, rule

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
        self.current_job = job_id
        try:
            measurement, rule = self._prepare(job_id, job)
        except _JobEnds as ends:
            self._spool_write(self.spool.set_job_state, job_id, *ends.args)
            return
        except (RunError, UnknownEvent) as err:
            self._spool_write(self.spool.set_job_state, job_id, "failed", str(err))
            return
        try:
            if self.stopping.is_set():  # a clean stop: this job starts again with the agent
                self._spool_write(self.spool.set_job_state, job_id, state, report=False)
                return
            self._measure(job_id, job, measurement, rule, next_index)
        finally:
            try:
                measurement.close()  # its loops end: the worker thread gets its CPUs back between jobs
            except HookFailed as err:  # a --cleanup after a stop or a failed run: the job's end is said already
                log.error("job %s: %s", job_id, err)

    def _measure(self, job_id: str, job: pb.Job, measurement: Measurement, rule: SequentialRule | None,
                 next_index: int) -> None:
        """The job's runs from ``next_index`` on (a restarted agent resumes), spooled with the job's progress a
        few at a time (spool.GroupCommit), until they are done or the stopping rule ends them; then its end."""
        held = GroupCommit(self.spool.group_bytes())
        try:
            end = self._runs(job_id, job, measurement, rule, next_index, held)
            if end is not None:  # its --cleanup before its end is told, so that a failing one fails the job
                measurement.clean_up()
        except RunError:  # the job fails (_work says why); the runs measured before it are kept
            self._commit(held)
            raise
        except HookFailed as failed:  # as stat and ab say it: the hook, its status, its command; runs kept
            # a hook the agent's stop killed: the job resumes at its next run when the agent restarts
            end = None if self.stopping.is_set() else ("failed", f"{failed}; the runs measured before it are kept")
        if self._commit(held) and end is not None:
            self._spool_write(self.spool.set_job_state, job_id, *end)

    def _commit(self, held: GroupCommit) -> bool:
        """The samples ``held``, committed (and the sender told); False if the agent stopped meanwhile (on a
        full disk): those runs are measured again when it restarts."""
        runs = held.take()
        if not runs:
            return True
        if not self._spool_write(self.spool.add_samples, runs):
            return False
        SPOOLED.inc(len(runs))
        self._notify_sender()
        return True

    def _runs(self, job_id: str, job: pb.Job, measurement: Measurement, rule: SequentialRule | None,
              next_index: int, held: GroupCommit) -> tuple[str, str] | None:
        """Measure the job's runs into ``held``; the job's end (state, message), or None when the agent stops
        (the job resumes at its first run not committed)."""
        order = job_order(job_id, job.warmups, job.repetitions, len(measurement.commands), shuffled=rule is not None)
        if not self._spool_write(self.spool.set_job_state, job_id, "running"):
            return None
        self._notify_sender()
        rounds = None
        if rule is not None:
            rounds = SettlingRounds(rule, order, len(measurement.commands), self.spool.round_values(job_id))
            done = rounds.replay(next_index)
            if done:  # the agent stopped between the deciding run and the job's end
                return "done", done
        stored = set(job.stored_runs)  # a retried job: these runs reached the server before it was lost
        failure = ""  # how a measured run failed: the first this agent saw (one before a restart may have, too)
        for index in range(next_index, len(order)):
            if self.stopping.is_set():
                return None
            if index in stored:
                continue
            warmup, run_index, which = order[index]
            sample_uuid = job_run_uuid(job_id, index)
            try:
                sample = measurement.measure(which, run_index=run_index, warmup=warmup, sample_uuid=sample_uuid)
            except RunError:
                if self.stopping.is_set():  # the stop killed the gate's loop with the run: it runs again at restart
                    return None
                raise
            if self.stopping.is_set():  # a run the stop cut short measures nothing: it runs again at restart
                return None
            if sample.outcome != "ok" and not warmup and not failure:
                failure = f"; a measured run that failed: {describe_failure(sample)}"
            value, unusable = None, None
            if rounds is not None and not warmup and sample.outcome == "ok":
                try:
                    value = rounds.usable(which, sample, run_index - job.warmups)
                except Unusable as err:  # the rounds stop at it, as ab's do; the run itself is kept
                    unusable = str(err)
            # While the disk is full the commit waits; if the agent stops meanwhile, the runs held (whose
            # index was not advanced) are measured again, under the same uuids.
            run = SpooledRun(sample_uuid, self._encoder.encode(sample), job_id, index + 1, value)
            if held.add(run, sample.wall_ns) and not self._commit(held):
                return None
            if rounds is not None and sample.outcome != "ok":  # the rounds stop at it, as ab's do (warmup or not)
                return "failed", rounds_stopped(side_letter(which), sample)
            if unusable:
                return "failed", unusable
            settled = rounds.measured(index, value) if rounds is not None else None
            if settled:
                return "done", settled
        return "done", ((rounds.summary(settled=False) if rounds is not None else
                         f"{len(order) - len(stored)} runs" + (f" ({len(stored)} stored before the retry)"
                                                              if stored else "")) + failure)

    # --- what the network side (agent/uplink.py) asks of the agent ---

    def machine_info(self) -> pb.MachineInfo:
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
        self._uplink = Uplink(self)
        worker = threading.Thread(target=self.worker, name="perfctl-measure", daemon=True)
        worker.start()
        try:  # a bug in the connection's tasks: logged, counted, connected again (perfctl/supervise.py)
            await supervised("agent connection", self._uplink.connect_until_stopped, logger=log,
                             stopping=self.stopping, backoff=Backoff(most=self.config.backoff_max))
        finally:
            # whatever ends the network side ends the worker before run_agent closes the spool under it (a
            # stop signal has done so already: its run's tree is not killed a second time meanwhile)
            if not self.stopping.is_set():
                self.stop()
            await asyncio.to_thread(worker.join, 5)  # the event loop stays free: a stop that lasts says where
        if self._spool_error is not None:
            raise self._spool_error

    def stop(self) -> None:
        """SIGTERM, SIGINT, SIGHUP: the run in progress is killed with its process tree (perfctl's signal
        policy) and not recorded; the job resumes at that run, under the same uuid, when the agent restarts."""
        if not self.stopping.is_set():
            log.info("stopping")
            faulthandler.dump_traceback_later(STOP_LIMIT_S, exit=True)  # from a C thread: whatever holds the GIL
            if self._loop is not None:  # from a signal's handler or the worker (a damaged spool): the tasks' awaits
                self._loop.call_soon_threadsafe(self._loop.call_later, STOP_LIMIT_S / 2, _say_awaits)
        self.stopping.set()
        self.job_wakeup.set()
        self._runner.kill_running()
        kill_hooks()


def _say_awaits() -> None:
    """Where each task of a stop that lasts waits: the chain of awaits below its coroutine (faulthandler's
    stacks show threads only, and a task's own get_stack stops at its outermost coroutine)."""
    for task in asyncio.all_tasks():
        chain, awaited = [], task.get_coro()
        while awaited is not None and len(chain) < 30:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}" if frame
                         else type(awaited).__name__)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        log.warning("still stopping after %.0f s: task %s awaits %s", STOP_LIMIT_S / 2, task.get_name(),
                    " > ".join(chain))


async def run_agent(config: AgentConfig, spool: Spool | None = None) -> None:
    """Run the agent until it is stopped (SIGTERM, SIGINT, SIGHUP: perfctl/output.py STOP_SIGNALS). A spool
    found damaged meanwhile stops it and is raised as the one SpoolError, never inside an ExceptionGroup."""
    agent = Agent(config, spool)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, agent.stop)
    if take_stop_held_at_start() is not None:  # a stop received while the agent started: it stops now
        agent.stop()
    try:
        await agent.run()
    finally:
        agent.spool.close()
