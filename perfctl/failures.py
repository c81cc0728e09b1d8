"""How a run failed, in one line: the words `perfctl stat`'s summary, the stop of `perfctl ab`'s rounds and an
agent's job message share. Plain text, no rich: the agent imports it (perfctl/report/ renders it)."""

from __future__ import annotations

import signal

from perfctl.model import Sample

_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}  # their default action stops


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def describe_failure(sample: Sample) -> str:
    """One line: which run failed and how."""
    if sample.outcome == "timeout":
        what = "timed out and was killed with its process tree"
    elif sample.outcome == "signal" and sample.signal in _STOP_SIGNALS:
        # a stop signal cannot kill: perfctl saw a stop that would never end and killed the tree itself
        what = f"stopped by signal {sample.signal} ({_signal_name(sample.signal)})"
    elif sample.outcome == "signal":
        what = f"killed by signal {sample.signal} ({_signal_name(sample.signal)})"
    else:
        what = f"exited with status {sample.exit_status}"
    tail = f": {sample.stderr_tail}" if sample.stderr_tail else ""
    return f"run {sample.run_index} {what}{tail}"


def rounds_stopped(label: str, sample: Sample) -> str:
    """Why an A/B comparison's rounds stopped at a failed run, in one line naming the side: ab and an agent's
    --until-settled job stop at the first run that fails (a round without it cannot be compared), alike."""
    return f"{label}'s run {sample.run_index} failed, so the rounds stopped: {describe_failure(sample)}"
