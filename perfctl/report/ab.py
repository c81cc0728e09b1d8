"""The report of a `perfctl ab` run: each command against the baseline, its ratio and confidence sequence, the
verdict read off it, why the rounds stopped; the live line drawn while they run; the exit code."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.table import Table

from perfctl import units
from perfctl.agent import cachegrind
from perfctl.analysis.ab import EXACT, Settlement
from perfctl.analysis.summary import Description, describe
from perfctl.analysis.verdicts import DEFAULT_FAIL_ON, FAIL_ON, Verdict, finding, margin_words
from perfctl.exit_codes import outcome_exit
from perfctl.model import DETERMINISTIC_BACKENDS
from perfctl.output import Interrupted, paragraph, show
from perfctl.report import NORMAL, QUIET, Report, csv_text, finite, markdown_text
from perfctl.report.stat import runs_word
from perfctl.text import cell, visible

STOPS = {
    "settled": "every verdict settled",
    "max-runs": "--max-runs reached",
    "max-time": "--max-time reached",
    "failed": "a run failed",
    "interrupted": "interrupted",
    "unusable": "a run's metric gives no ratio",
    "not-alike": "a command's rounds are not alike",
}
# how each test of alikeness (analysis/alike.py, analysis/ab.py) saw the change, in the note that names it
SEEN_BY = {
    "exchangeability": "a test of alike rounds (a conformal test martingale)",
    "disjoint": "the rounds' confidence sequences no longer overlapping",
    "stretches": "a test of a step (the confidence sequences of the rounds before and after a round no longer "
                 "overlapping)",
}


@dataclass
class Side:
    """One command of the run: its label (A, B, ...), its command line and how its runs went."""

    label: str
    argv: list[str]
    runs: int = 0
    warmups: int = 0
    failed: int = 0  # measured runs that failed: in ``runs``, never in ``values``
    values: list[float] = field(default_factory=list)  # the metric of each measured ok run that counted it
    unit: str = "ns"

    @property
    def description(self) -> Description | None:
        return describe(self.values) if self.values else None


def absolute(side: Side) -> str:
    """A command's own runs in the metric's unit, as hyperfine prints "Time (mean ± σ)" and "Range (min …
    max)": "median 12.304 ms ± 410.017 µs (σ), min 11.902 ms, max 13.120 ms" (no "…": it reads as a cut
    number on a terminal)."""
    d = side.description
    if d is None:
        return "no measured run counted the metric"
    spread = "" if math.isnan(d.sd) else f" ± {units.quantity(d.sd, side.unit)} (σ)"
    return (f"median {units.quantity(d.median, side.unit)}{spread}, min {units.quantity(d.min, side.unit)}, "
            f"max {units.quantity(d.max, side.unit)}")


def _absolute_fields(side: Side) -> dict:
    """A command's own statistics as JSON and CSV fields, in the metric's unit (``unit``)."""
    d = side.description
    return {"failed": side.failed, "unit": side.unit, **{key: None if d is None else getattr(d, key)
                                                         for key in ("median", "mean", "sd", "min", "max")}}


@dataclass
class AbResult:
    """What the report shows: the sides (the first is the baseline), one settlement per other side, the
    metric, the margin and family confidence, the seed that ordered the rounds and why they stopped."""

    sides: list[Side]
    settlements: dict[str, Settlement]
    metric: str
    margin: float
    confidence: float
    seed: int
    stop: str
    rounds: int = 0
    excluded_rounds: int = 0  # rounds left out: a run interfered with (--exclude-interfered)
    to_settle: dict[str, int | None] = field(default_factory=dict)
    failure: str | None = None
    output: str | None = None


def slowdown(settlement: Settlement, fail_on: str) -> bool:
    """Whether B is shown slower as ``fail_on`` asks (compare's --fail-on): a relevant difference with B
    slower (ratio A/B below 1), or with "beyond" a confidence sequence entirely below 1 - margin."""
    if fail_on == "beyond":
        return settlement.beyond == "slower"
    return settlement.verdict is Verdict.RELEVANT and settlement.high is not None and settlement.high < 1


def settlements_found(settlements, fail_on: str) -> dict:
    """What sequential comparisons (ab's, and the fleet's --until-settled jobs as the server replays them)
    found, as perfctl/exit_codes.py outcome_exit takes it: a B shown slower as ``fail_on`` asks; every
    comparison settled (not when there is none, the budget ended first, or the rounds were not alike)."""
    settlements = list(settlements)
    return {"slowdown": any(slowdown(s, fail_on) for s in settlements),
            "decided": bool(settlements) and all(s.settled for s in settlements)}


def said(settlement: Settlement, label: str = "B") -> str:
    """The verdict with its direction, in compare's words (analysis/verdicts.py finding), for ``label``."""
    if settlement.ratio is None:
        return "no rounds"
    if not settlement.alike:
        return "not alike"
    return finding(settlement.verdict, settlement.ratio, settlement.beyond, settlement.margin, label)


def reading(settlement: Settlement, label: str = "B") -> str:
    """The verdict in words, with its size, as the confidence sequence shows it, for the command ``label``:
    "B slower, within ±5%: A/B 0.9811 [0.9568, 0.9990]"."""
    if settlement.ratio is None:
        return "no rounds"
    if not settlement.alike:
        return "not alike: the machine or a program changed during the rounds; no verdict"
    words = said(settlement, label)
    if settlement.verdict is Verdict.RELEVANT and not settlement.beyond:
        words += f"; not yet shown beyond or inside {margin_words(settlement.margin)}"
    return f"{words}: A/{label} {_number(settlement.ratio)} {_sequence(settlement)}"


def _against(words: str, label: str, base: str) -> str:
    """``said``'s words with the baseline named: "B slower than A beyond ±5%", "B equivalent to A within ±5%"."""
    for way in ("slower", "faster"):
        if words.startswith(f"{label} {way}"):
            return words.replace(f"{label} {way}", f"{label} {way} than {base}", 1)
    if words.startswith("equivalent"):
        return words.replace("equivalent", f"{label} equivalent to {base}", 1)
    return f"{label}: {words}"


def headline(result: AbResult, exit_code: int, fail_on: str) -> str:
    """The sentence ab's output leads with: each command's verdict against A with its ratio, when it settled,
    the confidence, and why the exit code is what it is."""
    base = result.sides[0].label
    parts = []
    for side in result.sides[1:]:
        s = result.settlements.get(side.label)
        if s is None:
            continue
        if s.ratio is None or not s.alike:
            if not (result.failure and s.ratio is None):
                parts.append(f"{side.label}: {said(s, side.label)}")
            continue
        state = f"settled after {s.rounds} rounds" if s.settled else f"not yet settled ({s.rounds} rounds)"
        parts.append(f"{_against(said(s, side.label), side.label, base)}: A/{side.label} {_number(s.ratio)} "
                     f"{_sequence(s)}, {state}")
    slow = [side.label for side in result.sides[1:]
            if (s := result.settlements.get(side.label)) is not None and slowdown(s, fail_on)]
    # outcome_exit's order (perfctl/exit_codes.py): the first that holds is why
    if exit_code >= 128:
        why = "stopped by a signal"
    elif result.stop == "failed":
        why = "a run failed"
    elif result.stop == "unusable":
        why = "a run's metric gives no ratio"
    elif slow:
        why = f"{', '.join(slow)} slower than {base}"
    elif exit_code:
        why = "a verdict not settled"
    else:
        why = f"no command slower than {base}"
    if result.failure and result.stop in ("failed", "unusable"):  # what ended the rounds comes first
        parts.insert(0, "No verdict: " + result.failure.removeprefix("perfctl ab: "))
    together = " together" if len(result.sides) > 2 else ""
    return (f"{'; '.join(parts) or 'no comparison'}. Confidence {units.percent(result.confidence)}{together}. "
            f"Exit {exit_code}: {why}" + (f" (--fail-on {fail_on})." if exit_code in (0, 3) else "."))


class AbReport(Report):
    kind = "ab"
    formats = ("table", "json", "markdown", "csv")

    def __init__(self, result: AbResult, fail_on: str = DEFAULT_FAIL_ON, verbosity: int = NORMAL,
                 interrupted: Interrupted | None = None):
        if fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {FAIL_ON}, got {fail_on!r}")
        self.result, self.fail_on, self.verbosity, self.interrupted = result, fail_on, verbosity, interrupted

    def exit_code(self) -> int:
        """128 + N when stopped by signal N; 1 a run failed; 3 a B shown slower (--fail-on); 4 a verdict not
        settled (the budget ended first); else 0."""
        if self.interrupted is not None:
            return self.interrupted.exit_code
        return outcome_exit(run_failed=self.result.stop == "failed", unusable=self.result.stop == "unusable",
                            **settlements_found(self.result.settlements.values(), self.fail_on))

    def document(self) -> dict:
        r = self.result
        return finite({
            "headline": headline(r, self.exit_code(), self.fail_on), "metric": r.metric, "margin": r.margin,
            "confidence": r.confidence, "seed": r.seed, "stop": r.stop,
            "rounds": r.rounds, "excluded_rounds": r.excluded_rounds, "failure": r.failure, "output": r.output,
            "baseline": {"label": r.sides[0].label, "argv": r.sides[0].argv, "runs": r.sides[0].runs,
                         **_absolute_fields(r.sides[0])},
            "comparisons": [{
                "label": side.label, "argv": side.argv, "runs": side.runs, **_absolute_fields(side),
                "finding": said(s, side.label),
                **_settlement_fields(s),
                "method": s.method, "rounds_to_settle": r.to_settle.get(side.label),
            } for side in r.sides[1:] if (s := r.settlements.get(side.label)) is not None],
            "exit_code": self.exit_code(),
        })

    def table(self, console: Console) -> None:
        r = self.result
        rows = [(side, r.settlements[side.label]) for side in r.sides[1:] if side.label in r.settlements]
        if self.verbosity > QUIET:
            paragraph(console, visible(headline(r, self.exit_code(), self.fail_on)))
            console.print()
            # the title a paragraph of its own: a table's title wraps to the table's width
            paragraph(console, visible(f"perfctl ab: {r.metric}, {r.rounds} rounds, stopped: "
                                       f"{STOPS.get(r.stop, r.stop)}"))
            table = Table(caption_justify="left", box=box.SIMPLE_HEAD,
                          show_edge=False, pad_edge=False,
                          caption=f"ratio = A / {'B' if len(r.sides) == 2 else 'each command'} (above 1: faster "
                                  f"than A); margin {margin_words(r.margin)}; the sequences cover "
                                  f"their ratios together with {units.percent(r.confidence)} confidence")
            # only the command folds (in pieces of 20 at least): a number, a sequence or a verdict cut in two
            # misleads; where they do not fit whole, show() prints each command's row as lines
            ratio = "ratio A/B" if len(r.sides) == 2 else "ratio A/cmd"
            for column in ("", "command", "runs", ratio, f"{units.percent(r.confidence)} sequence", "verdict"):
                table.add_column(column, justify="right" if column in ("runs", ratio) else "left",
                                 no_wrap=column != "command", overflow="fold",
                                 min_width=20 if column == "command" else None)
            table.add_row(r.sides[0].label, cell(" ".join(r.sides[0].argv)), str(r.sides[0].runs), "baseline", "",
                          "")
            for side, s in rows:
                if s.alike:
                    verdict = said(s, side.label) + ("" if s.settled else " (not settled)")
                    sequence = _sequence(s)
                else:  # no interval is claimed of rounds that are not alike
                    verdict, sequence = "not alike", "-"
                table.add_row(side.label, cell(" ".join(side.argv)), str(side.runs), _number(s.ratio), sequence,
                              verdict)
            show(console, table, lead=-1)
            for side in r.sides:  # each command's own runs, in the metric's unit (hyperfine's lines)
                runs = f"{side.runs} {runs_word(side.runs)}" + (
                    f", {side.failed} failed: not in these figures" if side.failed else "")
                paragraph(console, visible(f"{side.label}: {r.metric} {absolute(side)} ({runs})"),
                          hang=len(side.label) + 2)
        for side, s in rows:
            if s.change is not None:  # what exit 4 is about: said even with -q
                paragraph(console, change_line(side.label, s))
            elif (self.verbosity > QUIET and not s.settled) or (self.verbosity <= QUIET and slowdown(s, self.fail_on)):
                # a settled verdict is the headline's; what is left open says what would settle it
                paragraph(console, visible(f"{side.label}: {reading(s, side.label)}" + _settling_note(side, s, r)))
        exact = [side.label for side, s in rows if s.method == EXACT]
        if exact and self.verbosity > QUIET:  # the table's "sequence" of these is a point, not a CS
            paragraph(console, f"{', '.join(exact)}: exact counts ({', '.join(DETERMINISTIC_BACKENDS)}), every round "
                               "repeating the first: the ratio is known, not estimated (docs/ab.md, CI without a PMU)")
        if r.metric.partition(":")[0] == cachegrind.ESTIMATED:  # an exact ratio of a model's figures
            paragraph(console, f"{r.metric}: {cachegrind.MODEL}")
        if r.excluded_rounds:
            paragraph(console, f"{r.excluded_rounds} rounds left out: a run was interfered with (--exclude-interfered)")
        if r.failure:
            paragraph(console, visible(r.failure))
        if r.output and self.verbosity > QUIET:
            sides = " ".join(f"{r.output}@ab={side.label}" for side in r.sides[:2])
            # not wrapped: the command is to be pasted as printed
            console.print(visible(f"samples: {r.output} (fixed-n comparison afterwards: perfctl compare {sides} "
                                  "--paired)"), highlight=False, markup=False, soft_wrap=True)


    def _rows(self) -> list[tuple[Side, Settlement | None]]:
        """Each command with its settlement against A (None for A itself, and a command not compared)."""
        r = self.result
        return [(side, r.settlements.get(side.label) if i else None) for i, side in enumerate(r.sides)]

    def csv(self) -> str:
        """One row per command: its own statistics in the metric's unit, and its comparison with A."""
        r = self.result
        rows = []
        for side, s in self._rows():
            row = {"label": side.label, "command": " ".join(side.argv), "metric": r.metric, "runs": side.runs,
                   **_absolute_fields(side)}
            if s is not None:
                row.update({"ratio": s.ratio, "low": s.low, "high": s.high, "verdict": said(s, side.label),
                            "settled": s.settled})
            rows.append(finite(row))
        return csv_text(rows, ("label", "command", "metric", "runs", "failed", "unit", "median", "mean", "sd", "min",
                               "max", "ratio", "low", "high", "verdict", "settled"))

    def markdown(self) -> str:
        """The headline, then a GitHub table of the commands (as a CI posts it in a comment)."""
        r = self.result
        ratio = "ratio A/B" if len(r.sides) == 2 else "ratio A/cmd"
        lines = [markdown_text(headline(r, self.exit_code(), self.fail_on)), "",
                 f"| | command | runs | {markdown_text(r.metric)} | {ratio} | "
                 f"{units.percent(r.confidence)} sequence | verdict |", "|:---|:---|---:|---:|---:|:---|:---|"]
        for side, s in self._rows():
            compared = ("baseline", "", "") if s is None else (_number(s.ratio), _sequence(s) if s.alike else "-",
                                                                said(s, side.label))
            cells = (side.label, " ".join(side.argv), str(side.runs), absolute(side), *compared)
            lines.append("| " + " | ".join(markdown_text(c) for c in cells) + " |")
        lines += ["", markdown_text(f"{r.rounds} rounds, stopped: {STOPS.get(r.stop, r.stop)}; margin "
                                    f"{margin_words(r.margin)}; seed {r.seed}")]
        return "\n".join(lines) + "\n"


def change_line(label: str, s: Settlement) -> str:
    """Where the rounds of a comparison that is not alike changed, and how that was seen.

    >>> from perfctl.analysis.ab import SequentialComparison
    >>> c, i = SequentialComparison(), 0
    >>> while c.alike:  # B 25% slower from round 16 on; ab stops the rounds once they are not alike
    ...     c.add(20.0 * (1 + 0.001 * (i % 5)), 20.0 if i < 15 else 25.0)
    ...     i += 1
    >>> print(change_line("B", c.settlement()))  # doctest: +NORMALIZE_WHITESPACE
    B: not alike: A/B 1.0020 over rounds 1-15, 0.8016 over rounds 16-30 (Pettitt's change point), seen at round
    30 by a test of a step (the confidence sequences of the rounds before and after a round no longer
    overlapping); the machine or a program changed during the rounds, so there is no verdict (exit 4): run
    again on a quiet machine, or find what changed
    """
    change = s.change
    if change is None:
        return ""
    where = ""
    if change.last_before is not None:
        where = (f"A/{label} {_number(change.before)} over rounds 1-{change.last_before}, {_number(change.after)} "
                 f"over rounds {change.last_before + 1}-{s.rounds} (Pettitt's change point), ")
    return (f"{label}: not alike: {where}seen at round {change.seen_at} by {SEEN_BY.get(change.test, change.test)}; "
            "the machine or a program changed during the rounds, so there is no verdict (exit 4): run again on a "
            "quiet machine, or find what changed")


def _settling_note(side: Side, s: Settlement, result: AbResult) -> str:
    if s.rounds == 0 or not s.alike:
        return ""
    if s.settled:
        return f" (settled after {s.rounds} rounds)"
    # a stop signal is named first, whatever else kept the verdict unsettled: every interrupt reads the same
    interrupted = f"interrupted after {result.rounds} rounds" if result.stop == "interrupted" else None
    if s.too_early:
        if interrupted:
            return (f"; not settled: {interrupted}, before the {s.min_rounds} of --min-runs (the verdict of the "
                    "rounds so far)")
        return f"; not settled: the rounds ended after {s.rounds}, before the {s.min_rounds} of --min-runs"
    estimate = result.to_settle.get(side.label)
    # rounds_to_settle is None when the empirical quantiles at the sequence's ranks, which close in on the
    # median, still cross an edge of the band LOOK_AHEAD times later: the rounds around the median lie on both
    # sides of it (a median near the edge, or ratios in two clusters either side of the band)
    more = ("more rounds like these would not settle it soon (the rounds' ratios around their median lie on both "
            "sides of a margin edge)") if estimate is None else f"about {estimate} rounds like these would settle it"
    if interrupted:  # the user stopped the rounds: no budget to raise, and no edge to blame
        again = "" if estimate is None else ": run the same perfctl ab again (its rounds start afresh)"
        return f"; not settled: {interrupted} (the verdict of the rounds so far); {more}{again}"
    budget = {"max-time": "--max-time", "max-runs": "--max-runs"}.get(result.stop)
    return f"; not settled: {more}" + (f" ({budget})" if budget and estimate is not None else "")


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4f}"


