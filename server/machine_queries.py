"""QueryService's calls about the machines themselves (server/service.py mixes them in; ListMachines, with each
machine's clock skew and the runs flagged with a clock ahead of the server's, is a paged listing:
server/listings.py): RetireMachine, which takes a decommissioned machine out of the heartbeat and audit gauges
so their alerts stop (deploy/prometheus/perfctl-alerts.yml), keeping what it stored."""

from __future__ import annotations

import logging
import time

import grpc

from perfctl.server.listings import machines_page
from perfctl.server.machine_records import NoSuchMachine
from perfctl.v1 import fleet_pb2 as pb

log = logging.getLogger("perfctl.server")


class MachineQueries:
    """A mixin of QueryService (``storage``, ``keeper``, ``_principal`` and ``_db`` are _Base's)."""

    async def RetireMachine(self, request, context):
        """Any client token may: retiring stops the machine's alerts and deletes nothing (runs, jobs and audits
        stay, and its agent registering again undoes it). Refused while its agent is connected: it would be
        heard from at once and watched again at its next registration."""
        await self._principal(context, "client")
        # the one machine by name, as ListMachines pages it (never every machine's runs counted)
        found, _ = await self._db(context, machines_page, self.storage, self.keeper.connected, request.name, 1, None)
        if not found or not request.name:
            some, _ = await self._db(context, machines_page, self.storage, self.keeper.connected, "", 20, None)
            known = ", ".join(m.name for m in some) or "none"
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no machine named {request.name[:128]!r} on this "
                                                           f"server (known: {known})")
        if found[0].connected:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"machine {request.name!r} has its agent connected: stop the agent first "
                                "(systemctl disable --now perfctl-agent), then retire it")
        try:
            await self._db(context, self.storage.retire_machine, request.name, time.time_ns())
        except NoSuchMachine as err:  # deleted meanwhile
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        await self._db(context, self.keeper.fleet_gauges)  # out of the gauges now, not at the next refresh
        log.info("machine %s retired: out of the heartbeat and audit gauges; its runs are kept", request.name)
        (retired,), _ = await self._db(context, machines_page, self.storage, self.keeper.connected, request.name,
                                       1, None)
        return pb.RetireMachineResponse(machine=retired)
