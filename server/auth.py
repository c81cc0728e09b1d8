"""Who may call the server: a token per agent and per client, from a tokens file.

One line per token: ``agent NAME TOKEN`` or ``client NAME TOKEN`` (``#`` starts a comment). An agent may
only register and send samples as NAME; a client may query and submit jobs. Tokens travel in the
``authorization: Bearer TOKEN`` metadata, so only over TLS except on loopback (perfctl/security.py).
``perfctl token add`` writes lines with fresh random tokens.

The file is re-read when it changes (checked at most once a second, and at once for a token it does not
know: a token just added is honoured at its first call, as a replica started a moment before sees it), so
tokens are added and revoked without a restart, and the server never keeps serving tokens from a file it
would refuse to start with:

- a file with no tokens (empty, or only comments) revokes every token; at start it is refused ("no tokens");
- a file that goes missing, turns readable by group or others, passes to an owner other than the server's
  user or root, becomes unreadable or syntactically invalid revokes every token and is logged as an error,
  once per change of the file, not per call;
- fixing the file restores the tokens it lists.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
import time
from dataclasses import dataclass

ROLES = ("agent", "client")

log = logging.getLogger("perfctl.server")


class TokenFileError(ValueError):
    pass


@dataclass(frozen=True)
class Principal:
    role: str
    name: str

    @property
    def token_kind(self) -> str:
        """"a client token", "an agent token": how messages name the caller's kind of token."""
        return f"{'an' if self.role[:1] in 'aeiou' else 'a'} {self.role} token"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """The tokens file's principals, re-read when the file changes (module docstring: the rules)."""

    def __init__(self, entries: dict[bytes, Principal], path: str | None = None, state: tuple | None = None):
        self._entries = entries
        self._path = path
        self._state = state
        self._checked = time.monotonic()

    @classmethod
    def load(cls, path: str) -> Tokens:
        """The tokens of ``path``; TokenFileError (one line) if the server must not start with it."""
        state = cls._file_state(path)
        entries = cls._parse(path)
        if not entries:
            raise TokenFileError(f"{path}: no tokens")
        return cls(entries, path, state)

    @staticmethod
    def _file_state(path: str) -> tuple:
        """What identifies one version of the file: a chmod changes ctime and mode, not mtime; a replacing
        rename changes the inode."""
        try:
            st = os.stat(path)
        except OSError as err:
            return ("error", err.errno)
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)

    def _refresh(self, now: bool = False) -> None:
        """Re-read the file if it changed: checked at most once a second, or ``now``."""
        if self._path is None or (not now and time.monotonic() - self._checked < 1.0):
            return
        self._checked = time.monotonic()
        state = self._file_state(self._path)
        if state == self._state:
            return
        self._state = state
        try:
            entries = self._parse(self._path)
        except TokenFileError as err:
            self._entries = {}
            log.error("tokens file refused, every token is revoked until it is fixed: %s", err)
            return
        self._entries = entries
        if entries:
            log.info("tokens file %s re-read: %d tokens", self._path, len(entries))
        else:
            log.warning("tokens file %s has no tokens: every call is refused", self._path)

    @staticmethod
    def _parse(path: str) -> dict[bytes, Principal]:
        try:
            with open(path) as f:
                # the mode and owner of the file read, not of whatever is at the path a moment later
                st = os.fstat(f.fileno())
                lines = f.read().splitlines()
        except OSError as err:
            raise TokenFileError(f"{path}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise TokenFileError(f"{path}: not UTF-8 text") from None
        if st.st_mode & 0o077:
            raise TokenFileError(f"{path}: open to its group or other users (mode {stat.S_IMODE(st.st_mode):o}); "
                                 "chmod 600 it")
        # another user who owns the file can write tokens into it (or chmod it), whatever its mode
        if st.st_uid not in (os.geteuid(), 0):
            raise TokenFileError(f"{path}: owned by uid {st.st_uid}, not by the server's user "
                                 f"(uid {os.geteuid()}) or root; chown it")
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
        return entries

    def identify(self, token: str | None) -> Principal | None:
        """The principal of a token, compared in constant time over digests."""
        if not token:
            return None
        self._refresh()
        digest = _digest(token)
        principal = self._known(digest)
        if principal is None:  # a token added since the last check (a stat per unknown token, no more)
            self._refresh(now=True)
            principal = self._known(digest)
        return principal

    def _known(self, digest: bytes) -> Principal | None:
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
    from perfctl.output_files import append_whole

    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab"):
        # the file opened, not the one checked before (perfctl/output_files.py): a secret is never written
        # where other users can read it, and the server would refuse the file for it (_parse)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            raise TokenFileError(f"{path}: open to its group or other users (mode {mode:o}); chmod 600 it")
        # the whole line or none of it: a line cut by a full disk would make the server refuse the whole
        # file, and with it every token (perfctl/output_files.py)
        append_whole(fd, f"{role} {name} {token}\n".encode())
    return token
