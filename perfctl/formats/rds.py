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
    """The sample and its benchmark description."""
    try:
        with open(path, "rb") as f:
            document = json.loads(f.read())
    except OSError as err:
        raise RdsError(f"{path}: {err.strerror}") from None
    except ValueError as err:
        raise RdsError(f"{path}: not JSON (truncated?): {err}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise RdsError(f"{path}: not a perfctl reuse-distance sample (no \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise RdsError(f"{path}: unsupported version {document.get('version')!r}")
    if document.get("line_bytes") != LINE_BYTES:
        raise RdsError(f"{path}: lines of {document.get('line_bytes')!r} bytes; perfctl models 64-byte lines")
    try:
        distances = np.asarray(document["distances"], dtype=np.int64)
        windows = np.asarray(document["windows"], dtype=np.int64)
        accesses = int(document["accesses"])
        instructions = document.get("instructions")
        instructions = int(instructions) if instructions is not None else None
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise RdsError(f"{path}: malformed field: {err}") from None
    if distances.ndim != 1 or windows.shape != distances.shape:
        raise RdsError(f"{path}: distances and windows must be lists of the same length")
    if len(distances) == 0:
        raise RdsError(f"{path}: the sample is empty")
    if (distances < DANGLING).any() or accesses < 1 or (instructions is not None and instructions < 1):
        raise RdsError(f"{path}: negative distances (other than -1), or no accesses or instructions")
    if (distances >= accesses).any():
        raise RdsError(f"{path}: a reuse distance exceeds the {accesses} accesses of the trace")
    sampler = document.get("sampler") if isinstance(document.get("sampler"), dict) else {}
    benchmark = document.get("benchmark") if isinstance(document.get("benchmark"), dict) else {}
    return ReuseSample(distances, windows, accesses, instructions, sampler), benchmark
