"""How perfctl writes a measured value for a person: times in s/ms/µs/ns as fits, counts with thousands
separators, ratios with their interval. The one owner of these formats: stat's and compare's reports
both print through it. JSON and CSV keep raw numbers; only tables and Markdown use it."""

from __future__ import annotations

import math

# units a reader or backend may give a time in, as nanoseconds per unit
TIME_UNITS_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_TIME_STEPS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"))


def _missing(value) -> bool:
    """No value to show: None, or a float that is not finite (JSON writes null for those)."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def time_ns(value: float) -> str:
    """A duration in nanoseconds, in the largest unit it is at least one of: 37790000 -> '37.790 ms'."""
    if _missing(value):
        return "-"
    if abs(value) >= 1e15:  # beyond 11 days: no reading needs every digit
        return f"{value / 1e9:.4g} s"
    for scale, suffix in _TIME_STEPS:
        if abs(value) >= scale:
            return f"{value / scale:.3f} {suffix}"
    return f"{value:.0f} ns"


def count(value: float) -> str:
    """A count: integers in full with thousands separators (1,234,567), others to two decimals."""
    if _missing(value):
        return "-"
    if abs(value) >= 1e15:  # beyond a quadrillion: significant digits only
        return f"{value:.4g}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}"


def quantity(value: float, unit: str | None) -> str:
    """``value`` measured in ``unit``: a time when the unit is one (ns, µs, us, ms, s), else a count."""
    if unit in TIME_UNITS_NS:
        return "-" if _missing(value) else time_ns(value * TIME_UNITS_NS[unit])
    return count(value)


def ratio(value: float | None, low: float | None = None, high: float | None = None) -> str:
    """A ratio with its interval: '1.045× [1.024, 1.072]' ('…' for an open end)."""
    if _missing(value):
        return "-"
    text = f"{value:.3f}×"
    if low is None and high is None:
        return text
    return f"{text} [{'…' if _missing(low) else f'{low:.3f}'}, {'…' if _missing(high) else f'{high:.3f}'}]"


def interval(low: float | None, high: float | None, unit: str | None) -> str:
    """An interval of values in ``unit``: '[44.568, 47.456] ms' when both ends take the same suffix, else each
    end with its own ('…' for an open end)."""
    if low is None and high is None:
        return "-"
    ends = ["…" if _missing(v) else quantity(v, unit) for v in (low, high)]
    suffixes = {end.rpartition(" ")[2] for end in ends if " " in end}
    if len(suffixes) == 1 and all(" " in end for end in ends):
        return f"[{ends[0].rpartition(' ')[0]}, {ends[1].rpartition(' ')[0]}] {suffixes.pop()}"
    return f"[{ends[0]}, {ends[1]}]"
