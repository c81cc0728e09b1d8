"""perf stat's derived figures, from the means of a `perfctl stat` measurement: instructions per cycle, CPUs
utilized, events per second of task-clock, and its "( +- x% )" (the standard error of the mean relative to
the mean). The report formats them (perfctl/report/stat.py); the numbers are computed here.

perf computes each figure from the averages over the runs, not per run (tools/perf/util/stat-shadow.c,
perf_stat__print_shadow_stats: instructions' average over cycles' average; task-clock's over the wall
clock's; a count's over task-clock's, in seconds), and perfctl does the same, so that the figures are the
ones a perf stat user reads for the same runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfctl.model import SCOPE_SUFFIX, WALL_TIME

TASK_CLOCK = "task-clock"
# events perf prints no rate for: the clocks themselves (a time per time), and cycles, shown as GHz
_NO_RATE = {TASK_CLOCK, WALL_TIME, "cpu-clock"}


@dataclass(frozen=True)
class Figure:
    """One derived figure: its value and what it is in perf stat's words ("insn per cycle", "CPUs utilized",
    "/sec", "GHz")."""

    value: float
    what: str


def relative_stderr(stderr: float, mean: float) -> float:
    """perf stat's "( +- x% )" as a fraction: the standard error of the mean over the mean.

    perf's stddev_stats (tools/perf/util/stat.c) is sqrt(M2 / (n - 1) / n), Welford's sample variance over
    n, i.e. s / sqrt(n); rel_stddev_stats is 100 * that / avg; stat-display.c print_noise_pct prints it.
    NaN when there is no spread to claim (n < 2, a mean of 0).

    >>> relative_stderr(2.0, 100.0)
    0.02
    """
    if math.isnan(stderr) or not mean:
        return math.nan
    return stderr / abs(mean)


def figures(means: dict[str, tuple[float, str]]) -> dict[str, Figure]:
    """perf stat's figure for each event label in ``means`` (label -> (mean over the runs, unit)) that has
    one: instructions per cycle on instructions where cycles of the same scope (:u, :k, or both) were
    counted; CPUs utilized on task-clock (task-clock over wall-time); the clock rate of cycles and the rate
    per second of task-clock of every other count, when task-clock was counted.

    >>> f = figures({"instructions:u": (3e6, "count"), "cycles:u": (2e6, "count"), "task-clock": (1e6, "ns"),
    ...              "wall-time": (2e6, "ns"), "page-faults": (50, "count")})
    >>> for label in sorted(f): print(label, round(f[label].value, 3), f[label].what)
    cycles:u 2.0 GHz
    instructions:u 1.5 insn per cycle
    page-faults 50000.0 /sec
    task-clock 0.5 CPUs utilized
    """
    found: dict[str, Figure] = {}
    task_clock = means.get(TASK_CLOCK)
    seconds = task_clock[0] / 1e9 if task_clock and task_clock[1] == "ns" and task_clock[0] > 0 else None
    wall = means.get(WALL_TIME)
    if seconds is not None and wall and wall[0] > 0:
        found[TASK_CLOCK] = Figure(task_clock[0] / wall[0], "CPUs utilized")
    for suffix in SCOPE_SUFFIX.values():
        instructions, cycles = means.get(f"instructions{suffix}"), means.get(f"cycles{suffix}")
        if instructions and cycles and cycles[0] > 0:
            found[f"instructions{suffix}"] = Figure(instructions[0] / cycles[0], "insn per cycle")
    if seconds is None:
        return found
    for label, (mean, unit) in means.items():
        if label in _NO_RATE or label in found or unit != "count" or not math.isfinite(mean):
            continue
        cycles = label.partition(":")[0] == "cycles"
        found[label] = Figure(mean / seconds / (1e9 if cycles else 1), "GHz" if cycles else "/sec")
    return found


def scaled(figure: Figure) -> str:
    """A figure as perf prints it: a rate with K, M or G before "/sec" (94.438 K/sec), others with three
    decimals (1.523 insn per cycle).

    >>> scaled(Figure(94438.0, "/sec")), scaled(Figure(0.4, "/sec")), scaled(Figure(1.5234, "insn per cycle"))
    ('94.438 K/sec', '0.400 /sec', '1.523 insn per cycle')
    """
    value, prefix = figure.value, ""
    if figure.what == "/sec":
        for step, name in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
            if abs(value) >= step:
                value, prefix = value / step, name
                break
    return f"{value:.3f} {prefix}{figure.what}"
