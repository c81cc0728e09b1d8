"""Parameter scans in the HTML reports: a metric's median, with its interval, against the parameter of a
scan (`perfctl stat -P/-L`, perfctl/cli/scan.py), a line per side in compare's report and one line in
stat's. A scan's benchmarks are found by name, ``BASE NAME=value`` (the name cli/scan.py gives each point):
benchmarks that share BASE and NAME, two or more of them, are one scan. Numeric values go on a numeric
axis (logarithmic when they span more than two decades) in numeric order, others in the order they come
(the scan's in stat's report, by name in compare's, whose benchmarks are sorted by name)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from perfctl.report import svg
from perfctl.report.axes import padded, value_axis

LOG_SPAN = 100.0  # values spanning more than two decades go on a log axis
MAX_TICKS = 10  # parameter values labelled on the axis at most (evenly picked among the scan's)
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")  # perfctl/model.py's label keys: a parameter is a label


@dataclass(frozen=True)
class ScanLine:
    """One side's (or stat's one) medians and their intervals, at each value of the scan, in its order;
    None where that side has no runs of that point."""

    name: str  # "A", "B", or the benchmark's base name in stat's report
    medians: Sequence[float | None]
    lows: Sequence[float | None]
    highs: Sequence[float | None]


def split_name(benchmark: str) -> tuple[str, str, str] | None:
    """(base, parameter, value) of a scan's benchmark name ``base NAME=value``, else None."""
    base, _, last = benchmark.rpartition(" ")
    parameter, equals, value = last.partition("=")
    return (base, parameter, value) if base and equals and _KEY.match(parameter) else None


def scans(names: Sequence[str]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """The scans among ``names``: (base, parameter) to its [(value, benchmark name)] in the order given,
    for every (base, parameter) with two values or more."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for benchmark in names:
        parts = split_name(benchmark)
        if parts is not None:
            found.setdefault(parts[:2], []).append((parts[2], benchmark))
    return {key: points for key, points in found.items() if len({v for v, _ in points}) >= 2}


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float | None, float | None,
                                                                                 float | None]:
    """(median, low, high): the sample median and the exact distribution-free interval of the population
    median from order statistics (analysis/spa.py value_interval at proportion 0.5; Hahn & Meeker,
    "Statistical Intervals", 1991, sec. 5.2); a bound is None when the runs are too few for it."""
    from perfctl.analysis.spa import value_interval
    from perfctl.analysis.summary import describe

    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None, None, None
    interval = value_interval(finite, 0.5, confidence)
    return describe(finite).median, interval.low, interval.high


def _numeric(values: Sequence[str]) -> list[float] | None:
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        return None
    return numbers if all(map(math.isfinite, numbers)) else None


def plot(parameter: str, values: Sequence[str], lines: Sequence[ScanLine], metric: str, unit: str | None,
         level: str = "95%", width: int = 540) -> str:
    """The medians of ``metric`` against the scan's ``values`` of ``parameter``: each line a polyline (class
    ``scan-line``, its side in ``data-side``) through its medians, a whisker for each interval; the
    parameter's values label the axis (class ``tick``). Numeric values are drawn in numeric order whatever
    order they come in (compare's rows come sorted by name: 1, 10, 11, 2), so a line never doubles back."""
    numbers = _numeric(values)
    if numbers is not None:
        order = sorted(range(len(values)), key=numbers.__getitem__)
        values, numbers = [values[i] for i in order], [numbers[i] for i in order]
        lines = [ScanLine(line.name, *([series[i] for i in order] for series in (line.medians, line.lows,
                                                                                  line.highs)))
                 for line in lines]
    positive = numbers is not None and min(numbers) > 0
    log = positive and max(numbers) / min(numbers) > LOG_SPAN
    where = numbers if numbers is not None else list(range(len(values)))
    entries = [(line.name, svg.line_glyph(svg.COLOURS.get(line.name, "#444"))) for line in lines]
    note = f"median with its {level} interval (order statistics), at each value of {parameter}"
    body, top = svg.plot_key(90, width, entries if len(lines) > 1 else [], [note + ("; log axis" if log else "")])
    height = int(top) + 220
    low_x, high_x = min(where), max(where)
    if log:  # room for the first and last whiskers and their values' labels, in the axis's own terms
        pad = (high_x / low_x) ** 0.06
        low_x, high_x = low_x / pad, high_x * pad
    elif low_x != high_x:
        pad = (high_x - low_x) * 0.06
        low_x, high_x = low_x - pad, high_x + pad
    xs = svg.Scale(low_x, high_x, 90, width - 20, log)
    ends = [v for line in lines for v in (*line.medians, *line.lows, *line.highs) if v is not None]
    axis = value_axis(metric, unit, ends or [0.0])
    ys = svg.Scale(*padded(ends or [0.0, 1.0]), height - 50, top + 10)
    picked = sorted({round(i * (len(values) - 1) / (MAX_TICKS - 1)) for i in range(MAX_TICKS)}
                    if len(values) > MAX_TICKS else range(len(values)))
    shown = {where[i]: values[i] for i in picked}
    body += svg.axis_x(xs, list(shown), height - 50, top + 10, parameter, lambda t: shown[t])
    ticks = axis.ticks(ys.low, ys.high, 4)
    for tick in ticks:
        body.append(f'<line x1="90" x2="{width - 20}" y1="{svg.px(ys(tick))}" y2="{svg.px(ys(tick))}" '
                    f'stroke="#eee"/>')
        body.append(svg.text_element(84, ys(tick) + 4, axis.text(tick, ticks), "end", ' class="ytick"'))
    body.append(svg.y_title(16, (height - 50 + top + 10) / 2, axis.title))
    for line in lines:
        colour = svg.COLOURS.get(line.name, "#444")
        points = [(xs(x), ys(m)) for x, m in zip(where, line.medians) if m is not None and math.isfinite(m)]
        whiskers = "".join(f"M{svg.px(xs(x))} {svg.px(ys(lo))}V{svg.px(ys(hi))}"
                           for x, lo, hi in zip(where, line.lows, line.highs) if lo is not None and hi is not None)
        if whiskers:
            body.append(f'<path class="scan-interval" d="{whiskers}" stroke="{colour}" stroke-width="1.5"/>')
        body.append(f'<polyline class="scan-line" data-side="{svg.tooltip(line.name)}" fill="none" '
                    f'stroke="{colour}" stroke-width="2" points="'
                    + " ".join(f"{svg.px(x)},{svg.px(y)}" for x, y in points) + '"/>')
        body.append(svg.mark_path(points, colour, "round" if line.name != "B" else "square", 7))
    return svg.svg_element(width, height, f"{axis.title} against {parameter}: {note}", body)


def section(title: str, plots: Sequence[str]) -> str:
    """The reports' section of scan plots (id ``scans``)."""
    if not plots:
        return ""
    return (f"<h2 id=scans>{svg.esc(title)}</h2><div class=plots>"
            + "".join(f'<div class="plot scan">{p}</div>' for p in plots) + "</div>")
