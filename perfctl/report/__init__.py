"""The one place that turns results into output (criterion.rs's report/, hyperfine's export/).

Each kind of result has its module here (stat, compare, audit, info, fleet, cache) with one ``Report``
subclass that renders it as a rich table, a JSON document, CSV, Markdown or HTML, whichever of these the
kind has (``formats``), and that decides the command's exit code. ``write`` is the one writer: the CLI
builds a report from analysis, agent or client results and hands it here; it computes nothing.

Strings from files, agents and servers are shown through perfctl/text.py (``visible``, ``cell``); JSON is
strict (no NaN or infinity: a statistic that does not exist is null), and every JSON document carries its
schema and the perfctl that wrote it (``versioned``; docs/outputs.md, "JSON documents").
"""

from __future__ import annotations

import json
import math
import re

from rich.console import Console

from perfctl.formats.csv import line
from perfctl.output import EXIT_OK, UsageError, quiet_stdout
from perfctl.text import visible

QUIET, NORMAL, VERBOSE = -1, 0, 1
FORMATS = ("table", "json", "csv", "markdown", "html")
_FORMAT_NAMES = {"json": "JSON", "csv": "CSV", "markdown": "Markdown", "html": "HTML"}


class Report:
    """One result, renderable in each of ``formats``; ``verbosity`` (QUIET, NORMAL, VERBOSE) shapes only the
    table: the machine-readable formats are always whole."""

    kind = "result"
    formats: tuple[str, ...] = ("table", "json")
    verbosity = NORMAL
    # the JSON document's schema, "perfctl.<schema>/<schema_version>" (schema None: the kind, "cache mrc" as
    # "cache-mrc"); the version is raised when a key changes meaning or goes away (a new key is not a new
    # version), as a sample line's schema_version is (docs/samples.md)
    schema: str | None = None
    schema_version = 1

    def table(self, console: Console) -> None:
        raise self._unsupported("table")

    def document(self) -> dict:
        """The JSON document: raw numbers, units named, no NaN."""
        raise self._unsupported("JSON")

    def csv(self) -> str:
        raise self._unsupported("CSV")

    def markdown(self) -> str:
        raise self._unsupported("Markdown")

    def html(self) -> str:
        raise self._unsupported("HTML")

    def exit_code(self) -> int:
        return EXIT_OK

    def _unsupported(self, what: str) -> UsageError:
        return UsageError(f"no {what} report for {self.kind} (it has {', '.join(self.formats)})")


def write(report: Report, fmt: str, console: Console) -> int:
    """Write ``report`` in ``fmt`` (one of FORMATS) on ``console``; returns the report's exit code."""
    if fmt not in report.formats:
        raise report._unsupported(_FORMAT_NAMES.get(fmt, fmt))
    try:
        if fmt == "table":
            report.table(console)
        elif fmt == "json":
            console.file.write(json_text(versioned(report)) + "\n")
        elif fmt == "csv":
            console.file.write(report.csv())
        elif fmt == "markdown":
            console.file.write(report.markdown())
        else:
            console.file.write(report.html())
    except BrokenPipeError:
        # the reader left before reading it all (`| true`, `| head`): the exit code still describes the result
        quiet_stdout()
    return report.exit_code()


def versioned(report: Report):
    """``report``'s JSON document with its schema and the perfctl version first. A document that is an object
    gets the two keys; a listing (machines, jobs, benchmarks) stays a JSON array, as scripts index it, and
    each of its elements gets them, so that an element kept on its own still says what wrote it."""
    from perfctl import __version__

    schema = report.schema or report.kind.replace(" ", "-")
    stamp = {"schema": f"perfctl.{schema}/{report.schema_version}", "perfctl": __version__}
    document = report.document()
    if isinstance(document, list):
        return [_stamped(stamp, item) for item in document]
    return _stamped(stamp, document)


def _stamped(stamp: dict, document: dict) -> dict:
    clash = stamp.keys() & document.keys()
    assert not clash, f"a report's own document uses {clash}"  # a bug: the stamp would hide it
    return {**stamp, **document}


def json_text(document) -> str:
    """The one JSON dump: strict (allow_nan=False), so a NaN that was not cleaned is a bug, not bad JSON."""
    return json.dumps(document, indent=2, allow_nan=False)


def finite(value):
    """``value`` with every non-finite float (NaN, infinity) turned into None, in nested dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def csv_text(rows: list[dict], fields) -> str:
    """The one CSV writer of reports: a header of ``fields``, one line per row, each cell written by
    perfctl/formats/csv.py's ``cell`` (None empty, control characters visible, formulas defused by OWASP's
    rule, numbers kept as numbers)."""
    fields = list(fields)
    return line(fields) + "".join(line(row.get(f) for f in fields) for row in rows)


# Inline Markdown that a renderer (GitHub's cmark-gfm, GitLab's, CommonMark's) would act on inside a table
# cell or a line of text: emphasis and strikethrough (* _ ~), code (`), links and images ([ ] ( ) !),
# autolinks (the : of a scheme, the @ of an address, the . of www.), math ($), the cell separator (|),
# braces, and the backslash itself. CommonMark 0.31 section 2.4: any ASCII punctuation may be backslash
# escaped and then renders as itself. & < > become character references, which every Markdown renderer and
# every HTML one shows as the characters: no tag, no entity of the data's own survives (and a > that would
# open a quote is &gt;, which does not). - + # = act only at the start of a line (a list, a heading, a
# setext underline): escaped there, left elsewhere so that names stay readable; a "1." that would start a
# list has its . escaped by the rule for the . anyway.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_~\[\]()!:@$|{}]|(?<!\d)\.|\.(?!\d)|^ *[-+#=])")
_MARKDOWN_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_text(text) -> str:
    """``text`` (a name from a file, an agent or a server) as literal Markdown text: control characters
    made visible (a newline cannot forge a row), Markdown's inline syntax backslash-escaped and HTML's
    characters as references, so that it renders as exactly the characters it is. A decimal point between
    digits is left as it is (1.05 stays readable)."""
    escaped = _MARKDOWN_SPECIAL.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], visible(str(text)))
    return re.sub("[&<>]", lambda m: _MARKDOWN_HTML[m.group()], escaped)

