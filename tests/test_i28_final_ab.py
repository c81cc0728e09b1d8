"""Issue 28, final round: a stop signal that Python drops cannot leave `perfctl stat` or `perfctl ab` running.

Python runs a signal's handler wherever the main thread runs Python code, finalisers included, and drops an
exception raised in one ("Exception ignored in ..."). perfctl's policy ignored every signal after the first
(so that the cleanup it starts runs to its end), so a first Interrupted dropped in a finaliser left the
command unstoppable but by SIGKILL (CI under load: `perfctl ab` ran on for 14 minutes after a SIGINT). The
tests build that situation in-process: garbage in a reference cycle whose __del__ sends the signal, so the
handler runs inside the finaliser while the command's run loop runs.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import time

import pytest

from perfctl.cli import main
from perfctl.output import Interrupted, stop_on_signals
from tests.conftest import needs_tracepoints, perfctl


def _samples(path) -> int:
    return sum('"type":"sample"' in line for line in open(path)) if os.path.exists(path) else 0


class _SignalInFinaliser:
    """Cyclic garbage: the cyclic GC finalises it at some allocation of the run loop. Once ``after`` samples
    are in ``path``, its __del__ sends SIGINT and the handler runs there (at the call after the kill);
    before, it leaves garbage like itself for the next collection."""

    sent: list[float] = []

    def __init__(self, path, after: int):
        self.cycle, self.path, self.after = self, path, after

    def __del__(self):
        if self.sent:
            return
        if _samples(self.path) >= self.after:
            self.sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
            _a_call()  # where the handler runs, inside this finaliser
        else:
            _SignalInFinaliser(self.path, self.after)


def _a_call() -> None:
    return None


@pytest.fixture
def frequent_gc():
    """Collections every 50 allocations, so that the garbage is finalised within the first runs."""
    thresholds = gc.get_threshold()
    _SignalInFinaliser.sent = []
    gc.set_threshold(50)
    yield
    gc.set_threshold(*thresholds)
    gc.collect()


@pytest.mark.parametrize("command", ["stat", "ab"])
def test_a_stop_signal_raised_inside_a_finaliser_ends_the_runs(command, tmp_path, frequent_gc, capsys):
    """Before: the SIGINT's Interrupted was dropped in __del__, every later signal ignored, and the command
    ran all its 40 runs (rounds) and exited 0 (stat) or 4 (ab). Now the loop ends at its next run: exit 130,
    every finished run kept."""
    out = tmp_path / "runs.jsonl"
    argv = {"stat": ["stat", "-r", "40", "-o", str(out), "--", "/bin/sleep", "0.01"],
            "ab": ["ab", "--min-runs", "40", "--max-runs", "40", "-o", str(out), "--", "/bin/sleep", "0.01", ":::",
                   "/bin/sleep", "0.01"]}[command]
    _SignalInFinaliser(out, 2)
    code = main(argv)
    captured = capsys.readouterr()
    assert _SignalInFinaliser.sent, "the finaliser never ran during the runs"
    assert code == 130, captured.err
    assert "interrupted after" in captured.err and "Exception ignored" not in captured.err
    written = _samples(out)
    assert 2 <= written < (40 if command == "stat" else 80), written


def test_a_second_signal_raises_again_when_the_first_was_dropped():
    """A first stop dropped in a finaliser does not make the command deaf: the next signal raises."""
    sent: list[bool] = []

    class Finaliser:
        def __del__(self):
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            _a_call()

    with pytest.raises(Interrupted) as stopped, stop_on_signals():
        Finaliser()  # freed at once (no cycle): its __del__ runs here and the Interrupted is dropped
        assert sent
        os.kill(os.getpid(), signal.SIGINT)
        _a_call()
    assert stopped.value.signum == signal.SIGTERM  # the first stop's signal decides the exit (143)


def test_a_second_signal_is_ignored_while_the_first_unwinds():
    """The cleanup a stop starts runs to its end: a signal during it raises nothing."""
    cleaned = []
    with pytest.raises(Interrupted) as stopped, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            _a_call()
        finally:
            os.kill(os.getpid(), signal.SIGINT)
            _a_call()
            cleaned.append(True)
    assert cleaned and stopped.value.signum == signal.SIGINT


def _note(rounds, stop: str, a_values, b_values) -> str:
    """The line ab prints for B after ``rounds`` rounds of A and B's values, stopped by ``stop``."""
    from perfctl.analysis.ab import SequentialSuite

    suite = SequentialSuite(2, 0.05, 0.95)
    for a, b in zip(a_values[:rounds], b_values[:rounds]):
        suite.add_round({0: a, 1: b})
    return b_line(suite, rounds, stop, "task-clock")


