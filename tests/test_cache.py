"""Memory-hierarchy models against answers known exactly (../shared/notes/cache-models.md, "Test cases with
known answers"), real traces of real programs under valgrind lackey, the Pirate on this machine, and bad
input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import perfctl, pmu_reason, processes_with, signal_when

from perfctl.agent.run.reaping import descendants, kill_tree
from perfctl.analysis import lru, pirate, reuse, statcc, statstack

RNG = np.random.default_rng(2024)


def _brute_stack(lines):
    out = []
    for t, line in enumerate(lines):
        previous = [j for j in range(t) if lines[j] == line]
        out.append(lru.COLD if not previous else len(set(lines[previous[-1] + 1:t])))
    return np.array(out)


def _full_sample(lines) -> reuse.ReuseSample:
    """Every access sampled: StatStack's approximations alone, no sampling error."""
    return reuse.hierarchical_sample(lines, reuse.SamplerSettings(len(lines), 0, len(lines)))


@pytest.mark.parametrize("n,footprint", [(1, 1), (2, 1), (300, 7), (2000, 60), (1500, 900)])
def test_exact_stack_distances_match_brute_force(n, footprint):
    lines = RNG.integers(0, footprint, n)
    assert (lru.stack_distances(lines) == _brute_stack(list(lines))).all()


def test_identity_of_reuse_and_stack_distance_needs_greater_or_equal():
    """Case 1: Σ_{j=1..r} 1(R→(x_{t−j}) ≥ j) is the LRU stack distance; the printed '>' is not."""
    lines = RNG.integers(0, 40, 3000)
    nxt = lru.next_access(lines)
    forward = np.where(nxt >= 0, nxt - np.arange(len(lines)) - 1, np.iinfo(np.int64).max)
    reuse_d = lru.reuse_distances(lines)
    exact = lru.stack_distances(lines)
    with_ge, with_gt = [], []
    for t, r in enumerate(reuse_d):
        if r == lru.COLD:
            continue
        j = np.arange(1, r + 1)
        with_ge.append(int(np.sum(forward[t - j] >= j)))
        with_gt.append(int(np.sum(forward[t - j] > j)))
    reused = exact[exact != lru.COLD]
    assert (np.array(with_ge) == reused).all()
    assert (np.array(with_gt) != reused).sum() > 100  # the printed form is off on many accesses


def test_cyclic_scan_is_exact_where_the_printed_equations_are_off_by_one():
    """Case 2: a scan over W lines misses always below W lines and only cold at W and above."""
    width, rounds = 100, 200
    lines = np.tile(np.arange(width), rounds)
    sizes = [1, 50, 99, 100, 101, 1000]
    truth = [1, 1, 1, width / len(lines), width / len(lines), width / len(lines)]
    assert lru.exact_mrc(lines, sizes).miss_ratios == pytest.approx(truth)
    model = statstack.statstack(_full_sample(lines), sizes)
    assert model.miss_ratios == pytest.approx(truth)  # 1.0 at C = 99, where the printed form gives 0.02


def test_sequential_sweep_in_8_byte_steps_misses_once_per_line():
    """Case 3, through lackey's address-to-line splitting: 8-byte accesses, 1/8 miss below the footprint."""
    from perfctl.agent.lackey import _lines

    width = 5000
    addresses = np.arange(width * 8, dtype=np.uint64) * np.uint64(8)
    lines = _lines(addresses, np.full(len(addresses), 8, dtype=np.uint64)).astype(np.int64)
    sizes = [16, 1024, width, 2 * width]
    exact = lru.exact_mrc(lines, sizes).miss_ratios
    assert exact == pytest.approx([1 / 8] * 4)
    assert statstack.statstack(_full_sample(lines), sizes).miss_ratios == pytest.approx(exact)


def test_line_crossing_accesses_touch_each_line():
    from perfctl.agent.lackey import _lines

    lines = _lines(np.array([60, 128, 250], dtype=np.uint64), np.array([8, 4, 100], dtype=np.uint64))
    assert lines.tolist() == [0, 1, 2, 3, 4, 5]  # 60..67 spans lines 0-1; 250..349 spans lines 3-5


