"""Which format a sample file is in, from its structure, and what it looks like when it is none of them.

Line formats are told by their first record: a perfctl JSON Lines record (``"type"`` "machine" or "sample"),
a ``perf stat -j`` line (``"event"`` and ``"counter-value"``), a ``perf stat -x,`` line (perf_stat_csv's
field layout). A JSON document is parsed and told by its top-level keys: hyperfine's ``results`` list;
a ``benchmarks`` list with Google Benchmark's ``context`` or ``run_type``, pytest-benchmark's
``machine_info``/``commit_info`` or ``fullname``/``stats``, or pyperf's ``version`` or ``runs``. A word such as
``"results"`` anywhere in the text (pyperf's ``--name results``) decides nothing: only the document's shape.

A file that fits none is refused in one line that says what it looks like (gzip data, UTF-16 text, an HTML
page, a JSON list, a hyperfine CSV export, binary data...) and which formats perfctl reads.
"""

from __future__ import annotations

import json

from perfctl.dataset import DatasetError
from perfctl.formats.dataset import BOM, NumberTooLong, json_int
from perfctl.formats.perf_stat import STARTED_ON
from perfctl.formats.perf_stat_csv import is_perf_stat_line

READS = ("perfctl JSON Lines, hyperfine, pyperf, Google Benchmark or pytest-benchmark JSON, perf stat -j or "
         "perf stat -x, output")
_HEAD = 4096
# Leading bytes of files people mistake for their samples (file(1)'s magic numbers); the UTF-16/32 byte
# order marks are told apart below, since UTF-16LE's BOM starts UTF-32LE's.
_MAGIC = ((b"\x1f\x8b", "gzip-compressed data (decompress it first: perfctl compare <(zcat FILE) ...)"),
          (b"BZh", "bzip2-compressed data (decompress it first: perfctl compare <(bzcat FILE) ...)"),
          (b"\xfd7zXZ\x00", "xz-compressed data (decompress it first: perfctl compare <(xzcat FILE) ...)"),
          (b"\x28\xb5\x2f\xfd", "zstd-compressed data (decompress it first: perfctl compare <(zstdcat FILE) ...)"),
          (b"PK\x03\x04", "a zip archive"), (b"\x7fELF", "an ELF executable"), (b"%PDF", "a PDF document"),
          (b"SQLite format 3\x00", "an SQLite database"))
_UTF = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
        (b"\xfe\xff", "UTF-16"))


def detect(path: str) -> str:
    """The format of a file (one of FORMATS), from its structure; a DatasetError saying what the file looks
    like when it has none of them."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    binary = _binary(head)
    if binary:
        raise _unknown(path, binary)
    text = head.decode("utf-8", errors="replace").removeprefix(BOM).lstrip()
    if not text:
        raise DatasetError(f"{path}: empty file")
    if text.startswith(("{", "[")):
        return _json_format(path, head, text)
    lines = [line for line in text.splitlines() if line.strip()]
    body = [line for line in lines if not line.startswith("#")]
    if not body and lines[0].startswith(STARTED_ON):
        return "perf-stat"  # perf's header and no event: its reader says there are no runs
    if body and body[0].lstrip().startswith("{"):
        record = _json_record(body[0])
        if record is not None and _line_format(record) == "perf-stat-json":
            return "perf-stat-json"
    if body and is_perf_stat_line(body[0]):
        return "perf-stat"
    raise _unknown(path, _text_kind(lines[0]))


def _unknown(path: str, looks_like: str) -> DatasetError:
    return DatasetError(f"{path}: unknown format: {looks_like}; perfctl reads {READS}")


def _binary(head: bytes) -> str | None:
    """What a file that is not UTF-8 text is, from its first bytes; None for text."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    for bom, encoding in _UTF:
        if head.startswith(bom):
            return f"{encoding} text (convert it first: iconv -f {encoding} -t UTF-8 FILE)"
    if b"\x00" not in head:
        return None
    if not head.strip(b"\x00"):  # nothing but NULs: space allocated and never written, no text in either half
        return "binary data: NUL bytes only"
    # ASCII written as UTF-16 without a byte order mark (iconv -t UTF-16LE): a NUL beside every character,
    # and the characters between them text
    pairs = len(head) // 2
    for zeros, characters in ((head[0::2][:pairs], head[1::2][:pairs]), (head[1::2][:pairs], head[0::2][:pairs])):
        if pairs and zeros.count(0) >= 0.9 * pairs and _text_bytes(characters) >= 0.9 * pairs:
            return "UTF-16 text (convert it first: iconv -f UTF-16LE -t UTF-8 FILE, or UTF-16BE)"
    return "binary data"


