"""One measurement, however it is asked for: `perfctl stat` and `perfctl ab` parse their options and hand over
(perfctl/cli/), an agent receives a job and hands over (agent/daemon.py). What they then share is owned here:
the runner and how its runs start (the gate's loop wherever it can: LoopedGate, agent/run/looped.py, for the
fleet as for stat), each command's corrector, the context every sample records (session.RunContext), the
order of the runs (warmups, then rounds in a seeded order), and a comparison's sequential stopping rule with its
replay after an agent's restart. One run is session.measure_once; nothing else builds a Sample from a run.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from perfctl.agent.events import EventSpec, uncorrectable
from perfctl.agent.hooks import HookFailed, Hooks
from perfctl.agent.machine import Inventory
from perfctl.agent.runner import RunControl, RunError, Runner
from perfctl.agent.session import NOT_YET, Backend, Command, RunContext, files_seen, identify, measure_once, uuids
from perfctl.model import DETERMINISTIC_BACKENDS, Benchmark, Sample, side_letter


def corrector_for(inventory: Inventory, identified: tuple[list[str], Benchmark], control: RunControl,
                  runner: Runner, specs: list[EventSpec], ebpf: bool):
    """corrections.make_corrector's corrector and sentence for a perf_event run of ``identified`` (resolved argv,
    Benchmark). Where nothing can be corrected (events.uncorrectable) that is said without importing
    agent/corrections.py and what it imports, ~7 ms of every start."""
    impossible = uncorrectable(specs, inventory.pmu.present)
    if impossible is not None:
        return None, impossible
    from perfctl.agent.corrections import make_corrector

    return make_corrector(inventory, *identified, control, runner, specs, ebpf=ebpf)


class Measurement:
    """Commands measured with one backend, one runner and one set of run controls, each run one Sample
    (session.measure_once). Every caller's runs start alike: the runner's ``loop_runs`` is set here, so a run
    is started by the gate's loop wherever it can be (agent/run/looped.py), else by a gate of its own.

    ``runner``: one the caller keeps (the agent's, which its stop kills); :meth:`close` then ends only the
    loops this measurement started, else the runner made here. ``record``: called with every sample as its
    run ends (the CLI's outputs), so nothing measured is lost when the measurement is interrupted.
    """

    def __init__(self, backend: Backend, control: RunControl, machine_id: str, *, job_id: str | None = None,
                 runner: Runner | None = None, record: Callable[[Sample], object] | None = None,
                 hooks: Hooks | None = None):
        self._owns_runner = runner is None
        self.hooks = hooks
        # commands whose --setup was started (a failed one too: it may have done part of its work); each gets
        # its --cleanup in close()
        self._set_up: list[int] = []
        self.runner = Runner() if runner is None else runner
        self.runner.loop_runs = True  # the same start as `perfctl stat`'s, for ab and the fleet alike
        self.backend, self.control = backend, control
        self.context = RunContext.of(backend, self.runner, control, machine_id, job_id)
        self.commands: list[Command] = []
        self._seen: list[tuple] = []  # each command's files_seen when it was identified
        self._record = record
        self._uuids = uuids()

    def correct(self, inventory: Inventory, identified: tuple[list[str], Benchmark], specs: list[EventSpec]):
        """(corrector, the correction's sentence) for ``identified`` measured here: perf_event counts only;
        (None, "") for another backend."""
        if self.backend.name != "perf_event":
            return None, ""
        return corrector_for(inventory, identified, self.control, self.runner, specs,
                             ebpf="ebpf" in self.backend.names)

    def add(self, identified: tuple[list[str], Benchmark], labels: dict[str, str] | None = None,
            corrector=None) -> int:
        """A command to measure (session.identify's result), the labels its samples carry and its corrector;
        its index for :meth:`measure`."""
        resolved, bench = identified
        self.commands.append(Command(resolved, bench, dict(labels or {}), corrector))
        self._seen.append(files_seen(resolved, self.control.cwd) if self.hooks is not None else ())
        return len(self.commands) - 1

    def measure(self, which: int, *, run_index: int, warmup: bool, sample_uuid: str | None = None,
                extra: dict | None = None) -> Sample:
        """One run of command ``which``, recorded; ``sample_uuid`` defaults to a random one (a job's run k
        has its own: wire.job_run_uuid). Its --prepare runs first, and the command's --setup before its first
        run (agent/hooks.py: HookFailed when one fails). After them the command is identified again when they
        changed its program or an argument's file (:meth:`_identify_again`), so its samples carry what ran."""
        if self.hooks is not None:
            with self.runner.unpinned():  # a hook is not the benchmark: the loop's pinning is not for it
                if which not in self._set_up:
                    self._set_up.append(which)
                    self.hooks.run("setup", which)
                self.hooks.run("prepare", which)
            self._identify_again(which)
        sample = measure_once(self.context, self.commands[which], run_index=run_index, warmup=warmup,
                              sample_uuid=sample_uuid or next(self._uuids), extra=extra)
        if self._record is not None:
            self._record(sample)
        return sample

    def _identify_again(self, which: int) -> None:
        """Command ``which`` identified anew (session.identify: its program resolved and hashed, its inputs'
        digest) when stat(2) says its program or an argument's file is not what it was, or when it was not
        identified yet (session.NOT_YET: its --setup makes it). A rebuilt binary is another benchmark
        (docs/samples.md). HookFailed when the command still cannot run: its hooks were to make it."""
        command = self.commands[which]
        pending = command.bench.executable_sha256 == NOT_YET
        argv = list(command.bench.argv) if pending else command.resolved
        seen = files_seen(argv, self.control.cwd)
        if not pending and seen == self._seen[which]:
            return
        try:
            resolved, bench = identify(list(command.bench.argv), self.control, command.bench.name,
                                       executable=None if pending else command.resolved[0])
        except RunError as err:
            made_by = "--setup" if pending else "--setup or --prepare"
            raise HookFailed(f"{made_by} did not leave a command that runs: {err}") from None
        self.commands[which] = replace(command, resolved=resolved, bench=bench)
        self._seen[which] = files_seen(resolved, self.control.cwd)

    def measure_unrecorded(self, which: int, *, run_index: int) -> Sample:
        """One run of command ``which`` that is not a sample: not recorded, no hooks (stat's runs of the
        --shell with an empty command, which measure the shell's own cost)."""
        return measure_once(self.context, self.commands[which], run_index=run_index, warmup=False,
                            sample_uuid=next(self._uuids))

    def close(self) -> None:
        """The loops end (and the thread they pinned gets its CPUs back); a runner made here is closed. Then
        :meth:`clean_up`."""
        if self._owns_runner:
            self.runner.close()
        else:
            self.runner.close_loops()
        self.clean_up()

    def clean_up(self) -> None:
        """Every command whose --setup was started gets its --cleanup, once, each tried: the first that fails is raised
        (HookFailed). A fleet job calls it before it reports its end, so a failing cleanup fails the job."""
        failed = None
        with self.runner.unpinned():  # a hook is not the benchmark (a no-op once the loops are closed)
            for which in self._set_up:
                try:
                    self.hooks.run("cleanup", which)
                except HookFailed as err:
                    failed = failed or err
        self._set_up.clear()
        if failed is not None:
            raise failed


def job_seed(job_id: str) -> int:
    """The seed of a job's order: from its id, so a restarted agent (and run k's uuid5(job, k)) meets the
    same order."""
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big")


class Rounds:
    """The order of a measurement's runs: ``warmups`` warmup rounds, then rounds in which every command still
    measured runs once (ABAB, not AABB), in an order shuffled by ``seed`` (None: the commands' own order). A
    run's index counts rounds: warmup round k is run_index k, measured round r is run_index warmups + r."""

    def __init__(self, commands: int, warmups: int, seed: int | None = None):
        self.commands, self.warmups, self.seed = commands, warmups, seed
        self._rng = random.Random(seed) if seed is not None else None

    def warmup_runs(self) -> list[tuple[int, int]]:
        """(warmup round, command) of every warmup run, each round in the commands' order."""
        return [(k, c) for k in range(self.warmups) for c in range(self.commands)]

    def next_round(self, members: Iterable[int]) -> list[int]:
        """The order of the next round of ``members`` (every command still measured)."""
        order = list(members)
        if self._rng is not None:
            self._rng.shuffle(order)
        return order

    def order(self, rounds: int) -> list[tuple[bool, int, int]]:
        """Every run of a measurement of ``rounds`` rounds that no command leaves early, as (warmup,
        run_index, command): the order an agent's job follows and resumes."""
        runs = [(True, k, c) for k, c in self.warmup_runs()]
        for r in range(rounds):
            runs += [(False, self.warmups + r, c) for c in self.next_round(range(self.commands))]
        return runs


def job_order(job_id: str, warmups: int, rounds: int, commands: int, shuffled: bool) -> list[tuple[bool, int, int]]:
    """The runs of a job (Rounds.order): an --until-settled job's rounds in a random order seeded by the job
    id (job_seed), every other job's in the commands' order."""
    return Rounds(commands, warmups, job_seed(job_id) if shuffled else None).order(rounds)


@dataclass(frozen=True)
class SequentialRule:
    """When a comparison's rounds stop (`perfctl ab`'s options, a job's --until-settled): ``metric`` compared
    within ``margin`` at ``confidence``, nothing settled before ``min_rounds`` rounds (analysis/ab.py)."""

    metric: str
    margin: float
    confidence: float
    min_rounds: int


class Sequential:
    """A comparison's stopping rule: each whole round's metric values go to analysis/ab.py's SequentialSuite;
    the rounds stop once every comparison is settled (from min_rounds on) or not alike, since more rounds then
    change nothing. ``rounds``: those added; ``left_out``: those that could not be (a run without the metric)."""

    def __init__(self, rule: SequentialRule, commands: int):
        from perfctl.analysis.ab import SequentialSuite

        self.rule = rule
        self.suite = SequentialSuite(commands, rule.margin, rule.confidence, rule.min_rounds)
        self.rounds = self.left_out = 0

    def add(self, values: dict[int, float], exact: bool = False) -> None:
        self.suite.add_round(values, exact)
        self.rounds += 1

    def exact(self, samples: Iterable[Sample]) -> bool:
        """Whether a round's values are counts of a deterministic backend (analysis/ab.py's exact rule)."""
        readings = [sample.reading(self.rule.metric) for sample in samples]
        return all(reading is not None and reading.backend in DETERMINISTIC_BACKENDS for reading in readings)

    def usable(self, which: int, sample: Sample, round_: int) -> float:
        """The metric value of command ``which``'s run in measured round ``round_`` (from 0); Unusable, saying
        why, when no ratio can be taken of it (0, or not counted in that run): ab's rounds and a job's stop."""
        metric, label = self.rule.metric, side_letter(which)
        value = sample.metric_value(metric)
        if value is None:
            reading = sample.reading(metric)
            why = reading.reason if reading is not None and reading.reason else "not counted"
            raise Unusable(f"{metric} of {label} in round {round_}: {why}; choose another --metric")
        if not value > 0:
            raise Unusable(f"{metric} of {label} is {value:g} in round {round_}: a ratio needs values above 0; "
                           "choose another --metric")
        return value

    @property
    def decided(self) -> bool:
        return not self.suite.undecided()

    @property
    def stop(self) -> str:
        """Why decided rounds stopped, in ab's words: "settled" or "not-alike"."""
        return "settled" if not self.suite.unsettled() else "not-alike"


class RunFailed(Exception):
    """A run of command ``which`` did not end "ok": a comparison's rounds stop at it (ab's and a job's)."""

    def __init__(self, which: int, sample: Sample):
        super().__init__(side_letter(which))
        self.which, self.sample = which, sample


class Unusable(Exception):
    """A run's metric value no ratio can be taken of (0, or not counted in that run): ab's rounds and a job's stop,
    saying why (the message)."""


class ComparedRounds:
    """`perfctl ab`'s rounds, handed over by the CLI: the warmups, then rounds of A and every command whose
    comparison with A is undecided, in ``rounds``' seeded order, each run recorded with its round (or warmup
    round), its position and the seed; each whole round's metric values go to the stopping rule, unless
    ``excluded(samples)`` leaves the round out (--exclude-interfered). They stop once every comparison is
    decided ("settled", "not-alike"), after ``max_rounds`` ("max-runs") or ``max_seconds`` ("max-time"); a run
    that failed raises RunFailed, a metric value no ratio can be taken of Unusable. ``measured(which, sample)``
    is told of every run; ``rounded()`` after every round (ab's counts and live display)."""

    def __init__(self, measurement: Measurement, rounds: Rounds, sequential: Sequential, seed: int, *,
                 max_rounds: int, max_seconds: float | None, excluded: Callable[[Iterable[Sample]], bool]):
        self.measurement, self.plan, self.sequential, self.seed = measurement, rounds, sequential, seed
        self.max_rounds, self.max_seconds, self.excluded = max_rounds, max_seconds, excluded
        self.rounds = self.excluded_rounds = 0
        self.started = time.monotonic()

    def run(self, measured: Callable[[int, Sample], object], rounded: Callable[[], object]) -> str:
        """Measure until the rounds stop; why they stopped."""
        for k, which in self.plan.warmup_runs():
            self._measure(which, k, True, {"warmup_round": k}, measured)
        self.started = time.monotonic()
        active = list(range(1, self.plan.commands))
        for round_ in range(self.max_rounds):
            samples = {which: self._measure(which, self.plan.warmups + round_, False,
                                            {"round": round_, "order": position}, measured)
                       for position, which in enumerate(self.plan.next_round([0, *active]))}
            self.rounds = round_ + 1
            if self.excluded(samples.values()):
                self.excluded_rounds += 1
            else:
                self.sequential.add({which: self.sequential.usable(which, sample, round_)
                                     for which, sample in samples.items()}, self.sequential.exact(samples.values()))
            # a comparison whose rounds are not alike leaves at once (that is final); a settled one (settled
            # only from min_rounds on) too
            undecided = set(self.sequential.suite.undecided())
            active = [which for which in active if which in undecided]
            rounded()
            if not active:
                return self.sequential.stop
            if self.max_seconds is not None and time.monotonic() - self.started >= self.max_seconds:
                return "max-time"
        return "max-runs"

    def _measure(self, which: int, run_index: int, warmup: bool, extra: dict, measured) -> Sample:
        sample = self.measurement.measure(which, run_index=run_index, warmup=warmup,
                                          extra={**extra, "seed": self.seed})
        measured(which, sample)
        if sample.outcome != "ok":
            raise RunFailed(which, sample)
        return sample

class SettlingRounds(Sequential):
    """An agent's --until-settled job's decision, kept as its runs (``order``: Rounds.order) are measured: the
    metric values of each round's runs (those measured before a restart come from the spool), fed to the
    stopping rule once a round is whole. A value no ratio can be taken of ends the job as it ends ab's rounds
    (Sequential.usable); a round with a run whose value is not known (a retried job's runs stored before it
    was lost) is left out."""

    def __init__(self, rule: SequentialRule, order: list[tuple[bool, int, int]], commands: int,
                 values: dict[int, float]):
        super().__init__(rule, commands)
        self.order, self.values = order, dict(values)
        self._members: dict[int, list[int]] = {}
        for index, (warmup, run_index, _) in enumerate(order):
            if not warmup:
                self._members.setdefault(run_index, []).append(index)

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
            self.add({self.order[i][2]: self.values[i] for i in members})
        else:
            self.left_out += 1
        return self.summary(settled=True) if self.decided else None

    def summary(self, settled: bool) -> str:
        head = f"{'settled' if self.stop == 'settled' else 'not alike'} after {self.rounds} rounds" if settled \
            else f"not settled after {self.rounds} rounds (the runs asked for are done)"
        parts = []
        for i, s in self.suite.settlements().items():
            interval = "-" if s.low is None or s.high is None else f"[{s.low:.4f}, {s.high:.4f}]"
            verdict = s.verdict.value if s.alike else f"not alike (a change seen at round {s.change.seen_at})"
            parts.append(f"{side_letter(i)}: {verdict}{', ' + s.beyond if s.beyond else ''}, "
                         f"A/{side_letter(i)} {'-' if s.ratio is None else f'{s.ratio:.4f}'} {interval}")
        left = f"; {self.left_out} rounds left out (a run did not count {self.rule.metric})" \
            if self.left_out else ""
        return f"{head} on {self.rule.metric}: " + "; ".join(parts) + left