def test_uniform_random_misses_one_minus_c_over_w_and_statstack_follows_at_sampling_rates():
    """Case 4: uniform over W lines: about 1 − C/W; StatStack within 0.01 on average at 10⁻² and 10⁻³."""
    width = 4000
    lines = RNG.integers(0, width, 2_000_000)
    sizes = np.array([100, 500, 1000, 2000, 3000, 3900])
    exact = lru.exact_mrc(lines, sizes).miss_ratios
    assert exact == pytest.approx(1 - sizes / width, abs=0.01)
    for rate in (1e-2, 1e-3):
        sample = reuse.hierarchical_sample(lines, reuse.settings_for_rate(rate, len(lines)), seed=3)
        assert sample.size == pytest.approx(rate * len(lines), rel=0.35)
        error = np.abs(statstack.statstack(sample, sizes).miss_ratios - exact)
        assert error.mean() <= 0.01, (rate, error)


def test_dangling_samples_carry_the_cold_misses():
    lines = np.concatenate([np.arange(20000), RNG.integers(0, 20000, 180000)])  # 10% of accesses are cold
    sample = reuse.hierarchical_sample(lines, reuse.settings_for_rate(0.05, len(lines)), seed=1)
    assert sample.dangling / sample.size == pytest.approx(0.1, abs=0.02)
    assert statstack.statstack(sample, [10**6]).miss_ratios[0] == pytest.approx(0.1, abs=0.02)


def test_per_window_estimation_is_robust_to_phases():
    """Two phases with different footprints: per-window StatStack beats the pooled estimate (I.5.4)."""
    lines = np.concatenate([np.tile(np.arange(300), 1000), 1000 + RNG.integers(0, 6000, 300_000)])
    sizes = np.array([200, 1000, 3000, 5000])
    exact = lru.exact_mrc(lines, sizes).miss_ratios
    sample = reuse.hierarchical_sample(lines, reuse.settings_for_rate(0.02, len(lines)), seed=5)
    windowed = np.abs(statstack.statstack(sample, sizes).miss_ratios - exact).mean()
    pooled = np.abs(statstack.statstack(sample, sizes, per_window=False).miss_ratios - exact).mean()
    assert windowed < 0.03 and windowed < pooled / 3, (windowed, pooled)


def _random_replacement(lines, capacity, seed=0):
    rng = np.random.default_rng(seed)
    cache, where, misses = [], {}, 0
    for line in lines.tolist():
        if line in where:
            continue
        misses += 1
        if len(cache) < capacity:
            where[line] = len(cache)
            cache.append(line)
        else:
            slot = int(rng.integers(capacity))
            del where[cache[slot]]
            cache[slot] = line
            where[line] = slot
    return misses / len(lines)


def test_statcache_matches_a_random_replacement_cache():
    """A cyclic scan: LRU misses always below the footprint, random replacement does not (Ch. 3.4). Near
    the critical size (900 of 1,000 lines) Eq. 3.1 with the exact cold ratio is 0.035 above the simulation
    (0.234 against 0.199), whatever the seed; with the sample's dangling share it swung from 0.192 (a sample
    without dangling samples) to 0.312 (seed 1, 203 of them)."""
    lines = np.tile(np.arange(1000), 150)
    for seed in range(4):
        sample = reuse.hierarchical_sample(lines, reuse.settings_for_rate(0.05, len(lines)), seed=seed)
        for capacity in (500, 900):
            estimated = statstack.statcache(sample, [capacity]).miss_ratios[0]
            assert estimated == pytest.approx(_random_replacement(lines, capacity), abs=0.04)
            assert estimated < 0.99  # where LRU misses every access


def test_statcc_two_identical_uniform_applications_share_half_each():
    """Case 5: each ≈ 1 − C/(2W), and within 0.02 of the co-run simulation (sampled at 10⁻¹)."""
    width, cache = 2000, 1500
    traces = [RNG.integers(0, width, 300_000) for _ in range(2)]
    apps = [statcc.Application(name, reuse.hierarchical_sample(trace, reuse.settings_for_rate(0.1, len(trace)),
                                                               seed=i), 0.3)
            for i, (name, trace) in enumerate(zip("ab", traces))]
    result = statcc.solve(apps, cache)
    simulated, _ = statcc.simulate_corun(traces, [0.3, 0.3], cache)
    assert result.converged
    for estimated, truth in zip(result.miss_ratios, simulated):
        assert truth == pytest.approx(1 - cache / (2 * width), abs=0.01)
        assert estimated == pytest.approx(truth, abs=0.02)
        assert estimated > result.alone_miss_ratios[0]


