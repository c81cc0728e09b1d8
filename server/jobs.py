"""Jobs across server replicas: who sends a queued job to its agent, and when a dispatched one is lost.

Any number of `perfctl server` processes may serve one fleet on one PostgreSQL (docs/operations.md,
"Replicas"); the database is the only state they share. A job is submitted through any replica and stored
queued. Every replica offers its connected agents their queued jobs: at once when the job was submitted
through it, and within ``DISPATCH_POLL_S`` otherwise (``JobKeeper`` asks the database). Sending a job first
claims it, queued -> dispatched in one conditional statement, by the replica holding the agent's newest watch
only (server/delivery.py), so of the replicas and watches that offer one job exactly one sends it.

A job is dispatched when its agent has it, not when a replica sent it (server/delivery.py): the agent's
heartbeats name the jobs it holds; one not confirmed within the delivery deadline is queued and offered again.
A delivered or running job holds a lease until now + lease_s, renewed by every heartbeat of its machine
(through whichever replica the agent reaches). When the lease lapses (the agent gone for longer than
``--job-lease``), a replica marks the job lost, again in one statement, with the reason; it never stays
dispatched forever. `perfctl jobs --retry ID` queues a lost job again under its id, naming the runs already
stored (Job.stored_runs), which the agent does not run again: run k keeps uuid5(job, k).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid

from perfctl.server.delivery import DELIVERY_HEARTBEATS, Deliveries
from perfctl.server.metrics import (
    DATABASE_SIZE,
    JOBS,
    JOBS_LOST,
    JOBS_OFFERED_AGAIN,
    MACHINE_AUDIT_TIME,
    MACHINE_AUDIT_VERDICT,
    MACHINE_HEARTBEAT,
    SAMPLES_STORED,
)
from perfctl.server.storage import JOB_STATES, Storage
from perfctl.supervise import supervised
from perfctl.v1 import fleet_pb2 as pb

log = logging.getLogger("perfctl.server")

HEARTBEAT_SECONDS = 10  # how often agents heartbeat, at most (RegisterResponse.heartbeat_seconds)
DISPATCH_POLL_S = 1.0  # how soon a job submitted through another replica reaches an agent connected here
DEFAULT_LEASE_S = 300.0  # `perfctl server --job-lease`: thirty missed heartbeats (HEARTBEAT_SECONDS 10)
MIN_LEASE_S = 3.0  # agents heartbeat at least three times per lease (heartbeat_seconds), at most once a second
# a gap this many polls long, and at least a heartbeat interval, between the keeper's answered ticks (the
# database hung, or this process stalled) is treated as a restart: no agent could renew a lease meanwhile either
# (JobKeeper._judge_gap). Shorter gaps cost an agent at most one heartbeat, which a lease of three outlasts;
# a slow tick (the fleet gauges on a large database) shorter than a heartbeat interval does not hold expiry off.
STALL_POLLS = 3
FLEET_GAUGES_S = 30.0  # the per-machine and database gauges: not every second
# perfctl_samples_stored is a count of every sample stored, which reads a whole index: on months of fleet
# history it takes seconds. It is counted again only after 1/COUNT_SHARE times as long as it took (30 s at
# least), so that it costs each replica at most this share of its time and of the database's.
COUNT_SHARE = 0.01


def heartbeat_seconds(lease_s: float, most: int) -> int:
    """How often agents are told to heartbeat: ``most`` seconds apart, closer for a short lease, so that a
    live agent never lets one lapse (three heartbeats per lease)."""
    return max(1, min(most, int(lease_s // 3)))


class JobHub:
    """Jobs waiting for the agents connected to this replica: a queue per open job watch. Two watches under
    one name (an agent restarted before its old connection timed out, or a second agent given the same token)
    are kept apart: jobs go to the newest, and one leaving never takes the other's queue with it."""

    def __init__(self) -> None:
        self._watches: dict[str, list[asyncio.Queue]] = {}

    def watch(self, machine: str) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self._watches.setdefault(machine, []).append(queue)
        return queue

    def unwatch(self, machine: str, queue: asyncio.Queue) -> None:
        queues = self._watches.get(machine, [])
        if queue in queues:
            queues.remove(queue)
        if not queues:
            self._watches.pop(machine, None)

    def connected(self, machine: str) -> bool:
        return machine in self._watches

    def names(self) -> set[str]:
        return set(self._watches)

    def machines(self) -> int:
        return len(self._watches)

    def offer(self, machine: str, job: pb.Job) -> bool:
        queues = self._watches.get(machine)
        if not queues:
            return False
        queues[-1].put_nowait(job)
        return True


