"""What ``perf stat`` output means, whatever its syntax: the ``-x,`` CSV reader (perf_stat_csv) and the
``-j`` JSON reader (perf_stat_json) each parse their lines into an event, its value, unit and running
percentage, and hand them to :class:`PerfStatRuns`, the one owner of the rest:

- Runs. ``perf stat -o FILE --append -- CMD`` run N times writes N blocks of lines, each after perf's
  ``# started on`` line: N runs. An event twice in one such block is refused (``-e`` named it twice; the two
  values are one run, not two). Where there is no such line (``perf stat ... 2>>FILE``) a run ends when an
  event repeats.
- Values. ``<not supported>`` and ``<not counted>`` are noted, never read as 0; msec values (task-clock,
  cpu-clock) are converted to ns; a value that is not a finite number, as written or once scaled, is refused.
- Cuts. A run that lacks events other runs count is incomplete (cut at a line end, or recorded with other
  events): refused, naming its first line (``finish``). A run cut while written and then appended to ends in a line
  with the next run's ``# started on`` after its text: refused, naming that line (``refuse_cut``); read,
  the cut text became an event name and the two runs' values one run.
- Multiplexing. A counter that ran less than 100% of the time was scaled by perf: noted.
- Output that is not one value per event and run is refused, each with the option that made it: ``-r``
  (a mean over runs), ``-I`` (intervals of one run), ``-A`` and ``--per-*`` (a value per CPU, core, ...).

The file is one benchmark. perf stat's -x, and -j output records no command, so the benchmark is given one
neutral name, PERF_STAT_BENCHMARK, the same in every file: two files compare as one benchmark under one name
(it was named after each file, and the comparison after A's file); a comparison's note says so
(perfctl/pairing.py compared)."""

from __future__ import annotations

from perfctl.dataset import Dataset, DatasetError
from perfctl.formats.dataset import finite, stem, to_ns

_SCALE = {"msec": ("ns", 1e6)}
STARTED_ON = "# started on"
PERF_STAT_BENCHMARK = "perf stat"


def refuse_cut(at: str, line: str) -> None:
    """Refuse a line holding perf's ``# started on`` after other text: perf writes that line whole, at a line
    start, so the text before it is a line cut while written, and the line after it another run appended."""
    where = line.find(STARTED_ON)
    if where > 0:
        raise DatasetError(f"{at}: a line cut while it was written ({line[:where][-40:]!r}), then the next run's "
                           "'# started on' appended after it (perf stat --append): the cut run is incomplete; "
                           "remove its lines or record it again")


def refuse_repeat(at: str, syntax: str, spread: str) -> DatasetError:
    return DatasetError(f"{at}: this is perf stat -r output (a mean with its {spread}), not per-run values; "
                        f"record runs with perf stat {syntax} -o FILE --append")


def refuse_intervals(at: str, syntax: str) -> DatasetError:
    return DatasetError(f"{at}: this is perf stat -I output (intervals of one run), not per-run values; "
                        f"record runs with perf stat {syntax} -o FILE --append")


def refuse_aggregation(at: str, what: str) -> DatasetError:
    return DatasetError(f"{at}: {what} output has several values per event and run; record without "
                        "-A/--per-* options")


class PerfStatRuns:
    """The runs of one perf stat file, filled a line at a time; ``dataset`` holds them."""

    def __init__(self, path: str, fmt: str):
        self.dataset = Dataset(path, fmt)
        self._bench = self.dataset.benchmark(PERF_STAT_BENCHMARK)
        self._run_events: dict[str, int] = {}  # event -> its line in the run being read
        self._run_header: int | None = None  # the line of the "# started on" that began that run
        self._runs: list[dict[str, int]] = []  # every run's events (the last is _run_events), for finish()
        self._empty: list[int] = []  # the "# started on" lines followed by no event

    def start_run(self, number: int) -> None:
        """perf's ``# started on`` line at ``number``: the lines after it are one run."""
        if self._run_header is not None and not self._run_events:
            self._empty.append(self._run_header)
        self._run_events = {}
        self._run_header = number

    def count(self, at: str, number: int, event: str, value: str | float, unit: str,
              running: float | None) -> None:
        """One event's line: ``at`` names it in messages (FILE:LINE), ``value`` is the counter value as
        written (a number, its digits, or perf's ``<not supported>``/``<not counted>``), ``running`` the
        percentage of the run the counter ran (None when the line has none)."""
        if not event:
            raise DatasetError(f"{at}: event: empty")
        first = self._run_events.get(event)
        if first is not None:
            if self._run_header is not None:
                raise DatasetError(f"{at}: {event}: a second value in the run started on line {self._run_header} "
                                   f"(the first on line {first}): -e named it twice; name each event once")
            self._run_events = {}  # no "# started on" lines: the event repeats, a new run begins
        if not self._run_events:
            self._runs.append(self._run_events)
        self._run_events[event] = number
        if isinstance(value, str) and value.startswith("<not supported>"):
            self._bench.note(event, "unsupported: perf stat printed <not supported>")
            return
        if isinstance(value, str) and value.startswith("<not counted>"):
            self._bench.note(event, "perf stat printed <not counted> in some runs")
            return
        number = finite(at, "counter-value", value, text=True)
        out_unit, scale = _SCALE.get(unit, (unit or "count", 1.0))
        scaled = to_ns(at, "counter-value", number, unit, scale) if unit in _SCALE else number
        self._bench.add(event, scaled, out_unit, "perf-stat")
        if running is not None and running != 100:
            self._bench.note(event, f"multiplexed: counted {running:.2f}% of the time in some runs (scaled by perf)")

    def finish(self) -> Dataset:
        """The runs read. perf writes every event of a run, ``<not counted>`` ones too, so a run that lacks
        events other runs have is incomplete: the last was cut at a line end (a full disk, a killed perf
        stat), one before it cut and then appended to, or recorded with other ``-e`` events. Its values are
        no run's, and read they entered the verdict (a note said so, which ``-q`` and ``--format csv`` do
        not show): refused, naming its first line, as a cut inside a line is (``refuse_cut``,
        dataset.read_lines). A ``# started on`` line with no event after it is perf's own record of a
        command that did not start (``Workload failed``), or a cut just after it: no value is read from it,
        and a note says so."""
        if self._run_header is not None and not self._run_events:
            self._empty.append(self._run_header)
        if self._empty and self._runs:
            self.dataset.notes.append(f"{stem(self.dataset.path)}: no event after the '# started on' line "
                                      f"{', '.join(map(str, self._empty[:4]))}: a run that perf did not count, or "
                                      "a file cut after it")
        counted = set().union(*self._runs)
        for events in self._runs:
            missing = sorted(counted - events.keys())
            if missing:
                self._refuse_short(events, missing, last=events is self._runs[-1])
        return self.dataset

    def _refuse_short(self, events: dict[str, int], missing: list[str], last: bool) -> None:
        first = min(events.values())
        lacks = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        why = ("the last run, cut at a line end while the file was written (a full disk, a killed perf stat)"
               if last else "a run cut and then appended to, or recorded with other -e events")
        raise DatasetError(f"{self.dataset.path}:{first}: the run from line {first} lacks {lacks}, which other "
                           f"runs count (perf writes every event of a run): {why}; remove its lines or record "
                           "it again")