def test_statcc_unequal_applications_against_the_co_run_simulation():
    small, large = RNG.integers(0, 400, 300_000), RNG.integers(0, 6000, 300_000)
    model = statcc.ThesisCpiModel(l1_lines=64)
    apps = [statcc.Application(n, _full_sample(t), mix) for n, t, mix in (("small", small, 0.2), ("large", large, 0.4))]
    result = statcc.solve(apps, 3000, model)
    simulated, cpis = statcc.simulate_corun([small, large], [0.2, 0.4], 3000, model)
    assert result.converged and result.iterations < 50
    assert result.miss_ratios == pytest.approx(simulated, abs=0.02)
    assert result.cpis == pytest.approx(cpis, rel=0.05)


def test_a_statcc_system_that_does_not_settle_is_reported_not_hidden():
    rng = np.random.default_rng(0)
    lines = RNG.integers(0, 1000, 50_000)
    apps = [statcc.Application(n, _full_sample(lines), 0.3) for n in "ab"]
    result = statcc.solve(apps, 500, lambda app, mr: float(rng.uniform(1, 50)), max_iterations=40)
    assert result.converged is False and result.iterations == 40 and result.residual > 1e-3


def test_pirate_in_a_simulated_lru_cache_leaves_exactly_c_minus_p():
    """Case 6: while the Pirate's fetch ratio is 0, the Target misses as alone in C − P; too big is flagged."""
    sets, ways = 64, 8
    target = RNG.integers(0, sets * ways, 20_000)
    fits = pirate.simulate(target, 2 * sets, sets, ways)
    assert fits.pirate_fetch_ratio == 0 and not fits.flagged
    assert fits.target_misses == fits.standalone_misses
    too_big = pirate.simulate(target, 6 * sets, sets, ways)
    assert too_big.flagged and too_big.pirate_fetch_ratio > pirate.FETCH_RATIO_LIMIT


def test_pirate_curve_discards_values_taken_while_the_pirate_lost_lines():
    point = pirate.PiratePoint(1 << 20, 8 << 20, [10.0, 11.0, 50.0], [0.0, 0.005, 0.3])
    unknown = pirate.PiratePoint(0, 8 << 20, [9.0, 9.5], [None, None])
    first, second = pirate.curve([point, unknown])
    assert (first.target_bytes, first.median, first.verified) == (8 << 20, 9.25, False)
    assert (second.median, second.kept, second.discarded, second.verified) == (10.5, 2, 1, True)
    with pytest.raises(ValueError, match="does not fit"):
        pirate.check_sizes([1 << 20, 8 << 20], 8 << 20)


# --- the command line, with real programs ---


def test_mrc_of_a_real_program_with_rds_csv_plot_and_corun(programs, tmp_path):
    rds_files = []
    for name, args in (("matmul", ["60"]), ("pagetouch", ["2000"])):
        rds_file = tmp_path / f"{name}.rds"
        # traces of 10⁵-10⁶ accesses: a dense rate, or a few windows decide the estimate (see bench/ for rates)
        result = perfctl("cache", "mrc", "--json", "--rate", "0.25", "--sizes", "4K,64K,1M", "--rds", str(rds_file),
                         "--csv", str(tmp_path / f"{name}.csv"), "--plot", str(tmp_path / f"{name}.png"), "--",
                         str(programs / name), *args, timeout=300)
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["accesses"] > 10_000 and 0 < document["mix"] < 2 and document["samples"] > 100
        for row in document["curve"]:
            assert 0 <= row["exact_lru"] <= 1 and row["error"] <= 0.05, row
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / f"{name}.csv").read_text().startswith("bytes,lines,statstack,statcache,exact_lru,error")
        rds_files.append(str(rds_file))
    pages = json.loads(perfctl("cache", "mrc", "--json", "--sizes", "64K", "--no-exact", "--",
                               str(programs / "pagetouch"), "2000", timeout=300).stdout)
    assert pages["footprint_lines"] >= 2000  # a byte written on each of 2000 pages: 2000 distinct lines at least
    assert pages["samples"] >= 0.9 * min(100_000, pages["accesses"])  # the default rate: dense over a full trace
    assert "exact_lru" not in pages["curve"][0]
    corun = perfctl("cache", "corun", *rds_files, "--cache", "64K", "--json")
    assert corun.returncode == 0, corun.stderr
    apps = json.loads(corun.stdout)
    assert apps["converged"] and len(apps["applications"]) == 2
    for app in apps["applications"]:
        assert app["corun_miss_ratio"] >= app["alone_miss_ratio"] - 1e-9
        assert app["corun_cpi"] >= app["alone_cpi"] - 1e-9


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="probe: fewer than 2 CPUs for Target and Pirate")
def test_pirate_sweep_of_a_real_program_says_it_cannot_verify_without_llc_counters(programs):
    result = perfctl("cache", "pirate", "--sizes", "0,8M", "--llc", "32M", "--rounds", "2", "--json", "--",
                     str(programs / "matmul"), "80", timeout=300)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [p["pirate_bytes"] for p in document["points"]] == [0, 8 << 20]
    assert all(p["kept"] == 2 and p["median"] > 0 for p in document["points"])
    if pmu_reason() is not None:
        assert document["metric"] == "task-clock"
        assert "could not be checked" in document["note"] and not any(p["verified"] for p in document["points"])


