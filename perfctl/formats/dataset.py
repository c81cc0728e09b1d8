"""What every format reader shares: the checks of values read from a file, each ending in a DatasetError
that names the file and the field. The readers (one module per format) import this module, never the package,
so that the package can dispatch to them without an import circle. The Dataset they fill is the common
model's (perfctl/dataset.py), imported from there."""

from __future__ import annotations

import json
import math
import os
import re
import sys

from perfctl.dataset import BenchmarkData, DatasetError

# Editors on some systems start UTF-8 files with a byte order mark: readers skip it (encoding utf-8-sig).
BOM = "\ufeff"


def from_entry(bench: BenchmarkData, entry: str, runs: int) -> None:
    """``runs`` kept runs of ``bench`` came from the file's ``entry`` (hyperfine's ``results[0]``, pyperf's
    ``benchmarks[2]``): a reader whose format lists each program once calls it per entry, so that two entries
    under one name (two programs) are a mixture, which ``unmix`` leaves out unless pooled, as it does for
    perfctl runs of two executables under one name."""
    if runs:
        bench.variants[(None, None, (entry,), "")] += runs


class NumberTooLong(ValueError):
    """A JSON integer with more digits than Python converts (``json_int``)."""


def json_int(digits: str) -> int:
    """``parse_int`` for the JSON readers: Python refuses to convert an integer of more than
    sys.get_int_max_str_digits() digits (4300) with advice to raise that limit, which a user of perfctl
    cannot take; no counter has such a value, so it is refused as too long, with its length."""
    limit = sys.get_int_max_str_digits()
    if limit and len(digits) > limit:
        raise NumberTooLong(f"an integer of {len(digits):,} digits, too long to be a value (at most {limit:,})")
    return int(digits)


def load_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f, parse_int=json_int)
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    except NumberTooLong as err:
        raise DatasetError(f"{path}: {err}") from None
    except ValueError as err:
        raise DatasetError(f"{path}: not valid JSON ({what}): {err}") from None
    except RecursionError:
        raise DatasetError(f"{path}: not valid JSON ({what}): lists or objects nested too deeply to read") from None


def json_list(path: str, what: str, key: str) -> list:
    """The list under ``key`` of a JSON file holding one object (how hyperfine, Google Benchmark and
    pytest-benchmark files list their results), or a DatasetError saying the file is not ``what``."""
    data = load_json(path, what)
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise DatasetError(f"{path}: not {what}: no '{key}' list")
    return items


def read_lines(path: str) -> list[str]:
    """A text format's lines (perf stat's CSV and JSON), BOM and undecodable bytes tolerated. The tools end
    every line, so a last line without its end was cut while written (a full disk, a copy interrupted, a
    run killed) and refused: a CSV line cut inside its event name (``task-cl``) still parses, as a new event."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            text = f.read()
    except OSError as err:
        raise DatasetError(f"{path}: {err.strerror}") from None
    lines = text.splitlines()
    if lines and lines[-1].strip() and not text.endswith(("\n", "\r")):
        raise DatasetError(f"{path}:{len(lines)}: the last line has no line end: the file was cut while it was "
                           f"written; remove that line or record the run again: {lines[-1][-60:]!r}")
    return lines


def stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def finite(path: str, where: str, value, text: bool = False) -> float | int:
    """A finite number from a file, or a DatasetError naming where the bad value is. A JSON value must be
    a number (not a string, not a boolean); ``text`` accepts the digits of a text format such as CSV. An
    integer (a JSON integer, or text of digits only) is returned as the int it is, exact past 2^53, when a
    float can stand for it at all (a value beyond 10^308 is refused as before); anything else as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str) if text else (int, float)):
        raise DatasetError(f"{path}: {where}: expected a number, got {json_kind(value)}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise DatasetError(f"{path}: {where}: not a number: {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise DatasetError(f"{path}: {where}: non-finite value {value!r}")
    if type(value) is int:
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return number


# an integer as text formats write one (perf stat -x, counts): digits, perhaps signed and padded; int()
# reads it exactly
_DIGITS = re.compile(r"\s*[+-]?[0-9]+\s*")


def to_ns(path: str, where: str, value: float, unit: str, ns_per_unit: float) -> float:
    """A finite time ``value`` in ``unit`` as nanoseconds, the unit perfctl keeps times in; the one owner of
    that conversion for the readers. A time finite in its unit can pass the largest float in ns (1e308 s):
    refused naming the value, rather than as the infinity the product is."""
    number = value * ns_per_unit
    if not math.isfinite(number):
        raise DatasetError(f"{path}: {where}: {value!r} {unit} is too large to be a time in ns (at most "
                           f"{sys.float_info.max:.4g} ns)")
    return number


def json_kind(value) -> str:
    """The JSON name of a value's type, for messages that say what was found where a number or a string
    belongs."""
    for types, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"),
                        (dict, "an object"), (type(None), "null")):
        if isinstance(value, types):
            return name
    return type(value).__name__


def json_field(path: str, where: str, container: dict, key: str, types, wanted: str, default=None):
    """``container[key]`` when it has one of ``types``; ``default`` when it is absent or null (a None
    ``default`` makes it required); else a DatasetError naming the field."""
    value = container.get(key)
    if value is None:
        if default is not None:
            return default
        raise DatasetError(f"{path}: {where}: missing")
    problem = type_problem(value, types, wanted)
    if problem:
        raise DatasetError(f"{path}: {where}: {problem}")
    return value


def type_problem(value, types: type | tuple[type, ...], wanted: str) -> str | None:
    """None when ``value`` has one of ``types``, else what is wrong. A boolean is never a number here,
    although Python counts bool as an int."""
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
        return None
    return f"expected {wanted}, got {json_kind(value)}"
