"""Where tracepoints live: tracefs, mounted on demand as perf(1) does when running as root."""

from __future__ import annotations

import ctypes
import functools
import os

_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


@functools.lru_cache(maxsize=1)
def events_dir() -> tuple[str | None, str]:
    """(path of tracefs's events/ directory, or None; how it was found or why not)."""
    for root in _CANDIDATES:
        if os.path.isdir(root) and not os.access(root, os.X_OK):
            return None, f"tracefs at {root} is readable only by root (tracepoints need root)"
        if os.path.isdir(os.path.join(root, "events")):
            return os.path.join(root, "events"), f"tracefs at {root}"
    root = _CANDIDATES[0]
    if not os.path.isdir(root):
        return None, f"{root} does not exist (kernel without tracefs)"
    if os.geteuid() != 0:
        return None, f"tracefs is not mounted at {root} and mounting it needs root"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nodev", root.encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        return None, f"tracefs is not mounted and `mount -t tracefs nodev {root}` failed: {os.strerror(err)}"
    if os.path.isdir(os.path.join(root, "events")):
        return os.path.join(root, "events"), f"tracefs mounted by perfctl at {root}"
    return None, f"tracefs mounted at {root} but has no events/ directory"


def tracepoint_id(tracepoint: str) -> int:
    group, name = tracepoint.split(":", 1)
    events, _ = events_dir()
    with open(os.path.join(events, group, name, "id")) as f:
        return int(f.read())


def first_available(tracepoints: tuple[str, ...]) -> tuple[str | None, str]:
    """The first tracepoint of the list present in this kernel, or None and the reason."""
    events, how = events_dir()
    if events is None:
        return None, how
    for tracepoint in tracepoints:
        group, name = tracepoint.split(":", 1)
        path = os.path.join(events, group, name, "id")
        try:
            if os.access(path, os.R_OK):
                return tracepoint, how
        except OSError:
            continue
        if os.path.isdir(os.path.dirname(path)):
            return None, f"tracepoint {tracepoint} is not readable here (tracefs needs root)"
    return None, f"no tracepoint among {', '.join(tracepoints)} exists in this kernel"
