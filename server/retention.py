"""`perfctl server --retain`: the server's retention loop (Storage.prune deletes; this decides when).

It runs under the supervisor (perfctl/supervise.py, started in server/service.py serve): a prune that fails
(the database down) is logged with its traceback, counted in perfctl_task_restarts_total{task="retention"},
and tried again after the supervisor's backoff, not an hour later.
"""

from __future__ import annotations

import asyncio
import logging
import time

from perfctl.server.storage import Storage
from perfctl.units import span

log = logging.getLogger("perfctl.server")

RETAIN_EVERY_S = 3600.0


async def retain(storage: Storage, retain_s: float) -> None:
    """At start and then hourly, the runs received (by any replica) and started more than ``retain_s`` ago are
    deleted (Storage.prune: in short batches, so ingest goes on; by the receipt too, so an agent's slow clock
    cannot age the runs it just measured). With several replicas each prunes; the second finds nothing left."""
    while True:
        removed = await asyncio.to_thread(storage.prune, time.time_ns() - int(retain_s * 1e9))
        if removed:
            log.info("retention: deleted %d runs received and started more than %s ago (%s)", sum(removed.values()),
                     span(retain_s),
                     ", ".join(f"{m}: {n}" for m, n in sorted(removed.items())))
        await asyncio.sleep(RETAIN_EVERY_S)
