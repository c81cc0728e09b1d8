"""Reuse-distance sample files (``.rds``): what `perfctl cache mrc --rds FILE` writes and `perfctl cache
corun` reads. One JSON document:

    {"format": "perfctl-rds", "version": 1, "benchmark": {...}, "line_bytes": 64,
     "accesses": N, "instructions": I or null, "sampler": {...},
     "distances": [...], "windows": [...]}

``distances`` are forward reuse distances in accesses, -1 for a dangling sample (never reused); ``windows``
the sampling window of each. Every field is checked on reading; a bad file is one line naming what is wrong.
"""

from __future__ import annotations

import json

import numpy as np

from perfctl.analysis.reuse import DANGLING, ReuseSample

FORMAT, VERSION, LINE_BYTES = "perfctl-rds", 1, 64


class RdsError(ValueError):
    """A file that is not a usable reuse-distance sample; one line."""


def write(path: str, sample: ReuseSample, benchmark: dict) -> None:
    document = {"format": FORMAT, "version": VERSION, "benchmark": benchmark, "line_bytes": LINE_BYTES,
                "accesses": sample.accesses, "instructions": sample.instructions, "sampler": sample.sampler,
                "distances": sample.distances.tolist(), "windows": sample.windows.tolist()}
    with open(path, "w") as f:
        json.dump(document, f, separators=(",", ":"))


def read(path: str) -> tuple[ReuseSample, dict]:
    """The sample and its benchmark description; RdsError (one line naming the field) for anything a real
    trace cannot have produced. The rules, and why (docs/cache.md, "Reuse-distance samples"):

    - integers are JSON integers (not floats, strings or booleans) and below 2^63 (numpy's int64); NaN and
      Infinity, which Python's JSON reader would accept, appear nowhere;
    - ``accesses`` >= 1; ``instructions`` null or >= 1;
    - the mix, accesses / instructions, is at most MAX_MIX: StatCC's rescaling multiplies every distance
      by ratios of mixes, so an absurd mix (1 instruction for 39,803 accesses) gives absurd co-run CPIs;
    - every distance is -1 (dangling) or in [0, accesses), every window id in [0, accesses) (a window holds at
      least one access), and there are no more samples than accesses;
    - ``benchmark`` and ``sampler`` are objects when present; the benchmark's name is a string.
    """
    try:
        with open(path, "rb") as f:
            document = json.loads(f.read(), parse_constant=_refuse_constant)
    except OSError as err:
        raise RdsError(f"{path}: {err.strerror}") from None
    except RdsError as err:
        raise RdsError(f"{path}: {err}") from None
    except (ValueError, RecursionError) as err:
        raise RdsError(f"{path}: not JSON (truncated?): {err}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise RdsError(f"{path}: not a perfctl reuse-distance sample (no \"format\": \"{FORMAT}\")")
    if not _is_int(document.get("version")) or document["version"] != VERSION:
        raise RdsError(f"{path}: unsupported version {document.get('version')!r}")
    if not _is_int(document.get("line_bytes")) or document["line_bytes"] != LINE_BYTES:
        raise RdsError(f"{path}: lines of {document.get('line_bytes')!r} bytes; perfctl models 64-byte lines")
    try:
        sample, benchmark = _validated(document)
    except RdsError as err:
        raise RdsError(f"{path}: {err}") from None
    return sample, benchmark


# An x86 instruction touches at most a few data operands (push/pop or movs to memory: 2; a gather: 16); the
# most lines one instruction can reach is an XSAVE area (up to ~2.7 kB, 43 lines). 64 per instruction is
# beyond any of them; real programs are at 0.05-1 (docs/cache.md).
MAX_MIX = 64
_INT_LIMIT = 1 << 63


def _refuse_constant(name: str):
    raise RdsError(f"{name} is not a number a trace can produce")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(document: dict, field: str, *, optional: bool = False) -> int | None:
    value = document.get(field)
    if value is None and optional:
        return None
    if not _is_int(value):
        raise RdsError(f"\"{field}\" must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
    if not 1 <= value < _INT_LIMIT:
        raise RdsError(f"\"{field}\" must be between 1 and 2^63 - 1, got {str(value)[:40]}")
    return value


def _int_array(document: dict, field: str, low: int, high: int) -> np.ndarray:
    """The list ``field`` as int64, every element an integer in [low, high)."""
    values = document.get(field)
    if not isinstance(values, list):
        raise RdsError(f"\"{field}\" must be a list of integers, got {type(values).__name__}")
    bad = [v for v in values if not _is_int(v)][:1]  # null is bad too: no sentinel
    if bad:
        raise RdsError(f"\"{field}\" must hold only integers, found {type(bad[0]).__name__} {str(bad[0])[:40]!r}")
    outside = [v for v in values if not low <= v < high][:1]
    if outside:
        raise RdsError(f"\"{field}\" must lie in [{low}, {high}), found {str(outside[0])[:40]}")
    return np.asarray(values, dtype=np.int64)


def _validated(document: dict) -> tuple[ReuseSample, dict]:
    accesses = _count(document, "accesses")
    instructions = _count(document, "instructions", optional=True)
    if instructions is not None and accesses > MAX_MIX * instructions:
        raise RdsError(f"\"accesses\" / \"instructions\" = {accesses / instructions:.4g} data accesses per "
                       f"instruction; no x86 program exceeds {MAX_MIX}")
    distances = _int_array(document, "distances", DANGLING, accesses)
    windows = _int_array(document, "windows", 0, accesses)
    if len(windows) != len(distances):
        raise RdsError(f"\"distances\" ({len(distances)}) and \"windows\" ({len(windows)}) must have the same "
                       "length")
    if len(distances) == 0:
        raise RdsError("the sample is empty")
    if len(distances) > accesses:
        raise RdsError(f"{len(distances)} samples of a trace of {accesses} accesses: each sample is one access")
    parts = {}
    for field in ("benchmark", "sampler"):
        parts[field] = document.get(field, {})
        if not isinstance(parts[field], dict):
            raise RdsError(f"\"{field}\" must be an object, got {type(parts[field]).__name__}")
    name = parts["benchmark"].get("name")
    if name is not None and not isinstance(name, str):
        raise RdsError(f"\"benchmark.name\" must be a string, got {type(name).__name__}")
    return ReuseSample(distances, windows, accesses, instructions, parts["sampler"]), parts["benchmark"]
