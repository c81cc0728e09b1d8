"""A small ctypes binding of libbpf.so.1 (Debian libbpf1): open, load and attach a CO-RE object, and read
and write its maps. Only what agent/runacct.py needs; no bcc (it compiles at run time and needs kernel
headers that BTF-only kernels do not ship).

libbpf 1.x returns NULL (pointers) or a negative errno (ints) and sets errno; every failure here becomes a
:class:`BpfError` whose message carries the last lines libbpf printed (the verifier's reason among them).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

BTF_KIND_TYPEDEF = 8
BPF_ANY, BPF_NOEXIST = 0, 1


class BpfError(Exception):
    """Why a BPF object could not be opened, loaded or attached; one line."""


_p = ctypes.c_void_p
_SIGNATURES = {
    "bpf_object__open_file": (_p, [ctypes.c_char_p, _p]),
    "bpf_object__load": (ctypes.c_int, [_p]),
    "bpf_object__close": (None, [_p]),
    "bpf_object__find_program_by_name": (_p, [_p, ctypes.c_char_p]),
    "bpf_object__next_program": (_p, [_p, _p]),
    "bpf_object__find_map_by_name": (_p, [_p, ctypes.c_char_p]),
    "bpf_program__name": (ctypes.c_char_p, [_p]),
    "bpf_program__section_name": (ctypes.c_char_p, [_p]),
    "bpf_program__set_autoload": (ctypes.c_int, [_p, ctypes.c_bool]),
    "bpf_program__attach": (_p, [_p]),
    "bpf_link__destroy": (ctypes.c_int, [_p]),
    "bpf_map__fd": (ctypes.c_int, [_p]),
    "bpf_map__value_size": (ctypes.c_uint32, [_p]),
    "bpf_map__set_max_entries": (ctypes.c_int, [_p, ctypes.c_uint32]),
    "bpf_map_update_elem": (ctypes.c_int, [ctypes.c_int, _p, _p, ctypes.c_uint64]),
    "bpf_map_lookup_elem": (ctypes.c_int, [ctypes.c_int, _p, _p]),
    "bpf_map_delete_elem": (ctypes.c_int, [ctypes.c_int, _p]),
    "bpf_map_get_next_key": (ctypes.c_int, [ctypes.c_int, _p, _p]),
    "libbpf_num_possible_cpus": (ctypes.c_int, []),
    "libbpf_set_print": (_p, [_p]),
    "btf__load_vmlinux_btf": (_p, []),
    "btf__find_by_name_kind": (ctypes.c_int32, [_p, ctypes.c_char_p, ctypes.c_uint32]),
    "btf__free": (None, [_p]),
}

# libbpf_print_fn_t: int (*)(enum libbpf_print_level, const char *fmt, va_list); on x86-64 a va_list
# argument is passed as a pointer, which vsnprintf takes as is.
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class _Log:
    """What libbpf printed, kept per thread so a failure can quote it."""

    def __init__(self) -> None:
        self._local = threading.local()
        libc = ctypes.CDLL(None)
        self._vsnprintf = libc.vsnprintf
        self._vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
        self.callback = _PRINT_FN(self._print)

    def _print(self, level: int, fmt: bytes, args: int) -> int:
        # One message can hold a whole verifier log, many lines long; the tail (the verdict) is what counts.
        buf = ctypes.create_string_buffer(1 << 16)
        self._vsnprintf(buf, len(buf), fmt, args)
        self.lines.extend(line.rstrip() for line in buf.value.decode(errors="replace").splitlines())
        return 0

    @property
    def lines(self) -> list[str]:
        if not hasattr(self._local, "lines"):
            self._local.lines = []
        return self._local.lines

    def start(self) -> None:
        self._local.lines = []

    def reason(self) -> str:
        """The most telling line libbpf printed: the verifier's own complaint when there is one, else
        libbpf's first error or hint."""
        verifier, errors = [], []
        for line in self.lines:
            if not line or line.startswith(("--", "processed ", "Validating ")):
                continue
            if not line.startswith("libbpf:"):
                verifier.append(line)
            elif any(word in line for word in ("failed", "error", "Error", "not found", "try ", "invalid")):
                errors.append(line.removeprefix("libbpf: "))
        if verifier:  # the verifier ends with its complaint, often two lines (what, then why)
            return "; ".join(verifier[-2:])
        return errors[0] if errors else "no message from libbpf"


@functools.lru_cache(maxsize=1)
def library():
    """(libbpf's ctypes handle, its log) or a BpfError saying why it is not there."""
    import ctypes.util

    path = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        lib = ctypes.CDLL(path, use_errno=True)
    except OSError as err:
        raise BpfError(f"libbpf is not installed ({err}); apt-get install libbpf1") from None
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    log = _Log()
    lib.libbpf_set_print(ctypes.cast(log.callback, ctypes.c_void_p))
    return lib, log


