"""The reports of `perfctl cache` (docs/cache.md): the miss-ratio curves of `mrc`, StatCC's co-run table of
`corun`, the Cache Pirating curve of `pirate`; their CSV and the curves' plot; the trace's live progress."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from perfctl import failures
from perfctl.output import EXIT_OK
from perfctl.report import QUIET, Report, csv_text, finite
from perfctl.text import cell, visible

LINE = 64
# The CSVs' first columns, which also sign them as perfctl's (perfctl/output_files.py rule 5: an existing
# --csv FILE is replaced only when it starts so); mrc adds exact_lru and error when the exact reference ran
MRC_COLUMNS = ("bytes", "lines", "statstack", "statcache")
PIRATE_COLUMNS = ("target_bytes", "pirate_bytes", "median", "kept", "discarded", "verified")
MRC_CSV_SIGNATURE = ",".join(MRC_COLUMNS).encode()
PIRATE_CSV_SIGNATURE = (",".join(PIRATE_COLUMNS) + "\r\n").encode()
EXIT_NOT_CONVERGED = 3


def human(size: int) -> str:
    """A size in bytes as the cache sizes are given: 32K, 1.5M, 64B."""
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size // scale}{unit}" if size % scale == 0 else f"{size / scale:.1f}{unit}"
    return f"{size}B"


def run_ended(exit_) -> str:
    """How a traced run (agent.runner.Exit) ended, as the predicate of "the traced run ...", in the words
    of every other run's end (perfctl/failures.py)."""
    return failures.run_ended(exit_.outcome, exit_.signal, exit_.exit_status)


class MrcReport(Report):
    """The miss-ratio curve of one trace: ``summary`` is the JSON document (its "curve" the rows), with the
    sample's window count and whether the exact reference was skipped for size (``exact_skipped``)."""

    kind = "cache mrc"
    formats = ("table", "json", "csv")

    def __init__(self, summary: dict, windows: int, exact_skipped: bool, exact_limit: int, verbosity: int = 0):
        self.summary, self.windows, self.exact_skipped, self.exact_limit = summary, windows, exact_skipped, exact_limit
        self.verbosity = verbosity

    def document(self) -> dict:
        return finite(self.summary)

    def csv(self) -> str:
        curve = self.summary["curve"]
        return csv_text(curve, [*MRC_COLUMNS, *(key for key in curve[0] if key not in MRC_COLUMNS)])

    def table(self, console: Console) -> None:
        if self.verbosity <= QUIET:
            return
        s = self.summary
        footprint = s["footprint_lines"]
        console.print(f"{visible(s['benchmark']['name'])}: {s['accesses']:,} data accesses ({s['line_crossings']:,} "
                      f"from line-crossing splits), footprint {footprint:,} lines ({human(footprint * LINE)}), mix "
                      f"{s['mix']:.3f} accesses/instruction", markup=False)
        console.print(f"sample: {s['samples']:,} reuse distances ({s['dangling']:,} dangling) at rate "
                      f"{s['sampler']['rate']:.2g}, {self.windows} windows, estimated {s['estimation']}")
        console.print(f"cold misses: {footprint / s['accesses']:.5f} of accesses (footprint / accesses: exact, the "
                      "floor of every curve)",
                      highlight=False)
        table = Table(title="miss ratio (misses per data access, fully associative, 64-byte lines)",
                      title_justify="left")
        for column in ("cache", "StatStack (LRU)", "exact LRU", "|error|", "StatCache (random)"):
            table.add_column(column, justify="right")
        for row in s["curve"]:
            table.add_row(human(row["bytes"]), f"{row['statstack']:.4f}",
                          f"{row['exact_lru']:.4f}" if "exact_lru" in row else "-",
                          f"{row['error']:.4f}" if "error" in row else "-", f"{row['statcache']:.4f}")
        console.print(table)
        if s["dangling"] == s["samples"]:
            console.print("the sampled lines were never reused: every access is a first touch (miss ratio 1 at "
                          "every size)", highlight=False)
        if self.exact_skipped:
            console.print(f"exact LRU skipped: {s['accesses']:,} accesses is above {self.exact_limit:,} (minutes and "
                          "GBs)", highlight=False)
        beyond = [human(row["bytes"]) for row in s["curve"] if row["lines"] >= footprint]
        if beyond:
            console.print(f"sizes at or above the footprint ({', '.join(beyond)}): only cold misses remain",
                          highlight=False)


