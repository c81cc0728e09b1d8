"""Small programs perfctl builds itself: with the system's C compiler the exec gate and the calibration
kernels; with clang the BPF CO-RE objects (against a vmlinux.h generated from the running kernel's BTF).

Each is built once per digest of its inputs and flags into a cache directory owned by the current user
(root: /var/cache/perfctl, mode 755, so a benchmark run with --user can execute it; others:
~/.cache/perfctl; $PERFCTL_CACHE_DIR replaces either, under the same trust checks). An artifact lives in
its own entry ``<cache>/NAME-<digest>/`` beside ``sha256``, the digest of its content recorded when it was
built (``sha256sum -c`` reads it). The entry is written under a temporary name, verified (the producer
exited 0 and the output is complete), fsynced and renamed into place whole (:func:`_install`), so a full
disk or a crash never leaves a truncated artifact where a later run would take it for a built one.

perfctl (often root) executes or loads what it finds there, so before every use the cache directory, the
entry, the record and the artifact must be ours, not writable by group or others, not symbolic links and
(below the directories) regular files, never a FIFO or a device, which are refused without being read,
and the artifact's content must match its record (:func:`open_artifact`); anything else is refused with
the reason and the command that fixes it, never rebuilt over silently. A descriptor kept open across uses
(the exec gate's) is checked again before each one by :func:`check_descriptor`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pwd
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Callable

CACHE_DIR_ENV = "PERFCTL_CACHE_DIR"  # another cache directory (tests on a small tmpfs; operators)
RECORD = "sha256"  # an entry's file holding its artifact's content digest, in sha256sum's format
# Part of every digest: entries of another layout (the flat files of earlier perfctls) get other names
# rather than being misread.
LAYOUT = "perfctl-cache-2"


class BuildError(Exception):
    """Why a program could not be built or used; one line. ``reason`` without ``fix``, the command that
    repairs it (None when there is none to give)."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(f"{reason} ({fix})" if fix else reason)
        self.reason = reason
        self.fix = fix


class UntrustedError(BuildError):
    """A cached file or directory perfctl refuses to execute, load or read: not ours, writable by others, a
    symbolic link, or different from what was recorded when it was built."""


def cache_dir() -> str:
    given = os.environ.get(CACHE_DIR_ENV)
    if given:
        return os.path.abspath(given)
    if os.geteuid() == 0:
        return "/var/cache/perfctl"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "perfctl")


def _check_owner_and_mode(st: os.stat_result, path: str, fix: str | None) -> None:
    """Ours and not writable by group or others: perfctl (often root) executes or believes what is there."""
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedError(f"{path} is a symbolic link", fix or f"rm {path}")
    if st.st_uid != os.geteuid():
        raise UntrustedError(f"{path} is owned by uid {st.st_uid}, not by uid {os.geteuid()} running perfctl",
                             fix or f"chown {_user_name()} {path}")
    if st.st_mode & 0o022:
        who = {0o020: "its group", 0o002: "every user", 0o022: "its group and every user"}[st.st_mode & 0o022]
        raise UntrustedError(f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})",
                             fix or f"chmod go-w {path}")


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


# Every open of an artifact, a record or a trusted file: no symbolic link followed, never blocking (a FIFO in
# place of a file would otherwise hang perfctl in open(2) before any check), never a controlling terminal.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(st: os.stat_result, path: str, fix: str | None) -> UntrustedError:
    kind = next((name for test, name in _KINDS if test(st.st_mode)), f"of type {stat.S_IFMT(st.st_mode):o}")
    return UntrustedError(f"{path} is not a regular file ({kind})", fix or f"rm {path}")


