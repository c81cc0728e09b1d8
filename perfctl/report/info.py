"""The report of `perfctl info`: the machine inventory, and per item what it means for the counters and
the command that changes it (agent/inventory.py's checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

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
        # quiet: only the items that disturb counting as they are
        for check in self.checks if self.verbosity > QUIET else [c for c in self.checks if not c.ok]:
            table.add_row(*map(cell, (check.item, check.value, check.meaning, check.fix or "")))
        if table.row_count or self.verbosity > QUIET:
            console.print(table)
