"""QueryService's calls about the machines themselves (server/service.py mixes them in): ListMachines, with
each machine's clock skew and the runs flagged with a clock ahead of the server's (server/clock.py), and
RetireMachine, which takes a decommissioned machine out of the heartbeat and audit gauges so their alerts
stop (deploy/prometheus/perfctl-alerts.yml), keeping what it stored."""

from __future__ import annotations

import json
import logging
import time

import grpc

from perfctl.server.machine_records import NoSuchMachine
from perfctl.v1 import fleet_pb2 as pb

log = logging.getLogger("perfctl.server")


class MachineQueries:
    """A mixin of QueryService (``storage``, ``keeper``, ``_principal`` and ``_db`` are _Base's)."""

    async def ListMachines(self, request, context):
        await self._principal(context, "client")
        rows = await self._db(context, self.storage.list_machines)
        latest = await self._db(context, self.storage.latest_audits)
        return pb.ListMachinesResponse(machines=[self._summary(row, latest.get(row["name"])) for row in rows])

    def _summary(self, row: dict, audit: dict | None) -> pb.MachineSummary:
        summary = pb.MachineSummary(name=row["name"], machine_id=row["machine_id"], inventory_json=row["inventory"],
                                    backends=json.loads(row["backends"]), last_heard_ns=row["last_heard_ns"],
                                    connected=self.keeper.connected(row["name"], row["watched_by"],
                                                                    row["last_heard_ns"]),
                                    samples=row["samples"], audit_verdict=audit["verdict"] if audit else "",
                                    # when the server received it (server/machine_records.py latest_audits)
                                    audit_time_ns=audit["time_ns"] if audit else 0,
                                    clock_ahead_runs=row["clock_ahead_runs"], retired_ns=row["retired_ns"] or 0)
        if row["clock_skew_ns"] is not None:
            summary.clock_skew_ns = row["clock_skew_ns"]
        for entry in json.loads(row["events"]):
            summary.events.add(**entry)
        return summary

    async def RetireMachine(self, request, context):
        """Any client token may: retiring stops the machine's alerts and deletes nothing (runs, jobs and audits
        stay, and its agent registering again undoes it). Refused while its agent is connected: it would be
        heard from at once and watched again at its next registration."""
        await self._principal(context, "client")
        rows = {row["name"]: row for row in await self._db(context, self.storage.list_machines)}
        row = rows.get(request.name)
        if row is None:
            known = ", ".join(sorted(rows)[:20]) or "none"
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no machine named {request.name[:128]!r} on this "
                                                           f"server (known: {known})")
        if self.keeper.connected(row["name"], row["watched_by"], row["last_heard_ns"]):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"machine {request.name!r} has its agent connected: stop the agent first "
                                "(systemctl disable --now perfctl-agent), then retire it")
        try:
            await self._db(context, self.storage.retire_machine, request.name, time.time_ns())
        except NoSuchMachine as err:  # deleted meanwhile
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        await self._db(context, self.keeper.fleet_gauges)  # out of the gauges now, not at the next refresh
        log.info("machine %s retired: out of the heartbeat and audit gauges; its runs are kept", request.name)
        rows = await self._db(context, self.storage.list_machines)
        latest = await self._db(context, self.storage.latest_audits)
        row = next(r for r in rows if r["name"] == request.name)
        return pb.RetireMachineResponse(machine=self._summary(row, latest.get(request.name)))