def b_line(suite, rounds: int, stop: str, metric: str) -> str:
    """The line ab prints for B of ``suite`` (a SequentialSuite of A and B) after ``rounds``, stopped by
    ``stop``: the report as the command renders it."""
    from rich.console import Console

    from perfctl.report.ab import AbReport, AbResult, Side

    sides = [Side("A", ["a"], rounds), Side("B", ["b"], rounds)]
    result = AbResult(sides, {"B": suite.settlements()[1]}, metric, 0.05, 0.95, 1, stop, rounds=rounds,
                      to_settle={"B": suite.comparisons[1].rounds_to_settle()})
    console = Console(record=True, width=400)
    AbReport(result).table(console)
    # the last: the headline may start with "B: " too (a verdict without a direction, "B: no difference shown")
    return [line for line in console.export_text().splitlines() if line.startswith("B: ")][-1]


def test_an_interrupted_ab_says_so_rather_than_naming_a_budget_or_an_edge():
    """Before: "not settled: about 28 rounds like these would settle it (--max-runs)" after a SIGHUP at round
    14, and "... (the ratio is near a margin edge)" whatever stopped the rounds."""
    noise = random.Random(28)
    a = [20.0 * noise.uniform(0.8, 1.2) for _ in range(14)]
    b = [23.0 * noise.uniform(0.8, 1.2) for _ in range(14)]
    line = _note(14, "interrupted", a, b)
    assert "not settled: interrupted after 14 rounds (the verdict of the rounds so far)" in line, line
    assert "rounds like these would settle it: run the same perfctl ab again" in line, line
    assert "--max-runs" not in line and "edge" not in line
    # --max-time named as the budget that ended the rounds, not --max-runs
    line = _note(14, "max-time", a, b)
    assert line.endswith("rounds like these would settle it (--max-time)"), line


def test_rounds_in_two_clusters_either_side_of_the_band_are_not_blamed_on_a_median_near_an_edge():
    """B alternating 10% faster and 10% slower (ab_s4 of the review: ratio 1.0039, "near a margin edge"):
    the median is in the middle of the band; what keeps it unsettled is that no round lies near it."""
    a = [100.0] * 60
    b = [91.0 if i % 2 else 111.0 for i in range(60)]
    line = _note(60, "max-runs", a, b)
    assert "near a margin edge" not in line
    assert "the rounds' ratios around their median lie on both sides of a margin edge" in line, line
    line = _note(60, "interrupted", a, b)
    assert "interrupted after 60 rounds" in line and "run the same" not in line, line


# --- a step in A or in B is shown "not alike" (review: a step in B at round 10 settled "beyond" unseen) ------

def _first_not_alike(before: float, after: float, step_after: int, min_rounds: int, side: str = "B"):
    """Rounds of constant exact counts (page faults) whose ratio A/B steps from ``before`` to ``after`` after
    round ``step_after``, by a step of ``side``; fed as ab feeds them until they settle (from ``min_rounds``)
    or are seen not alike. Returns the comparison."""
    from perfctl.analysis.ab import SequentialComparison

    comparison = SequentialComparison(0.05, 0.05, min_rounds=min_rounds)
    for round_ in range(1, 200):
        ratio = before if round_ <= step_after else after
        a, b = (1000.0, 1000.0 / ratio) if side == "B" else (952.0 * ratio, 952.0)
        comparison.add(a, b)
        if comparison.settled or not comparison.alike:
            break
    return comparison


