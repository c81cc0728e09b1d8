"""What a gRPC call hears while the database is down: UNAVAILABLE, "database unavailable; try again".

Storage raises DatabaseUnavailable from every method when the database cannot be reached
(server/storage_errors.py), and the driver's own errors from modules that use its connections (delivery,
listings) are told apart by the same test (storage_errors.unavailable); this interceptor is the one place that
answers it, for every service and every kind of call (unary, streaming), so no handler needs its own case. The
client hears one line without the driver's text (socket paths, addresses); UNAVAILABLE tells agents to
reconnect (to another replica, if they have several) and clients' waits to ask again
(perfctl/cli/listings.py). The server's log says it once per OUTAGE_LOG_S with the driver's first line and how
many calls were answered so, never a traceback per call.

A value the database refuses (the driver's DataError: a NUL in PostgreSQL's text, a number out of a column's
range) is the request's fault, not the server's: INVALID_ARGUMENT in one line without the SQL, and one line in
the log naming the call and the driver's first line.
"""

from __future__ import annotations

import inspect
import logging
import time

import grpc

from perfctl.server.storage_errors import DatabaseUnavailable, refused_value, unavailable

log = logging.getLogger("perfctl.server")

UNAVAILABLE_DETAILS = "database unavailable; try again"
REFUSED_DETAILS = "a value of the request is one the database cannot hold (NUL, out of range, malformed)"
OUTAGE_LOG_S = 10.0


class DatabaseOutage(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        self._said_at = -OUTAGE_LOG_S
        self._unsaid = 0

    def _answered(self, method: str, err: DatabaseUnavailable) -> None:
        self._unsaid += 1
        if time.monotonic() - self._said_at >= OUTAGE_LOG_S:
            log.warning("%s (%s; %d calls answered UNAVAILABLE since the last such line)", err, method, self._unsaid)
            self._said_at, self._unsaid = time.monotonic(), 0

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behavior = getattr(handler, kind)
            if behavior is not None:
                return handler._replace(**{kind: self._guarded(method, behavior)})
        return handler

    async def _answer(self, method: str, err: Exception, context) -> None:
        """UNAVAILABLE for an unreachable database, INVALID_ARGUMENT for a value it refuses; any other error
        goes on up as it was."""
        if (refusal := refused_value(err)) is not None:
            # a net under the requests' checks (server/nul_refusal.py, server/validation.py): one line here and
            # to the client, without the SQL and its parameters
            log.warning("%s: the database refused a value of the request: %s", method, refusal)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, REFUSED_DETAILS)
        if (outage := unavailable(err)) is None:
            raise err
        self._answered(method, outage)
        await context.abort(grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_DETAILS)

    def _guarded(self, method: str, behavior):
        if inspect.isasyncgenfunction(behavior):
            async def streaming(request, context):
                try:
                    async for response in behavior(request, context):
                        yield response
                except Exception as err:  # noqa: BLE001 -- only an unreachable database is answered here
                    await self._answer(method, err, context)
            return streaming

        async def unary(request, context):
            try:
                return await behavior(request, context)
            except Exception as err:  # noqa: BLE001 -- only an unreachable database is answered here
                await self._answer(method, err, context)
        return unary
