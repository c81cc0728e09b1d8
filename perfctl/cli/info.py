"""`perfctl info`: the machine inventory and what each item means for the counters (docs/inventory.md)."""

from __future__ import annotations

import dataclasses

from perfctl.cli.options import SIGNAL_EXIT, exit_status, loudness, verbosity
from perfctl.output import console
from perfctl.report import write


def add_parser(sub) -> None:
    info = sub.add_parser("info", help="the machine inventory and what each item means for the counters",
                          epilog=exit_status("0 shown", "2 bad usage, or an output that cannot be written",
                                             SIGNAL_EXIT))
    info.add_argument("--json", action="store_true")
    loudness(info, verbose="accepted (every item is always shown)",
             quiet="only the items that disturb counting as they are")


def run(args) -> int:
    from perfctl.agent import inventory
    from perfctl.report.info import InfoReport

    inv = dataclasses.replace(inventory.collect(), ebpf=inventory.probe_ebpf())
    report = InfoReport(inv, inventory.checks(inv), verbosity(args))
    return write(report, "json" if args.json else "table", console())
