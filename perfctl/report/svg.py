"""Plots as inline SVG text, for the HTML report: a forest plot of ratio intervals against the equivalence
band, strip plots with interval bars, empirical CDFs, runs in order, and a confidence sequence over rounds.

No script and no external resource: each function returns one ``<svg>`` element as a string. Every text
that comes from data (benchmark names, units) is escaped here. Colours are the Okabe-Ito palette, which
stays distinct under the common colour-vision deficiencies, and colour is never the only cue: A's runs are
round marks, B's square, flagged runs hollow rings, and every plot has its legend in words.

A plot draws one mark per run up to a series' ``limit`` (``MARK_LIMIT``, less on a page of many benchmarks:
``mark_limit``) runs a side. Beyond that it draws what a reader can see and says so on the plot: the strip
and the ECDF go through ``limit`` evenly spaced order statistics (the minimum, the maximum and every quantile
in between are kept, so the shape and the extremes are as the runs have them), and the runs in order are
binned, ``RUN_BINS`` bins of consecutive runs (fewer with a lower limit), each drawn as a line from its
minimum to its maximum with its median marked. 10^6 runs a side otherwise made a 74 MB page that
Chromium took 5 s to load and had not painted after 300 s; thinned, the page is some 150 kB."""

from __future__ import annotations

import html
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from perfctl import units
from perfctl.report.axes import nice_ticks, padded, ratio_ticks, value_axis
from perfctl.text import visible

# Okabe & Ito (2008), "Color Universal Design": blue, vermillion, bluish green, sky blue, grey, orange
COLOURS = {"A": "#0072B2", "B": "#D55E00"}
VERDICT_COLOURS = {"faster": "#009E73", "slower": "#D55E00", "equivalent": "#56B4E9", "other": "#666666"}
BAND = "#E69F00"
FONT = 12
# one mark per run up to this many runs a side (about 2.5 marks per pixel of a 400-pixel plot: more cannot be
# told apart); beyond it, this many quantiles
MARK_LIMIT = 1_000
# the runs in order beyond MARK_LIMIT: bins of consecutive runs, about 1.1 pixels each on the 430-pixel axis
RUN_BINS = 400
# The page budget, one owner for every page of many benchmarks (html.compare_page, html.stat_page): a page
# spends at most PAGE_BYTES (under the 5 MB a browser opens in seconds). The summary comes first: the
# verdict table keeps every benchmark up to TABLE_BYTES (some 800 bytes a row: 5,000 rows), the forest plot
# FOREST_ROWS; what the summary and the rest of the page leave goes to per-benchmark sections, at most
# DETAIL_LIMIT of them, each SECTION_BYTES of facts, axes and text plus its marks (some MARK_BYTES each).
# 1,000 benchmarks of 20 runs made 8 kB of sections each: 8 MB, and 5,000 made 40 MB.
PAGE_BYTES = 4_700_000
TABLE_BYTES = 4_200_000
FOREST_ROWS = 200
LIST_ITEMS = 200  # names only in A or B, notes: each list in full up to this many (html._capped)
DETAIL_LIMIT = 100
SECTION_BYTES = 8_000
MARK_BYTES = 30
# marks (of thinned series) a page of many benchmarks spends on all its plots together at most: each
# benchmark gets its share, between MIN_LIMIT and MARK_LIMIT
PAGE_MARKS = 100_000
MIN_LIMIT = 100


