#!/usr/bin/env python3
"""perfctl's estimated cycles beside iai-callgrind's formula applied to cachegrind run directly (issue 33).

iai-callgrind is a Rust crate and is not run here (no cargo offline, and none is installed for this). Its
formula is applied as published: iai-callgrind-runner/src/runner/callgrind/mod.rs, ``CacheSummary``'s
``TryFrom<&Costs>`` (which cites Itamar Turner-Trauring's pythonspeed.com article), over the nine events of
cachegrind's ``summary:`` line (Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw), each used separately as iai does:

    ram_hits = ILmr + DLmr + DLmw
    l3_hits  = (I1mr + D1mr + D1mw) - ram_hits
    l1_hits  = (Ir + Dr + Dw) - ram_hits - l3_hits
    cycles   = l1_hits + 5 * l3_hits + 35 * ram_hits

The script runs ``valgrind --tool=cachegrind --cache-sim=yes`` itself on an example (ASLR off, the caches of
agent/cachegrind.py GEOMETRY, its out file in a private directory of its own), then ``perfctl stat --backend
dbi`` on the same program, and prints for each: the counts, iai's formula of them and perfctl's
(agent/cachegrind.py ``estimated_cycles``). The two formulas must agree exactly on the same counts (the
script exits 1 if not). The two runs' counts themselves differ a little: perfctl runs the benchmark with its
own environment (padded to --env-size, 4096 bytes by default), which ld.so and libc read at start-up (a few
hundred more Ir) and which moves the stack (a few data accesses and misses elsewhere). On examples/bin/work 2
here: Ir +551, D refs +105, D1 misses -6, LL misses +1 of ~3.4 million estimated cycles (+662, 0.02%); the
same program under perfctl repeats its own counts exactly, run after run.

    python bench/dbi_iai.py [--program examples/bin/work] [ARGS ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from perfctl.agent import cachegrind

ROOT = Path(__file__).resolve().parent.parent

ORDER = ("Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw")


def iai_cycles(c: dict[str, int]) -> int:
    """iai-callgrind's estimated cycles of cachegrind's nine events (the module docstring)."""
    ram_hits = c["ILmr"] + c["DLmr"] + c["DLmw"]
    l3_hits = c["I1mr"] + c["D1mr"] + c["D1mw"] - ram_hits
    l1_hits = c["Ir"] + c["Dr"] + c["Dw"] - ram_hits - l3_hits
    return l1_hits + 5 * l3_hits + 35 * ram_hits


def direct(argv: list[str]) -> dict[str, int]:
    """Cachegrind's summary events of one run of ``argv``, ASLR off, read from its out file."""
    with tempfile.TemporaryDirectory(prefix="dbi-iai-") as private:  # mode 0700: no one else can pre-create
        out = Path(private) / "cachegrind.out"
        flags = [flag for flag in cachegrind.FLAGS if not flag.startswith("--cachegrind-out-file=")]
        subprocess.run(["setarch", platform.machine(), "-R", "valgrind", *flags, f"--cachegrind-out-file={out}",
                        "--vgdb=no", "--log-file=/dev/null", "--", *argv], check=True, stdout=subprocess.DEVNULL)
        lines = out.read_text().splitlines()
    events = next(line.split()[1:] for line in lines if line.startswith("events:"))
    summary = next(line.split()[1:] for line in lines if line.startswith("summary:"))
    return dict(zip(events, map(int, summary)))


def through_perfctl(argv: list[str]) -> dict[str, int]:
    """perfctl stat --backend dbi's cachegrind events and estimate of one run of ``argv``."""
    events = ",".join(cachegrind.EVENTS)
    result = subprocess.run([sys.executable, "-m", "perfctl", "stat", "-r", "1", "--backend", "dbi", "-e", events,
                             "--json", "--", *argv], capture_output=True, text=True, check=True)
    for line in result.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "sample":
            return {r["event"]: r["value"] for r in record["readings"]}
    raise SystemExit(f"perfctl printed no sample: {result.stderr.strip()}")


def perfctl_of(c: dict[str, int]) -> int:
    return cachegrind.estimated_cycles(c["Ir"], c["Dr"] + c["Dw"], c["I1mr"] + c["D1mr"] + c["D1mw"],
                                       c["ILmr"] + c["DLmr"] + c["DLmw"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default=str(ROOT / "examples" / "bin" / "work"))
    parser.add_argument("args", nargs="*", default=["2"])
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind")
    argv = [os.path.abspath(options.program), *options.args]
    counts = direct(argv)
    ours = through_perfctl(argv)
    print(f"program: {' '.join(argv)}")
    print(f"{'cachegrind event':<18}{'direct':>16}{'perfctl (dbi)':>16}")
    pairs = {"Ir": "cg-i-refs", "I1mr": "cg-i1-misses", "ILmr": "cg-lli-misses"}
    for event in ORDER:
        mine = f"{ours[pairs[event]]:,}" if event in pairs else ""
        print(f"{event:<18}{counts[event]:>16,}{mine:>16}")
    merged = {"D refs": (counts["Dr"] + counts["Dw"], ours["cg-d-refs"]),
              "D1 misses": (counts["D1mr"] + counts["D1mw"], ours["cg-d1-misses"]),
              "LLd misses": (counts["DLmr"] + counts["DLmw"], ours["cg-lld-misses"]),
              "LL misses": (counts["ILmr"] + counts["DLmr"] + counts["DLmw"], ours["cg-ll-misses"])}
    for name, (theirs, mine) in merged.items():
        print(f"{name:<18}{theirs:>16,}{mine:>16,}")
    iai, same_formula = iai_cycles(counts), perfctl_of(counts)
    print(f"{'estimated cycles':<18}{iai:>16,}{ours[cachegrind.ESTIMATED]:>16,}   (iai's formula | perfctl's run)")
    print(f"perfctl's formula on the direct counts: {same_formula:,} "
          f"({'equal to' if same_formula == iai else 'DIFFERENT from'} iai-callgrind's)")
    differences = {name: mine - theirs for name, (theirs, mine) in
                   {**merged, "Ir": (counts["Ir"], ours["cg-i-refs"])}.items() if mine != theirs}
    print("runs' counts: " + (", ".join(f"{k} {v:+,}" for k, v in differences.items()) if differences else "equal")
          + " (perfctl's run - direct run: its environment)")
    return 0 if same_formula == iai else 1


if __name__ == "__main__":
    sys.exit(main())