@pytest.mark.skipif(pmu_reason() is not None, reason=f"probe: {pmu_reason()}")
def test_dynamic_pirate_sweep_measures_cpi_per_size(programs):
    result = perfctl("cache", "pirate", "--dynamic", "--sizes", "0,4M", "--json", "--",
                     str(programs / "matmul"), "300", timeout=300)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["metric"] == "CPI" and all(p["kept"] >= 1 for p in document["points"])


def test_dynamic_pirate_without_a_pmu_says_why(programs):
    if pmu_reason() is None:
        pytest.skip("probe: this machine has a PMU")
    result = perfctl("cache", "pirate", "--dynamic", "--", str(programs / "spin"), "0.1")
    assert result.returncode == 2 and "needs instructions and cycles" in result.stderr


@pytest.mark.parametrize("args,message", [
    (["mrc", "--sizes", "0", "--", "/bin/true"], "a cache of 0 bytes"),
    (["mrc", "--sizes", "12Q", "--", "/bin/true"], "not a size in bytes"),
    (["mrc", "--rate", "2", "--", "/bin/true"], "sampling rate must be in (0, 1]"),
    (["mrc"], "no command given"),
    (["mrc", "--csv", "/nonexistent/dir/c.csv", "--", "/bin/true"], "cannot write in /nonexistent/dir"),
    (["pirate", "--llc", "1M", "--sizes", "2M", "--", "/bin/true"], "does not fit the 1048576-byte shared cache"),
    (["pirate", "--target-cpu", "0", "--pirate-cpu", "0", "--", "/bin/true"], "different CPUs"),
    (["pirate", "--llc", "32M", "--sizes", "0", "--", "/bin/true"], "--sizes has only 0 (the baseline"),
    (["pirate", "--llc", "32M", "--sizes", "0,0K", "--", "/bin/true"], "--sizes has only 0 (the baseline"),
    (["mrc", "--max-trace-bytes", "0", "--", "/bin/true"], "--max-trace-bytes must be at least 1 byte"),
    (["corun", "--base-cpi", "nan", "x.rds"], "--base-cpi must be a non-negative number"),
    (["corun", "--latencies", "1,nan,130", "x.rds"], "--latencies takes three non-negative numbers"),
    (["corun", "/nonexistent.rds"], "No such file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = perfctl("cache", *args)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_empty_truncated_and_reuse_free_inputs(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("==1== Lackey\n")
    result = perfctl("cache", "mrc", "--from-lackey", str(empty))
    assert result.returncode == 2 and "no data accesses" in result.stderr
    truncated = tmp_path / "t.rds"
    truncated.write_text('{"format": "perfctl-rds", "version": 1, "distances": [1, 2')
    result = perfctl("cache", "corun", str(truncated))
    assert result.returncode == 2 and "not JSON (truncated?)" in result.stderr
    once = tmp_path / "once.log"  # every line touched once: no reuse at all
    once.write_text("".join(f" L {0x1000 + 64 * i:x},8\n" for i in range(5000)) + "==1==   guest instrs:  9,000\n")
    result = perfctl("cache", "mrc", "--from-lackey", str(once), "--rate", "0.1", "--sizes", "4K,1M")
    assert result.returncode == 0, result.stderr
    assert "were never reused" in result.stdout and "only cold misses remain" in result.stdout
    with pytest.raises(statstack.CannotEstimate, match="empty"):
        statstack.statstack(reuse.ReuseSample(np.zeros(0, np.int64), np.zeros(0, np.int64), 10), [1])


# --- issue 12: traces that end early, the size cap, signals, hostile .rds files ---


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 20 MB tmpfs, as the issue's full TMPDIR."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="probe: mounting a tmpfs needs root")
def test_a_full_tmpdir_cannot_cut_the_trace_short(programs, small_tmpfs):
    """Lackey's log of sort 10000 is ~80 MB: through a 20 MB TMPDIR it came out cut at 370,380 accesses with no
    instruction count (sort 30000) and exit 0. Streamed through a pipe, the whole trace arrives."""
    result = perfctl("cache", "mrc", "--json", "--no-exact", "--sizes", "64K", "--", str(programs / "sort"), "10000",
                     env={**os.environ, "TMPDIR": str(small_tmpfs)}, timeout=300)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["instructions"] is not None and document["instructions"] > 3_500_000, document
    assert document["accesses"] > 1_500_000 and 0.3 < document["mix"] < 0.5, document
    assert os.listdir(small_tmpfs) == []


def test_a_lackey_log_without_its_instruction_total_is_refused(tmp_path):
    """A log cut off by a full disk has accesses but no 'guest instrs' total: not a complete trace."""
    cut = tmp_path / "cut.log"
    cut.write_text("".join(f" L {0x1000 + 8 * (i % 300):x},8\n" for i in range(5000)) + " S 1f")
    result = perfctl("cache", "mrc", "--from-lackey", str(cut))
    assert result.returncode == 2, result.stdout
    assert "without its 'guest instrs' total" in result.stderr and len(result.stderr.strip().splitlines()) == 1


_HOSTILE_LOGS = {  # the adversarial tester's logs: tracebacks, a stall of minutes, numpy's words, or silence
    "zero total": (b" L 0400,8\n S 0500,4\n==1== guest instrs: 0\n", "line 3: 'guest instrs' total is 0"),
    "address past 64 bits": (b" L ffffffffffffffffffff,8\n==1== guest instrs: 5\n",
                             "line 1: address ffffffffffffffffffff is beyond 64 bits"),
    "size past 64 bits": (b" L 0400,99999999999999999999999\n==1== guest instrs: 5\n",
                          "line 1: size 99999999999999999999999 of the access at 0400: lackey reports 1 to 512"),
    "4 GB access": (b" L 0400,4000000000\n==1== guest instrs: 5\n", "line 1: size 4000000000 of the access"),
    "zero size": (b" L 0400,8\n L 0400,0\n==1== guest instrs: 5\n", "line 2: size 0 of the access"),
    "access wrapping past 2^64": (b" L ffffffffffffffc0,128\n==1== guest instrs: 5\n",
                                  "line 1: the 128-byte access at ffffffffffffffc0 runs past the end"),
    "total not a count": (b" L 0400,8\n==1== guest instrs: ,\n", "line 2: 'guest instrs' total ',' is not a count"),
    "total before the accesses": (b"==1== guest instrs: 5\n L 0400,8\n",
                                  "line 2: a data access after the 'guest instrs' total (line 1)"),
    "two totals": (b" L 0400,8\n==1== guest instrs: 5\n==1== guest instrs: 7\n",
                   "line 3: a second 'guest instrs' total (the first is on line 2)"),
    "total past 2^63": (b" L 0400,8\n==1== guest instrs: 10,000,000,000,000,000,000\n",
                        "line 2: 'guest instrs' total is not below 2^63"),
    "65 accesses per instruction": (b" L 0400,8\n" * 65 + b"==1== guest instrs: 1\n",
                                    "line 66: 'guest instrs' total of 1 for 65 data accesses, 65 per instruction"),
}


@pytest.mark.parametrize("name", list(_HOSTILE_LOGS))
def test_hostile_lackey_logs_are_one_line_and_exit_2(tmp_path, name):
    """Each field is checked (address, size, wrap, the one total after the last access): one line naming the
    line and field, exit 2, at once (the 4 GB access used to expand into 62 million lines for minutes)."""
    log, message = _HOSTILE_LOGS[name]
    path = tmp_path / "hostile.log"
    path.write_bytes(log)
    result = perfctl("cache", "mrc", "--from-lackey", str(path), timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr and "negative dimensions" not in result.stderr, result.stderr


def test_the_pipe_parser_gives_the_same_verdicts_in_blocks_of_any_size():
    """valgrind's pipe hands the parser blocks cut anywhere: line numbers and verdicts do not depend on them."""
    from perfctl.agent.lackey import _Parser

    def verdict(log: bytes, block: int):
        parser = _Parser("pipe")
        try:
            for start in range(0, len(log), block):
                parser.feed(log[start:start + block])
            trace = parser.finish()
        except ValueError as err:
            return str(err)
        return trace.accesses, trace.instructions, trace.lines.tolist()

    padding = b"I  0400,3\n L 0400,8\n" * 40  # 80 lines before each hostile log's first
    for log, message in _HOSTILE_LOGS.values():
        line = int(re.match(r"line (\d+):", message).group(1))
        shifted = f"pipe: line {line + 80}: "
        verdicts = {verdict(padding + log, block) for block in (1, 7, 64, 1 << 20)}
        assert len(verdicts) == 1 and next(iter(verdicts)).startswith(shifted), (shifted, verdicts)
    good = padding + b" M 043c,8\n==1==   guest instrs:  1,000\n"
    assert {str(verdict(good, block)) for block in (1, 7, 1 << 20)} == {str((41, 1000, [16] * 41 + [17]))}


def test_the_trace_size_cap_kills_valgrind_and_progress_shows_on_a_terminal(programs):
    marker = "31337"  # sort's N, unique to this test: finds this test's valgrind in /proc
    leader, follower = os.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "perfctl", "cache", "mrc", "--no-exact",
                                    "--max-trace-bytes", "40M", "--", str(programs / "sort"), marker],
                                   stdout=subprocess.PIPE, stderr=follower, text=True)
        os.close(follower)
        stdout, _ = process.communicate(timeout=300)
        terminal = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        os.close(leader)
        for pid in processes_with("--tool=lackey", marker):
            kill_tree(pid)
    lines = [line for line in terminal.decode().replace("\r", "\n").splitlines() if line.strip()]
    assert process.returncode == 2 and stdout == "", lines
    assert "passed --max-trace-bytes 41,943,040" in lines[-1], lines
    assert sum("--max-trace-bytes" in line for line in lines) == 1
    progress = [line for line in lines if "of trace so far" in line]
    assert progress and "data accesses" in progress[0], lines
    assert processes_with("--tool=lackey", marker) == []


def test_sigterm_kills_valgrind_tree_and_leaves_no_temp_files(programs, tmp_path):
    """SIGTERM exits 143 (128 + 15) with valgrind's tree killed and nothing left in TMPDIR. Needs the
    signal policy of perfctl/output.py (SIGINT, SIGTERM, SIGHUP raise a KeyboardInterrupt subclass in every
    command); without it, returncode -15 and valgrind left running."""
    marker = "400000"  # sort of 400,000 values: minutes under lackey, so valgrind is still tracing
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "perfctl", "cache", "mrc", "--no-exact", "--",
                                str(programs / "sort"), marker], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmpdir)})
    try:
        def tracing():
            return set(processes_with("--tool=lackey", marker)) & set(descendants(process.pid))

        # one second more: valgrind traces, perfctl reads its log
        _, stderr = signal_when(process, tracing, signal.SIGTERM, "valgrind tracing under perfctl", settle=1)
        assert process.returncode == 143, (process.returncode, stderr)
        assert processes_with("--tool=lackey", marker) == [], "valgrind outlived perfctl"
        assert os.listdir(tmpdir) == []
    finally:
        for pid in processes_with("--tool=lackey", marker):
            kill_tree(pid)