def mark_limit(plotted: int, marks: int = PAGE_MARKS) -> int:
    """The ``limit`` of each series on a page that plots ``plotted`` benchmarks (or events): MARK_LIMIT up
    to 25 of them (each plots its two series three times), then the page's share of ``marks`` (PAGE_MARKS,
    or fewer when the summary took part of the page: ``detail_plan``)."""
    return max(MIN_LIMIT, min(MARK_LIMIT, min(marks, PAGE_MARKS) // (4 * max(plotted, 1))))


def detail_plan(count: int, spent: int) -> tuple[int, int]:
    """How many of ``count`` benchmarks a page that has spent ``spent`` bytes on its summary draws in detail,
    and each series' mark limit: as many as PAGE_BYTES affords at SECTION_BYTES and MIN_LIMIT marks a series
    each (a section's worst case), up to DETAIL_LIMIT; the marks left are shared out (``mark_limit``)."""
    left = max(PAGE_BYTES - spent, 0)
    drawn = min(count, DETAIL_LIMIT, left // (SECTION_BYTES + 4 * MIN_LIMIT * MARK_BYTES))
    return drawn, mark_limit(drawn, (left - drawn * SECTION_BYTES) // MARK_BYTES)


def chosen(priorities: Sequence, limit: int) -> list[int]:
    """The positions of the ``limit`` smallest ``priorities`` (what matters most first), in their own
    order: the rows a page keeps when it cannot keep them all."""
    if len(priorities) <= limit:
        return list(range(len(priorities)))
    return sorted(sorted(range(len(priorities)), key=lambda i: priorities[i])[:max(limit, 0)])


# Bounds on the escaped form of a text, in characters, each cut in its middle saying how many characters
# were left out (``bounded``): a 3 MB benchmark name repeated in a title, a heading, a table row, tooltips
# and the plots made a 6 MB page; bounded, a page of any names stays within PAGE_BYTES (the verdict table
# by its own measure, the forest and the sections at a few hundred bytes a name). --format json keeps every
# text whole. Any text (a note, an inventory value): TEXT_LIMIT; a name (benchmark, machine, metric,
# event, label) in a tooltip, an attribute or a plot's accessible name: NAME_LIMIT; a name where it is read
# at a glance (a table cell, a heading, a plot's text): NAME_SHOWN, the tooltip beside it (html.name).
TEXT_LIMIT = 2000
NAME_LIMIT = 300
NAME_SHOWN = 160


def cut(text: str, limit: int) -> str:
    """``text`` with its middle replaced by how many characters were left out when it is longer than
    ``limit`` characters: the start and the end of a name tell it from its neighbours."""
    if len(text) <= limit:
        return text
    keep = max(limit - 50, 2)  # the note below takes under 50 characters
    tail = keep // 3
    return text[:keep - tail] + f" [... {len(text) - keep:,} characters left out ...] " + text[len(text) - tail:]


def bounded(text, limit: int) -> str:
    """Data as SVG/HTML text (control characters made visible, markup characters escaped) of at most
    ``limit`` characters once escaped (a name of quotes and ampersands escapes to six times its length):
    cut in its middle as far as that takes."""
    raw = visible(str(text))
    keep = min(len(raw), limit)
    while True:
        shown = html.escape(cut(raw, keep), quote=True)
        if len(shown) <= limit or keep <= 60:
            return shown
        keep = max(60, keep * limit // len(shown) - 1)


def esc(text) -> str:
    """Data as SVG/HTML text, at most TEXT_LIMIT characters once escaped (``bounded``)."""
    return bounded(text, TEXT_LIMIT)


def tooltip(text) -> str:
    """A name as SVG/HTML text in a tooltip, an attribute or an accessible name: at most NAME_LIMIT."""
    return bounded(text, NAME_LIMIT)


@dataclass(frozen=True)
class Scale:
    """Maps values in [low, high] to pixels in [start, end]; logarithmic for ratios."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        low, high, value = ((_log(v) for v in (self.low, self.high, value)) if self.log
                            else (self.low, self.high, value))
        # halves: the span of two values near the float limit (±1.7e308) would overflow to inf
        span = high / 2 - low / 2
        if span == 0 or not math.isfinite(span):
            return (self.start + self.end) / 2
        return self.start + (value / 2 - low / 2) / span * (self.end - self.start)


def _log(value: float) -> float:
    """The log of a value on a log scale, which takes any float: 0, a negative value or one that underflowed
    (a ratio of 1.8e19 to 1e-300 padded by (high/low)^0.05 became 0: log(0) ended the report) is drawn at
    the smallest positive float, infinity at the largest, NaN at the scale's middle (1)."""
    if math.isnan(value):
        return 0.0
    return math.log(min(max(value, math.ulp(0.0)), sys.float_info.max))


def px(value: float) -> str:
    """A coordinate. Never nan or inf (browsers reject the attribute): such a value is drawn at 0, and the
    callers drop marks whose value is not finite before they get here."""
    if not math.isfinite(value):
        return "0"
    return f"{value:.1f}".rstrip("0").rstrip(".")


def svg_element(width: int, height: int, label: str, body: list[str], grow: float = 1.0) -> str:
    """One plot that scales down with the window (the page's CSS: max-width 100%, height auto); ``grow``
    above 1: it also scales up, to that many times its size, where the page has room."""
    style = f' style="width:100%;max-width:min(100%,{int(width * grow)}px)"' if grow > 1 else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"{style} '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{tooltip(label)}" '
            f'font-family="sans-serif" font-size="{FONT}">' + "".join(body) + "</svg>")


def text_element(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{px(x)}" y="{px(y)}" text-anchor="{anchor}"{extra}>{bounded(text, NAME_SHOWN)}</text>'


def mark_path(points: Sequence[tuple[float, float]], colour: str, cap: str, width: float = 6,
              hollow: bool = False) -> str:
    """Many marks in one path: zero-length segments drawn with round or square caps (a 1,000-run series
    costs a path of some 12 KB, not a thousand elements)."""
    if not points:
        return ""
    points = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if not points:
        return ""
    data = "".join(f"M{px(x)} {px(y)}h0" for x, y in points)
    if hollow:  # a ring: a wide cap in the colour under a narrower white one
        return (f'<path d="{data}" stroke="{colour}" stroke-width="{width + 3}" stroke-linecap="{cap}"/>'
                f'<path d="{data}" stroke="#fff" stroke-width="{width - 1}" stroke-linecap="{cap}"/>')
    return f'<path d="{data}" stroke="{colour}" stroke-width="{width}" stroke-linecap="{cap}" opacity="0.75"/>'


def axis_x(scale: Scale, ticks: Sequence[float], y: float, top: float, label, fmt) -> list[str]:
    """A horizontal axis at ``y``, its grid lines up to ``top``; one group (class ``axis``) whose tick labels
    and title carry the classes ``tick`` and ``axis-title``, for a reader's script and the tests."""
    out = ['<g class="axis">',
           f'<line x1="{px(scale.start)}" x2="{px(scale.end)}" y1="{px(y)}" y2="{px(y)}" stroke="#444"/>']
    for tick in ticks:
        x = scale(tick)
        out.append(f'<line x1="{px(x)}" x2="{px(x)}" y1="{px(top)}" y2="{px(y)}" stroke="#ddd"/>')
        out.append(text_element(x, y + 14, fmt(tick), "middle", ' class="tick"'))
    if label:
        out.append(text_element((scale.start + scale.end) / 2, y + 30, label, "middle", ' class="axis-title"'))
    return out + ["</g>"]


@dataclass(frozen=True)
class ForestRow:
    label: str
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    tone: str  # a key of VERDICT_COLOURS
    anchor: str = ""  # the id of the benchmark's section, to link to
    finding: str = ""  # the verdict with its direction in words ("B slower"), shown; else the verdict

    @property
    def words(self) -> str:
        return self.finding or self.verdict


# the width of a character of the 12-pixel sans-serif labels, a little above the average of DejaVu Sans and
# Liberation Sans (Chromium's sans-serif on Linux), so that a label measured by it fits
CHAR_WIDTH = 7.2


def fitted(label: str, room: float) -> str:
    """``label`` as it fits in ``room`` pixels: whole, or its start and its end around an ellipsis (names
    that share a long prefix differ at the end: bench_..._variant_0, bench_..._variant_1)."""
    chars = max(int(room / CHAR_WIDTH), 5)
    if len(label) <= chars:
        return label
    head = (chars - 1) * 3 // 5
    return label[:head] + "…" + label[len(label) - (chars - 1 - head):]


def forest(rows: Sequence[ForestRow], margin: float) -> str:
    """Each benchmark's A/B ratio (log scale) with its interval, against the equivalence band
    [1 - margin, 1 + margin] and the line of no difference, its finding in words on the right. The label
    column is as wide as the longest name needs, up to 440 pixels; a longer name is shortened in its middle
    (``fitted``), and every row has its whole name, verdict and interval as a tooltip (an SVG ``<title>``).
    The axis runs from a labelled tick below every interval to one above it (``ratio_ticks``)."""
    longest = max((len(visible(r.label)) for r in rows), default=0)
    label_width = min(max(100, int(longest * CHAR_WIDTH) + 16), 440)
    right = max(100, int(max((len(visible(r.words)) for r in rows), default=0) * CHAR_WIDTH) + 16)
    width = label_width + 320 + right
    height = 40 + 18 * max(1, len(rows)) + 40
    ends = [v for r in rows for v in (r.low, r.high, r.ratio) if v is not None and v > 0 and math.isfinite(v)]
    ticks = ratio_ticks(min(ends + [1 - margin]), max(ends + [1 + margin]), margin)
    low, high = ticks[0], ticks[-1]
    # the end ticks' labels need room: the axis starts and ends half a label inside the plot
    scale = Scale(low, high, label_width + 12, width - right - 12, log=True)
    body = [f'<rect x="{px(scale(1 - margin))}" y="24" width="{px(scale(1 + margin) - scale(1 - margin))}" '
            f'height="{height - 64}" fill="{BAND}" opacity="0.18"/>',
            text_element(scale(1 - margin), 16, f"equivalence band ±{margin:g}",
                         "middle" if scale(1 - margin) > width / 2 else "start", ' fill="#8a5a00"')]
    body += axis_x(scale, _spaced(scale, ticks), height - 40, 24, "A/B ratio (log scale; above 1: B faster)",
                   lambda t: f"{t:g}")
    body.append(f'<line x1="{px(scale(1))}" x2="{px(scale(1))}" y1="24" y2="{height - 40}" stroke="#222" '
                f'stroke-dasharray="4 3"/>')
    for i, row in enumerate(rows):
        y = 40 + 18 * i
        colour = VERDICT_COLOURS.get(row.tone, VERDICT_COLOURS["other"])
        name = fitted(visible(row.label), label_width - 16)
        link = f'<a href="#{esc(row.anchor)}">' if row.anchor else ""
        interval = units.ratio(row.ratio, row.low, row.high)
        said = f"{row.words}, A/B {interval}" + (f" (SPARC: {row.verdict})" if row.finding else "")
        body.append(f'<g class="row"><title>{tooltip(row.label)}: {esc(said)}</title>'
                    f'{link}{text_element(label_width - 8, y + 4, name, "end")}{"</a>" if link else ""}')
        if row.low is not None and row.high is not None:
            body.append(f'<line x1="{px(scale(row.low))}" x2="{px(scale(row.high))}" y1="{y}" y2="{y}" '
                        f'stroke="{colour}" stroke-width="2.5"/>')
        if row.ratio is not None and row.ratio > 0:
            body.append(mark_path([(scale(row.ratio), y)], colour, "square", 8))
        body.append(text_element(width - right + 8, y + 4, row.words, "start", f' fill="{colour}"') + "</g>")
    # the plot a reader looks at first: larger on a wide screen
    return svg_element(width, height, "forest plot of the A/B ratio of every benchmark", body, grow=1.3)


def _spaced(scale: Scale, ticks: Sequence[float], gap: float | None = None) -> list[float]:
    """The ticks whose labels do not touch: ``gap`` pixels apart on a vertical axis, on a horizontal one
    half of both labels' widths and 10 pixels; the two outer ones first (they bound the data:
    ``ratio_ticks``), then 1 (no difference), then by their distance from 1."""
    if not ticks:
        return []
    ends = [min(ticks), max(ticks)]

    def apart(a: float, b: float) -> bool:
        room = gap if gap is not None else (len(f"{a:g}") + len(f"{b:g}")) * CHAR_WIDTH / 2 + 10
        return abs(scale(a) - scale(b)) >= room

    kept: list[float] = []
    for tick in sorted(ticks, key=lambda t: (t not in ends, t != 1, abs(math.log(t)) if t > 0 else 0)):
        if all(apart(tick, k) for k in kept):
            kept.append(tick)
    return sorted(kept)


@dataclass
class Series:
    """One side's values in run order; ``flagged`` maps a run's index to why it is marked (interfered-with)
    and ``before`` holds warm-up values, drawn before run 0."""

    name: str  # "A" or "B"
    values: Sequence[float]
    flagged: dict[int, str] = field(default_factory=dict)
    before: Sequence[float] = ()
    limit: int = MARK_LIMIT  # beyond this many runs the plots thin (module docstring)

    @cached_property
    def ordered(self) -> np.ndarray:
        """The finite values, sorted: computed once, read by the axes, the strip and the ECDF."""
        values = np.asarray(self.values, dtype=float)
        return np.sort(values[np.isfinite(values)])

    @property
    def thinned(self) -> bool:
        return len(self.values) > self.limit

    @property
    def bins(self) -> int:
        """How many bins of consecutive runs the runs in order are drawn as, when thinned."""
        return max(RUN_BINS * self.limit // MARK_LIMIT, 20)

    @property
    def colour(self) -> str:
        return COLOURS.get(self.name, "#444")

    @property
    def cap(self) -> str:
        return "round" if self.name != "B" else "square"


KEY_LINE = 16  # the height of a line of a plot's key
NOTE_CHAR = 6.0  # the width of a character of the 10-pixel notes


def _mark_glyph(colour: str, cap: str, hollow: bool = False):
    return lambda x, y: mark_path([(x + 5, y - 4)], colour, cap, 7 if hollow else 8, hollow)


def line_glyph(colour: str, dashed: bool = False):
    dash = ' stroke-dasharray="5 2"' if dashed else ""
    return lambda x, y: f'<path d="M{px(x)} {px(y - 4)}h14" stroke="{colour}" stroke-width="2"{dash}/>'


def _median_glyph(x: float, y: float) -> str:
    return f'<path d="M{px(x + 6)} {px(y - 11)}v12" stroke="#000" stroke-width="2"/>'


def _bracket_glyph(x: float, y: float) -> str:
    return f'<path d="M{px(x)} {px(y - 7)}v5h14v-5" fill="none" stroke="#000"/>'


def plot_key(x: float, width: float, entries: Sequence[tuple[str, object]], notes: Sequence[str] = ()) -> tuple[
        list[str], float]:
    """A plot's key, from its top: each entry a glyph (a function of x and the baseline y drawing one mark,
    14 pixels wide) and its words, a new line when the width is used up; then each note in small grey
    type, wrapped to the width. The elements, and the height they take."""
    import textwrap

    out: list[str] = []
    y, left = 0.0, x
    for words, glyph in entries:
        room = 20 + len(words) * CHAR_WIDTH + 14
        if left > x and left + room > width - 8:
            left, y = x, y + KEY_LINE
        out += [glyph(left, y + 13), text_element(left + 20, y + 13, words)]
        left += room
    y += KEY_LINE if entries else 0
    for note in notes:
        for line in textwrap.wrap(note, max(int((width - x - 8) / NOTE_CHAR), 20)):
            out.append(text_element(x, y + 11, line, extra=' fill="#555" font-size="10"'))
            y += 13
    return out, y + 4


def _sides(series: Sequence[Series]) -> list[tuple[str, object]]:
    """The key's entries naming the sides by their marks; none for a single series (a stat report's
    runs: a legend "A" said nothing)."""
    return [(s.name, _mark_glyph(s.colour, s.cap)) for s in series] if len(series) > 1 else []


def y_title(x: float, middle: float, text: str) -> str:
    """A value axis's title, along the axis (rotated)."""
    return (f'<text x="{px(x)}" y="{px(middle)}" text-anchor="middle" class="axis-title y" '
            f'transform="rotate(-90 {px(x)} {px(middle)})">'
            f'{bounded(text, NAME_SHOWN)}</text>')


def _extent(series: Sequence[Series], before: bool = False) -> list[float]:
    """The smallest and largest finite value of every series (and of its warm-ups): all ``padded`` needs,
    without a list of every run."""
    ends = [float(end) for s in series if len(s.ordered) for end in (s.ordered[0], s.ordered[-1])]
    for s in series if before else ():
        warm = [v for v in s.before if v is not None and math.isfinite(v)]
        ends += [min(warm), max(warm)] if warm else []
    return ends


def _evenly_spaced(n: int, limit: int = MARK_LIMIT) -> np.ndarray:
    """The positions (0 .. n-1) drawn of ``n``: all of them up to ``limit``, else ``limit`` evenly spaced
    ones, the first and the last among them (of sorted values: the minimum, the maximum and the quantiles
    between)."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, limit)).astype(np.int64))


def _thinned_note(series: Sequence[Series], how: str) -> str:
    """What the plot says when it thinned: "A 1,000,000, B 999,000 runs: 1,000 quantiles each"."""
    counts = [f"{s.name} {len(s.values):,}" for s in series if s.thinned]
    return f"{', '.join(counts)} runs: {how}" if counts else ""


# a strip plot gives each side an axis of its own when the sides do not overlap and one of them would span
# less than this share of an axis shared by both: matmul's two builds, 4.5x apart, were each a glyph
STRIP_SHARED = 0.15


def _median(ordered: np.ndarray) -> float:
    n = len(ordered)
    # halves: the sum of two values near the float limit would overflow
    return float(ordered[n // 2]) if n % 2 else float(ordered[n // 2 - 1]) / 2 + float(ordered[n // 2]) / 2


def strip(series: Sequence[Series], unit: str | None, intervals: dict[str, tuple[float | None, float | None]],
          label: str, width: int = 440, bracket: str = "interval") -> str:
    """Each side's runs on one row (jittered so that ties stay visible), its median as a bar and its
    interval from ``intervals`` as a bracket under the row, both explained in the key (``bracket``: what
    the interval is). ``label`` names what is measured; the axis title adds the unit its ticks print in
    (``value_axis``). Sides that do not overlap, one of which would be squeezed to a sliver of a shared
    axis (``STRIP_SHARED``), get an axis each, and the plot says how far apart their medians are. Beyond
    ``limit`` runs, the row holds ``limit`` evenly spaced order statistics instead (their density along
    the row is the runs' density), as the plot says."""
    def ends(s: Series) -> list[float]:
        low, high = intervals.get(s.name, (None, None))
        return _extent([s]) + [v for v in (low, high) if v is not None and math.isfinite(v)]

    every = [v for s in series for v in ends(s)]
    axis = value_axis(label, unit, every)
    low, high = padded(every)
    ranges = [(min(ends(s)), max(ends(s))) for s in series if ends(s)]
    apart = len(ranges) > 1 and all(a[1] < b[0] or b[1] < a[0] for i, a in enumerate(ranges) for b in ranges[i + 1:])
    own = apart and any(hi - lo < STRIP_SHARED * (high - low) for lo, hi in ranges)
    entries = _sides(series) + [("median", _median_glyph)]
    entries += [(bracket, _bracket_glyph)] if any(None not in intervals.get(s.name, (None,)) for s in series) else []
    medians = [_median(s.ordered) for s in series if len(s.ordered)]
    notes = [_thinned_note(series, f"{series[0].limit:,} quantiles each, min and max kept")]
    if own and len(medians) == 2 and medians[1]:
        notes.append(f"each side on an axis of its own: the medians are {medians[0] / medians[1]:.3g}× apart (A/B)")
    body, top = plot_key(60, width, entries, [n for n in notes if n])
    named = len(series) > 1
    y = top + 24
    shared = Scale(low, high, 60, width - 20)
    for row, s in enumerate(series):
        scale = Scale(*padded(ends(s)), 60, width - 20) if own else shared
        if named:
            body.append(text_element(50, y + 4, s.name, "end", ' font-weight="bold"'))
        drawn = s.ordered[_evenly_spaced(len(s.ordered), s.limit)] if s.thinned else s.values
        jitter = [((i * 0.618034) % 1 - 0.5) * 22 for i in range(len(drawn))]
        body.append(mark_path([(scale(v), y + j) for v, j in zip(drawn, jitter)], s.colour, s.cap, 5))
        if len(s.ordered):
            middle = _median(s.ordered)
            body.append(f'<line x1="{px(scale(middle))}" x2="{px(scale(middle))}" y1="{y - 15}" y2="{y + 15}" '
                        f'stroke="#000" stroke-width="2"><title>median {esc(units.quantity(middle, unit))}'
                        f'</title></line>')
        low_end, high_end = intervals.get(s.name, (None, None))
        if low_end is not None and high_end is not None:
            x0, x1 = scale(low_end), scale(high_end)
            body.append(f'<path d="M{px(x0)} {y + 14}v5H{px(x1)}v-5" fill="none" stroke="#000"><title>{esc(bracket)} '
                        f'{esc(units.interval(low_end, high_end, unit))}</title></path>')
        if own or row == len(series) - 1:
            ticks = axis.ticks(scale.low, scale.high, 5)
            last = row == len(series) - 1
            body += axis_x(scale, ticks, y + 28, y - 20 if own else top + 4, axis.title if last else "",
                           lambda t, ticks=ticks: axis.text(t, ticks))
            y += 28 + 40 if last else 28 + 44
        else:
            y += 50
    note = "; ".join(n for n in notes if n)
    return svg_element(width, int(y),
                       f"runs{' of A and B' if named else ''}: {axis.title}{f'; {note}' if note else ''}", body)


def ecdf(series: Sequence[Series], unit: str | None, label: str, width: int = 440) -> str:
    """The empirical cumulative distribution of each side: a step line per side (A solid, B dashed), the
    share of runs at or below each value. Beyond ``limit`` runs the steps go through ``limit`` evenly
    spaced order statistics: the line is then off by at most 1/limit in probability (a fraction of a pixel
    at 1,000)."""
    axis = value_axis(label, unit, _extent(series))
    scale = Scale(*padded(_extent(series)), 60, width - 20)
    note = _thinned_note(series, f"{series[0].limit:,} quantiles each")
    entries = [(s.name, line_glyph(s.colour, s.name == "B")) for s in series] if len(series) > 1 else []
    body, top = plot_key(60, width, entries, [note] if note else [])
    height = int(top) + 200
    prob = Scale(0, 1, height - 40, top + 10)
    ticks = axis.ticks(scale.low, scale.high, 5)
    body += axis_x(scale, ticks, height - 40, top + 10, axis.title, lambda t: axis.text(t, ticks))
    for p in (0, 0.25, 0.5, 0.75, 1):
        body.append(f'<line x1="60" x2="{width - 20}" y1="{px(prob(p))}" y2="{px(prob(p))}" stroke="#eee"/>')
        body.append(text_element(54, prob(p) + 4, f"{p:g}", "end"))
    body.append(y_title(16, (prob(0) + prob(1)) / 2, "share of runs ≤ value"))
    for s in series:
        ordered, n = s.ordered, len(s.ordered)
        if not n:
            continue
        steps = [f"M{px(scale(ordered[0]))} {px(prob(0))}"]
        for rank in (_evenly_spaced(n, s.limit) if s.thinned else range(n)):
            steps.append(f"H{px(scale(ordered[rank]))}V{px(prob((rank + 1) / n))}")
        dash = ' stroke-dasharray="6 3"' if s.name == "B" else ""
        body.append(f'<path d="{"".join(steps)}" fill="none" stroke="{s.colour}" stroke-width="2"{dash}/>')
    named = " of A and B" if len(series) > 1 else ""
    return svg_element(width, height, f"empirical CDF{named}: {axis.title}{f'; {note}' if note else ''}", body)


def run_order(series: Sequence[Series], unit: str | None, label: str, width: int = 540) -> str:
    """Every run's value against its place in the order of runs (warm-ups before 0, hollow); flagged runs
    are hollow rings too, so drift, warm-up and interference show. Beyond ``limit`` runs a side, ``bins``
    bins of consecutive runs: a line from each bin's minimum to its maximum, its median marked, and the
    flagged runs and warm-ups thinned to each bin's extremes (``_in_order``), as the plot says."""
    longest = max((len(s.values) for s in series), default=1)
    warm = max((len(s.before) for s in series), default=0)
    marked = any(s.flagged or s.before for s in series)
    entries = _sides(series) + ([("warm-up or flagged as interfered-with", _mark_glyph("#444", "round", True))]
                                if marked else [])
    note = _thinned_note(series, f"{series[0].bins if series else 0} bins of consecutive runs, each a line "
                                 f"from min to max, median marked")
    body, top = plot_key(90, width, entries, [note] if note else [])
    height = int(top) + 200
    xs = Scale(-warm - 0.5, max(longest, 1) - 0.5, 90, width - 20)
    extent = _extent(series, before=True)
    axis = value_axis(label, unit, extent)
    ys = Scale(*padded(extent), height - 40, top + 10)
    body += axis_x(xs, [t for t in nice_ticks(0, max(longest - 1, 1), 6) if t == int(t)], height - 40, top + 10,
                   "run (in the order taken; warm-ups before 0)", lambda t: f"{int(t)}")
    ticks = axis.ticks(ys.low, ys.high, 4)
    for tick in ticks:
        body.append(f'<line x1="90" x2="{width - 20}" y1="{px(ys(tick))}" y2="{px(ys(tick))}" stroke="#eee"/>')
        body.append(text_element(84, ys(tick) + 4, axis.text(tick, ticks), "end", ' class="ytick"'))
    body.append(y_title(16, (height - 40 + top + 10) / 2, axis.title))
    for s in series:
        flagged = [(i, s.values[i]) for i in sorted(s.flagged)]
        warmups = [(i - len(s.before), v) for i, v in enumerate(s.before)]
        if s.thinned:
            body.append(_bins(s, xs, ys))
        else:
            body.append(mark_path([(xs(i), ys(v)) for i, v in enumerate(s.values) if i not in s.flagged],
                                  s.colour, s.cap, 5))
        body.append(mark_path([(xs(i), ys(v)) for i, v in _in_order(flagged, s.limit) + _in_order(warmups, s.limit)],
                              s.colour, s.cap, 6, hollow=True))
    said = "; ".join(n for n in ("hollow: warm-up or flagged as interfered-with" if marked else "", note) if n)
    return svg_element(width, height, f"runs in order: {axis.title}{f'; {said}' if said else ''}", body)


def _bins(s: Series, xs: Scale, ys: Scale) -> str:
    """The runs of ``s`` that are not flagged, in ``s.bins`` bins of consecutive runs: one path of min-to-max
    lines and one of median marks (the flagged runs are drawn apart, as rings)."""
    values = np.asarray(s.values, dtype=float)
    keep = np.isfinite(values)
    keep[[i for i in s.flagged if i < len(values)]] = False
    edges = np.linspace(0, len(values), s.bins + 1).astype(np.int64)
    lines, medians = [], []
    for start, end in zip(edges[:-1], edges[1:]):
        inside = values[start:end][keep[start:end]]
        if not len(inside):
            continue
        x = xs((start + end - 1) / 2)
        low, high = float(inside.min()), float(inside.max())
        lines.append(f"M{px(x)} {px(ys(low))}V{px(ys(high))}")
        # the upper median, an order statistic: no mean of two that could overflow near the float limit
        medians.append((x, ys(float(np.partition(inside, len(inside) // 2)[len(inside) // 2]))))
    if not lines:
        return ""
    return (f'<path d="{"".join(lines)}" stroke="{s.colour}" stroke-width="2" opacity="0.45"/>'
            + mark_path(medians, s.colour, s.cap, 4))


def _in_order(points: Sequence[tuple[int, float]], limit: int = MARK_LIMIT) -> list[tuple[int, float]]:
    """``points`` (run position, value), in order: all of them up to ``limit``, else the lowest and the
    highest of each of limit/2 bins of consecutive points, so that no extreme is thinned away."""
    points = [(i, v) for i, v in points if v is not None and math.isfinite(v)]
    if len(points) <= limit:
        return points
    kept = []
    edges = np.linspace(0, len(points), limit // 2 + 1).astype(np.int64)
    for start, end in zip(edges[:-1], edges[1:]):
        inside = points[start:end]
        if inside:
            extremes = {min(inside, key=lambda p: p[1]), max(inside, key=lambda p: p[1])}
            kept += sorted(extremes)
    return kept


def sequence(rounds: Sequence[int], estimate: Sequence[float], low: Sequence[float], high: Sequence[float],
             margin: float, width: int = 640) -> str:
    """A confidence sequence of the A/B ratio over rounds (``perfctl ab``): the band it covers at each
    round, its estimate, and the equivalence band. Beyond MARK_LIMIT rounds, MARK_LIMIT evenly spaced rounds
    (the first and the last among them), as the plot says."""
    note = ""
    if len(rounds) > MARK_LIMIT:
        note = f"{len(rounds):,} rounds drawn at {MARK_LIMIT:,} evenly spaced ones"
        kept = _evenly_spaced(len(rounds))
        rounds, estimate, low, high = ([values[k] for k in kept] for values in (rounds, estimate, low, high))
    finite = [v for v in (*low, *high, *estimate) if v is not None and v > 0 and math.isfinite(v)]
    ticks = ratio_ticks(min(finite + [1 - margin]), max(finite + [1 + margin]), margin)
    lo, hi = ticks[0], ticks[-1]
    height = 260
    xs = Scale(min(rounds, default=0), max(rounds, default=1), 60, width - 20)
    ys = Scale(lo, hi, height - 40, 20, log=True)
    body = [f'<rect x="60" y="{px(ys(1 + margin))}" width="{width - 80}" '
            f'height="{px(ys(1 - margin) - ys(1 + margin))}" fill="{BAND}" opacity="0.18"/>']
    body += axis_x(xs, nice_ticks(xs.low, xs.high, 6), height - 40, 20, "round", lambda t: f"{int(t)}")
    for tick in _spaced(ys, ticks, 16):
        body.append(text_element(56, ys(tick) + 4, f"{tick:g}", "end"))
    body.append(y_title(14, (height - 20) / 2, "A/B ratio (log scale)"))
    pairs = [(r, a, b) for r, a, b in zip(rounds, low, high) if a is not None and b is not None and a > 0]
    if pairs:
        top = "".join(f"{'M' if i == 0 else 'L'}{px(xs(r))} {px(ys(b))}" for i, (r, _, b) in enumerate(pairs))
        bottom = "".join(f"L{px(xs(r))} {px(ys(a))}" for r, a, _ in reversed(pairs))
        body.append(f'<path d="{top}{bottom}Z" fill="{COLOURS["A"]}" opacity="0.25"/>')
    line = "".join(f"{'M' if i == 0 else 'L'}{px(xs(r))} {px(ys(e))}" for i, (r, e) in
                   enumerate((r, e) for r, e in zip(rounds, estimate) if e is not None and e > 0))
    if line:
        body.append(f'<path d="{line}" fill="none" stroke="{COLOURS["A"]}" stroke-width="2"/>')
    if note:
        body.append(text_element(60, 12, note, extra=' fill="#555" font-size="10"'))
    return svg_element(width, height, f"confidence sequence of the A/B ratio over rounds{f'; {note}' if note else ''}",
                       body)


def timeline(rows: Sequence[tuple[str, Sequence[tuple[float, str, str]]]], width: int = 640) -> str:
    """One row per machine, one mark per event at its time (seconds since the epoch): ``(time, tone,
    text)`` with ``tone`` a key of VERDICT_COLOURS and ``text`` shown on hover and, for the last mark of a
    row, beside it."""
    times = [t for _, marks in rows for t, _, _ in marks]
    low, high = (min(times), max(times)) if times else (0.0, 1.0)
    if high - low < 60:
        low, high = low - 30, high + 30
    label_width, right = 160, 120
    height = 30 + 22 * max(1, len(rows)) + 40
    xs = Scale(low, high, label_width, width - right)
    body = axis_x(xs, [low, (low + high) / 2, high], height - 40, 20, "time of the audit (UTC)", _when)
    for i, (label, marks) in enumerate(rows):
        y = 34 + 22 * i
        name = fitted(visible(label), label_width - 16)
        body.append(f"<g><title>{tooltip(label)}</title>{text_element(label_width - 8, y + 4, name, 'end')}</g>")
        for tone, group in _by_tone(marks).items():
            colour = VERDICT_COLOURS.get(tone, VERDICT_COLOURS["other"])
            body.append(mark_path([(xs(t), y) for t in group], colour, "square" if tone != "slower" else "round", 9))
        for t, _, text in marks:
            body.append(f'<circle cx="{px(xs(t))}" cy="{y}" r="6" fill="transparent"><title>{esc(text)}</title>'
                        f'</circle>')
        if marks:
            body.append(text_element(width - right + 8, y + 4, marks[-1][2].split(":")[0]))
    return svg_element(width, height, "audit verdicts of every machine over time", body)


def _by_tone(marks) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for t, tone, _ in marks:
        out.setdefault(tone, []).append(t)
    return out


def _when(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M")
