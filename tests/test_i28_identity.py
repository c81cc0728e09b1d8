"""Issue 28, part 2: the identity of a run. A run is its uuid (read twice, it counts once), runs are paired
by their round or run index (never by their place in a list), two programs under one name are not pooled
silently, and the report draws B's runs under the benchmark they were compared as. Real programs measured
by the real command line; real hyperfine where it is installed."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import perfctl, read_records, sample_of, signal_when

from perfctl.formats import read_dataset
from perfctl.report.stat import StatSummary

HYPERFINE = shutil.which("hyperfine")
needs_hyperfine = pytest.mark.skipif(HYPERFINE is None, reason="probe: no hyperfine on PATH")


@pytest.fixture(scope="module")
def faults(tmp_path_factory, programs):
    """Two real measurements of 20 runs of pagetouch through a script that counts its runs: run n touches
    (800 + 300 (n mod 7)) x SCALE/100 pages, so the page faults change from run to run, and A's (SCALE 103)
    are 3% more than B's of the same n; A's run 3 and B's run 15 fail (exit 1)."""
    out = tmp_path_factory.mktemp("faults")
    script = out / "touch.sh"
    script.write_text('#!/bin/sh\nn=$(cat "$1" 2>/dev/null || echo 0)\necho $((n + 1)) > "$1"\n'
                      '[ "$n" -eq "$2" ] && exit 1\n'
                      f'exec {programs / "pagetouch"} $(( (800 + 300 * (n % 7)) * $3 / 100 ))\n')
    script.chmod(0o755)
    files = {}
    for side, fail, scale in (("A", 3, 103), ("B", 15, 100)):
        path = out / f"{side}.jsonl"
        result = perfctl("stat", "-q", "-r", "20", "-e", "page-faults", "--name", "touch", "-o", str(path), "--",
                         str(script), str(out / f"count-{side}"), str(fail), str(scale))
        assert result.returncode == 1, result.stderr  # one run failed, as meant
        files[side] = str(path)
    return files


def _document(*args) -> tuple[dict, subprocess.CompletedProcess]:
    result = perfctl("compare", *args, "--format", "json")
    assert result.stdout, result.stderr
    return json.loads(result.stdout), result


def test_a_run_appended_twice_counts_once(faults, tmp_path):
    """B appended to itself 4 times holds every run 4 times: compare must see B's 19 runs, not 76, and say
    how many repeats it left out."""
    repeated = tmp_path / "B4.jsonl"
    repeated.write_bytes(open(faults["B"], "rb").read() * 4)
    once = read_dataset(faults["B"]).benchmarks["touch"]
    four = read_dataset(str(repeated))
    assert four.benchmarks["touch"].metrics == once.metrics
    assert any("left out 60 samples whose uuid an earlier sample already had" in n for n in four.notes)
    document, result = _document(faults["A"], str(repeated), "--metric", "page-faults")
    assert [(r["n_a"], r["n_b"]) for r in document["benchmarks"]] == [(19, 19)], result.stdout


