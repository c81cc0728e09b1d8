"""perfctl_agent_samples_pending: the samples in the agent's spool not yet acked, counted when Prometheus
scrapes, whatever the connection. It was set by the sender alone, so it froze while no server was reachable,
exactly when PerfctlSpoolBacklogGrowing (deploy/prometheus/perfctl-alerts.yml) is meant to fire."""

from __future__ import annotations

import math

from prometheus_client import Gauge

from perfctl.agent.spool import Spool

SAMPLES_PENDING = Gauge("perfctl_agent_samples_pending", "Samples in the spool, not yet acked")


def track_pending(spool: Spool) -> Spool:
    """Read the gauge from ``spool`` at every scrape (one COUNT over the spool's samples, ~10 ms per
    million); ``spool``."""
    def pending() -> float:
        try:
            return float(spool.count())
        except Exception:  # noqa: BLE001 - a spool closed at shutdown or damaged: unknown, not 0
            return math.nan

    SAMPLES_PENDING.set_function(pending)
    return spool