def _text_bytes(characters: bytes) -> int:
    """How many of ``characters`` are printable ASCII or whitespace."""
    return sum(32 <= c < 127 or c in b"\t\n\r" for c in characters)


def _json_format(path: str, head: bytes, text: str) -> str:
    first_line = text.splitlines()[0]
    if len(head) == _HEAD and b"\n" not in head:  # a long first line (a machine line with a big inventory)
        with open(path, "rb") as f:
            first_line = f.readline(1 << 20).decode("utf-8", errors="replace").removeprefix(BOM).strip()
    record = _json_record(first_line)
    fmt = _line_format(record) if record is not None else None
    if fmt:
        return fmt
    try:
        with open(path, encoding="utf-8-sig") as f:
            document = json.load(f, parse_int=json_int)
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    except NumberTooLong as err:
        raise DatasetError(f"{path}: {err}") from None
    except UnicodeDecodeError:
        raise _unknown(path, "JSON-like text that is not UTF-8") from None
    except RecursionError:
        raise _unknown(path, "JSON nested too deeply to read") from None
    except ValueError as err:
        if record is not None:  # a whole JSON value on the first line, and more after it
            raise _unknown(path, f"JSON Lines whose first record is {_json_shape(record)}") from None
        raise _unknown(path, f"not valid JSON ({err})") from None
    fmt = _document_format(document)
    if fmt:
        return fmt
    raise _unknown(path, _json_shape(document))


def _json_record(line: str):
    """The JSON value on one line, or None when the line is not one whole JSON value."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _line_format(record) -> str | None:
    """perfctl JSON Lines or perf stat -j, from a file's first record; None for any other JSON."""
    if not isinstance(record, dict):
        return None
    if record.get("type") in ("machine", "sample"):
        return "perfctl"
    if "counter-value" in record and "event" in record:
        return "perf-stat-json"
    return None


def _document_format(document) -> str | None:
    """The tool that wrote a JSON document, from its top-level keys and its entries' keys (every tool's
    entries carry some of their own, so a file whose keys were sorted since, ``jq -S``, is told alike)."""
    if not isinstance(document, dict):
        return None
    if isinstance(document.get("results"), list) and "benchmarks" not in document:
        return "hyperfine"
    benchmarks = document.get("benchmarks")
    if not isinstance(benchmarks, list):
        return None
    entry_keys = set().union(*(entry for entry in benchmarks if isinstance(entry, dict)))
    if isinstance(document.get("context"), dict) or {"run_type", "time_unit"} & entry_keys:
        return "google-benchmark"
    if {"machine_info", "commit_info"} & document.keys() or {"fullname", "stats"} & entry_keys:
        return "pytest-benchmark"
    if "version" in document or "runs" in entry_keys:
        return "pyperf"
    return None


def _json_shape(value) -> str:
    """A JSON value in a few words: 'a JSON list of 2 objects with keys command, mean, ...'."""
    if isinstance(value, dict):
        return f"a JSON object with keys {_keys(value)}" if value else "an empty JSON object"
    if isinstance(value, list):
        if not value:
            return "an empty JSON list"
        objects = [item for item in value if isinstance(item, dict)]
        if len(objects) == len(value):
            return f"a JSON list of {len(value)} object{'s' if len(value) != 1 else ''} with keys {_keys(objects[0])}"
        return f"a JSON list of {len(value)} item{'s' if len(value) != 1 else ''}"
    return "a JSON " + {str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _keys(record: dict) -> str:
    names = [repr(key)[1:-1][:40] for key in list(record)[:6]]
    return ", ".join(names) + (", ..." if len(record) > 6 else "")


def _text_kind(first_line: str) -> str:
    """Text that is no format perfctl reads, named by its first line."""
    start = first_line.lstrip().lower()
    if start.startswith(("<!doctype html", "<html")):
        return "an HTML page (a report? compare reads the sample files it was made from)"
    if start.startswith("<?xml"):
        return "an XML document"
    if start.startswith("command,mean,stddev"):
        return "a hyperfine CSV export (summaries, no runs: export with --export-json)"
    if start.startswith("| command |"):
        return "a hyperfine Markdown export (summaries, no runs: export with --export-json)"
    return f"text whose first line is {first_line[:60]!r}"
