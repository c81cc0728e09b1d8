"""Where a zero-config `perfctl server` keeps its state, and where the agent and clients on the same host
find it (docs/operations.md, "Starting with no options").

root: /var/lib/perfctl; any other user: $XDG_STATE_HOME/perfctl (~/.local/state/perfctl). PERFCTL_STATE_DIR
replaces either (tests; several servers on one host). The directory is the user's own, mode 700: it holds
the tokens file and the two token files made at the first start, and the SQLite database.
"""

from __future__ import annotations

import os
import socket

TOKENS = "tokens"            # the server's tokens file
CLIENT_TOKEN = "client.token"  # this host's client token, for commands run here
AGENT_TOKEN = "agent.token"    # this host's agent token (the agent's name: the host name)
LOCAL_SERVER = "127.0.0.1:7433"  # the default --listen, and where a local agent or client looks


def state_dir() -> str:
    override = os.environ.get("PERFCTL_STATE_DIR")
    if override:
        return override
    if os.geteuid() == 0:
        return "/var/lib/perfctl"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "perfctl")


def path(name: str) -> str:
    return os.path.join(state_dir(), name)


def host_name() -> str:
    """This machine's name in the fleet when none is given: its host name, as far as a token's name may go."""
    return socket.gethostname().split(".")[0] or "localhost"


def ensure_dir() -> str:
    """The state directory, created mode 700 if missing; OSError if it cannot be, or if it is not this user's
    own and private (its tokens would not be)."""
    directory = state_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.stat(directory)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{directory} must be owned by this user and private (mode 700): the tokens are kept there")
    return directory
