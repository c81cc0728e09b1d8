"""Small static programs perfctl builds itself with the system's C compiler: the exec gate and the
calibration kernels. Each is built once per (source, flags) digest into a cache directory owned by the
current user (root: /var/cache/perfctl, mode 755, so a benchmark run with --user can execute it; others:
~/.cache/perfctl), and used only if it and its directory are ours and not writable by anyone else.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile


class BuildError(Exception):
    """Why a program could not be built; one line."""


def cache_dir() -> str:
    if os.geteuid() == 0:
        return "/var/cache/perfctl"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "perfctl")


def _trusted(path: str) -> bool:
    """Ours and not writable by anyone else: perfctl (often root) is about to exec it."""
    st = os.stat(path)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def build_static(source: str, flags: tuple[str, ...], name: str) -> tuple[str, bool]:
    """Path of the program built from ``source`` with ``flags`` (built now if needed), and whether it was
    built by this call. Raises BuildError with the reason."""
    try:
        with open(source, "rb") as f:
            digest = hashlib.sha256(f.read() + "\0".join(flags).encode()).hexdigest()[:16]
    except OSError as err:
        raise BuildError(f"{source} unreadable: {err.strerror}") from None
    directory = cache_dir()
    binary = os.path.join(directory, f"{name}-{digest}")
    if os.path.exists(binary):
        if _trusted(binary) and _trusted(directory):
            return binary, False
        raise BuildError(f"{binary} is not owned by us or is writable by others")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BuildError("no C compiler (apt-get install gcc)")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}-")
        os.close(fd)
        result = subprocess.run([compiler, *flags, "-o", temporary, source], capture_output=True, text=True)
        if result.returncode != 0:
            os.unlink(temporary)
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise BuildError(f"building {name} failed: {last}")
        os.chmod(temporary, 0o755)
        os.replace(temporary, binary)
    except OSError as err:
        raise BuildError(f"cannot build {name} in {directory}: {err.strerror}") from None
    return binary, True