class CorunReport(Report):
    """StatCC's solution (analysis/statcc.py) for applications sharing a cache; exit 3 when the fixed
    point was not reached (the numbers are then the last iterate)."""

    kind = "cache corun"

    def __init__(self, document: dict, result, base_cpi: float, latencies: str, verbosity: int = 0):
        self._document, self.result, self.base_cpi, self.latencies = document, result, base_cpi, latencies
        self.verbosity = verbosity

    def document(self) -> dict:
        return finite(self._document)

    def exit_code(self) -> int:
        return EXIT_OK if self.result.converged else EXIT_NOT_CONVERGED

    def table(self, console: Console) -> None:
        if self.verbosity <= QUIET:
            return
        result = self.result
        table = Table(title=f"StatCC: sharing {human(self._document['cache_bytes'])} (CPI model: base "
                            f"{self.base_cpi} + mix·({self.latencies} cycles))", title_justify="left")
        for column in ("application", "mix", "miss ratio alone", "CPI alone", "miss ratio co-run", "CPI co-run"):
            table.add_column(column, justify="right")
        for app in self._document["applications"]:
            table.add_row(cell(app["name"]), f"{app['mix']:.3f}", f"{app['alone_miss_ratio']:.4f}",
                          f"{app['alone_cpi']:.3f}", f"{app['corun_miss_ratio']:.4f}", f"{app['corun_cpi']:.3f}")
        console.print(table)
        state = ("converged" if result.converged else "did NOT converge") + (
            f" in {result.iterations} iterations (largest last CPI change {result.residual:.1e}"
            + (", damped" if result.damping else "") + ")")
        console.print(f"fixed point {state}", highlight=False)


class PirateReport(Report):
    """A Cache Pirating curve: ``rows`` per Pirate size (analysis/pirate.py's curve), the shared cache and
    where its size came from, and whether the Pirate's residency was verified."""

    kind = "cache pirate"
    formats = ("table", "json", "csv")

    def __init__(self, benchmark: str, cache_bytes: int, source: str, result, rows: list[dict], verbosity: int = 0):
        self.benchmark, self.cache_bytes, self.source, self.result, self.rows = (benchmark, cache_bytes, source,
                                                                                  result, rows)
        self.verbosity = verbosity
        self.note = (f"the Pirate's residency could not be checked: {result.unverified_reason}; values are kept "
                     "unverified" if result.unverified_reason
                     else "the Pirate's fetch ratio was checked for every value (limit 1%)")

    def document(self) -> dict:
        return finite({"benchmark": self.benchmark, "cache_bytes": self.cache_bytes, "cache_source": self.source,
                       "metric": self.result.metric, "points": self.rows, "note": self.note})

    def csv(self) -> str:
        return csv_text(self.rows, PIRATE_COLUMNS)

    def table(self, console: Console) -> None:
        if self.verbosity <= QUIET:
            return
        metric = self.result.metric
        table = Table(title=cell(f"{self.benchmark}: {metric} by cache left to it ({human(self.cache_bytes)} shared "
                                 f"cache, {self.source})"), title_justify="left")
        for column in ("cache for Target", "Pirate", f"median {metric}", "runs kept", "discarded", "verified"):
            table.add_column(column, justify="right")
        for row in self.rows:
            median = "-" if row["median"] is None else (f"{row['median'] / 1e6:.3f} ms" if metric == "task-clock"
                                                        else f"{row['median']:.4g}")
            table.add_row(human(row["target_bytes"]), human(row["pirate_bytes"]), median, str(row["kept"]),
                          str(row["discarded"]), "yes" if row["verified"] else "no")
        console.print(table)
        console.print(self.note, highlight=False, markup=False)


def plotting():
    """matplotlib's pyplot (without a display), or a UsageError: asked before a trace, not after it."""
    from perfctl.output import UsageError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("perfctl cache mrc: --plot needs matplotlib (pip install 'perfctl[plot]')") from None
    return plt


def plot(path: str, shown: str, rows: list[dict], name: str) -> None:
    """The miss-ratio curves of ``rows`` (MrcReport's curve) into ``path`` (a temporary file for the one the
    user named, ``shown``), in the format its extension names (.png, .svg, .pdf), signed as perfctl's in
    the format's own metadata (perfctl/output_files.py rule 5)."""
    from perfctl.output import UsageError
    from perfctl.output_files import PLOT_CREATOR

    plt = plotting()
    figure, axes = plt.subplots(figsize=(7, 4))
    sizes = [row["bytes"] for row in rows]
    for key, label in (("statstack", "StatStack (LRU)"), ("exact_lru", "exact LRU"), ("statcache", "StatCache")):
        if key in rows[0]:
            axes.plot(sizes, [row[key] for row in rows], marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("cache size (bytes)")
    axes.set_ylabel("miss ratio")
    axes.set_title(name)
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path, metadata={"Creator": PLOT_CREATOR})
    except (OSError, ValueError) as err:
        raise UsageError(f"perfctl cache mrc: cannot write the plot {shown}: {err}") from None
    finally:
        plt.close(figure)


class TraceProgress:
    """Accesses and log size so far, rewritten in place on a terminal (the reader calls it once a second).
    Made only where perfctl/output.py says a live display is wanted: a line a second would fill a log."""

    def __init__(self) -> None:
        self.shown = False

    def __call__(self, accesses: int, log_bytes: int) -> None:
        self.shown = True
        print(f"\rperfctl cache mrc: {accesses:,} data accesses, {human(log_bytes)} of trace so far ",
              end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)
