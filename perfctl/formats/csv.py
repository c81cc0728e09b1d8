"""CSV out: the one owner of how a cell is written (``cell``, ``line``), used by ``stat --csv``'s per-run rows
(``CsvWriter``, columns in docs/samples.md) and by every report's ``--format csv`` (perfctl/report's
``csv_text``).

A cell is RFC 4180 (quoted when it holds a comma, a quote or a line break; quotes doubled). Text from files,
agents and command lines has its control characters made visible (a newline cannot forge a row), and text
that a spreadsheet would run as a formula is defused by OWASP's rule for CSV injection
(https://owasp.org/www-community/attacks/CSV_Injection): a text cell beginning with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return gets a single quote in front and is quoted, so that Excel, LibreOffice
and Google Sheets show it as text. Numbers are written as numbers: a negative value such as -0.5 stays
-0.5, which a spreadsheet reads as a number and never as a formula.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import IO

from perfctl.model import Sample
from perfctl.text import visible

COLUMNS = ("run_index", "warmup", "outcome", "exit_status", "signal", "wall_ns", "event", "backend", "scope",
           "status", "value", "time_enabled", "time_running", "scaled", "source", "reason")

# OWASP's formula triggers, and their full-width forms (U+FF1D, U+FF0B, U+FF0D, U+FF20), which some
# spreadsheets' import also reads as the ASCII ones; the check looks past leading spaces, which a
# spreadsheet's import may trim before it looks for a formula
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
# a plain decimal number given as text (a number a file gave as a string): a spreadsheet reads it as a
# number, so it is left as it is, like the numbers themselves
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_NEEDS_QUOTES = re.compile(r'[",\r\n]')


def cell(value) -> str:
    """One CSV cell as written: None is empty, a number (or bool) its plain form as Python's csv module
    writes it, text made visible, defused (OWASP) and quoted where RFC 4180 needs it."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    text = visible(str(value))
    defused = text.lstrip(" ").startswith(FORMULA_START) and not _PLAIN_NUMBER.fullmatch(text)
    if defused:
        text = "'" + text
    if defused or _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def line(values: Iterable) -> str:
    """One CSV row, ended as RFC 4180 ends rows (CR LF, as Python's csv module writes them)."""
    return ",".join(cell(v) for v in values) + "\r\n"


class CsvWriter:
    """``stat --csv``: one row per (run, reading), written as each run ends."""

    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._stream.write(line(COLUMNS))

    def write_machine(self, inventory: dict) -> None:
        """The inventory does not fit a per-reading table; use --json or -o to keep it."""

    def write_sample(self, sample: Sample) -> None:
        head = (sample.run_index, int(sample.warmup), sample.outcome, sample.exit_status, sample.signal,
                sample.wall_ns)
        for r in sample.readings:
            self._stream.write(line((*head, r.event, r.backend, r.scope, r.status, r.value, r.time_enabled,
                                     r.time_running, r.scaled, r.source, r.reason)))
        self._stream.flush()
