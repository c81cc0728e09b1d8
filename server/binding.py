"""Binding the server's address: every address a name resolves to, or none, with one line saying why not.

gRPC alone would bind what it can of a name's addresses and carry on, and print its own error on stderr; a
second server on a taken port must fail instead (SO_REUSEPORT is off, server/service.py serve), or it would
silently split the agents and clients between two databases.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile

from perfctl import security


def listen_on(server, listen: str, credentials) -> int:
    """Bind ``listen`` on the gRPC ``server`` (TLS when ``credentials``), before it starts; the port bound.
    OSError("cannot listen on ADDRESS: why") when the address, or one of those it resolves to, cannot be
    bound."""
    problem = unbindable(listen)
    port = 0 if problem else _bound_port(server, listen, credentials)
    if not problem and port == 0:
        # taken between the check and gRPC's bind, or gRPC's own reason
        problem = unbindable(listen) or "gRPC could not bind it (GRPC_VERBOSITY=debug shows why)"
    if problem:
        raise OSError(f"cannot listen on {listen}: {problem}")
    return port


def unbindable(listen: str) -> str | None:
    """Why one of the addresses ``listen`` resolves to cannot be bound now, in words, or None.

    gRPC binds every address a name resolves to (localhost: ::1 and 127.0.0.1) and carries on when only
    some of them bind: a second server on localhost:P would take ::1 beside a first one on 127.0.0.1:P,
    and agents and clients would split between the two. So each address is bound here first, as gRPC
    binds it (SO_REUSEADDR, no SO_REUSEPORT)."""
    try:
        host, port = security.split_address(listen)
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (security.SecurityError, OSError, UnicodeError) as err:
        return str(err.strerror if isinstance(err, OSError) and err.strerror else err)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as err:
                return "address in use" if err.errno == errno.EADDRINUSE else (err.strerror or str(err)).lower()
    return None


# gRPC core's words when a name resolved to several addresses and only some of them bound
_PARTIAL_BIND = b"addresses added out of total"


def _bound_port(server, listen: str, credentials) -> int:
    """The bound port, or 0 (also when gRPC bound only some of the addresses ``listen`` resolves to: the
    server is then not started, so the ones it bound are released). gRPC core prints its own bind error on
    file descriptor 2, a second line beside the one-line error the caller gives: stderr is captured for the
    call, written back when the bind succeeded (nothing is lost) and dropped when it failed (the caller
    explains the failure)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            if credentials is None:
                port = server.add_insecure_port(listen)
            else:
                port = server.add_secure_port(listen, credentials)
        except RuntimeError:  # grpc >= 1.5x raises instead of returning 0
            port = 0
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        printed = capture.read()
        if _PARTIAL_BIND in printed:
            return 0
        if port:
            os.write(2, printed)
    return port