class JobKeeper:
    """The replica's share of the fleet's job work, every DISPATCH_POLL_S: offer the queued jobs of the
    agents connected here (claimed first), mark lapsed leases lost; and every FLEET_GAUGES_S, the fleet's
    gauges. Whatever fails meanwhile (the database) is logged, and the work started again (run)."""

    def __init__(self, storage: Storage, hub: JobHub, lease_s: float = DEFAULT_LEASE_S,
                 poll_s: float = DISPATCH_POLL_S):
        self.storage, self.hub, self.lease_s, self.poll_s = storage, hub, lease_s, poll_s
        # this process among the replicas (machines.watched_by): a restarted server is another replica
        self.replica = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.heartbeat_s = heartbeat_seconds(lease_s, HEARTBEAT_SECONDS)
        self.deliveries = Deliveries(storage, self.replica, lease_s, DELIVERY_HEARTBEATS * self.heartbeat_s)
        self._gauges_due = self._count_due = self._expire_from = 0.0
        self._answered_at = float("-inf")  # when the database last finished a tick for this keeper

    def connected(self, machine: str, watched_by: str | None, last_heard_ns: int) -> bool:
        """Whether the machine's agent has a job watch open: here, or at another replica that heard from it
        within three heartbeats (a replica that crashed leaves its mark, which the heartbeats outdate)."""
        if self.hub.connected(machine):
            return True
        return watched_by not in (None, self.replica) and \
            time.time_ns() - last_heard_ns < 3 * self.heartbeat_s * 1e9

    async def claim_and_offer(self, machine: str, job: pb.Job) -> bool:
        """Send ``job`` to ``machine``'s agent if it is connected here and no one else claimed the job first.
        On the event loop (the hub is not thread-safe); the claim runs in a thread."""
        if not self.hub.connected(machine):
            return False
        if not await asyncio.to_thread(self.deliveries.claim, job.job_id, machine):
            return False
        return self.hub.offer(machine, job)

    async def run(self) -> None:
        """The ticks, and the count of samples at its own pace (a count never delays a dispatch), each under
        the supervisor (perfctl/supervise.py): whatever fails (the database gone: DatabaseUnavailable; a bug)
        is logged with its traceback, counted (perfctl_task_restarts_total) and started again with backoff,
        until the server cancels this."""
        async with asyncio.TaskGroup() as group:
            group.create_task(supervised("job keeper", self._keep, logger=log))
            group.create_task(supervised("sample count", self._count_samples, logger=log))

    async def _keep(self) -> None:
        # (re)started: the gauges are read at the first tick, not FLEET_GAUGES_S later; after an outage they
        # would otherwise show the heartbeats of before it for up to that long
        self._gauges_due = 0.0
        # nor are leases expired for lease_s: the first tick finds the gap since the last answer (_judge_gap)
        self._answered_at = float("-inf")
        while True:
            await asyncio.sleep(self.poll_s)
            await self.tick()

    async def _count_samples(self) -> None:
        while True:
            await asyncio.to_thread(self.samples_gauge)
            await asyncio.sleep(max(FLEET_GAUGES_S, self._count_due - time.monotonic()))

    def _judge_gap(self, answered: bool) -> None:
        """The one rule for when leases may be judged: only once the database has answered this keeper for a
        whole lease. A gap of STALL_POLLS polls or more since the last answered tick (a restart, a database that
        went down or hung without an error, this process stalled) starts that lease again: meanwhile no agent
        could renew its lease either (its heartbeat waits on the same database), and one that lapsed then is
        not a lost agent; a dead agent's job is lost a lease later. ``answered``: a tick just finished."""
        now = time.monotonic()
        if now - self._answered_at > max(STALL_POLLS * self.poll_s, self.heartbeat_s):
            self._expire_from = max(self._expire_from, now + self.lease_s)
        if answered:
            self._answered_at = now

    async def tick(self) -> None:
        # expiry first: a job queued again for want of its agent's confirmation goes out in the same tick
        # no job is marked lost before the database has answered for a lease (_judge_gap); the expiry's "now"
        # is read before its statement, so one that hangs judges no lease by the time after the hang
        self._judge_gap(answered=False)
        requeued, lost = await asyncio.to_thread(self.deliveries.expire, None, time.monotonic() >= self._expire_from)
        JOBS_OFFERED_AGAIN.inc(len(requeued))
        JOBS_LOST.inc(len(lost))
        for job_id, machine in requeued:
            log.warning("job %s on %s offered again: its agent did not confirm it within %g s", job_id, machine,
                        self.deliveries.deadline_s)
        for job_id, machine in lost:
            log.warning("job %s on %s lost: no heartbeat for %g s", job_id, machine, self.lease_s)
        for machine, job in await asyncio.to_thread(self.storage.queued_jobs, self.hub.names()):
            if await self.claim_and_offer(machine, job):
                log.info("job %s sent to %s", job.job_id, machine)
        if time.monotonic() >= self._gauges_due:
            await asyncio.to_thread(self.fleet_gauges)
            self._gauges_due = time.monotonic() + FLEET_GAUGES_S
        elif lost or requeued:
            await asyncio.to_thread(self.job_gauge)
        self._judge_gap(answered=True)  # a tick that itself hung on the database is a gap too

    def job_gauge(self) -> None:
        counts = self.storage.job_counts()
        for state in JOB_STATES:
            JOBS.labels(state).set(counts.get(state, 0))

    def fleet_gauges(self) -> None:
        """What the alert rules watch (deploy/prometheus/perfctl-alerts.yml): each machine's last heartbeat
        and latest audit, the jobs by state, the database's size (the samples: samples_gauge)."""
        self.job_gauge()
        # machines in service only (a retired one's alerts stop: server/machine_records.py), each series set
        # anew: a machine's previous verdict must not stay at 1 beside the new one, nor a retired one's linger
        in_service = self.storage.last_heard()
        for gauge in (MACHINE_HEARTBEAT, MACHINE_AUDIT_VERDICT, MACHINE_AUDIT_TIME):
            gauge.clear()
        for machine, heard_ns in in_service.items():
            MACHINE_HEARTBEAT.labels(machine).set(heard_ns / 1e9)
        for machine, audit in self.storage.latest_audits().items():  # dated by the server's receipt
            if machine in in_service:
                MACHINE_AUDIT_VERDICT.labels(machine, audit["verdict"]).set(1)
                MACHINE_AUDIT_TIME.labels(machine).set(audit["time_ns"] / 1e9)
        DATABASE_SIZE.set(self.storage.size())

    def samples_gauge(self) -> None:
        """perfctl_samples_stored, and when to count again (COUNT_SHARE)."""
        started = time.monotonic()
        SAMPLES_STORED.set(self.storage.count_samples())
        took = time.monotonic() - started
        self._count_due = time.monotonic() + max(FLEET_GAUGES_S, took / COUNT_SHARE)

