"""What Storage (server/storage.py) keeps of each machine besides its runs and jobs: when it was last heard
and its clock's skew, its retirement, and its audits, each ordered by the server's clock (server/clock.py),
never by what an agent stamped."""

from __future__ import annotations

import time

from sqlalchemy import func, select, update

from perfctl.server.clock import heartbeat_skew
from perfctl.server.schema import audits, machines, samples

LEASED_JOB_STATES = ("dispatched", "running")


class NoSuchMachine(LookupError):
    """A machine name the database does not hold; one line."""


class MachineRecords:
    """Storage's machine, heartbeat and audit records (a mixin: ``engine``, ``_write_lock`` are Storage's)."""

    def skew_values(self, now_ns: int, agent_time_ns: int = 0) -> dict:
        """The machines row's values for an agent heard from now: when, and with ``agent_time_ns`` (the agent's
        clock when it sent its heartbeat) its clock skew. Written by server/delivery.py's heard, in the same
        transaction as the confirmations and lease renewals it carries."""
        values = dict(last_heard_ns=now_ns)
        skew = heartbeat_skew(agent_time_ns, now_ns)
        if skew is not None:
            values["clock_skew_ns"] = skew
        return values

    def list_machines(self) -> list[dict]:
        """Every machine's row with its runs stored (``samples``) and those flagged with a clock ahead of the
        server's (``clock_ahead_runs``: read from the partial index that holds only them)."""
        with self.engine.connect() as conn:
            counts = dict(conn.execute(select(samples.c.machine, func.count()).group_by(samples.c.machine)).all())
            flagged = samples.c.clock_ahead_ns.isnot(None)
            ahead = dict(conn.execute(select(samples.c.machine, func.count()).where(flagged)
                                      .group_by(samples.c.machine)).all())
            rows = conn.execute(select(machines).order_by(machines.c.name)).mappings().all()
        return [{**row, "samples": counts.get(row["id"], 0), "clock_ahead_runs": ahead.get(row["id"], 0)}
                for row in rows]

    def last_heard(self) -> dict[str, int]:
        """Each machine in service's last heartbeat (or registration), unix ns: retired ones are not watched."""
        with self.engine.connect() as conn:
            return dict(conn.execute(select(machines.c.name, machines.c.last_heard_ns)
                                     .where(machines.c.retired_ns.is_(None))).all())

    def retire_machine(self, name: str, now_ns: int | None = None) -> None:
        """Take ``name`` out of service (machines.retired_ns): it leaves the heartbeat and audit gauges; its
        runs, jobs and audits stay. Storage.register (its agent back) puts it in service again.
        NoSuchMachine if there is none."""
        with self._write_lock, self.engine.begin() as conn:
            changed = conn.execute(update(machines).where(machines.c.name == name)
                                   .values(retired_ns=func.coalesce(machines.c.retired_ns,  # retired again: since
                                                                    now_ns or time.time_ns()))).rowcount  # the first
        if not changed:
            raise NoSuchMachine(f"no machine named {name!r} on this server")

    # --- audits ---

    def add_audit(self, machine: str, audit_id: str, time_ns: int, verdict: str, report_json: str,
                  now_ns: int | None = None) -> None:
        """An audit as its agent reported it (``time_ns``: the agent's clock), received now by the server's."""
        with self._write_lock, self.engine.begin() as conn:
            conn.execute(self._insert_ignore(audits).values(id=audit_id, machine=machine, time_ns=time_ns,
                                                            verdict=verdict, report=report_json,
                                                            received_ns=now_ns or time.time_ns()))

    def list_audits(self, machine: str | None = None) -> list[dict]:
        """The audits, per machine in the order the server received them."""
        query = select(audits).order_by(audits.c.machine, audits.c.received_ns, audits.c.time_ns)
        if machine:
            query = query.where(audits.c.machine == machine)
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(query).mappings().all()]

    def latest_audits(self) -> dict[str, dict]:
        """Each machine's audit received last, as a summary: id, verdict, ``time_ns`` when the server received
        it (what the audit gauges, the compare warning and `perfctl machines` date it by) and
        ``agent_time_ns`` as its agent stamped it. Received, not stamped: an agent stamping its audits ahead
        cannot keep an old verdict in front of a newer one, nor an audit fresh for longer."""
        # the small columns alone, never the reports (up to 1 MiB each: server/listings.py)
        query = select(audits.c.machine, audits.c.id, audits.c.time_ns, audits.c.verdict, audits.c.received_ns) \
            .order_by(audits.c.machine, audits.c.received_ns, audits.c.time_ns)
        latest: dict[str, dict] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(query).mappings():
                latest[row["machine"]] = row  # ordered by receipt within each machine
        return {machine: {"id": row["id"], "verdict": row["verdict"], "agent_time_ns": row["time_ns"],
                          "time_ns": row["received_ns"] if row["received_ns"] is not None else row["time_ns"]}
                for machine, row in latest.items()}
