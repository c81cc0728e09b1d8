"""The one owner of issue 32's contract dicts (docs/history.md, "The JSON documents"): a point's summary of
its runs, a change row and its two sides, and what makes a change a regression. Files
(perfctl/history_files.py) and the fleet server's answers (perfctl/client.py) are both put in these dicts
here, so that `perfctl history --format json` prints the same document whichever gave it, and one renderer
(perfctl/report/history.py) reads both. No I/O; numpy only for the quartiles."""

from __future__ import annotations

import numpy as np

from perfctl.analysis.verdicts import beyond


def point_summary(values) -> dict:
    """A point's summary of its runs' values: runs, median, quartiles (Hyndman & Fan 1996, definition 7:
    numpy's linear interpolation, as every plot of the report draws them), min and max: also what the server
    stores of a point (server/history_store.py)."""
    runs = np.asarray(values, dtype=float)
    q1, median, q3 = (float(q) for q in np.percentile(runs, (25, 50, 75)))
    return {"runs": int(runs.size), "median": median, "q1": q1, "q3": q3, "min": float(runs.min()),
            "max": float(runs.max())}


def is_regression(low: float | None, high: float | None, margin: float) -> bool:
    """A regression: the change's whole interval lies below 1 - margin (slower after, beyond the margin),
    as analysis/verdicts.py ``beyond`` reads it; the server marks its stored changes by the same function."""
    return beyond(low, high, margin) == "slower"


def side_row(job: str, commit: str | None, time_ns: int, points: int, runs: int, median: float) -> dict:
    """One side of a change: the last point before it ("before") or the first after it ("after"), with the
    totals of its stretch (points, runs, the median of its runs)."""
    return {"job": job, "commit": commit, "time_ns": time_ns, "points": points, "runs": runs, "median": median}


def change_row(*, id: str | None, machine: str, benchmark: str, argv, metric: str, line: dict,
               state: str | None, before: dict, after: dict, ratio: float, low: float | None, high: float | None,
               confidence: float, margin: float, verdict: str, finding: str, p_value: float,
               regression: bool | None = None, note: str = "", link: str = "", fixed_by: str | None = None,
               detected_ns: int, updated_ns: int, on_request: bool = False) -> dict:
    """The contract's change row. ``regression`` None: read off the interval (``is_regression``); the server
    sends its own, which is False for a triaged change its runs no longer confirm. ``on_request``: computed
    for this answer (GetHistory with order_by), not stored: it has no id and no state, and no triage
    applies (both are None here whatever the server sent)."""
    return {"id": None if on_request else id, "machine": machine, "benchmark": benchmark, "argv": list(argv),
            "metric": metric, "line": dict(sorted(line.items())), "state": None if on_request else state,
            "before": before, "after": after, "ratio": ratio, "low": low, "high": high, "confidence": confidence,
            "margin": margin, "verdict": verdict, "finding": finding, "p_value": p_value,
            "regression": is_regression(low, high, margin) if regression is None else regression,
            "note": note, "link": link, "fixed_by": fixed_by, "detected_ns": detected_ns,
            "updated_ns": updated_ns, "on_request": on_request}