def test_a_repeated_run_is_still_checked(faults, tmp_path):
    """A line repeating an earlier uuid is left out only once it reads as a sample: a bad one is refused."""
    lines = open(faults["B"]).read().splitlines()
    bad = json.loads(lines[3])
    bad["wall_ns"] = "12"
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines + [json.dumps(bad)]) + "\n")
    result = perfctl("compare", faults["A"], str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == \
        f"perfctl compare: {path}:{len(lines) + 1}: wall_ns: expected a number, got a string"


def test_paired_runs_keep_their_true_partners_when_runs_fail(faults):
    """A's run 3 and B's run 15 failed: paired by place, runs 3-14 would meet the next round's partner and
    the clear 3% difference would spread over [0.9, 1.2]; paired by run index it stays clear."""
    document, result = _document(faults["A"], faults["B"], "--paired", "--metric", "page-faults")
    (row,) = document["benchmarks"]
    assert (row["n_a"], row["n_b"]) == (18, 18)
    assert 1.02 < row["ratio_low"] <= row["ratio_high"] < 1.035, row
    assert row["verdict"] == "trivial difference"
    assert "paired by round (run index): 18 pairs; left out 1 runs of A and 1 of B" in row["warnings"]


def test_runs_of_files_without_an_index_are_paired_by_position_and_said_so(tmp_path):
    """pyperf files (real ones) say nothing of rounds: --paired pairs by position, and says so."""
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-m", "pyperf", "command", "--quiet", "-p", "3", "-n", "2", "-w", "1",
                        "--name", "true", "-o", str(tmp_path / f"{name}.json"), "--", "/bin/true"],
                       check=True, capture_output=True)
    document, _ = _document(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--paired")
    assert "paired by position: A's and B's runs carry no round or run index" in document["benchmarks"][0]["warnings"]


@needs_hyperfine
def test_hyperfine_runs_that_failed_leave_their_partner_out(tmp_path, programs):
    """hyperfine -i keeps running after a failed run and exports its exit code: with --paired, run k of A
    still meets run k of B (a run's place in ``times`` is its index), not the next one."""
    script = tmp_path / "touch.sh"
    script.write_text('n=$(cat "$1" 2>/dev/null || echo 0)\necho $((n + 1)) > "$1"\n'
                      '[ "$n" -eq "$2" ] && exit 1\n'
                      f'exec {programs / "pagetouch"} $(( (800 + 300 * (n % 7)) * 10 ))\n')
    paths = []
    for side, fail in (("A", 3), ("B", 8)):  # hyperfine's own warm-up-free runs 0..11; run 'fail' fails
        path = tmp_path / f"{side}.json"
        subprocess.run([HYPERFINE, "-N", "-i", "-r", "12", "-n", "touch",
                        f"sh {script} {tmp_path / ('count-' + side)} {fail}", "--export-json", str(path)],
                       check=True, capture_output=True)
        paths.append(str(path))
    document, result = _document(*paths, "--paired")
    (row,) = document["benchmarks"]
    assert (row["n_a"], row["n_b"]) == (10, 10), result.stdout
    assert "paired by round (run index): 10 pairs; left out 1 runs of A and 1 of B" in row["warnings"]


def test_an_ab_interrupted_mid_round_pairs_its_complete_rounds(tmp_path):
    """SIGINT while a round is half done leaves one more run of one command than of the other: --paired
    compares the complete rounds (old: exit 4, 'needs as many runs on each side')."""
    path = tmp_path / "ab.jsonl"

    def counts():
        text = path.read_text()  # complete lines only: the last may be half written as it is read
        measured = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()[1:]
                    if '"warmup":false' in line]
        return [sum(r["labels"]["ab"] == side for r in measured) for side in "AB"]

    for _ in range(5):
        path.unlink(missing_ok=True)
        process = subprocess.Popen([sys.executable, "-m", "perfctl", "ab", "-q", "--no-progress", "--min-runs", "500",
                                    "--max-runs", "500", "-o", str(path), "--", "sleep", "0.05", ":::", "sleep",
                                    "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        signal_when(process, lambda: path.exists() and min(counts()) >= 6 and len(set(counts())) == 2,
                    2, "a round half done")
        if len(set(counts())) == 2:
            break
    a, b = counts()
    assert a != b, "every interrupt fell between rounds"
    document, result = _document(f"{path}@ab=A", f"{path}@ab=B", "--paired")
    assert result.returncode in (0, 3), result.stdout + result.stderr
    (row,) = document["benchmarks"]
    assert row["n_a"] == row["n_b"] == min(a, b)
    assert row["ratio_low"] is not None


@needs_hyperfine
@pytest.mark.parametrize("commands", [["-n", "same", "sleep 0.001", "-n", "same", "sleep 0.003"],
                                      ["-n", "fixed", "-P", "n", "1", "2", "sleep 0.00{n}"]])
def test_two_hyperfine_commands_under_one_name_are_not_pooled(tmp_path, commands):
    paths = []
    for side in "AB":
        path = tmp_path / f"{side}.json"
        subprocess.run([HYPERFINE, "-N", "-r", "5", *commands, "--export-json", str(path)], check=True,
                       capture_output=True)
        paths.append(str(path))
    result = perfctl("compare", *paths)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "left out: its runs mix 2 argv (hyperfine results[0]" in line and "--pool" in line
    pooled = perfctl("compare", *paths, "--pool")
    assert pooled.returncode in (0, 3) and "(--pool)" in pooled.stdout, pooled.stderr
    assert "5 runs" in pooled.stdout and " 10/10 " in pooled.stdout


@needs_hyperfine
def test_the_report_draws_b_under_another_name(tmp_path):
    """One benchmark a side under two names (hyperfine's two commands): compare pairs them, and the report
    must draw B's runs too (it looked them up under A's name and found none)."""
    paths = []
    for command in ("sleep 0.002", "sleep 0.003"):
        path = tmp_path / f"{command[-1]}.json"
        subprocess.run([HYPERFINE, "-N", "-r", "5", command, "--export-json", str(path)], check=True,
                       capture_output=True)
        paths.append(str(path))
    report = tmp_path / "r.html"
    result = perfctl("compare", *paths, "--html", str(report))
    assert result.returncode in (0, 3), result.stderr
    page = report.read_text()
    # the table of every counter both sides recorded is drawn only where B's runs are found
    assert "every counter both sides recorded" in page


def test_stat_summary_counts_a_run_once(faults):
    """stat's summary and the readers follow one rule (InterferencePolicy.judge) and count a uuid once."""
    samples = [sample_of(r) for r in read_records(faults["A"]) if r["type"] == "sample"]
    summary = StatSummary()
    for sample in samples + samples:
        summary.add(sample)
    assert summary.runs == 20 and summary.outcomes["failed"] == 1
    assert len(summary.events["page-faults"].values) == 19
    assert summary.events["page-faults"].values == read_dataset(faults["A"]).benchmarks["touch"].metrics["page-faults"]


def test_blocks_of_appended_measurements_pair_block_by_block(programs, tmp_path):
    """Two stat -o runs appended to each side (as examples/compare-builds.sh does): run k of the j-th
    measurement pairs with run k of the j-th on the other side; the keys are (block, run index)."""
    path = tmp_path / "A.jsonl"
    for _ in range(2):
        result = perfctl("stat", "-q", "-r", "3", "--warmup", "1", "-e", "page-faults", "--name", "t", "-o", str(path),
                         "--", str(programs / "pagetouch"), "100")
        assert result.returncode == 0, result.stderr
    bench = read_dataset(str(path)).benchmarks["t"]
    assert list(bench.keyed("page-faults")) == [1, 2, 3, 1 << 32 | 1, 1 << 32 | 2, 1 << 32 | 3]  # (block, index)
    assert os.path.getsize(path) > 0


def test_two_pyperf_benchmarks_under_one_name_are_not_pooled(tmp_path):
    """Two real pyperf results (/bin/true and sleep) merged into one file under one name, as a hand-merged
    suite holds them: two programs, left out unless pooled, as perfctl's and hyperfine's are."""
    merged = None
    for index, command in enumerate((["/bin/true"], ["/bin/sleep", "0.001"])):
        out = tmp_path / f"{index}.json"
        subprocess.run([sys.executable, "-m", "pyperf", "command", "--quiet", "-p", "3", "-n", "2", "-w", "1",
                        "--name", "same", "-o", str(out), "--", *command], check=True, capture_output=True)
        document = json.loads(out.read_text())
        if merged is None:
            merged = document
        else:
            merged["benchmarks"] += document["benchmarks"]
    path = tmp_path / "merged.json"
    path.write_text(json.dumps(merged))
    twin = tmp_path / "twin.json"  # one file on both sides is refused before it is read
    shutil.copyfile(path, twin)
    result = perfctl("compare", str(path), str(twin))
    assert result.returncode == 2
    assert "same: left out: its runs mix 2 argv (pyperf benchmarks[0]: 3 runs, pyperf benchmarks[1]: 3 runs)" \
        in result.stderr
    assert perfctl("compare", str(path), str(twin), "--pool").returncode in (0, 3)


def test_an_integer_beyond_any_float_is_refused_in_one_line(tmp_path):
    """A wall_ns of 10^400 ended in an OverflowError traceback (second hostile review): refused as no count
    or time, naming its line, as the other readers do."""
    path = tmp_path / "a.jsonl"
    made = perfctl("stat", "-r", "3", "-e", "task-clock", "--no-progress", "-o", str(path), "--", "/bin/true")
    assert made.returncode == 0, made.stderr
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    lines[2] = json.dumps(record).replace(f'"wall_ns": {record["wall_ns"]}', '"wall_ns": 1' + "0" * 400)
    huge = tmp_path / "huge.jsonl"
    huge.write_text("\n".join(lines) + "\n")
    result = perfctl("compare", str(huge), str(path))
    assert result.returncode == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1 and "401 digits is not a count or a time" in result.stderr, \
        result.stderr