def _open_checked(name: str, path: str, dir_fd: int | None, directory: bool, fix: str | None) -> int:
    """``name`` opened relative to ``dir_fd`` without following a symbolic link and without blocking, then
    checked through the descriptor, so what was checked is what is read. A file that is not a regular one
    (a FIFO, a device) is refused on its lstat, before it is opened (opening a device can do something),
    and again on the descriptor should it have been put there between the two."""
    if not directory:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise
        except OSError:
            pass  # open says why, below
        else:
            if not stat.S_ISREG(st.st_mode):
                _check_owner_and_mode(st, path, fix)
                raise _not_regular(st, path, fix)
    flags = _READ_FLAGS | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW met a link (or a file where a directory goes)
            st = os.lstat(name, dir_fd=dir_fd)
            _check_owner_and_mode(st, path, fix)
            if directory:
                raise UntrustedError(f"{path} is not a directory", fix or f"rm {path}") from None
            raise _not_regular(st, path, fix) from None
        raise
    try:
        st = os.fstat(fd)
        _check_owner_and_mode(st, path, fix)
        if not directory and not stat.S_ISREG(st.st_mode):
            raise _not_regular(st, path, fix)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_below(top: str, names: tuple[str, ...], fix: str | None) -> int:
    """The file ``top/names...`` opened for reading, each directory from ``top`` down and the file itself
    checked on its descriptor (:func:`_check_owner_and_mode`, no symbolic links). ``fix`` repairs a
    problem below ``top``. Raises UntrustedError, or OSError (FileNotFoundError when a part is missing)."""
    fd = _open_checked(top, top, None, True, None)
    path = top
    try:
        for index, name in enumerate(names):
            path = os.path.join(path, name)
            below = _open_checked(name, path, fd, index < len(names) - 1, fix)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_trusted(path: str) -> bytes:
    """The content of ``path`` if it and its directory are ours, not writable by group or others, and not
    symbolic links; checked on the open descriptors, so the bytes returned are the bytes checked.

    Raises FileNotFoundError when the file (or its directory) does not exist, UntrustedError (one line;
    ``.reason`` and ``.fix``) when either fails a check, and OSError for anything else the system refuses."""
    path = os.path.abspath(path)
    fd = _open_below(os.path.dirname(path), (os.path.basename(path),), None)
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


def write_trusted(path: str, content: bytes) -> None:
    """Replace ``path`` with ``content`` (mode 0644) so that :func:`read_trusted` finds it whole or finds the
    previous one: written to a private temporary name beside it, fsynced, then renamed (a full disk or a
    crash leaves the previous file). Raises OSError."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def open_artifact(path: str) -> int:
    """A read-only descriptor (close-on-exec) of the cached artifact ``path`` (``<cache>/ENTRY/NAME`` as
    returned by :func:`build_static` and :func:`build_bpf`) after every check of the module docstring,
    its content included. Execute or load through it (/proc/PID/fd/N) and the content checked is the
    content used. Raises UntrustedError with the reason and the fix, or BuildError."""
    return open_artifact_with_digest(path)[0]


def open_artifact_with_digest(path: str) -> tuple[int, str]:
    """:func:`open_artifact`, and the sha256 (hex) its content was checked against: what
    :func:`check_descriptor` compares the descriptor's content with before each later use."""
    entry, name = os.path.split(os.path.abspath(path))
    top, entry_name = os.path.split(entry)
    fix = _entry_fix(entry)
    try:
        record_fd = _open_below(top, (entry_name, RECORD), fix)
        try:
            record = _read_all(record_fd).decode("ascii", "replace").split()
        finally:
            os.close(record_fd)
        fd = _open_below(top, (entry_name, name), fix)
    except FileNotFoundError as err:
        raise UntrustedError(f"{entry} is incomplete ({os.path.basename(err.filename or '?')} is missing)",
                             fix) from None
    except OSError as err:
        raise BuildError(f"cannot read {path}: {err.strerror}") from None
    try:
        digest = _content_digest(fd)
        if record[:2] != [digest, name]:
            raise UntrustedError(f"{path} does not match the digest recorded when it was built", fix)
    except BaseException:
        os.close(fd)
        raise
    return fd, digest


def _content_digest(fd: int) -> str:
    """sha256 (hex) of a file's whole content, read with pread from offset 0: the descriptor's own offset is
    left where it was, so it can still be read, loaded or executed from the start."""
    hashed, offset = hashlib.sha256(), 0
    while chunk := os.pread(fd, 1 << 20, offset):
        hashed.update(chunk)
        offset += len(chunk)
    return hashed.hexdigest()


def _entry_fix(entry: str) -> str:
    return f"rm -r {entry}; perfctl rebuilds it"


def _artifact_fix(path: str) -> str:
    return _entry_fix(os.path.dirname(os.path.abspath(path)))


