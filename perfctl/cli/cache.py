"""`perfctl cache mrc|corun|pirate`: memory-hierarchy models (docs/cache.md). Options only: tracing and the
Pirate live in agent/, the models in analysis/, the tables and files in report/cache.py."""

from __future__ import annotations

import argparse
import math
import os

from perfctl.cli.options import SIGNAL_EXIT, Parser, command_of, exit_status, force_option, loudness, verbosity
from perfctl.output import UsageError, console, interactive, say
from perfctl.output_files import CSV, PLOT, RDS, Output, check, replace, replace_with
from perfctl.report import QUIET, write
from perfctl.report.cache import LINE, MRC_CSV_SIGNATURE, PIRATE_CSV_SIGNATURE

AUTO_SAMPLES = 100_000  # 50 windows of 2000: StatStack's own error, not the sample's, dominates (docs/cache.md)
EXACT_LIMIT = 30_000_000  # ~45 s and a few GB for the exact reference beyond this
# Lackey writes ~15 bytes per instruction and per access: 2 GiB is ~10^8 instructions, a few minutes under
# valgrind, and at most ~1.4*10^8 accesses (1 GB of line ids), well past what the exact reference handles
DEFAULT_MAX_TRACE = "2G"
DEFAULT_SIZES = "1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M,32M,64M"
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_bytes(text: str) -> int:
    """'32K', '1M', '4096' -> bytes; a ValueError naming the bad item."""
    item = text.strip().upper()
    digits = item.rstrip("KMGIB")
    unit = item[len(digits):]
    if not digits.isdigit() or unit not in _UNITS:
        raise ValueError(f"not a size in bytes: {text!r} (e.g. 4096, 32K, 1M)")
    return int(digits) * _UNITS[unit]


