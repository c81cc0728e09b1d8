"""The fleet's listings: `perfctl machines [NAME]`, `perfctl jobs` (and the progress of `--wait`),
`perfctl benchmarks` and `perfctl audit report`, from the server's answers (perfctl/client.py). Every string
in them is an agent's or another client's: shown literally (perfctl/text.py)."""

from __future__ import annotations

import shlex
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfctl.exit_codes import EXIT_WAIT_TIMEOUT, outcome_exit  # noqa: F401 - EXIT_WAIT_TIMEOUT re-exported
from perfctl.model import HOOKS
from perfctl.output import show
from perfctl.report import QUIET, Report, finite, json_text
from perfctl.text import cell, visible
from perfctl.units import clock_offset
from perfctl.wire import CLOCK_TOLERANCE_NS, inventory_of

FAILED_JOB_STATES = ("failed", "refused", "lost")  # lost: until `perfctl jobs --retry` queues it again
FINISHED_JOB_STATES = ("done", *FAILED_JOB_STATES)
# the exit code of a wait that ended before every job did (--wait-timeout): timeout(1)'s
FAILED_VERDICTS = ("degraded", "untrusted")


def ago(ns: int) -> str:
    if not ns:
        return "never"
    seconds = max(0.0, time.time() - ns / 1e9)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def clock(m) -> str:
    """A machine's clock against the server's (MachineSummary.clock_skew_ns, clock_ahead_runs): "ok", "30.0 d
    ahead", "unknown" (its agent never sent its time), and how many of its runs were flagged at ingest."""
    if not m.HasField("clock_skew_ns"):
        said = "unknown"
    elif abs(m.clock_skew_ns) <= CLOCK_TOLERANCE_NS:
        said = "ok"
    else:
        said = f"{clock_offset(m.clock_skew_ns)} {'ahead' if m.clock_skew_ns > 0 else 'behind'}"
    return said + (f", {m.clock_ahead_runs:,} runs stamped ahead" if m.clock_ahead_runs else "")


def _listing(title: str | Text, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


class MachinesReport(Report):
    """ListMachines' machines, one short row each: connected, latest audit, backends, samples stored, last
    heard (the inventory and the events are MachineReport's). Quiet: only the machines disconnected or whose
    latest audit failed."""

    kind = "machines"

    def __init__(self, machines, verbosity: int = 0):
        self.machines, self.verbosity = list(machines), verbosity

    def document(self) -> list:
        return [machine_document(m) for m in self.machines]

    def table(self, console: Console) -> None:
        table = _listing("machines", ("machine", "connected", "audit", "backends", "samples", "last heard",
                                      "clock"))
        table.caption, table.caption_justify = "inventory and events of one machine: perfctl machines NAME", "left"
        for m in self.machines:
            if self.verbosity <= QUIET and (m.retired_ns or m.connected and m.audit_verdict not in FAILED_VERDICTS):
                continue
            table.add_row(*map(cell, (m.name, _connected(m), _audit(m), ", ".join(m.backends),
                                      f"{m.samples:,}", ago(m.last_heard_ns), clock(m))))
        if table.row_count or self.verbosity > QUIET:
            console.print(table)


def machine_document(m) -> dict:
    """A MachineSummary whole, as `perfctl machines --json` gives it."""
    return {"name": m.name, "machine_id": m.machine_id, "connected": m.connected,
            "audit_verdict": m.audit_verdict or None, "audit_time_ns": m.audit_time_ns or None,
            "last_heard_ns": m.last_heard_ns, "samples": m.samples, "backends": list(m.backends),
            "clock_skew_ns": m.clock_skew_ns if m.HasField("clock_skew_ns") else None,
            "clock_ahead_runs": m.clock_ahead_runs, "retired_ns": m.retired_ns or None,
            "inventory": inventory_of(m.inventory_json),
            "events": [{"event": e.event, "supported": e.supported, "reason": e.reason} for e in m.events]}


def _connected(m) -> str:
    return f"retired {ago(m.retired_ns)}" if m.retired_ns else "yes" if m.connected else "no"


def _audit(m) -> str:
    return f"{m.audit_verdict} ({ago(m.audit_time_ns)})" if m.audit_verdict else "never audited"


def _inventory_items(inventory: dict):
    """(item, value) pairs of an inventory as the agent sent it: sections flattened to ``section.key``;
    lists joined; anything nested deeper shown as JSON. Facts only: what each means is `perfctl info`'s,
    on the machine itself (its checks read that machine's /proc and /sys)."""
    for key, value in inventory.items():
        if isinstance(value, dict):
            for inner, item in value.items():
                yield f"{key}.{inner}", _plain(item)
        else:
            yield key, _plain(value)


def _plain(value) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, (dict, list)):
        return json_text(value).replace("\n", " ")
    return str(value)


