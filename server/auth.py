"""Who may call the server: a token per agent and per client, from a tokens file.

One line per token: ``agent NAME TOKEN`` or ``client NAME TOKEN`` (``#`` starts a comment). An agent may
only register and send samples as NAME; a client may query and submit jobs. Tokens travel in the
``authorization: Bearer TOKEN`` metadata, so only over TLS except on loopback (perfctl/security.py).
``perfctl token add`` writes lines with fresh random tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass

ROLES = ("agent", "client")


class TokenFileError(ValueError):
    pass


@dataclass(frozen=True)
class Principal:
    role: str
    name: str


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """The tokens file, re-read when it changes (at most once a second), so agents and clients can be
    added or revoked without restarting the server. A file that turns unreadable or invalid keeps the
    last good tokens in force."""

    def __init__(self, entries: dict[bytes, Principal], path: str | None = None):
        self._entries = entries
        self._path = path
        self._mtime = os.stat(path).st_mtime_ns if path else None
        self._checked = time.monotonic()

    @classmethod
    def load(cls, path: str) -> Tokens:
        return cls(cls._parse(path), path)

    def _refresh(self) -> None:
        if self._path is None or time.monotonic() - self._checked < 1.0:
            return
        self._checked = time.monotonic()
        try:
            mtime = os.stat(self._path).st_mtime_ns
            if mtime != self._mtime:
                self._entries = self._parse(self._path)
                self._mtime = mtime
        except (OSError, TokenFileError):
            pass

    @staticmethod
    def _parse(path: str) -> dict[bytes, Principal]:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as err:
            raise TokenFileError(f"{path}: {err.strerror}") from None
        if os.stat(path).st_mode & 0o077:
            raise TokenFileError(f"{path}: readable by others; chmod 600 it")
        entries = {}
        for number, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.split()
            if len(parts) != 3 or parts[0] not in ROLES or len(parts[2]) < 16:
                raise TokenFileError(f"{path}:{number}: expected 'agent|client NAME TOKEN' "
                                     "with a token of 16+ characters")
            entries[_digest(parts[2])] = Principal(parts[0], parts[1])
        if not entries:
            raise TokenFileError(f"{path}: no tokens")
        return entries

    def identify(self, token: str | None) -> Principal | None:
        """The principal of a token, compared in constant time over digests."""
        if not token:
            return None
        self._refresh()
        digest = _digest(token)
        for known, principal in self._entries.items():
            if hmac.compare_digest(known, digest):
                return principal
        return None


def add_token(path: str, role: str, name: str) -> str:
    """Append a fresh token for NAME to the tokens file (created mode 600) and return it."""
    if role not in ROLES:
        raise TokenFileError(f"role must be one of {ROLES}")
    if not name or any(c.isspace() for c in name) or len(name) > 128:
        raise TokenFileError(f"bad name {name!r}: 1-128 characters, no spaces")
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(f"{role} {name} {token}\n")
    return token
