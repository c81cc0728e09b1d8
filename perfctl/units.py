"""How perfctl writes a measured value for a person: times in s/ms/µs/ns as fits, counts with thousands
separators, ratios with their interval. The one owner of these formats: stat's and compare's reports
both print through it. JSON and CSV keep raw numbers; only tables and Markdown use it."""

from __future__ import annotations

import math
from fractions import Fraction

from perfctl.analysis.verdicts import band

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
    if abs(value) < 1:  # below a nanosecond (a file's 1e-300 s): its significant digits, never "0 ns"
        return f"{value:.4g} ns"
    return f"{value:.0f} ns"


def clock_offset(value_ns: int) -> str:
    """How far one clock is from another, unsigned, at the scale a person reads it: '30.0 d', '2.5 h', '40 s'."""
    seconds = abs(value_ns) / 1e9
    return f"{seconds / 86400:.1f} d" if seconds >= 86400 else f"{seconds / 3600:.1f} h" if seconds >= 3600 \
        else f"{seconds:.0f} s"


_SPANS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))


def span(seconds: float) -> str:
    """A duration in words: in the largest unit it is a whole number (under 1,000) of, else to 4 significant
    digits in the largest unit it reaches: 360 -> '6 minutes', 15552000 -> '180 days', 5400 -> '90 minutes',
    100000 -> '1.157 days'. What a --retain was read as, said back."""
    for size, name in _SPANS:
        value = seconds / size
        if value.is_integer() and 1 <= value < 1000:
            return f"{value:g} {name}" + ("" if value == 1 else "s")
    size, name = next(((size, name) for size, name in _SPANS if seconds >= size), _SPANS[-1])
    return f"{seconds / size:.4g} {name}s"


def count(value: float) -> str:
    """A count: integers in full with thousands separators (1,234,567), others to two decimals."""
    if _missing(value):
        return "-"
    if abs(value) >= 1e15:  # beyond a quadrillion: significant digits only
        return f"{value:.4g}"
    if float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) < 0.01:  # a fraction two decimals would print as 0.00: its significant digits
        return f"{value:.4g}"
    return f"{value:,.2f}"


def quantity(value: float, unit: str | None) -> str:
    """``value`` measured in ``unit``: a time when the unit is one (ns, µs, us, ms, s), else a count."""
    if unit in TIME_UNITS_NS:
        return "-" if _missing(value) else time_ns(value * TIME_UNITS_NS[unit])
    return count(value)


def ratio(value: float | None, low: float | None = None, high: float | None = None,
          margin: float | None = None) -> str:
    """A ratio with its interval: '1.045× [1.024, 1.072]' ('…' for an open end); the digits are
    ``ratio_ends``'s, the estimate printed with as many as the ends."""
    if _missing(value):
        return "-"
    if low is None and high is None:
        return f"{_ratio_text(value, RATIO_DECIMALS)}×"
    low_text, high_text, decimals = _ratio_ends(low, high, margin)
    return f"{_ratio_text(value, decimals)}× [{low_text}, {high_text}]"


# the decimals of a ratio, unless an interval's end needs more to read as its value reads
RATIO_DECIMALS = 3
_MOST_DECIMALS = 1100  # a float's exact decimal expansion is never longer (2^-1074)
# Ratios from 0.1 up to a million print with fixed decimals (three significant digits at least, seven
# integer digits at most); beyond, in scientific notation with as many digits after the point: 2 ms
# against 1e-300 s is 7.892e+297, not 298 digits, 2^64 against 1 is not 20 digits of which the last five
# are exp(log)'s rounding, and a ratio of 5e-324 is 4.941e-324, not 0.000.
_FIXED_RATIOS = (0.1, 1e6)


def _ratio_text(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` digits after the point, fixed or scientific (``_FIXED_RATIOS``)."""
    if value == 0 or _FIXED_RATIOS[0] <= abs(value) < _FIXED_RATIOS[1]:
        return f"{value:.{decimals}f}"
    return f"{value:.{decimals}e}"


def ratio_ends(low: float | None, high: float | None, margin: float | None = None,
               decimals: int = RATIO_DECIMALS) -> tuple[str, str]:
    """The ends of an A/B interval as printed, with the fewest decimals (at least three, the same for both;
    scientific notation outside [0.1, 10^6), the decimals then those of its mantissa)
    at which each printed end lies on the same side of 1, and of each edge of [1 - margin, 1 + margin],
    as its value: the relations a verdict is read from (analysis/verdicts.py: low >= 1 - margin, low > 1,
    low > 1 + margin; high <= 1 + margin, high < 1, high < 1 - margin). So [0.937, 0.99996] is never
    printed [0.937, 1.000] beside "relevant difference", and an end just below an edge never prints on it.
    Read against the printed band (its edges are short decimals, ``band``), the printed ends give the
    verdict the values give. '…' for an open end."""
    low_text, high_text, _ = _ratio_ends(low, high, margin, decimals)
    return low_text, high_text


def _ratio_ends(low, high, margin, fewest: int = RATIO_DECIMALS) -> tuple[str, str, int]:
    edges = band(margin) if margin is not None else None
    for decimals in range(fewest, _MOST_DECIMALS):
        texts = [None if _missing(end) else _ratio_text(end, decimals) for end in (low, high)]
        if all(text is None or _sides(Fraction(text), is_low, edges) == _sides(Fraction(end), is_low, edges)
               for text, end, is_low in zip(texts, (low, high), (True, False))):
            break
    return ("…" if texts[0] is None else texts[0]), ("…" if texts[1] is None else texts[1]), decimals


def _sides(end: Fraction, is_low: bool, edges) -> tuple[bool, ...]:
    """The relations of an interval's end that a verdict reads (``ratio_ends``)."""
    if is_low:
        return (end > 1,) + (() if edges is None else (end >= edges[0], end > edges[1]))
    return (end < 1,) + (() if edges is None else (end <= edges[1], end < edges[0]))


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


def percent(level: float) -> str:
    """A confidence level as people write it: 0.95 -> '95%', 0.99833 -> '99.83%', 0.99998 -> '99.998%'
    (never rounded up to 100%)."""
    for digits in range(2, 9):
        text = f"{level * 100:.{digits}f}"
        if level >= 1 or not text.startswith("100"):
            break
    return f"{text.rstrip('0').rstrip('.')}%"
