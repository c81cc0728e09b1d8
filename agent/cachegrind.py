"""Cachegrind's simulated cache events and iai-callgrind's cycle estimate from them: the dbi backend's
cache model (agent/dbi.py runs valgrind; this module says what to ask and what the answer means).

``valgrind --tool=cachegrind --cache-sim=yes`` simulates a first-level instruction cache (I1), a first-level
data cache (D1) and a last-level cache (LL) and counts every instruction fetch (I refs, its Ir) and data
access (D refs) and the misses of each level. The geometry is pinned (``GEOMETRY``: 32 KiB 8-way I1 and D1,
8 MiB 16-way LL, 64-byte lines), not read off this machine's CPU as cachegrind does by default, so the same
binary gives the same counts on every CI host.

The estimate is iai-callgrind's (iai-callgrind-runner/src/runner/callgrind/mod.rs, ``CacheSummary``'s
``TryFrom<&Costs>``, which cites Itamar Turner-Trauring, "Consistent benchmarking in CI", pythonspeed.com,
2020)::

    L1 hits  = (Ir + Dr + Dw) - (I1mr + D1mr + D1mw)
    LL hits  = (I1mr + D1mr + D1mw) - (ILmr + DLmr + DLmw)
    RAM      = ILmr + DLmr + DLmw
    estimated cycles = L1 hits + 5 * LL hits + 35 * RAM

It is a model, never a measurement: the caches simulated are not this CPU's (nor any one CPU's: no
prefetcher, no replacement policy but LRU, inclusive levels, no TLB); there is no branch prediction, no
out-of-order overlap of misses, no frequency or memory-bandwidth effect; every instruction costs one
"cycle" whatever it does (a division as an add); and libc's memcpy, memset, strlen and friends run in the
variant libc picks for valgrind's virtual CPU (no AVX-512, for one), not the host's, so programs that spend
their time there are modelled on other code than they run natively. Cachegrind does not replace them by
valgrind's own (memcheck does; ``--trace-redir=yes`` under cachegrind shows only the vsyscall page's).
Its use is to compare two builds of one program on a machine without a PMU, as iai-callgrind and CodSpeed do.

Cachegrind's Ir counts every iteration of a rep-prefixed instruction (valgrind's VEX turns it into a loop),
unlike exp-bbv and hardware, so it is reported as ``cg-i-refs``, never as ``instructions:u``.
"""

from __future__ import annotations

import re

# What the dbi backend's cache events are called, with their unit.
ESTIMATED = "estimated-cycles"
EVENTS = {"cg-i-refs": "count", "cg-i1-misses": "count", "cg-lli-misses": "count", "cg-d-refs": "count",
          "cg-d1-misses": "count", "cg-lld-misses": "count", "cg-ll-misses": "count",
          ESTIMATED: "estimated cycles"}
# What every report says beside estimated-cycles (stat's notes, ab's lines): it is no measured time
MODEL = ("a model, never a measurement: iai-callgrind's L1 hits + 5·LL hits + 35·RAM accesses of cachegrind's "
         "simulated caches, every instruction one cycle, no branch prediction or frequency (docs/backends.md)")
# The simulated caches: size in bytes, associativity, line size (cachegrind's --I1/--D1/--LL)
GEOMETRY = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (8388608, 16, 64)}
# The summary goes to the log (agent/dbi.py's private --log-fd); the per-line out file is not wanted
FLAGS = ["--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null",
         *(f"--{level}={size},{ways},{line}" for level, (size, ways, line) in GEOMETRY.items())]
SOURCE = "valgrind cachegrind --cache-sim=yes (simulated caches, " + \
         ", ".join(f"{level} {size // 1024} KiB {ways}-way" for level, (size, ways, _) in GEOMETRY.items()) + ")"
# The summary's lines, e.g. "==123== D1  misses:          1,433  (     1,105 rd   +        328 wr)"
_SUMMARY = {name: re.compile(rb"^==\d+== " + label + rb":\s+([\d,]+)", re.MULTILINE) for name, label in {
    "cg-i-refs": rb"I\s+refs", "cg-i1-misses": rb"I1\s+misses", "cg-lli-misses": rb"LLi\s+misses",
    "cg-d-refs": rb"D\s+refs", "cg-d1-misses": rb"D1\s+misses", "cg-lld-misses": rb"LLd\s+misses",
    "cg-ll-misses": rb"LL\s+misses"}.items()}


def estimated_cycles(i_refs: int, d_refs: int, l1_misses: int, ll_misses: int) -> int:
    """iai-callgrind's estimated cycles (module docstring) of cachegrind's totals: ``d_refs`` = Dr + Dw,
    ``l1_misses`` = I1mr + D1mr + D1mw, ``ll_misses`` = ILmr + DLmr + DLmw.

    >>> estimated_cycles(96, 24 + 18, 6 + 0 + 2, 6 + 0 + 2)  # iai-callgrind's own test case: 410
    410
    """
    l1_hits = i_refs + d_refs - l1_misses
    ll_hits = l1_misses - ll_misses
    return l1_hits + 5 * ll_hits + 35 * ll_misses


def totals(log: bytes) -> dict[str, int]:
    """The events of a cachegrind summary in ``log`` (none when it printed none: the run failed), with the
    estimate when every count it needs is there."""
    found = {name: int(m.group(1).replace(b",", b"")) for name, pattern in _SUMMARY.items()
             if (m := pattern.search(log))}
    if len(found) == len(_SUMMARY):
        found[ESTIMATED] = estimated_cycles(found["cg-i-refs"], found["cg-d-refs"],
                                            found["cg-i1-misses"] + found["cg-d1-misses"], found["cg-ll-misses"])
    return found
