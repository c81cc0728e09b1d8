"""The fleet server as the commands reach it: one QueryService call, with connection and server errors as
one-line usage errors (perfctl/client.py makes the channel); the servers' Prometheus endpoint and logging."""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import TYPE_CHECKING

from perfctl.output import UsageError
from perfctl.report import QUIET, VERBOSE
from perfctl.text import visible

if TYPE_CHECKING:
    from perfctl.client import Connection


class ServerUnavailable(UsageError):
    """The server, or its database, cannot answer now (UNAVAILABLE: stopped, restarting, its database down;
    DEADLINE_EXCEEDED: hung): a wait asks again (perfctl/cli/listings.py), a command says it in one line."""


TRANSIENT_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


@contextlib.contextmanager
def answering(command: str):
    """Connection and server errors inside the block as one-line usage errors (ServerUnavailable for those
    that may pass), prefixed with ``command`` ("perfctl jobs"); the server's words made printable."""
    import grpc

    from perfctl import client, security

    try:
        yield
    except client.NoServerAccepted as err:
        raise ServerUnavailable(f"{command}: {err}") from None
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"{command}: {err}") from None
    except grpc.RpcError as err:
        error = ServerUnavailable if err.code().name in TRANSIENT_CODES else UsageError
        raise error(f"{command}: {err.code().name}: {visible(err.details() or '')}") from None


def call(connection: Connection, method: str, request):
    """One QueryService call, errors as ``answering``'s: of replicas (--server A,B), the first that answers
    (perfctl/client.py)."""
    from perfctl import client

    with answering(f"perfctl {connection.command}"):
        return client.unary(connection, method, request)


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


KNOWN_SHOWN = 20  # a machine name the server does not know: the machines it names instead


def known_machine(connection: Connection, name: str, command: str):
    """The server's record of machine ``name``; a one-line UsageError naming the machines it knows when it has
    none by that name (a typo in `perfctl changes --machine` must not pass as "no change" in a CI gate)."""
    from perfctl.v1 import fleet_pb2 as pb

    found = [m for m in call(connection, "ListMachines", pb.ListMachinesRequest(name=name)).machines
             if m.name == name]
    if found:
        return found[0]
    some = [m.name for m in pages(connection, "ListMachines", pb.ListMachinesRequest(), "machines",
                                  most=KNOWN_SHOWN)]
    known = ", ".join(sorted(some)) + (", ..." if len(some) == KNOWN_SHOWN else "") if some else "none"
    raise UsageError(f"{command}: no machine {visible(name)!r} on the server (known: {visible(known)})")
