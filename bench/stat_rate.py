#!/usr/bin/env python3
"""Runs per second of /bin/true with the full default event set: perfctl vs `perf stat -r` vs hyperfine -N.

All three are measured in this one run on this machine as whole commands (start-up included, amortized over
N runs): rate = N / elapsed wall time. The tools take turns for --rounds rounds (ABCABC..., not blocks, so a
noisy minute hurts all of them alike) and each tool's median rate is compared. perf stat gets exactly the events perfctl
counts here (timer and device interrupt tracepoints included); hyperfine counts nothing.

perf stat is measured cold and warm. Cold, the kernel registers each tracepoint afresh for every one of its
runs (~40 ms here); when anything else holds them registered (a running agent, any tracer) perf stat pays
nothing of it. Warm, a background `perf stat -a` counting the same events holds them, and perfctl takes a
turn under the same holder, so that both pay whatever it costs; warm perf stat runs as many runs as perfctl
(its start-up spread over fewer was a cost it paid only here), and the two take turns at going first.
Targets (issue 16): perfctl >= 1.2x warm `perf stat -r` (the cold ratio is printed beside it: issue 2's 10x
was mostly that registration), and >= 0.5x hyperfine -N. Also prints perfctl's peak resident memory
(ru_maxrss of the perfctl process) after its N runs. Where the ebpf backend loads, `perfctl stat --backend
perf_event,ebpf` takes its turn too, and the per-run cost eBPF adds is printed beside the perf_event-only
figure (issue 6). `perfctl ab` takes a turn with the same runs as rounds of /bin/true against itself (issue 16: its
per-run rate within 10% of stat's). The agent's job path takes its turn too (issue 30: a fleet job of the same
command within 10% of stat's per-run cost): an Agent in a process of its own receives a job of /bin/true with the
default events and measures it as its worker does (Agent._run_job, each sample spooled). An agent starts once
and runs many jobs, so its start-up (gRPC and the rest, ~0.1 s more than stat's) must not count against its
runs: both are timed with N and with 2N runs in turns, and the per-run cost is the difference over N.

    python bench/stat_rate.py [--runs 1000] [--perf-runs 100] [--rounds 3] [--agent-only]

--agent-only measures the agent's job and stat alone (the last comparison), in more rounds for the same time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from perfctl.agent import inventory
from perfctl.agent.events import DEFAULT_EVENTS, parse_events
from perfctl.agent.perf_event import PerfEventBackend
from perfctl.agent.perf_stat import perf_event_name

TARGET = "/bin/true"


def timed(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    """(elapsed seconds, peak RSS KiB) of one command, which must exit with a code in ``ok``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, rusage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        sys.exit(f"bench: {' '.join(argv[:4])}... failed: {proc.stderr.read().decode()[-300:]}")
    return elapsed, rusage.ru_maxrss


EBPF = "perfctl +ebpf"
AB = "perfctl ab"
# ab's verdict on /bin/true against itself may settle (0), show a difference (3) or not settle (4): --min-runs
# equal to --max-runs makes it take every round either way, so that it runs as many runs as stat
AB_CODES = (0, 3, 4)
WARM_PERFCTL, WARM_PERF = "perfctl (warm)", "perf stat (warm)"


