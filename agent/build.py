"""Small programs perfctl builds itself: with the system's C compiler the exec gate and the calibration
kernels; with clang the BPF CO-RE objects (against a vmlinux.h generated from the running kernel's BTF).
Each is built once per digest of its inputs and flags into a cache directory owned by the current user
(root: /var/cache/perfctl, mode 755, so a benchmark run with --user can execute it; others:
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
    compiler = shutil.which("cc") or shutil.which("gcc")
    return _cached(name, (source,), flags, 0o755, lambda out: [compiler, *flags, "-o", out, source],
                   None if compiler else "no C compiler (apt-get install gcc)")


BPF_CFLAGS = ("-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86")
VMLINUX_BTF = "/sys/kernel/btf/vmlinux"


def build_bpf(source: str, name: str) -> tuple[str, bool]:
    """Path of the BPF CO-RE object built from ``source`` (built now if needed) and whether it was built
    by this call: clang against a vmlinux.h that bpftool generates from this kernel's BTF, both cached by
    digest, so a new kernel gets a new header and object. Raises BuildError with the reason."""
    if not os.path.exists(VMLINUX_BTF):
        raise BuildError(f"this kernel has no BTF ({VMLINUX_BTF} is missing): CO-RE objects cannot be built")
    bpftool, clang = shutil.which("bpftool"), shutil.which("clang")
    for tool, package in ((bpftool, "bpftool"), (clang, "clang")):
        if tool is None:
            raise BuildError(f"no {package} to build BPF programs with (apt-get install {package} libbpf-dev)")
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        raise BuildError("no libbpf headers to build BPF programs with (apt-get install libbpf-dev)")
    include = _vmlinux_header(bpftool)
    header = os.path.join(include, "vmlinux.h")
    flags = (*BPF_CFLAGS, "-I", include)
    return _cached(name, (source, header), flags, 0o644, lambda out: [clang, *flags, "-c", source, "-o", out], None)


def _vmlinux_header(bpftool: str) -> str:
    """A directory holding vmlinux.h for this kernel's BTF, generated once per BTF digest."""
    with open(VMLINUX_BTF, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    directory = cache_dir()
    include = os.path.join(directory, f"btf-{digest}")
    if os.path.exists(os.path.join(include, "vmlinux.h")):
        if _trusted(include):
            return include
        raise BuildError(f"{include} is not owned by us or is writable by others")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        temporary = tempfile.mkdtemp(dir=directory, prefix=".btf-")
        with open(os.path.join(temporary, "vmlinux.h"), "w") as f:
            result = subprocess.run([bpftool, "btf", "dump", "file", VMLINUX_BTF, "format", "c"], stdout=f,
                                    stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            shutil.rmtree(temporary)
            raise BuildError(f"bpftool could not dump this kernel's BTF: {_last_line(result.stderr)}")
        os.chmod(temporary, 0o755)
        os.chmod(os.path.join(temporary, "vmlinux.h"), 0o644)
        try:
            os.rename(temporary, include)
        except OSError:  # another perfctl made it meanwhile
            shutil.rmtree(temporary)
    except OSError as err:
        raise BuildError(f"cannot write {include}: {err.strerror}") from None
    return include


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]


def _cached(name: str, inputs: tuple[str, ...], flags: tuple[str, ...], mode: int, command,
            missing: str | None) -> tuple[str, bool]:
    """The cached output named after the digest of ``inputs`` and ``flags``, made now by running
    ``command(out)`` (a compiler command line) when absent; ``missing`` says why no compiler is at hand."""
    digest = hashlib.sha256("\0".join(flags).encode())
    for path in inputs:
        try:
            with open(path, "rb") as f:
                digest.update(f.read())
        except OSError as err:
            raise BuildError(f"{path} unreadable: {err.strerror}") from None
    directory = cache_dir()
    output = os.path.join(directory, f"{name}-{digest.hexdigest()[:16]}")
    if os.path.exists(output):
        if _trusted(output) and _trusted(directory):
            return output, False
        raise BuildError(f"{output} is not owned by us or is writable by others")
    if missing:
        raise BuildError(missing)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}-")
        os.close(fd)
        try:
            result = subprocess.run(command(temporary), capture_output=True, text=True)
            if result.returncode != 0:
                raise BuildError(f"building {name} failed: {_last_line(result.stderr)}")
            os.chmod(temporary, mode)
            os.replace(temporary, output)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError as err:
        raise BuildError(f"cannot build {name} in {directory}: {err.strerror}") from None
    return output, True
