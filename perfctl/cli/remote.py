"""The fleet server as the commands reach it: one QueryService call, with connection and server errors as
one-line usage errors (perfctl/client.py makes the channel); the servers' Prometheus endpoint and logging."""

from __future__ import annotations

import contextlib
import logging
import sys

from perfctl.output import UsageError
from perfctl.report import QUIET, VERBOSE


def call(args, method: str, request):
    """One QueryService call; connection and server errors become one-line usage errors."""
    with session(args) as ask:
        return ask(method, request)


@contextlib.contextmanager
def session(args):
    """A function that makes QueryService calls (method name, request) on one channel, kept open while the
    block runs; connection and server errors become one-line usage errors."""
    import grpc

    from perfctl import client, security

    try:
        stub, metadata, channel = client.query(args)
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"perfctl {args.command}: {err}") from None

    def ask(method: str, request):
        try:
            return getattr(stub, method)(request, metadata=metadata, timeout=60)
        except grpc.RpcError as err:
            raise UsageError(f"perfctl {args.command}: {err.code().name}: {err.details()}") from None

    try:
        yield ask
    finally:
        channel.close()


def pages(args, method: str, request, field: str, most: int | None = None):
    """The items (``field`` of each answer) of a paged QueryService listing (server/listings.py), page after
    page (each answer's next_page_token), until none are left or ``most`` were given; errors as call()'s.
    Each page is one call: no call, and no message, holds the whole listing."""
    given = 0
    with session(args) as ask:
        while True:
            if most is not None:
                request.page_size = min(most - given, 1000)
            answer = ask(method, request)
            for item in getattr(answer, field):
                if most is not None and given >= most:  # a server that pages otherwise
                    return
                yield item
                given += 1
            if not answer.next_page_token or (most is not None and given >= most):
                return
            request.page_token = answer.next_page_token


def serve_metrics(address: str | None) -> None:
    if address:
        from prometheus_client import start_http_server

        from perfctl import security

        host, port = security.split_address(address)
        start_http_server(port, addr=host)


def start_logging(verbosity: int) -> None:
    """The long-running commands' log on stderr: warnings and errors only under -q, debug under -v."""
    logging.basicConfig(level=logging.WARNING if verbosity <= QUIET else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if verbosity >= VERBOSE:  # perfctl's own debug lines, not those of grpc and asyncio
        logging.getLogger("perfctl").setLevel(logging.DEBUG)