class MachineReport(Report):
    """`perfctl machines NAME`: one machine in full: its summary, its inventory item by item, and every event
    its agent probed with why an unsupported one is. Quiet: the summary and the unsupported events."""

    kind = "machine"
    schema = "machines"  # the listing's shape, of one machine

    def __init__(self, machine, verbosity: int = 0):
        self.machine, self.verbosity = machine, verbosity

    def document(self) -> list:  # the shape of `perfctl machines --json`: a list, here of one
        return [machine_document(self.machine)]

    def table(self, console: Console) -> None:
        m = self.machine
        quiet = self.verbosity <= QUIET
        summary = _listing(cell(f"machine {m.name}"), ("item", "value"))  # a Text: no markup
        for item, value in (("machine id", m.machine_id), ("connected", _connected(m)),
                            ("last heard", ago(m.last_heard_ns)), ("clock", clock(m)), ("audit", _audit(m)),
                            ("backends", ", ".join(m.backends) or "none"), ("samples stored", f"{m.samples:,}")):
            summary.add_row(cell(item), cell(value))
        console.print(summary)
        if not quiet:
            inventory = _listing("inventory (as the agent sent it; `perfctl info` on the machine says what each "
                                 "item means for the counters)", ("item", "value"))
            for item, value in _inventory_items(inventory_of(m.inventory_json)):
                inventory.add_row(cell(item), cell(value))
            console.print(inventory)
        events = _listing("events", ("event", "supported", "reason"))
        for e in m.events:
            if quiet and e.supported:
                continue
            events.add_row(cell(e.event), cell("yes" if e.supported else "no"), cell(e.reason))
        if events.row_count or not quiet:
            console.print(events)


class JobsReport(Report):
    """GetJobs' jobs. Quiet: only the jobs that failed, were refused or lost, or have runs that failed."""

    kind = "jobs"

    def __init__(self, jobs, verbosity: int = 0):
        self.jobs, self.verbosity = list(jobs), verbosity

    def document(self) -> list:
        return [{"job_id": j.job_id, "machine": j.machine, "state": j.state, "message": j.message,
                 "samples": j.samples, "runs": runs_expected(j.job), "submitted_ns": j.submitted_ns,
                 "updated_ns": j.updated_ns, "commands": [list(c.argv) for c in j.job.commands],
                 "repetitions": j.job.repetitions, "warmups": j.job.warmups, "labels": dict(j.job.labels),
                 **{hook: list(getattr(j.job, hook)) for hook in HOOKS}, "failed_runs": failed_runs(j)}
                for j in self.jobs]

    def table(self, console: Console) -> None:
        table = _listing("jobs", ("job", "machine", "state", "runs", "commands", "updated", "message"))
        for j in self.jobs:
            if self.verbosity <= QUIET and not went_wrong(j):
                continue
            table.add_row(*map(cell, (j.job_id[:8], j.machine, j.state, _runs(j), _commands(j.job),
                                      ago(j.updated_ns), j.message)))
        if table.row_count or self.verbosity > QUIET:
            console.print(table)


