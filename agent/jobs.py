"""The agent's side of job delivery (server/delivery.py): take each job the server sends once, and say which
jobs it holds.

A replica cannot know that a job it sent arrived (its connection may be gone without a packet saying so), so
the agent's heartbeats name the jobs it holds, its newest unfinished ones from the spool; the server queues a
job no heartbeat names within its delivery deadline again, through whichever replica the agent is at. A new
job wakes the heartbeat at once, so a job delivered is confirmed within milliseconds, not a heartbeat later.

A job may therefore arrive twice (a first delivery late, after it was offered again): the spool keeps it by
its id, once, and run k is stored as uuid5(job, k), so it is never measured or stored twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from perfctl.v1 import fleet_pb2 as pb
from perfctl.wire import MAX_HELD_JOBS

log = logging.getLogger("perfctl.agent")


class Delivery:
    """One connection's job watch and heartbeats. ``current_job`` says which job the worker measures now,
    ``spool_write`` is the agent's spool write that waits out a full disk, ``job_wakeup`` wakes the worker."""

    def __init__(self, spool, current_job: Callable[[], str | None], spool_write, job_wakeup: threading.Event):
        self.spool, self.current_job, self.spool_write, self.job_wakeup = spool, current_job, spool_write, job_wakeup
        self.received = asyncio.Event()

    async def heartbeat(self, stub, metadata, seconds: int) -> None:
        """Every ``seconds``, or at once when a job was received: the agent's state and the jobs it holds."""
        while True:
            self.received.clear()
            current = self.current_job()
            request = pb.HeartbeatRequest(state="running" if current else "idle",
                                          held_job_ids=await asyncio.to_thread(self.spool.held_jobs, MAX_HELD_JOBS),
                                          agent_time_ns=time.time_ns())  # its clock: the skew (server/clock.py)
            if current:
                request.job_id = current
            await stub.Heartbeat(request, metadata=metadata, timeout=10)
            # asyncio.timeout, never wait_for: see perfctl/supervise.py's note on lost cancellations
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self.received.wait()

    async def watch(self, stub, metadata) -> None:
        """Each job the server sends, kept in the spool by its id (a job sent again is not taken twice); either
        way the next heartbeat, at once, confirms the agent holds it."""
        async for job in stub.WatchJobs(pb.WatchJobsRequest(), metadata=metadata):
            if await self.spool_write(self.spool.add_job, job.job_id, job.SerializeToString()):
                log.info("job %s: %d commands x %d runs", job.job_id, len(job.commands), job.repetitions)
                self.job_wakeup.set()
            self.received.set()
