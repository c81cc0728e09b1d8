"""Known retired-instruction counter errata, keyed by CPU vendor and family (and model where it matters),
each with its source. ``lookup`` returns the entry for a machine's inventory; machines matching no entry
get the default (k_fldcw = 1: fldcw counted once), stated as such.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Erratum:
    vendor: str
    family: int | None
    models: tuple[int, ...] | None
    k_fldcw: float
    note: str
    source: str

    def matches(self, vendor: str, family: int | None, model: int | None) -> bool:
        return (self.vendor == vendor and (self.family is None or self.family == family)
                and (self.models is None or model in self.models))


TABLE = (
    Erratum("GenuineIntel", 15, None, 2.0,
            "Pentium 4 / NetBurst: instr_retired:nbogusntag counts fldcw twice; page faults and interrupts add "
            "no retired instructions",
            "Weaver & McKee, IISWC 2008, section 4.2 (../shared/seeds/003_7d2f7057436bc279.txt)"),
    Erratum("AuthenticAMD", 0x17, None, 1.0,
            "Family 17h: erratum 1291, retire-based events may overcount; the audit's determinism check "
            "catches it",
            "AMD Revision Guide for Family 17h, erratum 1291 (counter-artifacts notes, section 1)"),
)
DEFAULT = Erratum("", None, None, 1.0, "no known fldcw erratum: fldcw counts once",
                  "Weaver & McKee, IISWC 2008: every tested x86 but Pentium 4")


def lookup(inventory: dict) -> Erratum:
    cpu = inventory.get("cpu", {})
    for entry in TABLE:
        if entry.matches(cpu.get("vendor", ""), cpu.get("family"), cpu.get("model")):
            return entry
    return DEFAULT