@contextlib.contextmanager
def holding(holder: list[str]):
    """A `perf stat -a` of the same events running meanwhile: the tracepoints stay registered."""
    proc = subprocess.Popen(holder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # its events opened
        if proc.poll() is not None:
            sys.exit(f"bench: the holding perf stat -a ended: {proc.stderr.read().decode()[-300:]}")
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def timed_perfctl(argv: list[str], samples: str, runs: int, ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    """timed() of a perfctl stat (or ab) writing to ``samples``, checking that every run was recorded."""
    if os.path.exists(samples):
        os.unlink(samples)
    result = timed(argv, ok)
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


def agent_job(runs: int, spool_dir: str) -> None:
    """The agent's job path, in this process (the bench starts it with --agent-job): an Agent with its spool in
    ``spool_dir`` receives a job of ``runs`` runs of TARGET with the default events and measures it as its
    worker does; exits non-zero unless every run was spooled."""
    from perfctl.agent.daemon import Agent, AgentConfig
    from perfctl.v1 import fleet_pb2 as pb

    agent = Agent(AgentConfig(server="127.0.0.1:1", name="bench", spool_dir=spool_dir, token="t" * 20,
                              allow=["/bin/*", "/usr/bin/*"], user=None, audit_every_hours=0))
    job_id = str(uuid.uuid4())
    try:
        agent.spool.add_job(job_id, pb.Job(job_id=job_id, commands=[pb.Command(argv=[TARGET])],
                                           repetitions=runs).SerializeToString())
        agent._run_job(job_id)
        _, _, state = agent.spool.job(job_id)
        recorded = len(agent.spool.pending(0, runs + 1))
    finally:
        agent.spool.close()
        agent._runner.close()
    if state != "done" or recorded != runs:
        sys.exit(f"bench: the agent's job ended {state} with {recorded} samples spooled, expected {runs}")


def stat_argv(runs: int, samples: str) -> list[str]:
    return [sys.executable, "-m", "perfctl", "stat", "-r", str(runs), "--no-progress", "-o", samples, "--", TARGET]


def per_run_turns(runs: int, round_: int, tmp: str, per_run: dict[str, list[float]]) -> None:
    """One round of the agent's job path and stat, N and 2N runs each, in turns (which goes first alternates
    with ``round_``), each time added to ``per_run``."""
    samples = os.path.join(tmp, "per-run.jsonl")

    def stat_of(n: int) -> float:
        return timed_perfctl(stat_argv(n, samples), samples, n)[0]

    def agent_of(n: int) -> float:
        spool = tempfile.mkdtemp(dir=tmp)
        try:
            return timed([sys.executable, os.path.abspath(__file__), "--agent-job", str(n), spool])[0]
        finally:
            shutil.rmtree(spool)

    turns = [(f"{tool} {n}", lambda tool=tool, n=n: (stat_of if tool == "stat" else agent_of)(
        runs * (2 if n == "2N" else 1))) for n in ("N", "2N") for tool in ("stat", "agent")]
    for key, measure in turns if round_ % 2 == 0 else reversed(turns):
        per_run.setdefault(key, []).append(measure())


def print_per_run(per_run: dict[str, list[float]], runs: int, rounds: int) -> None:
    stat_ms, agent_ms = per_run_ms(per_run, "stat", runs), per_run_ms(per_run, "agent", runs)
    each = [a / s for a, s in zip(agent_ms, stat_ms)]
    vs_agent = statistics.median(each)
    print(f"per run (2N runs less N, over N): perfctl stat {statistics.median(stat_ms):.3f} ms, the agent's job "
          f"{statistics.median(agent_ms):.3f} ms (medians of {rounds} rounds)")
    print(f"agent job / perfctl stat     : {vs_agent:6.2f}x  (per-run cost; target <= 1.10) "
          f"{'PASS' if vs_agent <= 1.10 else 'FAIL'} (per round {', '.join(f'{r:.2f}' for r in each)})")


def agent_against_stat(runs: int, rounds: int) -> None:
    per_run: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            per_run_turns(runs, round_, tmp, per_run)
    print_per_run(per_run, runs, rounds)


def per_run_ms(times: dict[str, list[float]], tool: str, runs: int) -> list[float]:
    """Each round's per-run cost of ``tool`` in ms: its time with 2N runs less its time with N, over N (the
    start-up, paid once either way, cancels)."""
    return [(two - one) / runs * 1e3 for one, two in zip(times[f"{tool} N"], times[f"{tool} 2N"])]


def main() -> None:
    if sys.argv[1:2] == ["--agent-job"]:
        agent_job(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--perf-runs", type=int, default=100,
                        help="cold perf stat's runs (~40 ms each): warm, it runs as many as perfctl")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agent-only", action="store_true", help="only the agent's job against stat, per run")
    args = parser.parse_args()
    if args.agent_only:
        agent_against_stat(args.runs, args.rounds)
        return
    for tool in ("perf", "hyperfine"):
        if shutil.which(tool) is None:
            sys.exit(f"bench: {tool} not found (deploy/setup.sh installs it)")

    with tempfile.TemporaryDirectory() as tmp:
        samples = os.path.join(tmp, "samples.jsonl")
        perfctl = stat_argv(args.runs, samples)
        events = [arg for name in perf_events() for arg in ("-e", name)]
        perf = ["perf", "stat", "-r", str(args.perf_runs), "-x,", "-o", os.path.join(tmp, "perf.csv"), *events,
                "--", TARGET]
        # warm, perf stat runs as many runs as perfctl: its start-up (~10 ms) spread over --perf-runs alone
        # was a cost it paid only here (~0.1 ms a run of ~1.1)
        warm_perf = [*perf[:3], str(args.runs), *perf[4:]]
        hyperfine = ["hyperfine", "-N", "--runs", str(args.runs), "--export-json", os.path.join(tmp, "h.json"),
                     TARGET]
        # the same runs as stat's, in rounds of the two commands, deciding after every round (issue 16: ab's
        # per-run rate within 10% of stat's)
        ab = [sys.executable, "-m", "perfctl", "ab", "--max-runs", str(args.runs // 2), "--min-runs",
              str(args.runs // 2), "--no-progress", "-o", samples, "--", TARGET, ":::", TARGET]
        ebpf = ebpf_reason()

        with_ebpf = perfctl[:4] + ["--backend", "perf_event,ebpf"] + perfctl[4:]

        holder = ["perf", "stat", "-a", "-x,", "-o", os.devnull, *events]  # until SIGINT
        times: dict[str, list[float]] = {"perfctl": [], "perf stat -r": [], "hyperfine -N": [], WARM_PERFCTL: [],
                                         WARM_PERF: [], AB: []}
        runs = {"perfctl": args.runs, "perf stat -r": args.perf_runs, "hyperfine -N": args.runs,
                WARM_PERFCTL: args.runs, WARM_PERF: args.runs, AB: args.runs // 2 * 2}
        if ebpf is None:
            times[EBPF] = []
            runs[EBPF] = args.runs
        per_run: dict[str, list[float]] = {}
        perfctl_rss = ebpf_rss = 0
        for round_ in range(args.rounds):
            elapsed, perfctl_rss = timed_perfctl(perfctl, samples, args.runs)
            times["perfctl"].append(elapsed)
            times["perf stat -r"].append(timed(perf)[0])
            times["hyperfine -N"].append(timed(hyperfine)[0])
            times[AB].append(timed_perfctl(ab, samples, runs[AB], AB_CODES)[0])
            if ebpf is None:
                elapsed, ebpf_rss = timed_perfctl(with_ebpf, samples, args.runs)
                times[EBPF].append(elapsed)
            with holding(holder):  # in turns, first one then the other: neither always meets the holder fresh
                turns = [(WARM_PERFCTL, lambda: timed_perfctl(perfctl, samples, args.runs)[0]),
                         (WARM_PERF, lambda: timed(warm_perf)[0])]
                for tool, measure in turns if round_ % 2 == 0 else reversed(turns):
                    times[tool].append(measure())
            per_run_turns(args.runs, round_, tmp, per_run)

    rates = {tool: statistics.median(runs[tool] / t for t in elapsed) for tool, elapsed in times.items()}
    print(f"events: {', '.join(perf_events())}")
    for tool, rate in rates.items():
        every = ", ".join(f"{runs[tool] / t:.0f}" for t in times[tool])
        print(f"{tool:>14}: {rate:8.1f} runs/s median of {args.rounds} rounds ({every})")
    def paired(tool: str, peer: str) -> str:
        """The median of the rounds' own ratios: each round's tools ran minutes apart at most, so a ratio
        within a round is spared the swings between rounds (2x for hyperfine on these VMs)."""
        each = [runs[tool] / a / (runs[peer] / b) for a, b in zip(times[tool], times[peer])]
        return f"(per round {', '.join(f'{r:.2f}' for r in each)}; median {statistics.median(each):.2f})"

    vs_perf = rates["perfctl"] / rates["perf stat -r"]
    vs_warm = rates[WARM_PERFCTL] / rates[WARM_PERF]
    vs_hyperfine = rates["perfctl"] / rates["hyperfine -N"]
    print(f"perfctl / perf stat -r, cold : {vs_perf:6.2f}x  (perf stat registers the tracepoints for each run)")
    print(f"perfctl / perf stat -r, warm : {vs_warm:6.2f}x  (both under a perf stat -a holding them; target >= 1.2) "
          f"{'PASS' if vs_warm >= 1.2 else 'FAIL'} {paired(WARM_PERFCTL, WARM_PERF)}")
    verdict = "PASS" if vs_hyperfine >= 0.5 else "FAIL"
    print(f"perfctl / hyperfine -N       : {vs_hyperfine:6.2f}x  (target >= 0.5) {verdict} "
          f"{paired('perfctl', 'hyperfine -N')}")
    vs_stat = rates[AB] / rates["perfctl"]
    print(f"perfctl ab / perfctl stat    : {vs_stat:6.2f}x  (the same runs in rounds of two commands; target >= 0.9) "
          f"{'PASS' if vs_stat >= 0.9 else 'FAIL'} {paired(AB, 'perfctl')}")
    print_per_run(per_run, args.runs, args.rounds)
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