def parse_sizes(text: str, *, allow_zero: bool = False) -> list[int]:
    sizes = [parse_bytes(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise ValueError("no sizes given")
    for size in sizes:
        if size == 0 and not allow_zero:
            raise ValueError("a cache of 0 bytes has no lines to model")
    return sorted(set(sizes))


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"the sampling rate must be in (0, 1], got {text}")
    return value


def add_parser(sub) -> None:
    cache = sub.add_parser("cache", help="memory-hierarchy models: StatStack/StatCache curves, StatCC co-runs, "
                                         "Cache Pirating",
                           epilog=exit_status("0 modelled", "3 (corun) the CPI/miss-ratio system did not converge",
                                              "2 bad usage or input (a truncated trace, a bad .rds file, a trace "
                                              "past --max-trace-bytes)", f"{SIGNAL_EXIT} (docs/cache.md)"))
    actions = cache.add_subparsers(dest="cache_command", required=True, parser_class=Parser)
    mrc = actions.add_parser("mrc", help="miss-ratio curve of a command (StatStack, StatCache, exact LRU)",
                             epilog=exit_status("0 modelled (also from a traced run that failed: a line says so)",
                                                "2 bad usage or input: a truncated or malformed trace, a trace "
                                                "past --max-trace-bytes, an output that cannot be written",
                                                f"{SIGNAL_EXIT}: valgrind's tree is killed (docs/cache.md)"))
    mrc.add_argument("--rate", type=_rate, help="sampling rate of the reuse-distance sampler (default: enough for "
                                                f"{AUTO_SAMPLES:,} samples; a full trace makes dense sampling free)")
    mrc.add_argument("--seed", type=int, default=0)
    mrc.add_argument("--sizes", default=DEFAULT_SIZES, help=f"cache sizes in bytes ({DEFAULT_SIZES})")
    mrc.add_argument("--pooled", action="store_true", help="estimate from all windows at once, not per window")
    mrc.add_argument("--no-exact", action="store_true",
                     help=f"skip the exact LRU reference (skipped anyway above {EXACT_LIMIT:,} accesses)")
    mrc.add_argument("--from-lackey", metavar="LOG", help="model an existing `valgrind --tool=lackey "
                                                          "--trace-mem=yes` log instead of running CMD")
    mrc.add_argument("--max-trace-bytes", default=DEFAULT_MAX_TRACE, metavar="BYTES",
                     help=f"stop valgrind and fail when lackey's trace grows past this ({DEFAULT_MAX_TRACE})")
    mrc.add_argument("--rds", metavar="FILE", help="write the reuse-distance sample (for perfctl cache corun)")
    mrc.add_argument("--csv", metavar="FILE", help="write the curve as CSV")
    mrc.add_argument("--plot", metavar="FILE.png", help="plot the curves: .png, .svg or .pdf (needs matplotlib)")
    force_option(mrc, "--rds, --csv and --plot FILE")
    mrc.add_argument("--json", action="store_true", help="the curve as JSON on stdout")
    mrc.add_argument("--name", help="benchmark name (default: the command's basename)")
    loudness(mrc, verbose="accepted (the table shows every size)",
             quiet="no table and no progress: only errors (files asked for are written)")
    mrc.add_argument("cmd", nargs="*", metavar="-- CMD ARGS")

    corun = actions.add_parser("corun", help="StatCC: miss ratios and CPIs of applications sharing a cache",
                               epilog=exit_status("0 the fixed point was reached", "3 it was not: cannot estimate "
                                                  "(the numbers shown are the last iterate)", "2 bad usage or a bad "
                                                  ".rds file", SIGNAL_EXIT))
    corun.add_argument("rds", nargs="+", metavar="APP.rds", help="reuse-distance samples (perfctl cache mrc --rds)")
    corun.add_argument("--cache", default="2M", help="shared cache size (2M, the thesis's L2)")
    corun.add_argument("--l1", default="32K", help="private L1 size (32K)")
    corun.add_argument("--latencies", default="1,10,130", help="L1, shared cache, memory latencies in cycles")
    corun.add_argument("--base-cpi", type=float, default=1.0)
    corun.add_argument("--json", action="store_true")
    loudness(corun, verbose="accepted (the table shows every application)",
             quiet="no table: only a system that did not converge, and errors")

    pirate = actions.add_parser("pirate", help="Cache Pirating: the command's metrics as a function of cache size",
                                epilog=exit_status("0 measured", "2 bad usage (sizes, CPUs, --dynamic without a "
                                                   "PMU) or a command that cannot run",
                                                   f"{SIGNAL_EXIT}: the Target and the Pirate are killed"))
    pirate.add_argument("--sizes", help="Pirate working-set sizes (default: 0 and eighths of the shared cache)")
    pirate.add_argument("--llc", help="shared cache size (default: the last-level cache from sysfs)")
    pirate.add_argument("-r", "--rounds", type=int, default=3, help="runs of the command per size (3)")
    pirate.add_argument("--target-cpu", type=int, default=0)
    pirate.add_argument("--pirate-cpu", type=int, default=1)
    pirate.add_argument("--dynamic", action="store_true", help="one run, sizes cycled per interval (needs a PMU)")
    pirate.add_argument("--timeout", type=float, default=None, help="kill a Target run after S seconds")
    pirate.add_argument("--csv", metavar="FILE")
    force_option(pirate, "--csv FILE")
    pirate.add_argument("--json", action="store_true")
    loudness(pirate, verbose="accepted (the table shows every size)",
             quiet="no table: only errors (files asked for are written)")
    pirate.add_argument("cmd", nargs="*", metavar="-- CMD ARGS")


def run(args) -> int:
    try:
        if args.cache_command == "mrc":
            return _mrc(args)
        if args.cache_command == "corun":
            return _corun(args)
        return _pirate(args)
    except ValueError as err:  # CannotEstimate, RdsError, bad sizes
        raise UsageError(f"perfctl cache {args.cache_command}: {err}") from None


def _command(args) -> list[str]:
    cmd = command_of(args)
    if not cmd:
        raise UsageError(f"perfctl cache {args.cache_command}: no command given (usage: ... -- CMD ARGS)")
    return cmd


def _traced_command(args):
    """(resolved argv, Benchmark, RunControl) of CMD, or None with --from-lackey LOG: resolved before any
    output is checked (perfctl/output_files.py refuses one that is the benchmark or names its files)."""
    from perfctl.agent import session
    from perfctl.agent.runner import RunError, make_control

    if args.from_lackey:
        if args.cmd:
            raise UsageError("perfctl cache mrc: give either --from-lackey LOG or a command, not both")
        return None
    cmd = _command(args)
    try:
        control = make_control()
        return (*session.identify(cmd, control, args.name), control)
    except RunError as err:
        raise UsageError(f"perfctl cache mrc: {err}") from None


def _trace(args, command):
    """(benchmark description, agent.lackey.Trace) of the command (_traced_command) run once under lackey,
    or of --from-lackey LOG."""
    from perfctl.agent import lackey
    from perfctl.agent.runner import RunError, Runner
    from perfctl.report.cache import TraceProgress, run_ended

    if command is None:
        return {"name": args.name or os.path.basename(args.from_lackey)}, lackey.parse(args.from_lackey)
    resolved, bench, control = command
    max_bytes = parse_bytes(args.max_trace_bytes)
    if max_bytes < 1:
        raise UsageError("perfctl cache mrc: --max-trace-bytes must be at least 1 byte")
    progress = TraceProgress() if interactive(stderr=True) and not args.quiet else None
    try:
        if verbosity(args) > QUIET:
            say(f"perfctl cache mrc: tracing {bench.name} under valgrind lackey (tens of times slower than native)")
        runner = Runner()
        try:
            exit_, trace = lackey.trace(runner, resolved, control, max_bytes, progress)
        finally:
            runner.close()
            if progress is not None:
                progress.done()
    except lackey.TraceFailed as err:
        raise UsageError(f"perfctl cache mrc: {err} (the traced run {run_ended(err.exit)}: "
                         f"{err.exit.stderr_tail or 'no message'})") from None
    except RunError as err:
        raise UsageError(f"perfctl cache mrc: {err}") from None
    if exit_.outcome != "ok":
        say(f"perfctl cache mrc: the traced run {run_ended(exit_)}; modelling what it did before")
    return {"name": bench.name, "argv": list(bench.argv), "executable_sha256": bench.executable_sha256}, trace


def _mrc(args) -> int:
    import numpy as np

    from perfctl.analysis import lru, reuse, statstack
    from perfctl.formats import rds
    from perfctl.report.cache import MrcReport, plot, plotting

    sizes = parse_sizes(args.sizes)
    lines = np.array([max(1, s // LINE) for s in sizes])
    command = _traced_command(args)
    rds_signature = f'{{"format":"{rds.FORMAT}"'.encode()  # rds.write puts it first, without spaces
    rds_out, csv_out, plot_out = (Output("--rds", args.rds, RDS, signature=rds_signature, force=args.force),
                                  Output("--csv", args.csv, CSV, signature=MRC_CSV_SIGNATURE, force=args.force),
                                  Output("--plot", args.plot, PLOT, force=args.force))
    # every output is checked before the trace, which may take minutes: the file (its format by the
    # extension, perfctl's own or new) and the plotting library too
    check("perfctl cache mrc", [rds_out, csv_out, plot_out],
          inputs=[(args.from_lackey, args.from_lackey)] if args.from_lackey else [],
          benchmarks=[command[0]] if command else [], cwd=command[2].cwd if command else None,
          search_path=dict(command[2].env).get("PATH") if command else None)
    if args.plot:
        plotting()
    benchmark, trace = _trace(args, command)
    rate = args.rate or min(1.0, AUTO_SAMPLES / len(trace.lines))
    settings = reuse.settings_for_rate(rate, len(trace.lines))
    sample = reuse.hierarchical_sample(trace.lines, settings, args.seed, trace.instructions)
    footprint = int(len(np.unique(trace.lines)))
    stack = statstack.statstack(sample, lines, per_window=not args.pooled)
    random = statstack.statcache(sample, lines)
    skip_exact = args.no_exact or len(trace.lines) > EXACT_LIMIT
    exact = None if skip_exact else lru.exact_mrc(trace.lines, lines)
    rows = []
    for i, size in enumerate(sizes):
        row = {"bytes": size, "lines": int(lines[i]), "statstack": float(stack.miss_ratios[i]),
               "statcache": float(random.miss_ratios[i])}
        if exact is not None:
            row["exact_lru"] = float(exact.miss_ratios[i])
            row["error"] = abs(row["statstack"] - row["exact_lru"])
        rows.append(row)
    summary = {"benchmark": benchmark, "accesses": len(trace.lines), "line_crossings": trace.split,
               "instructions": trace.instructions, "mix": trace.mix, "footprint_lines": footprint,
               "samples": sample.size, "dangling": sample.dangling, "sampler": sample.sampler,
               "estimation": "pooled" if args.pooled else "per window", "curve": rows}
    report = MrcReport(summary, len(np.unique(sample.windows)), exact is None and not args.no_exact, EXACT_LIMIT,
                       verbosity(args))
    if args.rds:
        replace_with(rds_out, lambda temporary: rds.write(temporary, sample, benchmark), "perfctl cache mrc")
    if args.csv:
        replace(csv_out, report.csv(), "perfctl cache mrc")
    if args.plot:
        replace_with(plot_out, lambda temporary: plot(temporary, args.plot, rows, benchmark["name"]),
                     "perfctl cache mrc")
    return write(report, "json" if args.json else "table", console())


def _corun(args) -> int:
    from perfctl.analysis import statcc
    from perfctl.formats import rds
    from perfctl.report.cache import CorunReport

    latencies = [float(x) for x in args.latencies.split(",")]
    # `not 0 <= x < inf` also refuses nan, which float() accepts and every comparison would let through
    if len(latencies) != 3 or not all(0 <= x < math.inf for x in latencies):
        raise UsageError("perfctl cache corun: --latencies takes three non-negative numbers: L1,shared,memory")
    if not 0 <= args.base_cpi < math.inf:
        raise UsageError(f"perfctl cache corun: --base-cpi must be a non-negative number, got {args.base_cpi}")
    apps = []
    for path in args.rds:
        sample, benchmark = rds.read(path)
        if sample.mix is None:
            raise UsageError(f"perfctl cache corun: {path} has no instruction count: its mix is unknown")
        apps.append(statcc.Application(benchmark.get("name") or os.path.basename(path), sample, sample.mix))
    cache_lines = parse_bytes(args.cache) // LINE
    model = statcc.ThesisCpiModel(l1_lines=max(1, parse_bytes(args.l1) // LINE), base=args.base_cpi,
                                  l1=latencies[0], l2=latencies[1], memory=latencies[2])
    result = statcc.solve(apps, cache_lines, model)
    document = {"cache_bytes": cache_lines * LINE, "converged": result.converged, "iterations": result.iterations,
                "residual": result.residual, "damping": result.damping,
                "applications": [{"name": n, "mix": a.mix, "alone_miss_ratio": am, "alone_cpi": ac,
                                  "corun_miss_ratio": m, "corun_cpi": c}
                                 for n, a, am, ac, m, c in zip(result.names, apps, result.alone_miss_ratios,
                                                               result.alone_cpis, result.miss_ratios, result.cpis)]}
    code = write(CorunReport(document, result, args.base_cpi, args.latencies, verbosity(args)),
                 "json" if args.json else "table", console())
    if not result.converged:
        say("perfctl cache corun: the CPI/miss-ratio system did not converge: cannot estimate; the numbers "
            "shown are the last iterate")
    return code


def _pirate(args) -> int:
    from perfctl.agent import inventory, pirate, session
    from perfctl.agent.runner import RunError, make_control
    from perfctl.analysis.pirate import curve
    from perfctl.report.cache import PirateReport

    cmd = _command(args)
    if args.rounds < 1:
        raise UsageError("perfctl cache pirate: --rounds must be at least 1")
    cpus = os.sched_getaffinity(0)
    for what, cpu in (("--target-cpu", args.target_cpu), ("--pirate-cpu", args.pirate_cpu)):
        if cpu not in cpus:
            raise UsageError(f"perfctl cache pirate: {what} {cpu} is not a CPU this process may use ({sorted(cpus)})")
    if args.target_cpu == args.pirate_cpu:
        raise UsageError("perfctl cache pirate: the Target and the Pirate must run on different CPUs")
    if args.llc:
        cache_bytes, source = parse_bytes(args.llc), "--llc"
    else:
        cache_bytes, source = pirate.llc_bytes()
        if cache_bytes is None:
            raise UsageError(f"perfctl cache pirate: the shared cache size is unknown ({source}): give --llc BYTES")
    if cache_bytes < LINE:
        raise UsageError(f"perfctl cache pirate: a shared cache of {cache_bytes} bytes has no lines to share")
    # 0 is a Pirate size, not a cache size: the baseline with the whole cache left to the Target (the default
    # sweep starts with it). A sweep of nothing else runs no Pirate and has no curve to show.
    sizes = parse_sizes(args.sizes, allow_zero=True) if args.sizes else [cache_bytes * k // 8 for k in range(8)]
    if not any(sizes):
        raise UsageError("perfctl cache pirate: --sizes has only 0 (the baseline without a Pirate): add at least "
                         "one Pirate size, e.g. --sizes 0,4M")
    csv_out = Output("--csv", args.csv, CSV, signature=PIRATE_CSV_SIGNATURE, force=args.force)
    try:
        control = make_control(pin_cpu=args.target_cpu, timeout_s=args.timeout)
        resolved, bench = session.identify(cmd, control)
    except RunError as err:
        raise UsageError(f"perfctl cache pirate: {err}") from None
    check("perfctl cache pirate", [csv_out], benchmarks=[resolved], cwd=control.cwd,
          search_path=dict(control.env).get("PATH"))  # before anything runs
    inv = inventory.collect()
    try:
        if args.dynamic:
            if not inv.pmu.present:
                raise UsageError(f"perfctl cache pirate --dynamic needs instructions and cycles per interval: "
                                 f"{inv.pmu.reason}; run without --dynamic (one Target run per size)")
            result = pirate.measure_command_dynamic(resolved, control, sizes, cache_bytes, source, args.pirate_cpu,
                                                    inv)
        else:
            result = pirate.measure_command(resolved, bench, control, sizes, cache_bytes, source, args.rounds,
                                            args.pirate_cpu, inv)
    except RunError as err:
        raise UsageError(f"perfctl cache pirate: {err}") from None
    rows = [{"target_bytes": p.target_bytes, "pirate_bytes": p.pirate_bytes, "median": p.median, "kept": p.kept,
             "discarded": p.discarded, "verified": p.verified} for p in curve(result.points)]
    report = PirateReport(bench.name, cache_bytes, source, result, rows, verbosity(args))
    if args.csv:
        replace(csv_out, report.csv(), "perfctl cache pirate")
    return write(report, "json" if args.json else "table", console())