@pytest.mark.parametrize("side", ["A", "B"])
def test_a_step_at_round_10_is_not_alike_before_30_rounds_settle_it(side):
    """Before: the martingale on the log ratios needs about 4 times the rounds before a step to see it (42
    rounds here): --min-runs 30 settled "B slower beyond [0.7310, 0.8562]" at round 30, exit 3."""
    comparison = _first_not_alike(0.856, 0.731, 10, 30, side)
    settlement = comparison.settlement()
    assert not settlement.settled and not settlement.alike, settlement
    change = settlement.change
    assert change.seen_at < 30 and change.last_before == 10, change
    assert change.before == pytest.approx(0.856) and change.after == pytest.approx(0.731)


def test_a_change_of_the_machine_under_both_commands_cancels_in_the_ratio():
    """Both sides twice as slow from round 10: the ratio does not move, the verdict about it stays valid."""
    from perfctl.analysis.ab import SequentialComparison

    comparison = SequentialComparison(0.05, 0.05, min_rounds=30)
    for round_ in range(1, 31):
        level = 1.0 if round_ <= 10 else 2.0
        comparison.add(1000.0 * level, 1112.0 * level)
    assert comparison.alike and comparison.settled


@needs_tracepoints
def test_ab_shows_a_step_in_b_as_not_alike(programs, tmp_path):
    """The review's case with real programs: pagetouch 952 against a B that touches 1152 pages from its 11th
    run on (exact page-fault counts): exit 4, "not alike", the change placed after round 10."""
    pagetouch = str(programs / "pagetouch")
    state, script = tmp_path / "state", tmp_path / "pstep.sh"
    script.write_text(f'n=$(cat {state} 2>/dev/null || echo 0); echo $((n+1)) > {state}\n'
                      f'if [ "$n" -lt 10 ]; then exec {pagetouch} 952; else exec {pagetouch} 1152; fi\n')
    result = perfctl("ab", "--metric", "page-faults", "--min-runs", "30", "--seed", "1", "--", pagetouch, "952",
                     ":::", "sh", str(script), timeout=600)
    assert result.returncode == 4, (result.stdout, result.stderr)
    assert "not alike: A/B " in result.stdout and "over rounds 1-10," in result.stdout, result.stdout
    assert "settled" not in result.stdout.split("not alike")[-1], result.stdout


# --- a fleet job run --until-settled: rounds not alike end the job and are said so -------------------------

def test_a_fleet_job_whose_rounds_are_not_alike_ends_and_says_so():
    """Before: the agent ended a job only when every comparison settled, so rounds seen not alike ran to the
    job's end (200 runs here) and the job said "not settled ...: B: indeterminate"; the server's replay under
    `compare` said "indeterminate, not settled". Now the job ends at the round they are seen not alike."""
    from perfctl.agent.measurement import SequentialRule, SettlingRounds, job_order
    from perfctl.analysis.ab import replay
    from perfctl.report.ab import replay_line

    rule = SequentialRule("page-faults", 0.05, 0.95, 30)
    order = job_order("job", 0, 100, 2, shuffled=True)
    # A 1000 page faults; B 1168 for 10 rounds (A/B 0.856), then 1368 (0.731): the review's step
    values = [1000.0 if c == 0 else (1168.0 if run_index < 10 else 1368.0) for _, run_index, c in order]
    rounds = SettlingRounds(rule, order, 2, {})
    message = ended_at = None
    for index, value in enumerate(values):
        message = rounds.measured(index, value)
        if message:
            ended_at = index
            break
    assert message is not None and ended_at < 60, (ended_at, message)
    assert message.startswith(f"not alike after {rounds.rounds} rounds on page-faults: B: not alike (a change seen "
                              f"at round {rounds.rounds})"), message
    assert "indeterminate" not in message
    a = [values[i] for i in range(ended_at + 1) if order[i][2] == 0]
    b = [values[i] for i in range(ended_at + 1) if order[i][2] == 1]
    line = replay_line(replay(a, b, label="B", metric="page-faults", margin=0.05, confidence=0.95, commands=2,
                              min_rounds=30))
    assert "B: not alike: A/B 0.8562 over rounds 1-10, 0.7310 over rounds 11-" in line, line
    assert "indeterminate" not in line and "not settled" not in line