def _commands(job) -> str:
    """A job's commands as the jobs table shows them, after its hooks as submit's options (--prepare CMD ...),
    each given once for every command or once per command."""
    hooks = [f"--{hook} {shlex.quote(command)}" for hook in HOOKS for command in getattr(job, hook)]
    return " ".join([*hooks, " ::: ".join(" ".join(c.argv) for c in job.commands)])


def runs_expected(job) -> int:
    """The runs a job ends with, warm-ups included: what its agent counts in JobStatus.samples (the server
    checks the count against the same product, server/storage.py update_job)."""
    return (job.repetitions + job.warmups) * len(job.commands)


def failed_runs(status) -> int | None:
    """How many of a job's measured runs did not end ok, counted by the server when the job ended; None while
    it is open (or it ended before servers counted them)."""
    return status.failed_runs if status.HasField("failed_runs") else None


def went_wrong(status) -> bool:
    """The job failed, was refused or lost, or some of its runs failed: what quiet listings keep and what
    makes a wait exit 1."""
    return status.state in FAILED_JOB_STATES or bool(failed_runs(status))


def _runs(status, unit: str = "") -> str:
    """Runs measured/expected, and how many failed when some did: "20/20 (3 failed)", "20/20 runs (3 failed)"."""
    failed = failed_runs(status)
    return f"{status.samples}/{runs_expected(status.job)}{unit}" + (f" ({failed} failed)" if failed else "")


class JobsWaitReport(Report):
    """The jobs `perfctl submit --wait` and `perfctl jobs --wait` wait for, as GetJobs last gave them, and
    how the wait ended. ``progress_table`` is the live display, ``progress_line`` the line printed on each
    state change where there is no terminal; ``exit_code``: EXIT_RUN_FAILED when a job failed, was refused
    or lost or a run of one failed (as `perfctl stat` exits for a run that failed), else EXIT_WAIT_TIMEOUT
    when the wait ended before every job did, else 0; with ``verdicts`` (what the jobs' comparisons found,
    `submit --until-settled`: report/ab.py settlements_found) as ab exits on the same verdicts
    (perfctl/exit_codes.py outcome_exit)."""

    kind = "jobs --wait"
    schema = "jobs"

    def __init__(self, jobs, timed_out: bool = False, verbosity: int = 0):
        self.jobs, self.timed_out, self.verbosity = list(jobs), timed_out, verbosity
        self.verdicts: dict = {}

    @property
    def finished(self) -> bool:
        return all(j.state in FINISHED_JOB_STATES for j in self.jobs)

    @property
    def failed(self) -> list:
        """The jobs that failed, were refused or lost, or ended with runs that failed."""
        return [j for j in self.jobs if went_wrong(j)]

    def exit_code(self) -> int:
        return outcome_exit(run_failed=bool(self.failed), timed_out=not self.finished, **self.verdicts)

    def document(self) -> list:
        return JobsReport(self.jobs).document()

    def table(self, console: Console) -> None:
        console.print(self.progress_table())

    def progress_table(self) -> Table:
        table = _listing("jobs", ("machine", "job", "state", "runs", "message"))
        for j in self.jobs:
            state = Text(visible(j.state), style=_STATE_STYLES.get(j.state, ""))
            table.add_row(cell(j.machine), cell(j.job_id[:8]), state, cell(_runs(j)), cell(j.message))
        return table

    @staticmethod
    def progress_line(status) -> str:
        """One job's state, tab-separated: machine, job id, state, runs measured/expected (as its agent last
        reported them), the agent's message."""
        return "\t".join(visible(v) for v in (status.machine, status.job_id, status.state, _runs(status, " runs"),
                                               status.message))

    def summary(self) -> str:
        """How the wait ended, in one line."""
        done = sum(j.state == "done" for j in self.jobs)
        parts = [f"{done} of {len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''} done"]
        if self.failed:
            parts.append("; ".join(f"{j.machine} {j.state}"
                                   + (f", {failed_runs(j)} measured runs failed" if failed_runs(j) else "")
                                   + (f" ({j.message})" if j.message else "") for j in self.failed))
        unfinished = [j for j in self.jobs if j.state not in FINISHED_JOB_STATES]
        if unfinished:
            parts.append("still " + ", ".join(f"{j.machine} {j.state} {_runs(j, ' runs')}" for j in unfinished)
                         + " (they go on running on the server)")
        return visible("; ".join(parts))