def check_descriptor(fd: int, path: str, digest: str | None) -> None:
    """The artifact ``path``, held open as ``fd`` since :func:`open_artifact_with_digest` checked it, checked
    again before another use: still ours, not writable by group or others, a regular file, and its content,
    re-read from offset 0 with pread (the descriptor's offset is left alone), still hashing to ``digest``.
    Catches the file rewritten, truncated, chmod'ed or chown'ed in place (same inode) since; replacing it by
    a rename changes nothing that runs through ``fd``. Costs an fstat and reading the file (a static gate
    is a few KB: microseconds); ``digest`` None checks all but the content. Raises UntrustedError (one line,
    ``.reason`` and ``.fix``)."""
    try:
        st = os.fstat(fd)
        # the fix is made only when something is wrong: the gate is checked before every run, nearly always fine
        if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
            fix = _artifact_fix(path)
            _check_owner_and_mode(st, path, fix)
            raise _not_regular(st, path, fix)
        now = digest if digest is None else _content_digest(fd)
    except OSError as err:
        raise UntrustedError(f"cannot check {path} again: {err.strerror}", _artifact_fix(path)) from None
    if now != digest:
        raise UntrustedError(f"{path} changed since it was checked: it no longer matches the digest recorded "
                             "when it was built", _artifact_fix(path))


def _verified(path: str) -> str:
    os.close(open_artifact(path))
    return path


def _check_cache_dir(directory: str) -> None:
    """The cache directory itself, created if missing, must pass the same checks as what is in it."""
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        os.close(_open_checked(directory, directory, None, True, None))
    except UntrustedError:
        raise
    except OSError as err:
        raise BuildError(f"cannot use the cache directory {directory}: {err.strerror}") from None


def complete_elf(content: bytes) -> str | None:
    """What shows a compiler's output to be cut short, or None: an ELF file ends with its section header
    table (gcc, ld and clang write it last), so a truncated one lacks all or part of it."""
    if len(content) < 64 or content[:4] != b"\x7fELF" or content[4] != 2:
        return f"no 64-bit ELF header ({len(content)} bytes)"
    section_headers, = struct.unpack_from("<Q", content, 0x28)
    entry_size, count = struct.unpack_from("<HH", content, 0x3A)
    end = section_headers + entry_size * count
    if end > len(content):
        return f"its section headers end at byte {end}, past its end ({len(content)} bytes)"
    return None


VMLINUX_END = b"#endif /* __VMLINUX_H__ */\n"  # bpftool btf dump ... format c closes the header with it


def complete_vmlinux_header(content: bytes) -> str | None:
    if not content.endswith(VMLINUX_END):
        return f"it does not end with {VMLINUX_END.decode().strip()!r} ({len(content)} bytes)"
    return None


def _install(entry: str, name: str, produce: Callable[[str], None], complete: Callable[[bytes], str | None],
             mode: int) -> None:
    """The one way an artifact enters the cache: ``produce(path)`` writes it into a temporary entry (and
    raises BuildError when its producer fails), ``complete(content)`` says what is missing from it (None:
    nothing); then it and its record are fsynced and the entry renamed into place whole. On any failure
    the temporary entry is removed: nothing is left behind."""
    directory = os.path.dirname(entry)
    temporary = None
    try:
        temporary = tempfile.mkdtemp(dir=directory, prefix=f".{os.path.basename(entry)}-")
        artifact = os.path.join(temporary, name)
        produce(artifact)
        fd = os.open(artifact, _READ_FLAGS)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BuildError(f"{name} was not built as a regular file")
            content = _read_all(fd)
            missing = complete(content)
            if missing:
                raise BuildError(f"{name} was not built completely: {missing}")
            os.fchmod(fd, mode)
            os.fsync(fd)  # a delayed allocation can still fail for want of space: find out before the rename
        finally:
            os.close(fd)
        with open(os.path.join(temporary, RECORD), "x") as record:
            record.write(f"{hashlib.sha256(content).hexdigest()}  {name}\n")
            record.flush()
            os.fsync(record.fileno())
        os.chmod(temporary, 0o755)
        _fsync_directory(temporary)
        try:
            os.rename(temporary, entry)
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # another perfctl installed it meanwhile; its entry is checked like any other before use
        else:
            temporary = None
            _fsync_directory(directory)
    except OSError as err:
        raise BuildError(f"cannot build {name} in {directory}: {err.strerror}") from None
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _run(command: list[str], what: str) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True)
    if result.returncode != 0:
        raise BuildError(f"{what} failed: {_last_line(result.stderr.decode(errors='replace'))}")
    return result


