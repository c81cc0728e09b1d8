"""How a run ended or failed, in one line: the words `perfctl stat`'s summary, the stop of `perfctl ab`'s
rounds, an agent's job message and `perfctl cache`'s traced run share. Plain text, no rich: the agent
imports it (perfctl/report/ renders it)."""

from __future__ import annotations

import signal

from perfctl.model import Sample

_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}  # their default action stops


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def run_ended(outcome: str, signal_number: int | None, exit_status: int | None) -> str:
    """How a run ended, as the predicate of "run 3 ..." or "the traced run ...": the one wording of a run's
    end, for a Sample's ``outcome`` and an agent Exit's alike ("timeout", "signal", else by its status)."""
    if outcome == "timeout":
        return "timed out and was killed with its process tree"
    if outcome == "signal" and signal_number in _STOP_SIGNALS:
        # a stop signal cannot kill: perfctl saw a stop that would never end and killed the tree itself
        return f"stopped by signal {signal_number} ({_signal_name(signal_number)})"
    if outcome == "signal":
        return f"killed by signal {signal_number} ({_signal_name(signal_number)})"
    return f"exited with status {exit_status}"


def describe_failure(sample: Sample) -> str:
    """One line: which run failed and how."""
    tail = f": {sample.stderr_tail}" if sample.stderr_tail else ""
    return f"run {sample.run_index} {run_ended(sample.outcome, sample.signal, sample.exit_status)}{tail}"


def rounds_stopped(label: str, sample: Sample) -> str:
    """Why an A/B comparison's rounds stopped at a failed run, in one line naming the side: ab and an agent's
    --until-settled job stop at the first run that fails (a round without it cannot be compared), alike."""
    return f"{label}'s run {sample.run_index} failed, so the rounds stopped: {describe_failure(sample)}"