def kernel_tracepoints(names: set[str]) -> set[str]:
    """Those of ``names`` that this kernel's BTF has as BTF tracepoints (tp_btf programs attach to them)."""
    lib, _ = library()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        raise BpfError("cannot read this kernel's BTF (/sys/kernel/btf/vmlinux): CO-RE needs CONFIG_DEBUG_INFO_BTF")
    try:
        return {name for name in names
                if lib.btf__find_by_name_kind(btf, f"btf_trace_{name}".encode(), BTF_KIND_TYPEDEF) > 0}
    finally:
        lib.btf__free(btf)


class Map:
    """One map of a loaded object, by fd; keys and values are bytes of the map's own sizes."""

    def __init__(self, lib, fd: int, value_size: int) -> None:
        self._lib, self.fd, self.value_size = lib, fd, value_size

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        if self._lib.bpf_map_update_elem(self.fd, key, value, flags) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def lookup(self, key: bytes, size: int) -> bytes | None:
        out = ctypes.create_string_buffer(size)
        if self._lib.bpf_map_lookup_elem(self.fd, key, out) != 0:
            return None
        return out.raw

    def keys(self, key_size: int) -> list[bytes]:
        found: list[bytes] = []
        previous = None
        current = ctypes.create_string_buffer(key_size)
        while self._lib.bpf_map_get_next_key(self.fd, previous, current) == 0:
            found.append(current.raw)
            previous = ctypes.create_string_buffer(current.raw, key_size)
        return found

    def delete(self, key: bytes) -> bool:
        return self._lib.bpf_map_delete_elem(self.fd, key) == 0


class BpfObject:
    """A CO-RE object file opened, optionally trimmed of programs, loaded and attached.

    ``skip`` names programs not to load (their tracepoint is missing here); ``max_entries`` resizes maps
    before the load; ``shown_as`` names the object in messages when ``path`` is a descriptor's
    (/proc/self/fd/N, how a checked cached object is loaded). Closing detaches everything; the kernel frees
    the programs with the last fd.
    """

    def __init__(self, path: str, *, skip: set[str] = frozenset(), max_entries: dict[str, int] | None = None,
                 shown_as: str | None = None):
        self._lib, self._log = library()
        self._links: list[int] = []
        self._log.start()
        self._obj = self._lib.bpf_object__open_file(path.encode(), None)
        if not self._obj:
            err = ctypes.get_errno()
            raise BpfError(f"cannot open BPF object {shown_as or path}: {os.strerror(err)} ({self._log.reason()})")
        try:
            for name in skip:
                program = self._lib.bpf_object__find_program_by_name(self._obj, name.encode())
                if program:
                    self._lib.bpf_program__set_autoload(program, False)
            for name, entries in (max_entries or {}).items():
                handle = self._lib.bpf_object__find_map_by_name(self._obj, name.encode())
                if handle:  # a foreign object without it fails later, where its own problem shows first
                    self._lib.bpf_map__set_max_entries(handle, entries)
            if self._lib.bpf_object__load(self._obj) != 0:
                err = ctypes.get_errno()
                raise BpfError(f"the kernel refused {os.path.basename(shown_as or path)} ({os.strerror(err)}): "
                               f"{self._log.reason()}")
            self._attach(skip)
        except BaseException:
            self.close()
            raise

    def _map_handle(self, name: str):
        handle = self._lib.bpf_object__find_map_by_name(self._obj, name.encode())
        if not handle:
            raise BpfError(f"the BPF object has no map {name!r}: it was built from another source")
        return handle

    def _attach(self, skip: set[str]) -> None:
        program = self._lib.bpf_object__next_program(self._obj, None)
        while program:
            name = self._lib.bpf_program__name(program).decode()
            if name not in skip:
                link = self._lib.bpf_program__attach(program)
                if not link:
                    err = ctypes.get_errno()
                    section = self._lib.bpf_program__section_name(program).decode()
                    raise BpfError(f"cannot attach {name} to {section}: {os.strerror(err)} ({self._log.reason()})")
                self._links.append(link)
            program = self._lib.bpf_object__next_program(self._obj, program)

    def map(self, name: str) -> Map:
        handle = self._map_handle(name)
        return Map(self._lib, self._lib.bpf_map__fd(handle), self._lib.bpf_map__value_size(handle))

    @staticmethod
    def possible_cpus() -> int:
        lib, _ = library()
        count = lib.libbpf_num_possible_cpus()
        if count <= 0:
            raise BpfError(f"libbpf cannot count the possible CPUs: {os.strerror(-count)}")
        return count

    def close(self) -> None:
        for link in self._links:
            self._lib.bpf_link__destroy(link)
        self._links.clear()
        if self._obj:
            self._lib.bpf_object__close(self._obj)
            self._obj = None
