#!/usr/bin/env python3
"""Runs per second of /bin/true with the full default event set: perfctl vs `perf stat -r` vs hyperfine -N.

All three are measured in this one run on this machine as whole commands (start-up included, amortized over
N runs): rate = N / elapsed wall time. The tools take turns for --rounds rounds (ABCABC..., not blocks, so a
noisy minute hurts all of them alike) and each tool's median rate is compared. perf stat gets exactly the events perfctl
counts here (timer and device interrupt tracepoints included); hyperfine counts nothing. Targets (issue 2):
perfctl >= 10x perf stat's rate, and >= 1/3 of hyperfine's. Also prints perfctl's peak resident memory
(ru_maxrss of the perfctl process) after its N runs. Where the ebpf backend loads, `perfctl stat --backend
perf_event,ebpf` takes its turn too, and the per-run cost eBPF adds is printed beside the perf_event-only
figure (issue 6).

    python bench/stat_rate.py [--runs 1000] [--perf-runs 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from perfctl.agent import inventory
from perfctl.agent.events import DEFAULT_EVENTS, parse_events
from perfctl.agent.perf_event import PerfEventBackend
from perfctl.agent.perf_stat import perf_event_name

TARGET = "/bin/true"


def timed(argv: list[str]) -> tuple[float, int]:
    """(elapsed seconds, peak RSS KiB) of one command, which must succeed."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, rusage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:4])}... failed: {proc.stderr.read().decode()[-300:]}")
    return elapsed, rusage.ru_maxrss


EBPF = "perfctl +ebpf"


def timed_perfctl(argv: list[str], samples: str, runs: int) -> tuple[float, int]:
    """timed() of a perfctl stat writing to ``samples``, checking that every run was recorded."""
    if os.path.exists(samples):
        os.unlink(samples)
    result = timed(argv)
    with open(samples) as f:
        recorded = sum(1 for line in f) - 1
    if recorded != runs:
        sys.exit(f"bench: perfctl recorded {recorded} samples, expected {runs}")
    return result


def ebpf_reason() -> str | None:
    """Probed in a child: loading BPF here would grow this process, and a child's ru_maxrss counts the
    image it was forked from, so perfctl's memory figure would include the bench's own."""
    probe = subprocess.run([sys.executable, "-c", "import json; from perfctl.agent import inventory; "
                            "print(json.dumps(vars(inventory.probe_ebpf())))"],
                           capture_output=True, text=True, check=True)
    result = json.loads(probe.stdout)
    return None if result["available"] else result["reason"]


def perf_events() -> list[str]:
    """The default set as perf(1) spells it, minus what this machine cannot count at all."""
    backend = PerfEventBackend(parse_events(list(DEFAULT_EVENTS)), inventory.collect())
    try:
        names = [perf_event_name(o) for o in backend.openers]
    finally:
        backend.close()
    return [n for n in names if n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--perf-runs", type=int, default=100, help="perf stat is slow: fewer runs suffice")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for tool in ("perf", "hyperfine"):
        if shutil.which(tool) is None:
            sys.exit(f"bench: {tool} not found (deploy/setup.sh installs it)")

    with tempfile.TemporaryDirectory() as tmp:
        samples = os.path.join(tmp, "samples.jsonl")
        perfctl = [sys.executable, "-m", "perfctl", "stat", "-r", str(args.runs), "--no-progress", "-o", samples,
                   "--", TARGET]
        perf = ["perf", "stat", "-r", str(args.perf_runs), "-x,", "-o", os.path.join(tmp, "perf.csv")]
        for name in perf_events():
            perf += ["-e", name]
        perf += ["--", TARGET]
        hyperfine = ["hyperfine", "-N", "--runs", str(args.runs), "--export-json", os.path.join(tmp, "h.json"),
                     TARGET]
        ebpf = ebpf_reason()
        with_ebpf = perfctl[:4] + ["--backend", "perf_event,ebpf"] + perfctl[4:]

        times: dict[str, list[float]] = {"perfctl": [], "perf stat -r": [], "hyperfine -N": []}
        runs = {"perfctl": args.runs, "perf stat -r": args.perf_runs, "hyperfine -N": args.runs}
        if ebpf is None:
            times[EBPF] = []
            runs[EBPF] = args.runs
        perfctl_rss = ebpf_rss = 0
        for _ in range(args.rounds):
            elapsed, perfctl_rss = timed_perfctl(perfctl, samples, args.runs)
            times["perfctl"].append(elapsed)
            times["perf stat -r"].append(timed(perf)[0])
            times["hyperfine -N"].append(timed(hyperfine)[0])
            if ebpf is None:
                elapsed, ebpf_rss = timed_perfctl(with_ebpf, samples, args.runs)
                times[EBPF].append(elapsed)

    rates = {tool: statistics.median(runs[tool] / t for t in elapsed) for tool, elapsed in times.items()}
    print(f"events: {', '.join(perf_events())}")
    for tool, rate in rates.items():
        every = ", ".join(f"{runs[tool] / t:.0f}" for t in times[tool])
        print(f"{tool:>14}: {rate:8.1f} runs/s median of {args.rounds} rounds ({every})")
    vs_perf = rates["perfctl"] / rates["perf stat -r"]
    vs_hyperfine = rates["perfctl"] / rates["hyperfine -N"]
    print(f"perfctl / perf stat -r : {vs_perf:6.2f}x  (target >= 10)  {'PASS' if vs_perf >= 10 else 'FAIL'}")
    verdict = "PASS" if vs_hyperfine >= 1 / 3 else "FAIL"
    print(f"perfctl / hyperfine -N : {vs_hyperfine:6.2f}x  (target >= 0.33) {verdict}")
    print(f"perfctl peak resident memory after {args.runs} runs: {perfctl_rss / 1024:.1f} MiB")
    if ebpf is not None:
        print(f"ebpf backend not measured: {ebpf}")
        return
    per_run = {tool: 1e3 / rates[tool] for tool in ("perfctl", EBPF)}
    print(f"per run: perf_event alone {per_run['perfctl']:.3f} ms, perf_event+ebpf {per_run[EBPF]:.3f} ms "
          f"(eBPF adds {per_run[EBPF] - per_run['perfctl']:+.3f} ms, "
          f"rate ratio {rates[EBPF] / rates['perfctl']:.2f}x); "
          f"peak memory with ebpf {ebpf_rss / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
