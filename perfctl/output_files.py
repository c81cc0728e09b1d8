"""The one owner of every file a user names for perfctl to write: `stat`'s and `ab`'s ``-o FILE`` (samples,
appended), ``--html FILE`` of `stat` and `compare`, `report -o FILE`, `history -o FILE`, and `cache`'s
``--csv``, ``--rds`` and ``--plot`` (reports, replaced whole), `token add --file` (a tokens file, appended
to). docs/outputs.md states the rules; each is here once:

1. An output is resolved to the file it would write: relative forms made absolute, symbolic links followed
   (os.path.realpath), and, where the file exists, its identity (device and inode), so ``./x`` and ``x``, a
   link and its target, and two hard links of one file are one file. The caller takes ``@selectors`` off an
   input (compare's ``FILE@ab=A``) before handing its path here.
2. Before anything runs or is read, an output is refused (one line, exit 2) when its name is empty, or when it
   is one of the command's inputs, the benchmark's executable (as the runner resolves it, through PATH), a
   file the benchmark's arguments name, another output of the same command, stdout's or stdin's file, a
   directory; a
   report also when it exists and is not a regular file (a device, pipe or socket). The arguments name a
   file (``_named_files``) as a word of its own or the value after ``=`` (``data.txt``,
   ``--opt=data.txt``: whether or not it exists, the benchmark may write it); as any part of a word cut in
   two that names an existing file (``-fpat.txt``, ``@args.txt``, ``data.txt:3``); as a bare word found
   through the benchmark's PATH (``env spin``, ``nice spin``: a wrapper's program); and as each word of a
   shell string, split as the shell would (``sh -c 'gzip -c data.txt'``, nested strings too).
   stdout is an output too when it is a regular file (``> f``): perfctl prints there, so an input, an
   argument's file or another output that is the same file is refused.
3. Samples are appended only to a new or empty file, a stream (a pipe, a character device such as
   /dev/stdout), or a regular file whose first line is perfctl's JSON Lines (a machine or a sample line):
   appending to anything else would mix samples into, or cut the last line off, a file that is not perfctl's.
   Lines of another format (`perfctl token add --file`) are appended only to a new file, or to an existing
   one the format's ``recognise`` takes (asked of an empty file too: a tokens file other users can read is
   refused, empty or not) that, unless empty, ends with a newline.
4. Reports are written whole or not at all: a temporary file beside the target, renamed over it.
5. A file replaced whole (an HTML report, a CSV, an .rds sample, a plot) is replaced only when it is new,
   empty, or perfctl's own output of that kind, known by its signature (``_signed``; docs/outputs.md
   lists them), or with ``--force``: a file perfctl did not write may be one the benchmark reads without
   naming it (``xargs -a list``, ``sh job.sh``, a glob or a variable in a shell string), which no reading
   of its arguments can see. Checked before anything runs, and again just before the rename (the
   benchmark may have written the file meanwhile): a report that cannot replace it then is kept beside it.
   ``--force`` lifts only this rule: an input, the benchmark, its arguments' files stay refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfctl.output import UsageError, say

# replaced whole: perfctl's HTML report, a CSV, a reuse-distance sample, a plot (rule 5: each known by its
# signature); perfctl's JSON Lines, appended to; a file of another format that its own writer appends to
REPORT, CSV, RDS, PLOT, HISTORY = "report", "csv", "rds", "plot", "history"
SAMPLES, APPENDED = "samples", "appended"
_REPLACED = {REPORT: "perfctl's HTML report", CSV: "perfctl's CSV", RDS: "perfctl's reuse-distance sample",
             PLOT: "perfctl's plot", HISTORY: "perfctl's history (text, JSON or Markdown)"}
# `perfctl history -o FILE`'s signatures: its JSON starts with its schema (report/__init__.py json_text, two
# spaces of indent); its text and Markdown end with a line saying who wrote them (cli/history.py adds it)
HISTORY_JSON_START = b'{\n  "schema": "perfctl.history/'
HISTORY_ENDS = {"table": "written by perfctl history\n", "markdown": "<!-- written by perfctl history -->\n"}
# Rule 5's signatures. Every HTML page perfctl writes starts with these bytes (report/html.py document), its
# generator marker at a fixed place: a text that merely quotes the marker (docs/outputs.md) is not a page of
# perfctl's. Pages written before the marker are known by their fixed start, perfctl's footer and their end
HTML_START = '<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name=generator content="perfctl">'
_HTML_BEFORE_MARKER = b'<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name="viewport"'
_HTML_FOOTER, _HTML_END = b"<footer>written by perfctl ", b"</body></html>\n"
# a plot's creator, in the file's own metadata (matplotlib's savefig metadata=, report/cache.py plot): a PNG
# tEXt chunk, SVG's Dublin Core creator, a PDF's /Creator; only these three formats can carry it
PLOT_CREATOR = "perfctl cache mrc"
PLOT_FORMATS = {".png": (b"\x89PNG\r\n", b"Creator\x00" + PLOT_CREATOR.encode()),
                ".svg": (b"<?xml", b"<dc:title>" + PLOT_CREATOR.encode() + b"</dc:title>"),
                ".pdf": (b"%PDF-", b"/Creator (" + PLOT_CREATOR.encode() + b")")}
# perfctl's plots are tens of kB and its pages at most ~5 MB (docs/report.md): a larger file is looked at
# only this far, and not taken for perfctl's when its signature is not there
_SIGNED_LIMIT = 16 << 20
# perfctl's writers (formats/jsonl_writer.py, agent/machine.py) start every line with one of these: a file whose
# only line was cut short by a kill is still known as perfctl's by it
_PERFCTL_PREFIXES = (b'{"type":"machine",', b'{"type":"sample",')
# Longer names are no file (Linux's PATH_MAX, NAME_MAX): a part of a word longer than these is not looked up
_PATH_MAX, _NAME_MAX = 4096, 255
# shell strings inside shell strings (sh -c "sh -c '...'"): deeper than this is no command line a user writes
_SHELL_DEPTH = 8
_SHELL_SYNTAX = re.compile(r"[\s;&|<>()'\"\\]")  # what a shell splits at, quotes or escapes
# A machine line is a few kB and a sample line a few tens, but a sample carries the benchmark's argv, which
# may be megabytes long: a line is read whole whatever its length when it starts as perfctl's writers start
# every line (_PERFCTL_PREFIXES); one that does not is parsed only when shorter than this
_UNMARKED_LINE_LIMIT = 1 << 20
_BLOCK = 1 << 16  # files are scanned for a line's end or brackets this much at a time


@dataclass(frozen=True)
class Output:
    """A file the command is asked to write: the option that names it (``-o``, ``--html``), the path as the
    user wrote it (None: not asked for; "" is refused), and whether it is replaced whole (REPORT, CSV, RDS,
    PLOT) or appended to: samples (SAMPLES), or lines of another format (APPENDED), which
    ``recognise(path)`` knows: None for an existing file (empty too) that may take them, else why not.
    ``signature``: for CSV and RDS, the first bytes of every such file perfctl writes (its header line, its
    JSON's first key); ``force``: replace an existing file that is not perfctl's (rule 5, --force)."""

    option: str
    path: str | None
    kind: str = REPORT
    recognise: Callable[[str], str | None] | None = None
    signature: bytes = b""
    force: bool = False


def check(command: str, outputs: Sequence[Output], *, inputs: Sequence[tuple[str, str]] = (),
          benchmarks: Sequence[Sequence[str]] = (), hooks: Sequence[tuple[str, str]] = (), cwd: str | None = None,
          search_path: str | None = None) -> None:
    """Refuse, with one line naming the output and why (a UsageError, exit 2), any of ``outputs`` that must
    not be written (the module's rules 1-3). ``inputs``: (as the user wrote it, the file's path) of every
    file the command reads; ``benchmarks``: each benchmark's resolved argv (its executable's path first, as
    session.identify returns it); ``hooks``: (option, shell command) of each --prepare, --setup, --cleanup,
    whose script and the files its words name are the user's as the benchmark's arguments are (a hook may
    read them, or write them: no place for perfctl's output); ``cwd``: the directory the benchmark runs in,
    where its arguments are looked up (perfctl's own by default); ``search_path``: the benchmark's PATH,
    where a wrapper looks up the program a bare word names (perfctl's own by default). Called before
    anything runs, so a refusal costs nothing. stdout, when it is a regular file, is checked as an output of
    every command."""
    for output in outputs:
        if output.path == "":  # argparse takes -o "": left alone, it reads as "no output" and nothing is written
            raise UsageError(f"{command}: refusing {output.option} \"\": an empty name names no file; nothing was done")
    stdout = _fd_file(1)
    if stdout is None and not any(output.path for output in outputs):
        return
    protected = _protected(inputs, benchmarks, hooks, cwd or os.getcwd(),
                           os.environ.get("PATH", os.defpath) if search_path is None else search_path)
    stdin = _fd_file(0)
    if stdin is not None:  # `perfctl ... < data.txt`: a file the user gave perfctl, whoever reads it
        protected.setdefault(stdin[0], f"it is stdin's file ({stdin[1]})")
    claimed: dict[object, str] = {}
    if stdout is not None:
        identity, shown = stdout
        if identity in protected:
            raise UsageError(f"{command}: refusing stdout ({shown}): {protected[identity]}; nothing was done")
        claimed[identity] = "it is stdout's file (perfctl prints there)"
    for output in outputs:
        if not output.path:
            continue
        refused = _refusal(output, protected, claimed)
        if refused:
            raise UsageError(f"{command}: refusing {output.option} {output.path}: {refused}; nothing was done")
        claimed[_identity(output.path)] = f"{output.option} names the same file"


def names_stdout(path: str) -> bool:
    """Whether ``path`` names perfctl's stdout itself (/dev/stdout, /dev/fd/1, /proc/self/fd/1), which a
    command that can print its output writes as it prints (`history -o /dev/stdout`)."""
    return os.path.normpath(path) in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _fd_file(fd: int) -> tuple[object, str] | None:
    """(identity, name) of the regular file behind descriptor ``fd``: stdout's (``> f``, ``>> f``), which
    perfctl writes, or stdin's (``< f``), which the user gave it; else None: a pipe, a terminal or
    /dev/null holds no file to mix into or destroy."""
    try:
        status = os.fstat(fd)
    except OSError:  # closed
        return None
    if not stat.S_ISREG(status.st_mode):
        return None
    try:
        shown = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        shown = "a regular file"
    return (status.st_dev, status.st_ino), shown


def _refusal(output: Output, protected: dict[object, str], claimed: dict[object, str]) -> str | None:
    """Why ``output`` must not be written, or None."""
    try:
        real = os.path.realpath(output.path)
        identity = _identity(output.path)
    except ValueError:  # a NUL byte: no file has that name
        return "not a file name"
    if output.path.endswith(os.sep) or os.path.isdir(real):
        return "it is a directory"
    if identity in protected:
        return protected[identity]
    if identity in claimed:
        return claimed[identity]
    try:
        status = os.stat(real)
    except FileNotFoundError:
        status = None
    except OSError as err:
        return f"cannot check it: {err.strerror}"
    if output.kind == APPENDED:
        if status is None:
            return None
        if not stat.S_ISREG(status.st_mode):
            return "not a regular file"
        # an empty file is asked too: the format may forbid one (a tokens file open to other users shows the
        # secret appended to it, and its reader refuses it)
        return output.recognise(real) or (_not_appendable(real) if status.st_size else None)
    if output.kind == SAMPLES:
        if status is not None and stat.S_ISREG(status.st_mode) and status.st_size:
            return _not_perfctl(real)
        if status is not None and not (stat.S_ISREG(status.st_mode) or stat.S_ISFIFO(status.st_mode)
                                       or stat.S_ISCHR(status.st_mode)):
            return "not a regular file, pipe or terminal"
        return None
    if status is not None and not stat.S_ISREG(status.st_mode):
        return "not a regular file (a device, pipe or socket is never replaced)"
    if output.kind == PLOT and os.path.splitext(real)[1].lower() not in PLOT_FORMATS:
        return f"name the format by the extension: {', '.join(PLOT_FORMATS)} (the formats that carry perfctl's " \
               "signature)"
    if status is not None and not output.force and _foreign(real, output):
        return f"it exists and is not {_REPLACED[output.kind]} (perfctl replaces only a file it wrote, which " \
               "may be one the benchmark reads without naming it; --force replaces it)"
    import tempfile  # here, not at the top: every start of stat would pay for it

    try:  # the directory must take the temporary file the report is renamed from, or it fails after the runs
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(real), prefix=".perfctl-check-"):
            pass
    except OSError as err:
        return f"cannot write in {os.path.dirname(real)}: {err.strerror}"
    return None


def _identity(path: str, cwd: str | None = None) -> object:
    """What makes two names one file: (device, inode) of an existing file (links followed), else its real
    path. ValueError for a name with a NUL byte."""
    real = os.path.realpath(os.path.join(cwd, path) if cwd else path)
    try:
        status = os.stat(real)
    except OSError:
        return real
    return (status.st_dev, status.st_ino)


def _protected(inputs: Sequence[tuple[str, str]], benchmarks: Sequence[Sequence[str]],
               hooks: Sequence[tuple[str, str]], cwd: str, search_path: str) -> dict[object, str]:
    """identity -> why an output that is this file is refused. Inputs count where they exist (a name that is
    no file, a machine on a server, holds nothing to destroy); the files the benchmark's arguments name:
    _named_files."""
    protected: dict[object, str] = {}
    for shown, path in inputs:
        with contextlib.suppress(ValueError):
            if path and os.path.exists(path):
                protected.setdefault(_identity(path), f"it is one of the inputs ({shown})")
    for argv in benchmarks:
        if not argv:
            continue
        with contextlib.suppress(ValueError):
            protected.setdefault(_identity(argv[0]), f"it is the benchmark's executable ({argv[0]})")
        # `env PATH=/opt/bin spin`: the wrapper looks its program up there
        path = ":".join([w[len("PATH="):] for w in argv[1:] if w.startswith("PATH=")] + [search_path])
        directories = [os.path.join(cwd, d) for d in path.split(":")]  # "" is the current directory
        for word in dict.fromkeys(argv[1:]):  # a word repeated names the same files
            shown = word if len(word) <= 60 else word[:57] + "..."
            for identity in _named_files(word, cwd, directories, 0):
                protected.setdefault(identity, f"the benchmark's arguments name it ({shown})")
    directories = [os.path.join(cwd, d) for d in search_path.split(":")]
    for option, text in dict.fromkeys(hooks):
        shown = text if len(text) <= 60 else text[:57] + "..."
        # the hook is a shell's command line: each of its words is read as an argument of the benchmark's
        for word in dict.fromkeys(_shell_words(text) or [text]):
            for identity in _named_files(word, cwd, directories, 0):
                protected.setdefault(identity, f"{option} {shown} names it")
    return protected


def _named_files(word: str, cwd: str, directories: Sequence[str], depth: int) -> list[object]:
    """Identities of the files one argument of the benchmark may name; which program reads what is unknown
    (a wrapper's program, an option's glued value, a shell's command line), so every reading is taken:
    - the word and its value after "=" (--input=data.txt, dd's if=data.txt), relative to ``cwd``, whether or
      not they exist: a file the benchmark writes is no place for perfctl's output either;
    - the parts of the word where programs glue a file to something else, where they name an existing
      file: a short option's value (grep -fpat.txt, -vfpat.txt: what follows "-" and one or more
      letters), a response file (@args.txt), a file and a line (data.txt:3), a list (--in,data.txt). Not
      any cut of any word: "out" in --layout is no file the benchmark names (a refusal must have a reason);
    - the word or its value after "=", a bare name (no "/"), found in one of the PATH ``directories``: the
      program of a wrapper (env, nice, timeout, taskset, sudo, xargs spin), as its execvp would find it;
    - each word of a shell string (sh -c 'gzip -c data.txt >out'), split as the shell would, by these same
      rules, down to ``_SHELL_DEPTH`` strings deep."""
    named: list[object] = []

    def existing(path: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            status = os.stat(os.path.join(cwd, path))
            named.append((status.st_dev, status.st_ino))

    for name in (word, word.partition("=")[2]) if "=" in word else (word,):
        if name:
            with contextlib.suppress(ValueError):
                named.append(_identity(name, cwd))
    for part in _glued_parts(word):
        existing(part)
    for name in (word, word.partition("=")[2]):
        if name and "/" not in name and len(name) <= _NAME_MAX and name not in (".", ".."):
            for directory in directories:
                existing(os.path.join(directory, name))
    if depth < _SHELL_DEPTH:
        for piece in dict.fromkeys(_shell_words(word)):
            named.extend(_named_files(piece, cwd, directories, depth + 1))
    return named


_SEPARATORS = re.compile(r"[=@:,]")


def _glued_parts(word: str) -> list[str]:
    """The parts of ``word`` a program may read as a file (_named_files): between the separators = @ : ,
    and, for a short option (one "-"), what follows its letters, each count of them (-vfpat.txt: fpat.txt,
    pat.txt). Parts longer than PATH_MAX are no file."""
    parts = [part for part in _SEPARATORS.split(word) if part]
    if word.startswith("-") and not word.startswith("--"):
        letters = len(word) - len(word[1:].lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
        parts += [word[cut:] for cut in range(2, min(letters, 16) + 1) if word[cut:]]
    return [part for part in dict.fromkeys(parts) if part != word and len(part) <= _PATH_MAX]


def _shell_words(text: str) -> list[str]:
    """The words a shell makes of ``text`` (its operators ; | > < & ( ) apart), or [] when it is one word
    as it stands: nothing more to read in it."""
    if not _SHELL_SYNTAX.search(text):  # the common word: shlex (pure Python) would give it back whole
        return []
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: the shell would refuse it; its words still name files
        words = text.split()
    return [] if words == [text] else [w for w in words if w]


def _foreign(path: str, output: Output) -> bool:
    """Whether the existing regular file at ``path`` holds something and is not perfctl's (rule 5)."""
    try:
        if os.stat(path).st_size == 0:  # nothing to lose (mktemp's file, a `touch`ed name)
            return False
    except OSError:
        return False  # gone meanwhile: nothing to lose either
    return not _signed(path, output)


def _signed(path: str, output: Output) -> bool:
    """Whether the existing file at ``path`` carries the signature of perfctl's ``output.kind`` (rule 5):
    an HTML page starts with HTML_START (or, written before the marker, with the page's fixed start, and
    ends with perfctl's footer and the page's end); a plot carries its creator in the format's metadata; a
    CSV or an .rds sample starts with ``output.signature``. An unreadable file is not known as perfctl's."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SIGNED_LIMIT)
    except OSError:
        return False
    if output.kind == REPORT:
        tail = head[-(1 << 16):]
        return head.startswith(HTML_START.encode()) or (
            head.startswith(_HTML_BEFORE_MARKER) and _HTML_FOOTER in tail and tail.endswith(_HTML_END))
    if output.kind == PLOT:
        magic, creator = PLOT_FORMATS.get(os.path.splitext(path)[1].lower(), (None, None))
        return magic is not None and head.startswith(magic) and creator in head
    if output.kind == HISTORY:
        return head.startswith(HISTORY_JSON_START) or head.endswith(
            tuple(("\n" + end).encode() for end in HISTORY_ENDS.values()))
    return bool(output.signature) and head.startswith(output.signature)


def _not_perfctl(path: str) -> str | None:
    """None when the non-empty file at ``path`` starts with perfctl's JSON Lines, else why it does not. The
    first line is looked at whole, whatever its length (a sample of a benchmark with a long argv)."""
    refusal = "it is not perfctl JSON Lines (its first line is neither a machine nor a sample line; samples " \
              "are appended only to a new or empty file or to perfctl's own)"
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = 0
            while start < size:  # past blank lines and leading blanks, a block at a time
                block = f.read(_BLOCK)
                if not block:
                    break
                kept = block.lstrip(b" \t\r\n")
                if kept:
                    start += len(block) - len(kept)
                    break
                start += len(block)
            if start >= size:
                return refusal
            end = _newline_after(f, start, size)
            line = _line_kind(f, start, size if end is None else end)
    except OSError as err:
        return f"cannot read it: {err.strerror}"
    if line == "record" or (line == "torn" and end is None):  # a torn only line: SampleFile sets it aside
        return None
    return refusal


def _newline_after(f, start: int, size: int) -> int | None:
    """The offset of the first newline at or after ``start`` in the open file ``f`` of ``size`` bytes, or
    None; read a block at a time."""
    at = start
    while at < size:
        f.seek(at)
        block = f.read(min(_BLOCK, size - at))
        if not block:
            return None
        newline = block.find(b"\n")
        if newline >= 0:
            return at + newline
        at += len(block)
    return None


def _line_kind(f, start: int, end: int) -> str | None:
    """What the bytes ``start``..``end`` of the open file ``f`` (one line, its newline left out) are:
    "record", one of perfctl's records, whole; "torn", a line perfctl began and a kill or a crash cut short
    while it was written (it starts as perfctl's writers start every line, and leaves a string, an object or
    an array open: no whole JSON value does); None, neither: not perfctl's. A line of any length is decided
    on all of it: its brackets are followed a block at a time, and only a line that closes them all is read
    whole to be parsed, as every reader of the file reads it."""
    f.seek(start)
    ours = f.read(max(map(len, _PERFCTL_PREFIXES))).startswith(_PERFCTL_PREFIXES)
    if not ours and end - start > _UNMARKED_LINE_LIMIT:
        return None
    if not _closes_its_brackets(f, start, end):
        return "torn" if ours else None
    f.seek(start)
    return "record" if _record_kind(f.read(end - start)) is not None else None


_IN_STRING, _OUTSIDE_STRINGS = re.compile(rb'["\\]'), re.compile(rb'["{}\[\]]')


def _closes_its_brackets(f, start: int, end: int) -> bool:
    """Whether the bytes ``start``..``end`` of ``f`` close every string, object and array they open, as a
    whole JSON value does and a value cut short does not; read a block at a time."""
    depth, in_string, escaped, at_line = 0, False, False, start
    f.seek(start)
    while at_line < end:
        block = f.read(min(_BLOCK, end - at_line))
        if not block:
            break
        at_line += len(block)
        at, escaped = (1 if escaped else 0), False  # the character a backslash ending a block escaped
        while True:
            found = (_IN_STRING if in_string else _OUTSIDE_STRINGS).search(block, at)
            if found is None:
                break
            at, character = found.end(), found.group()
            if character == b"\\":
                escaped, at = at == len(block), at + 1
            elif character == b'"':
                in_string = not in_string
            else:
                depth += 1 if character in b"{[" else -1
    return depth <= 0 and not in_string


def _not_appendable(path: str) -> str | None:
    """None when the non-empty file at ``path`` ends with a newline (a line appended to an unterminated last
    line would be joined to it)."""
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
    except OSError as err:
        return f"cannot read it: {err.strerror}"
    return None if last == b"\n" else "its last line has no newline (a line appended would be joined to it)"


def _record_kind(line: bytes) -> str | None:
    """"machine" or "sample" for one of perfctl's JSON Lines records, else None."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    kind = record.get("type") if isinstance(record, dict) else None
    return kind if kind in ("machine", "sample") else None


class OutputError(Exception):
    """A sample could not be written to ``where`` (a full disk, /dev/full, a closed pipe): the path of -o FILE,
    or "stdout"."""

    def __init__(self, where: str, error: OSError):
        super().__init__(f"{where}: {error}")
        self.where, self.error = where, error


def append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` (whole lines) to ``fd``, opened with O_APPEND: all of it, or none of it left behind. A
    write cut short (a full disk) is cut off again, but only the bytes written here and only while they are
    still the file's end: cutting the file back to a size remembered before would take with it whatever
    another writer appended meanwhile (the benchmark, a second perfctl on the same file; review of issue
    28). perfctl's writers hold an exclusive flock for the write and the cut, so two of them never race;
    a writer that takes no lock could append in the instant between the check and the cut. The OSError is
    raised again; when the cut piece is not at the end any more it stays (never cut from the middle of
    another's lines), and the error says so."""
    import fcntl

    written = 0
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX)  # not every file takes a lock (a pipe, some mounts): the write goes on
    try:
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError as err:
        if written and not _cut_own_tail(fd, data[:written]):
            err.strerror = (f"{err.strerror}; {written} bytes of the line were written and another writer "
                            "appended after them: the file holds that cut line, which perfctl did not remove")
        raise
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)


def _cut_own_tail(fd: int, piece: bytes) -> bool:
    """Cut ``piece`` off the end of the file open at ``fd`` if it is still what the file ends with; whether
    the file ends without it now."""
    try:
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)  # fd is write-only
    except OSError:
        return False
    try:
        size = os.fstat(reader).st_size
        if size < len(piece) or os.pread(reader, len(piece), size - len(piece)) != piece:
            return False
        os.ftruncate(fd, size - len(piece))
        return True
    except OSError:
        return False
    finally:
        os.close(reader)


class SampleFile:
    """-o FILE, appended to a whole line at a time: a line that cannot be written in full (a full disk) is
    cut off again, so the file always ends with a complete sample and the next `stat -o FILE` appends to a
    file every reader still takes. When opened, the file is checked again to be new, empty, a stream or
    perfctl's (rule 3, on the file actually opened). A last line without its newline, read whole whatever
    its length (_line_kind), is a whole record (the newline is added), a line of perfctl's that a kill or a
    crash cut short (moved to a file beside it, named in the message: it was never a sample, but nothing a
    user had is deleted), or something else (refused: it is not perfctl's to touch); what is done is said.
    A file created here that received nothing is removed on close."""

    def __init__(self, path: str, command: str):
        self.path = path
        created = not os.path.lexists(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            status = os.fstat(self._fd)
            self._created = created and stat.S_ISREG(status.st_mode)
            self._size = status.st_size if stat.S_ISREG(status.st_mode) else 0
            if self._size:
                refused = _not_perfctl(path)
                if refused:
                    raise UsageError(f"{command}: refusing -o {path}: {refused}; nothing was done")
                self._end_with_a_whole_line(path, command)
        except BaseException:
            os.close(self._fd)
            raise
        self._start = self._size

    def _end_with_a_whole_line(self, path: str, command: str) -> None:
        with open(path, "rb") as f:
            end = self._size
            while end > 0:  # back to the last newline, a block at a time
                start = max(0, end - _BLOCK)
                f.seek(start)
                block = f.read(end - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    end = start + newline + 1
                    break
                end = start
            if end == self._size:
                return
            line = _line_kind(f, end, self._size)  # all of it, whatever its length
        if line == "record":
            self.write(b"\n")
            say(f"{command}: {path} ended in a whole record without its newline; added the newline before "
                "appending")
            return
        if line is None:  # only a torn line of perfctl's own is set aside
            raise UsageError(f"{command}: refusing -o {path}: its last line is not perfctl's and has no newline; "
                             "nothing was done")
        kept = self._set_aside(path, end, command)
        say(f"{command}: {path} ended in a partial line ({self._size - end} bytes, a write of perfctl's cut short "
            f"before: no whole record); moved it to {kept} before appending")
        self._size = end

    def _set_aside(self, path: str, end: int, command: str) -> str:
        """Move the bytes from ``end`` on (a torn line) to a new file beside the samples, and cut them off the
        samples: nothing a user had is destroyed, however sure perfctl is that the line is its own cut write.
        The new file's name as the user can find it; a UsageError, with nothing changed, when it cannot be
        made."""
        import shutil
        import tempfile

        real = os.path.realpath(path)
        try:
            fd, side = tempfile.mkstemp(prefix=os.path.basename(real) + ".cut-", dir=os.path.dirname(real))
        except OSError as err:
            raise UsageError(f"{command}: refusing -o {path}: it ends in a partial line, which cannot be kept "
                             f"aside in {os.path.dirname(real)} ({err.strerror}); nothing was done") from None
        try:
            with open(path, "rb") as source, os.fdopen(fd, "wb") as copy:
                os.fchmod(copy.fileno(), stat.S_IMODE(os.fstat(self._fd).st_mode))
                source.seek(end)
                shutil.copyfileobj(source, copy, _BLOCK)
                copy.flush()
                os.fsync(copy.fileno())
                if copy.tell() != self._size - end:
                    raise UsageError(f"{command}: refusing -o {path}: it changed while perfctl read it; nothing "
                                     "was done")
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(side)
            if isinstance(err, OSError):
                raise UsageError(f"{command}: refusing -o {path}: it ends in a partial line, which cannot be "
                                 f"kept aside ({err.strerror}); nothing was done") from None
            raise
        os.ftruncate(self._fd, end)
        return _shown_beside(path, side)

    def write(self, data: bytes) -> None:
        """Append ``data``, whole lines (formats/jsonl_writer.py makes them), whole or not at all."""
        append_whole(self._fd, data)
        self._size += len(data)

    def flush(self) -> None:
        """Every write went to the file already."""

    def moved(self) -> bool:
        """Whether the path no longer names the regular file written (removed, renamed or replaced meanwhile:
        a hook's `rm`), so what was written there is out of the user's reach; never for a stream."""
        opened = os.fstat(self._fd)
        if not stat.S_ISREG(opened.st_mode):
            return False
        try:
            now = os.stat(self.path)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)

    def close(self) -> None:
        try:
            os.close(self._fd)
        finally:
            if self._created and self._size == self._start == 0:  # opened early to fail fast; nothing came
                with contextlib.suppress(OSError):
                    if os.stat(self.path).st_size == 0:
                        os.unlink(self.path)


def replace(output: Output, content: str | bytes, command: str) -> int:
    """Write ``content`` into the file ``output`` names, whole or not at all (rules 4, 5); the bytes
    written. A failure is one line naming the file (a UsageError)."""
    data = content.encode("utf-8") if isinstance(content, str) else content

    def put(temporary: str) -> None:
        with open(temporary, "wb") as f:
            f.write(data)

    replace_with(output, put, command)
    return len(data)


def replace_with(output: Output, make: Callable[[str], None], command: str) -> None:
    """``make(temporary)`` writes a file (a library that takes a path: matplotlib's savefig), which then
    replaces the file ``output.path`` names: a temporary file beside the target (with its suffix, which
    tells such a library the format), renamed over it, so an interrupted or failed write leaves no half
    file behind (or the previous one). A link is followed; an existing file keeps its mode and owner; a new
    one gets 0666 less the umask, as open() would. A target that became a file perfctl did not write since
    ``check`` (the benchmark wrote it) is not replaced (rule 5): the new file keeps its temporary name, which
    the one-line refusal gives."""
    import tempfile

    path = output.path
    try:
        real = os.path.realpath(path)
        if path.endswith(os.sep) or os.path.isdir(real):
            raise UsageError(f"{command}: cannot write {path}: it is a directory")
        previous = os.stat(real) if os.path.exists(real) else None
        if previous is not None and not stat.S_ISREG(previous.st_mode):
            raise UsageError(f"{command}: cannot write {path}: not a regular file (a device, pipe or socket is "
                             "never replaced)")
        fd, temporary = tempfile.mkstemp(prefix=".perfctl-", suffix=os.path.splitext(real)[1],
                                         dir=os.path.dirname(real))
    except OSError as err:
        raise UsageError(f"{command}: cannot write {path}: {err.strerror}") from None
    os.close(fd)
    try:
        make(temporary)
        if previous is not None:
            os.chmod(temporary, stat.S_IMODE(previous.st_mode))
            if (previous.st_uid, previous.st_gid) != (os.geteuid(), os.getegid()):
                os.chown(temporary, previous.st_uid, previous.st_gid)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        # checked again on the file as it is now: the benchmark may have written it since check()
        foreign = previous is not None and not output.force and _foreign(real, output)
        if not foreign:
            os.replace(temporary, real)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise UsageError(f"{command}: cannot write {path}: {err.strerror}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if foreign:  # the new file is kept under its temporary name, which the message gives
        kept = _shown_beside(path, temporary)
        raise UsageError(f"{command}: refusing {output.option} {path}: it is not {_REPLACED[output.kind]} now (the "
                         f"benchmark wrote it while perfctl ran?) and was left as it is; the new file is {kept} "
                         "(--force replaces it)")


def _shown_beside(path: str, made: str) -> str:
    """The name to give the user of ``made``, a file perfctl made in the directory of the file ``path``
    names (links followed: a link may point into another directory): beside ``path`` as written when that
    is the same directory, else its real path, relative to the current directory when inside it."""
    given = os.path.dirname(path) or os.curdir
    try:
        same = os.path.samefile(given, os.path.dirname(made))
    except OSError:
        same = False
    if same:
        return os.path.join(os.path.dirname(path), os.path.basename(made))
    relative = os.path.relpath(made)
    return made if relative.split(os.sep)[0] == os.pardir else relative