def _sequence(s: Settlement) -> str:
    """A confidence sequence's ends, with the digits that make them read as its verdict (units.ratio_ends)."""
    low, high = units.ratio_ends(s.low, s.high, s.margin, decimals=4)
    return f"[{'-' if low == '…' else low}, {'-' if high == '…' else high}]"


def live_line(label: str, s: Settlement, width: int = 40) -> str:
    """One comparison while the rounds run: the estimate, its confidence sequence drawn against the margin
    band on a log scale, and the verdict so far.

    >>> from perfctl.analysis.ab import SequentialComparison
    >>> c = SequentialComparison()
    >>> for i in range(40): c.add(1.02 + (i % 5 - 2) * 0.01, 1.0)
    >>> live_line("B", c.settlement(), 30)
    'B  ratio 1.0200  [1.0100, 1.0300]  |       (------|-=*==-)        |  B faster, within ±5%, settled'
    """
    margin = s.margin
    edges = (math.log(1 - margin), math.log(1 + margin))
    points = [math.log(v) for v in (s.low, s.high, s.ratio) if v is not None]
    span = max([abs(p) for p in points] + [2 * abs(e) for e in edges])
    def column(value: float) -> int:
        return min(width - 1, max(0, round((math.log(value) / span + 1) / 2 * (width - 1))))

    bar = [" "] * width
    low_col, high_col = column(1 - margin), column(1 + margin)
    for i in range(low_col + 1, high_col):
        bar[i] = "-"
    if s.ratio is not None:  # an unbounded end runs to the edge of the drawing
        start = column(s.low) if s.low is not None else 0
        end = column(s.high) if s.high is not None else width - 1
        for i in range(start, end + 1):
            bar[i] = "="
    bar[low_col], bar[high_col] = "(", ")"  # the band's edges and 1 stay visible over the sequence
    bar[column(1.0)] = "|"
    if s.ratio is not None:
        bar[column(s.ratio)] = "*"
    if not s.alike:
        return f"{label}  ratio {_number(s.ratio)}  not alike from round {s.change.seen_at}: no verdict"
    state = "settled" if s.settled else "so far"
    return (f"{label}  ratio {_number(s.ratio)}  {_sequence(s)}  |{''.join(bar)}|  "
            f"{said(s, label)}, {state}")