_STATE_STYLES = {"done": "green", "failed": "bold red", "refused": "bold red", "running": "yellow"}


class BenchmarksReport(Report):
    """ListBenchmarks' benchmarks: what the server stores, per machine and benchmark identity (executable and
    input digests, argv), with the labels of its runs, how many jobs and runs, and when the first and last
    run started."""

    kind = "benchmarks"

    def __init__(self, benchmarks, verbosity: int = 0):
        self.benchmarks, self.verbosity = list(benchmarks), verbosity

    def document(self) -> list:
        return [{"machine": b.machine, "benchmark": b.name, "executable_sha256": b.executable_sha256 or None,
                 "input_digest": b.input_digest or None, "argv": list(b.argv), "labels": list(b.labels),
                 "labels_left_out": b.labels_left_out, "jobs": b.jobs, "runs": b.runs, "first_ns": b.first_ns or None,
                 "last_ns": b.last_ns or None}
                for b in self.benchmarks]

    def table(self, console: Console) -> None:
        """One line per benchmark at the terminal's width: digests cut to 12 hex digits, argv and labels
        shortened for display only (argv in the middle, where a path's common part is; the full values in
        -v and --json), jobs and the first run under -v, columns no benchmark fills left out. -v folds
        instead."""
        verbose = self.verbosity > 0
        rows = [{"machine": visible(b.machine), "benchmark": visible(b.name),
                 "executable": visible(b.executable_sha256 if verbose else b.executable_sha256[:12]),
                 "input": visible(b.input_digest if verbose else b.input_digest[:12]),
                 "argv": visible(shlex.join(b.argv)),
                 "labels": visible(", ".join(b.labels)) + _more(b.labels_left_out),
                 "jobs": f"{b.jobs:,}", "runs": f"{b.runs:,}", "first run": when(b.first_ns, short=not verbose),
                 "last run": when(b.last_ns, short=not verbose)} for b in self.benchmarks]
        columns = [c for c in ("machine", "benchmark", "executable", "input", "argv", "labels", "jobs", "runs",
                               "first run", "last run")
                   if (verbose or c not in ("first run", "jobs")) and (not rows or any(row[c] for row in rows))]
        widths = self._flexible_widths(rows, columns, console.width) if not verbose else None
        table = Table(title="benchmarks", title_justify="left")
        for column in columns:
            table.add_column(column, overflow="fold", no_wrap=widths is not None)
        table.caption = "executable: sha256 of the program; input: digest of its arguments and the files they name"
        table.caption_justify = "left"
        for b, row in zip(self.benchmarks, rows):
            if widths:
                row["argv"] = _middle(row["argv"], widths["argv"])
                # how many labels the server left out stays said, whatever is cut of the ones shown
                more = _more(b.labels_left_out)
                shown = row["labels"].removesuffix(more)
                row["labels"] = _middle(shown, max(widths["labels"] - len(more), 1), at_end=True) + more
            table.add_row(*(Text(row[c] or "?" if c in ("executable", "input") else row[c]) for c in columns))
        show(console, table)  # a digest or a count cropped misleads: rows as lines where the table does not fit

    @staticmethod
    def _flexible_widths(rows: list[dict], columns: list[str], width: int) -> dict | None:
        """The widths argv and labels get on one line each: what the other columns and the borders leave
        (3 characters per column and 1), labels at most a third of it; None when even that is too narrow."""
        fixed = sum(max([len(c)] + [len(row[c]) for row in rows]) for c in columns if c not in ("argv", "labels"))
        room = width - fixed - 3 * len(columns) - 1
        need = {c: max([len(c)] + [len(row[c]) for row in rows]) if c in columns else 0 for c in ("argv", "labels")}
        if room < 16:
            return None
        labels = min(need["labels"], max(room // 3, 12))
        argv = min(need["argv"], room - labels)
        return {"argv": argv, "labels": min(need["labels"], room - argv)}


def _more(left_out: int) -> str:
    return f", and {left_out:,} more" if left_out else ""


def _middle(text: str, width: int, at_end: bool = False) -> str:
    """``text`` in at most ``width`` characters: its start and its end with an ellipsis between (at_end:
    its start and the ellipsis), for display only."""
    if len(text) <= width:
        return text
    if at_end:
        return text[:width - 1] + "…"
    tail = (width - 1) // 2
    return text[:width - 1 - tail] + "…" + (text[-tail:] if tail else "")


def when(ns: int, short: bool = False) -> str:
    """A time as local date and time to the second; 'unknown' for 0. Short: the time alone today, the
    month and day this year, else the date alone."""
    if not ns:
        return "unknown"
    then, now = time.localtime(ns / 1e9), time.localtime()
    if not short:
        return time.strftime("%Y-%m-%d %H:%M:%S", then)
    if then[:3] == now[:3]:
        return time.strftime("%H:%M:%S", then)
    return time.strftime("%b %d %H:%M" if then.tm_year == now.tm_year else "%Y-%m-%d", then)


class AuditHistoryReport(Report):
    """`perfctl audit report`: per machine its audit history (``history``, oldest first) with ``drifts``;
    per kernel the fleet-wide ``spread`` (analysis/audits.py); ``notes`` on reports set aside. Quiet: the
    machines whose latest audit failed or that drifted, and the notes."""

    kind = "audit report"
    schema = "audit-history"
    formats = ("table", "json", "html")

    def __init__(self, history: dict[str, list[dict]], drifts: dict[str, list[str]], spread: list[dict],
                 notes: list[str], verbosity: int = 0):
        self.history, self.drifts, self.spread, self.notes = history, drifts, spread, notes
        self.verbosity = verbosity

    def html(self) -> str:
        from perfctl.report.html import fleet_page

        return fleet_page(self.history, self.drifts, self.spread, self.notes)

    def document(self) -> dict:
        return finite({"machines": {m: {"audits": len(r), "latest": r[-1]["verdict"], "drift": self.drifts[m]}
                                    for m, r in self.history.items()}, "spread": self.spread, "notes": self.notes})

    def table(self, console: Console) -> None:
        quiet = self.verbosity <= QUIET
        table = _listing("audits", ("machine", "audits", "latest", "when", "drift"))
        for machine, reports in sorted(self.history.items()):
            if quiet and reports[-1]["verdict"] not in FAILED_VERDICTS and not self.drifts[machine]:
                continue
            table.add_row(*map(cell, (machine, str(len(reports)), reports[-1]["verdict"], ago(reports[-1]["time_ns"]),
                                      "; ".join(self.drifts[machine]) or "none")))
        if table.row_count or not quiet:
            console.print(table)
        if not quiet:
            table = Table(title="fleet-wide spread of instruction counts per kernel (latest audits)",
                          title_justify="left")
            for column in ("kernel", "machines", "source", "median", "CV"):
                table.add_column(column)
            for row in self.spread:
                table.add_row(*map(cell, (row["kernel"], str(row["machines"]), row["source"], f"{row['median']:,.0f}",
                                          "-" if row["cv"] is None else f"{row['cv']:.3e}")))
            console.print(table)
        for note in self.notes:
            console.print(cell(f"note: {note}"))


class SubmitReport(Report):
    """SubmitJob's answer: one line per machine, its name and the job id it was given (tab-separated, for
    scripts); printed under --quiet too, since it is the output."""

    kind = "submit"
    formats = ("table",)

    def __init__(self, machines: list[str], job_ids) -> None:
        self.machines, self.job_ids = machines, list(job_ids)

    def table(self, console: Console) -> None:
        for machine, job_id in zip(self.machines, self.job_ids):
            console.file.write(f"{visible(machine)}\t{visible(job_id)}\n")
