"""The server's clock is the reference (issue 29, point 4): what an agent stamps is its own clock, which may
be days off; what orders a machine's jobs and audits, and what the gauges and alerts read, is when the server
received them.

- A run's start, by its agent's clock, cannot be after the server received it. One that is, by more than
  CLOCK_TOLERANCE_NS, is flagged at ingest (``samples.clock_ahead_ns``, migration 0009): stored as sent (the
  measurement is good; its date is not), counted per machine in `perfctl machines`.
- Each heartbeat carries the agent's clock at sending (HeartbeatRequest.agent_time_ns); the server keeps the
  difference with its own (``machines.clock_skew_ns``), shown in `perfctl machines`. It includes the
  heartbeat's one-way delay (milliseconds on a LAN), so only skews beyond the tolerance are worth a word.
"""

from __future__ import annotations

from perfctl.wire import CLOCK_TOLERANCE_NS


def ahead_by(start_time_ns: int, received_ns: int) -> int | None:
    """How far a run's agent-stamped start is after the server received it, when beyond the tolerance; else
    None (a run received late, from an agent's spool, is behind, never ahead)."""
    ahead = start_time_ns - received_ns
    return ahead if ahead > CLOCK_TOLERANCE_NS else None


def heartbeat_skew(agent_time_ns: int, received_ns: int) -> int | None:
    """The agent's clock minus the server's at a heartbeat; None when the agent did not send its time (an
    agent older than this field)."""
    return agent_time_ns - received_ns if agent_time_ns > 0 else None

