"""Strings from files, agents and other clients, made safe to show on a terminal.

Benchmark, machine and event names, inventory strings, job commands and a benchmark's stderr come from
sources the reader of a table does not control. Printed raw, an ESC starts a terminal escape sequence (clear
the screen, retitle the window, rewrite earlier lines), a U+202E reverses what follows, a newline forges a
table row; passed to rich as a string, ``[bold red]`` is markup. Every human-readable renderer (table,
markdown, CSV, one-line messages) passes such strings through ``visible``; rich cells get ``cell``. JSON
needs neither: json.dumps escapes control characters itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is loaded by what renders tables, not by the agent's use of visible()
    from rich.text import Text


def visible(text: str) -> str:
    """``text`` with every character Python calls non-printable shown as its escape (ESC as ``\\x1b``,
    newline as ``\\n``, U+202E as ``\\u202e``, a lone surrogate as ``\\udc80``); the space stays a space.

    Non-printable is ``str.isprintable``'s rule, the one ``repr`` applies: Unicode categories Cc (C0, DEL,
    C1), Cf (bidi overrides and isolates, zero-width characters), Cs (lone surrogates, which would not even
    encode as UTF-8), Co, Cn, and the separators Zl, Zp and Zs other than the space.
    """
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def visible_lines(text: str) -> str:
    """Multi-line output rendered elsewhere (a server's comparison): each line made visible, its line
    breaks kept (``\n``, and the ``\r\n`` that CSV ends rows with)."""
    return "".join(part if part in ("\n", "\r\n") else visible(part) for part in _LINE_BREAK.split(text))


_LINE_BREAK = re.compile(r"(\r?\n)")


def cell(text) -> Text:
    """A rich table cell that prints ``text`` literally: control characters made visible and no markup."""
    from rich.text import Text

    return Text(visible(text))