def replay_line(replayed) -> str:
    """The --until-settled job's own decision, under a comparison of its commands (analysis/ab.py Replay)."""
    s = replayed.settlement
    if not s.alike:  # no verdict is read off rounds that are not alike: where they changed, as ab says it
        return f"sequential (the job's --until-settled rule, {replayed.metric}): {change_line(replayed.label, s)}"
    state = f"settled after {s.rounds} rounds" if s.settled else f"not settled after {s.rounds} rounds"
    return (f"sequential (the job's --until-settled rule, {replayed.metric}): "
            f"{_against(said(s, replayed.label), replayed.label, 'A')}: A/{replayed.label} {_number(s.ratio)}, "
            f"confidence sequence {_sequence(s)} at {s.confidence:.4g} ({s.verdict.value}), {state}")


def replay_document(replayed) -> dict:
    return finite({"label": replayed.label, "metric": replayed.metric, **_settlement_fields(replayed.settlement),
                   "margin": replayed.settlement.margin})


def _settlement_fields(s: Settlement) -> dict:
    """A settlement as JSON fields, the same in ab's document and under a compare of a fleet job."""
    change = s.change
    return {"rounds": s.rounds, "min_rounds": s.min_rounds, "ratio": s.ratio, "low": s.low, "high": s.high,
            "level": s.confidence, "verdict": s.verdict.value, "beyond": s.beyond, "settled": s.settled,
            "contradicted": s.contradicted, "alike": s.alike, "change": None if change is None else {
                "seen_at": change.seen_at, "test": change.test, "last_before": change.last_before,
                "before": change.before, "after": change.after}}
