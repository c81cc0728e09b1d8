"""Transport security shared by server, agent and client: TLS credentials, and the rule that plaintext is
refused except on loopback unless --insecure is given (docs/operations.md)."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import grpc

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


class SecurityError(ValueError):
    pass


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT, [IPv6]:PORT. A host of only digits and dots must be a full dotted quad:
    the C resolver reads 127.1 as 127.0.0.1 but gRPC does not, so it would be checked as one address and
    bound (or dialled) as another."""
    host, sep, port = address.rpartition(":")
    # isascii: str.isdigit and int() also take other scripts' digits ("١٧٥١١" would be port 17511)
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise SecurityError(f"address {address!r} must be HOST:PORT with a port 1-65535")
    if host.startswith("["):
        if not host.endswith("]"):
            raise SecurityError(f"address {address!r}: unbalanced brackets around the host")
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise SecurityError(f"address {address!r}: {host!r} in brackets is not an IPv6 address") from None
    elif ":" in host:
        raise SecurityError(f"address {address!r}: write an IPv6 host in brackets, [::1]:PORT")
    elif all(c.isdigit() or c == "." for c in host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise SecurityError(f"address {address!r}: {host!r} is not a full IPv4 address (a.b.c.d)") from None
    else:
        try:
            # as the resolver will encode it: an empty label (a..b) or one over 63 characters is a UnicodeError
            # there, not an OSError
            host.encode("idna")
        except UnicodeError:
            raise SecurityError(f"address {address[:100]!r}: {host[:64]!r} is not a host name "
                                "(empty label, or one longer than 63 characters)") from None
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
        except (OSError, UnicodeError):  # UnicodeError: not a host name (split_address says why)
            return False


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise SecurityError(f"{what} {path}: {err.strerror}") from None


@dataclass(frozen=True)
class TlsFiles:
    """Server: cert + key (+ client CA for mutual TLS). Agent/client: CA (+ cert + key for mutual TLS)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @property
    def enabled(self) -> bool:
        return any((self.ca, self.cert, self.key))


def server_credentials(tls: TlsFiles, listen: str, insecure: bool) -> grpc.ServerCredentials | None:
    """None means plaintext, allowed only on loopback or with --insecure."""
    host, _ = split_address(listen)
    if tls.cert or tls.key:
        if not (tls.cert and tls.key):
            raise SecurityError("--tls-cert and --tls-key go together")
        client_ca = _read(tls.ca, "client CA")
        return grpc.ssl_server_credentials([(_read(tls.key, "TLS key"), _read(tls.cert, "TLS certificate"))],
                                           root_certificates=client_ca, require_client_auth=client_ca is not None)
    require_loopback_or_insecure(listen, insecure, "plaintext", "give --tls-cert/--tls-key, or --insecure")
    return None


def require_loopback_or_insecure(address: str, insecure: bool, what: str, remedy: str = "give --insecure") -> None:
    """The one rule for whatever a server serves without TLS (its gRPC port without a certificate, the
    Prometheus endpoint of `--metrics`, which is always plain HTTP): on a loopback address only, unless
    --insecure says that the network there is trusted. SecurityError naming the address otherwise."""
    host, _ = split_address(address)
    if not is_loopback(host) and not insecure:
        raise SecurityError(f"refusing {what} on {address}: not loopback; {remedy}")


def split_servers(text: str) -> list[str]:
    """The servers of ``--server A,B,...`` (replicas of one fleet: docs/operations.md), each HOST:PORT, in the
    order given. SecurityError naming the one that is not an address."""
    servers = [part.strip() for part in text.split(",")]
    if not all(servers):
        raise SecurityError(f"--server {text!r}: an empty address in the list")
    for server in servers:
        split_address(server)
    return servers


def channel(address: str, tls: TlsFiles, insecure: bool, options: list | None = None, aio: bool = True):
    """A gRPC channel to ``address``: TLS when a CA is given, plaintext only to loopback or with --insecure."""
    host, _ = split_address(address)
    module = grpc.aio if aio else grpc
    options = options or []
    if tls.enabled:
        if bool(tls.cert) != bool(tls.key):
            raise SecurityError("--tls-cert and --tls-key go together")
        credentials = grpc.ssl_channel_credentials(root_certificates=_read(tls.ca, "CA"),
                                                   private_key=_read(tls.key, "TLS key"),
                                                   certificate_chain=_read(tls.cert, "TLS certificate"))
        return module.secure_channel(address, credentials, options=options)
    if not is_loopback(host) and not insecure:
        raise SecurityError(f"refusing plaintext to {address}: not loopback; give --tls-ca, or --insecure")
    return module.insecure_channel(address, options=options)
