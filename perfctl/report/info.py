"""The report of `perfctl info`: the machine inventory, and per item what it means for the counters and
the command that changes it (agent/inventory.py's checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from perfctl.output import paragraph
from perfctl.report import QUIET, Report, finite
from perfctl.text import cell

if TYPE_CHECKING:  # read only: the report does not import the collection (perf_event, the gate)
    from perfctl.agent.inventory import Check
    from perfctl.agent.machine import Inventory


class InfoReport(Report):
    """``inventory`` as inventory.collect() gives it (with its eBPF probe), ``checks`` as inventory.checks()."""

    kind = "info"
    formats = ("table", "json")

    def __init__(self, inventory: Inventory, checks: list[Check], verbosity: int = 0):
        self.inventory, self.checks, self.verbosity = inventory, checks, verbosity

    def document(self) -> dict:
        return finite(self.inventory.to_dict())

    def table(self, console: Console) -> None:
        inv = self.inventory
        table = Table(title=cell(f"{inv.hostname} (machine id {inv.machine_id})"), title_justify="left")
        for column in ("item", "value", "what it means for the counters", "to change it"):
            table.add_column(column, overflow="fold")
        # quiet: only the items that disturb counting as they are, and always what was checked
        disturbing = [c for c in self.checks if not c.ok]
        for check in self.checks if self.verbosity > QUIET else disturbing:
            table.add_row(*map(cell, (check.item, check.value, check.meaning, check.fix or "")))
        if table.row_count:
            console.print(table)
        if self.verbosity <= QUIET:
            paragraph(console, self.checked(disturbing))

    def checked(self, disturbing: list[Check]) -> str:
        """The line -q always prints: how many items were checked and how many disturb counting."""
        said = f"checked {len(self.checks)} items: " + (
            f"{len(disturbing)} disturb{'s' if len(disturbing) == 1 else ''} counting as "
            f"{'it is' if len(disturbing) == 1 else 'they are'} (above, with what changes "
            f"{'it' if len(disturbing) == 1 else 'them'})" if disturbing else "none disturbs counting as it is")
        if not self.inventory.pmu.present:  # not a disturbance, but what a quiet reader must not miss
            said += "; no PMU here: hardware events are not counted (perfctl info says why)"
        return said
