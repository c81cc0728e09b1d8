"""Acknowledged job delivery: a job is dispatched when its agent has it, not when a replica sent it.

A replica that sends a job cannot know it arrived: an agent whose packets to that replica are dropped moves to
another replica, while the first still holds its job watch open (no packet says it is gone) and writes jobs
into a connection nobody reads. So a job goes through three steps, each one conditional statement that every
replica may race on (the database is the only state they share):

1. **claim** (queued -> dispatched): only by the replica holding the machine's newest job watch
   (machines.watched_by), so a replica with a stale watch never takes a job from the one the agent is at. The
   claim holds a short lease, the delivery deadline: ``DELIVERY_HEARTBEATS`` heartbeats.
2. **confirm**: every heartbeat names the jobs the agent holds (HeartbeatRequest.held_job_ids, from its
   spool). A job named is delivered (jobs.delivered_ns), dispatched if it was queued again meanwhile (a late
   first delivery: the agent has it, no replica sends it again), and holds the whole lease. Heartbeats renew
   only delivered jobs and running ones (the agent reported those itself).
3. **expire**: a dispatched job not confirmed by its deadline is queued again, and offered within a second
   through whichever replica the agent's watch is open at; a delivered or running job whose lease lapsed is
   lost (its agent may be measuring it: `perfctl jobs --retry` decides), as before.

Why the heartbeat carries the confirmation, rather than an ack call per job or a two-way job watch: it states
what the agent holds (state, not an event), so a confirmation lost with a connection is simply repeated by the
next heartbeat, through whichever replica the agent reaches, with no acks of acks; it is the call that renews
the leases already, so confirming and renewing are one transaction; an older server ignores the field, and
the agent sends a heartbeat at once when a job arrives, so a delivery is confirmed in milliseconds.

An agent never runs a job twice however often it is offered: its spool keeps each job by id, and run k of job
J is stored as uuid5(J, k) once. Agents older than acknowledged delivery name no jobs: a job of theirs is
offered again each deadline until it starts (they report it running), and still runs once.
"""

from __future__ import annotations

import time

from sqlalchemy import and_, or_, select, update

from perfctl.server.schema import jobs, machines
from perfctl.server.storage import Storage

DELIVERY_HEARTBEATS = 3  # a job not confirmed within three heartbeat intervals is offered again


class Deliveries:
    """One replica's side of job delivery on the shared database: claim, confirm and renew, expire.
    ``replica`` is this server process among the replicas (JobKeeper.replica), ``lease_s`` the lease a
    delivered or running job holds (`perfctl server --job-lease`), ``deadline_s`` how long a sent job may go
    unconfirmed."""

    def __init__(self, storage: Storage, replica: str, lease_s: float, deadline_s: float):
        self.storage, self.replica, self.lease_s, self.deadline_s = storage, replica, lease_s, deadline_s

    def claim(self, job_id: str, machine: str, now_ns: int | None = None) -> bool:
        """queued -> dispatched until the delivery deadline, in one statement, if the machine's newest job watch
        is open here: of the replicas (and watches) that offer one job, exactly one is told True and sends it.
        A job re-sent on reconnect is not claimed again: it must not move back from running or done."""
        now_ns = now_ns or time.time_ns()
        watched_here = select(machines.c.id).where(machines.c.name == machine,
                                                   machines.c.watched_by == self.replica).exists()
        with self.storage.write() as conn:
            claimed = conn.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.machine == machine,
                                                      jobs.c.state == "queued", watched_here)
                                   .values(state="dispatched", updated_ns=now_ns, delivered_ns=None,
                                           lease_ns=now_ns + int(self.deadline_s * 1e9))).rowcount
        return claimed == 1

    def heard(self, machine: str, now_ns: int, held_job_ids=(), agent_time_ns: int = 0) -> None:
        """The machine's agent was heard from now (a heartbeat, a registration), holding ``held_job_ids``:
        those are delivered; every delivered or running job of the machine holds its lease until now +
        lease_s. One transaction, so a confirmation and its renewal are never apart. With ``agent_time_ns``
        (the agent's clock when it sent the heartbeat), the machine's clock skew (server/clock.py)."""
        lease_ns = now_ns + int(self.lease_s * 1e9)
        with self.storage.write() as conn:
            conn.execute(update(machines).where(machines.c.name == machine)
                         .values(**self.storage.skew_values(now_ns, agent_time_ns)))
            if held_job_ids:
                conn.execute(update(jobs).where(
                    jobs.c.machine == machine, jobs.c.id.in_(sorted(set(held_job_ids))),
                    or_(jobs.c.state == "queued", and_(jobs.c.state == "dispatched", jobs.c.delivered_ns.is_(None))))
                    .values(state="dispatched", delivered_ns=now_ns, updated_ns=now_ns))
            conn.execute(update(jobs).where(jobs.c.machine == machine, or_(
                jobs.c.state == "running", and_(jobs.c.state == "dispatched", jobs.c.delivered_ns.is_not(None))))
                .values(lease_ns=lease_ns))

    def expire(self, now_ns: int | None = None,
               lose: bool = True) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(requeued, lost), each a list of (job id, machine) this call moved: the dispatched jobs not confirmed
        by their deadline queued again, the delivered or running ones whose lease lapsed lost (unless not
        ``lose``: a keeper just (re)started, whose agents could not renew meanwhile). One statement each
        (replicas that race move a job once between them)."""
        now_ns = now_ns or time.time_ns()
        requeue_message = (f"offered again: not confirmed by its agent within {self.deadline_s:g} s of being sent "
                           "(its connection to that replica was gone)")
        lost_message = (f"lost: no heartbeat from its agent for {self.lease_s:g} s (the job's lease lapsed); the "
                        "runs stored are kept, and `perfctl jobs --retry ID` queues the rest again")
        with self.storage.write() as conn:
            requeued = conn.execute(update(jobs).where(jobs.c.state == "dispatched", jobs.c.lease_ns < now_ns,
                                                       jobs.c.delivered_ns.is_(None))
                                    .values(state="queued", message=requeue_message, updated_ns=now_ns, lease_ns=None)
                                    .returning(jobs.c.id, jobs.c.machine)).all()
            lost = [] if not lose else conn.execute(update(jobs).where(jobs.c.state.in_(("dispatched", "running")),
                                                   jobs.c.lease_ns < now_ns)
                                .values(state="lost", message=lost_message, updated_ns=now_ns, lease_ns=None)
                                .returning(jobs.c.id, jobs.c.machine)).all()
        return [tuple(row) for row in requeued], [tuple(row) for row in lost]