def _rds_document() -> dict:
    """A real sample (a cyclic scan over 300 lines), as perfctl cache mrc --rds writes it."""
    lines = np.tile(np.arange(300), 40)
    sample = reuse.hierarchical_sample(lines, reuse.settings_for_rate(0.5, len(lines)), seed=1, instructions=30_000)
    return {"format": "perfctl-rds", "version": 1, "benchmark": {"name": "scan"}, "line_bytes": 64,
            "accesses": sample.accesses, "instructions": sample.instructions, "sampler": sample.sampler,
            "distances": sample.distances.tolist(), "windows": sample.windows.tolist()}


def _hostile(document: dict, field: str, value, index: int | None = None) -> dict:
    changed = json.loads(json.dumps(document))
    if index is None:
        changed[field] = value
    else:
        changed[field][index] = value
    return changed


@pytest.mark.parametrize("field,value,index,message", [
    ("distances", 3.5, 0, '"distances" must hold only integers, found float'),
    ("distances", "7", 1, '"distances" must hold only integers, found str'),
    ("distances", True, 2, '"distances" must hold only integers, found bool'),
    ("distances", None, 3, '"distances" must hold only integers, found NoneType'),
    ("distances", -2, 0, '"distances" must lie in [-1, 12000)'),
    ("distances", 12000, 0, '"distances" must lie in [-1, 12000)'),
    ("distances", 2 ** 64, 0, '"distances" must lie in [-1, 12000)'),
    ("distances", "NaN", 0, "NaN is not a number"),
    ("windows", -1, 0, '"windows" must lie in [0, 12000)'),
    ("windows", 2 ** 62, 0, '"windows" must lie in [0, 12000)'),
    ("windows", 0.0, 0, '"windows" must hold only integers, found float'),
    # 12,000 accesses in 1 instruction (the file had 39,803): beyond the mix bound
    ("instructions", 1, None, '"accesses" / "instructions" = 1.2e+04 data accesses per instruction; no x86'),
    ("instructions", 0, None, '"instructions" must be between 1 and 2^63 - 1'),
    ("instructions", "Infinity", None, "Infinity is not a number"),
    ("instructions", 1.5e4, None, '"instructions" must be an integer, got float'),
    ("accesses", 1e30, None, '"accesses" must be an integer, got float'),
    ("accesses", 2 ** 63, None, '"accesses" must be between 1 and 2^63 - 1'),
    ("accesses", "12000", None, '"accesses" must be an integer, got str'),
    ("version", True, None, "unsupported version True"),
    ("line_bytes", 64.0, None, "lines of 64.0 bytes"),
    ("distances", {"a": 1}, None, '"distances" must be a list of integers, got dict'),
    ("benchmark", ["x"], None, '"benchmark" must be an object'),
    ("benchmark", {"name": 5}, None, '"benchmark.name" must be a string'),
])
def test_corun_refuses_hostile_rds_fields_naming_the_field(tmp_path, field, value, index, message):
    """Each hostile file was accepted, and corun said "converged" for some: now one line naming the field,
    exit 2."""
    document = _rds_document()
    hostile = _hostile(document, field, value, index)
    text = json.dumps(hostile)
    if value in ("NaN", "Infinity"):  # JSON has no such numbers; Python's reader accepts them bare
        text = text.replace(f'"{value}"', value)
    path = tmp_path / "hostile.rds"
    path.write_text(text)
    good = tmp_path / "good.rds"
    good.write_text(json.dumps(document))
    result = perfctl("cache", "corun", str(good), str(path), "--cache", "16K", "--json")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and str(path) in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_corun_refuses_more_samples_than_accesses(tmp_path):
    document = _rds_document()
    document["accesses"] = len(document["distances"]) - 1
    document["distances"] = [min(d, document["accesses"] - 1) for d in document["distances"]]
    document["windows"] = [0] * len(document["distances"])
    document["instructions"] = document["accesses"]
    path = tmp_path / "many.rds"
    path.write_text(json.dumps(document))
    result = perfctl("cache", "corun", str(path))
    assert result.returncode == 2 and "each sample is one access" in result.stderr, result.stderr


def test_corun_shows_a_hostile_benchmark_name_literally(tmp_path):
    document = _rds_document()
    document["benchmark"]["name"] = "\x1b]0;owned\x07\x1b[2J[bold red]evil"
    path = tmp_path / "named.rds"
    path.write_text(json.dumps(document))
    result = perfctl("cache", "corun", str(path), "--cache", "16K", "--width", "250")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b]0;owned\\x07\\x1b[2J[bold red]evil" in result.stdout
