"""The fleet server as the commands reach it: one QueryService call, with connection and server errors as
one-line usage errors (perfctl/client.py makes the channel); the servers' Prometheus endpoint and logging."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from perfctl.output import UsageError
from perfctl.report import QUIET, VERBOSE

if TYPE_CHECKING:
    from perfctl.client import Connection


class ServerUnavailable(UsageError):
    """The server, or its database, cannot answer now (UNAVAILABLE: stopped, restarting, its database down;
    DEADLINE_EXCEEDED: hung): a wait asks again (perfctl/cli/listings.py), a command says it in one line."""


TRANSIENT_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def call(connection: Connection, method: str, request):
    """One QueryService call; connection and server errors become one-line usage errors (ServerUnavailable
    for those that may pass)."""
    import grpc

    from perfctl import client, security

    try:  # of replicas (--server A,B), the first that answers (perfctl/client.py)
        return client.unary(connection, method, request)
    except client.NoServerAccepted as err:
        raise ServerUnavailable(f"perfctl {connection.command}: {err}") from None
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"perfctl {connection.command}: {err}") from None
    except grpc.RpcError as err:
        error = ServerUnavailable if err.code().name in TRANSIENT_CODES else UsageError
        raise error(f"perfctl {connection.command}: {err.code().name}: {err.details()}") from None


def pages(connection: Connection, method: str, request, field: str, most: int | None = None):
    """The items (``field`` of each answer) of a paged QueryService listing (server/listings.py), page after
    page (each answer's next_page_token), until none are left or ``most`` were given; errors as call()'s.
    Each page is one call: no call, and no message, holds the whole listing."""
    given = 0
    while True:  # each page a call of its own: of replicas, the first that answers (a token is any replica's)
        if most is not None:
            request.page_size = min(most - given, 1000)
        answer = call(connection, method, request)
        for item in getattr(answer, field):
            if most is not None and given >= most:  # a server that pages otherwise
                return
            yield item
            given += 1
        if not answer.next_page_token or (most is not None and given >= most):
            return
        request.page_token = answer.next_page_token


def serve_metrics(address: str | None, insecure: bool) -> None:
    """`--metrics HOST:PORT` of the server and the agent: Prometheus's plain HTTP, so off loopback only with
    --insecure, the rule --listen follows (security.require_loopback_or_insecure). SecurityError, OSError."""
    if address:
        from prometheus_client import start_http_server

        from perfctl import security

        security.require_loopback_or_insecure(address, insecure, "plain-HTTP metrics",
                                              "give --insecure to serve them there (they have no TLS)")
        host, port = security.split_address(address)
        start_http_server(port, addr=host)


def start_logging(verbosity: int) -> None:
    """The long-running commands' log on stderr: warnings and errors only under -q, debug under -v."""
    logging.basicConfig(level=logging.WARNING if verbosity <= QUIET else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if verbosity >= VERBOSE:  # perfctl's own debug lines, not those of grpc and asyncio
        logging.getLogger("perfctl").setLevel(logging.DEBUG)
