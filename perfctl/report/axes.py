"""What a plot's axes print (perfctl/report/svg.py draws them): round ticks on a linear axis, whole ones
for counts; round ratios on a log axis, the outer two beyond the data; a value axis in the one unit its
ticks print, which its title names ("task-clock (ms)"); and a range padded so that the marks stay off
the edges, never below 0 for data that never is."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from perfctl import units


def nice_ticks(low: float, high: float, count: int = 5, integer: bool = False) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) within [low, high]; ``integer``:
    whole numbers only (counts: no tick at 2.5 page faults)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = high / count - low / count
    if not math.isfinite(raw) or raw <= 0:
        return [low, high]
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if integer:
        step = max(step, 1.0)
    first = math.ceil(low / step) * step
    steps = high / step - first / step
    if not math.isfinite(steps) or not 0 <= steps <= 10 * count:
        return [low, high]
    return [first + i * step for i in range(int(steps + 1e-9) + 1)]


def padded(values: Sequence[float], share: float = 0.05) -> tuple[float, float]:
    """The range of ``values`` with a margin of ``share`` of it each side; never below 0 when no value is
    (a constant count of 0 was drawn on an axis from -1, with a tick at -0.50)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    pad = (high * share - low * share) or abs(high) * share or 1.0
    if not math.isfinite(low - pad) or not math.isfinite(high + pad):  # near the float limit: no margin
        return low, high
    return (low - pad if low < 0 else max(low - pad, 0.0)), high + pad


# the round ratios a log axis is labelled with, per decade, by how many decades it spans: finer on a short
# axis (0.9 .. 1.2), coarser on a long one
_MANTISSAS = ((0.5, (1, 1.1, 1.2, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)),
              (1.3, (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8)), (2.5, (1, 1.5, 2, 3, 5, 7)), (6.0, (1, 2, 5)))


def ratio_ticks(low: float, high: float, margin: float | None = None) -> list[float]:
    """Round ratios for a log axis that shows [low, high]: the outer two at or beyond ``low`` and ``high``,
    so that an axis widened to them (``forest``, ``sequence``) has a labelled tick on each side of every
    interval it draws (its ticks were 1, 1.25, 2 with matmul at 4.52); the band's edges 1 ± ``margin``
    among them."""
    low, high = max(low, sys.float_info.min), min(high, sys.float_info.max)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    decades = math.log10(high) - math.log10(low)
    mantissas = next((m for most, m in _MANTISSAS if decades <= most), (1,))
    every = max(1, math.ceil(decades / 8)) if mantissas == (1,) else 1  # 10^-300 .. 10^300: every 76th power
    candidates = {m * 10.0 ** k for k in range(first, last + every, every) if -323 <= k <= 308 for m in mantissas}
    # the ends are round ratios (the band's edge 0.95 at the very end of the axis left no room for 1)
    rounds = sorted(c for c in candidates | {1.0} if 0 < c < math.inf)
    below = [c for c in rounds if c <= low * (1 + 1e-12)]
    above = [c for c in rounds if c >= high * (1 - 1e-12)]
    start, end = (below[-1] if below else low), (above[0] if above else high)
    inner = {1 - margin, 1 + margin} if margin else set()
    return sorted(c for c in set(rounds) | inner if start <= c <= end) or [low, high]


# the units a time axis prints in, as nanoseconds per unit, largest first (units.time_ns's); a count axis
# beyond a million prints in millions or billions, so that its tick labels stay short
_AXIS_TIMES = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))
_AXIS_COUNTS = ((1e9, "billions"), (1e6, "millions"))


@dataclass(frozen=True)
class ValueAxis:
    """How a value axis prints: every tick a plain number in one unit, the unit its title names
    ("task-clock (ms)" over ticks 30, 35, 40). Before, the title said "(ns)" over ticks "28.000 ms"."""

    label: str  # what is measured: a metric or an event
    per: float  # the printed number is the value / per
    unit: str | None  # the printed unit, None for a plain count
    integer: bool  # whole counts only: ticks at integers

    @property
    def title(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label

    def ticks(self, low: float, high: float, count: int) -> list[float]:
        """Round printed values within [low, high] (raw values), as raw values."""
        return [t * self.per for t in nice_ticks(low / self.per, high / self.per, count,
                                                 self.integer and self.per == 1)]

    def text(self, value: float, ticks: Sequence[float] = ()) -> str:
        """A tick's label: the printed number with the decimals the ticks' step needs (30, 32.5, 0.25)."""
        shown, step = value / self.per, (ticks[1] - ticks[0]) / self.per if len(ticks) > 1 else 0
        if abs(shown) >= 1e7 or (shown and abs(shown) < 1e-3):  # near the float limits: significant digits
            return f"{shown:.3g}"
        decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
        return f"{shown:,.{min(decimals, 6)}f}"


def value_axis(label: str, unit: str | None, ends: Sequence[float]) -> ValueAxis:
    """The axis of values ``ends`` spans, in ``unit`` (a time unit of units.TIME_UNITS_NS, else a count or
    a tool's unit): times in the largest unit the largest magnitude reaches, as the tables print them."""
    top = max((abs(v) for v in ends if v is not None and math.isfinite(v)), default=0.0)
    if unit in units.TIME_UNITS_NS:
        ns = units.TIME_UNITS_NS[unit]
        per, name = next(((size, name) for size, name in _AXIS_TIMES if top * ns >= size), _AXIS_TIMES[-1])
        return ValueAxis(label, per / ns, name, False)
    counted = unit in (None, "", "count")
    if counted:
        for size, name in _AXIS_COUNTS:
            if top >= size:
                return ValueAxis(label, size, name, False)
    whole = all(float(v).is_integer() for v in ends if v is not None and math.isfinite(v))
    return ValueAxis(label, 1.0, None if counted else unit, counted and whole)