def _cached(name: str, digest: str, produce: Callable[[str], None], complete: Callable[[bytes], str | None],
            mode: int, missing: tuple[str, str] | None = None, file_name: str | None = None) -> tuple[str, bool]:
    """The artifact ``file_name`` (default ``name``) in entry ``name-<digest>`` and whether this call built
    it: checked when it is already there (:func:`open_artifact`), else installed (:func:`_install`) and
    then checked like any other. ``missing``: (why it cannot be built here, the fix), e.g. no compiler."""
    entry = os.path.join(cache_dir(), f"{name}-{digest[:16]}")
    path = os.path.join(entry, file_name or name)
    try:
        os.lstat(entry)
    except FileNotFoundError:
        if missing:
            raise BuildError(missing[0], missing[1]) from None
        _check_cache_dir(os.path.dirname(entry))
        _install(entry, file_name or name, produce, complete, mode)
        return _verified(path), True
    except OSError as err:
        raise BuildError(f"cannot use the cache directory {os.path.dirname(entry)}: {err.strerror}") from None
    return _verified(path), False


def _input_digest(inputs: tuple[str, ...], flags: tuple[str, ...]) -> str:
    digest = hashlib.sha256("\0".join((LAYOUT, *flags)).encode())
    for path in inputs:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO must not hang
        except OSError as err:
            raise BuildError(f"{path} unreadable: {err.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BuildError(f"{path} is not a regular file")
            digest.update(_read_all(fd))
        except OSError as err:
            raise BuildError(f"{path} unreadable: {err.strerror}") from None
        finally:
            os.close(fd)
    return digest.hexdigest()


def build_static(source: str, flags: tuple[str, ...], name: str) -> tuple[str, bool]:
    """Path of the program built from ``source`` with ``flags`` (built now if needed), and whether it was
    built by this call. Raises BuildError with the reason (UntrustedError: the cached one is refused)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    return _cached(name, _input_digest((source,), flags),
                   lambda out: _run([compiler, *flags, "-o", out, source], f"building {name}"),
                   complete_elf, 0o755, None if compiler else ("no C compiler", "apt-get install gcc"))


BPF_CFLAGS = ("-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86")
VMLINUX_BTF = "/sys/kernel/btf/vmlinux"


def build_bpf(source: str, name: str) -> tuple[str, bool]:
    """Path of the BPF CO-RE object built from ``source`` (built now if needed) and whether it was built
    by this call: clang against a vmlinux.h that bpftool generates from this kernel's BTF, both cached by
    digest, so a new kernel gets a new header and object. Load it through :func:`open_artifact`. Raises
    BuildError with the reason."""
    if not os.path.exists(VMLINUX_BTF):
        raise BuildError(f"this kernel has no BTF ({VMLINUX_BTF} is missing): CO-RE objects cannot be built")
    bpftool, clang = shutil.which("bpftool"), shutil.which("clang")
    for tool, package in ((bpftool, "bpftool"), (clang, "clang")):
        if tool is None:
            raise BuildError(f"no {package} to build BPF programs with", f"apt-get install {package} libbpf-dev")
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        raise BuildError("no libbpf headers to build BPF programs with", "apt-get install libbpf-dev")
    header = _vmlinux_header(bpftool)
    include = os.path.dirname(header)
    flags = (*BPF_CFLAGS, "-I", include)
    return _cached(name, _input_digest((source, header), flags),
                   lambda out: _run([clang, *flags, "-c", source, "-o", out], f"building {name}"),
                   complete_elf, 0o644)


def _vmlinux_header(bpftool: str) -> str:
    """Path of vmlinux.h for this kernel's BTF, generated once per BTF digest (its directory is the include
    directory clang is given)."""

    def produce(out: str) -> None:
        dump = _run([bpftool, "btf", "dump", "file", VMLINUX_BTF, "format", "c"], "bpftool btf dump")
        with open(out, "xb") as f:  # written here, not by bpftool, which does not check its writes
            f.write(dump.stdout)

    return _cached("btf", _input_digest((VMLINUX_BTF,), ()), produce, complete_vmlinux_header, 0o644,
                   file_name="vmlinux.h")[0]


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]
