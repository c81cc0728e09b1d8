"""Issue 28's third review, the identity of a run: one file on both sides of a compare in any format (it was
refused only for perfctl JSON Lines), Google Benchmark repetitions and pyperf runs read twice (counted twice,
verdict changed, no note), two Google Benchmark families under one name (pooled silently), and pairing fields
of perfctl samples that are no index (run_index true or 2^32, extra.round 0.5: read as "no index")."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import perfctl

from perfctl.formats import read_dataset

needs_hyperfine = pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH")


def _refused(result, *needles) -> str:
    """The one line of a refusal (exit 2, nothing on stdout) holding every needle."""
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert all(needle in line for needle in needles), line
    return line


# --- 3. one file on both sides, any format ------------------------------------------------------------------

@needs_hyperfine
def test_one_hyperfine_file_on_both_sides_is_refused_by_any_name(tmp_path, programs):
    """compare hf40.json hf40.json --paired gave "1.000x [1.000, 1.000] equivalence", exit 0 (also through a
    symlink); a copy, a different file, is still read."""
    exported = tmp_path / "h.json"
    subprocess.run(["hyperfine", "-N", "-r", "5", "-w", "1", "--export-json", str(exported),
                    f"{programs / 'spin'} 0.001"], check=True, capture_output=True)
    (tmp_path / "sub").mkdir()
    os.symlink(exported, tmp_path / "link.json")
    os.link(exported, tmp_path / "sub" / "hard.json")
    for other in (exported, tmp_path / "link.json", tmp_path / "sub" / "hard.json", tmp_path / "sub" / ".." / "h.json"):
        _refused(perfctl("compare", str(exported), str(other), "--paired"), "A and B are the same file",
                 "compared with itself")
    copy = tmp_path / "copy.json"
    shutil.copyfile(exported, copy)
    assert perfctl("compare", str(exported), str(copy)).returncode in (0, 3)


def test_one_file_of_every_other_format_on_both_sides_is_refused(tmp_path):
    """Google Benchmark, pyperf, pytest-benchmark and perf stat files compared with themselves: exit 0."""
    gbench = tmp_path / "g.json"
    gbench.write_text(json.dumps({"benchmarks": _repetitions(0, [100, 101, 99])}))
    pyperf_file = tmp_path / "p.json"
    pyperf_file.write_text(json.dumps({"version": "1.0", "metadata": {"name": "x", "unit": "second"}, "benchmarks": [
        {"runs": [{"metadata": {"date": f"2026-11-28 01:00:0{i}.000001"}, "values": [0.001 + i / 1e5]}
                  for i in range(3)]}]}))
    pytest_file = tmp_path / "pb.json"
    pytest_file.write_text(json.dumps({"benchmarks": [{"name": "t", "fullname": "t.py::t",
                                                       "stats": {"data": [0.001, 0.0011, 0.0012]}}]}))
    for path in (gbench, pyperf_file, pytest_file):
        _refused(perfctl("compare", str(path), str(path)), "A and B are the same file")


def test_perf_stat_file_on_both_sides_is_refused(tmp_path):
    path = tmp_path / "ps.csv"
    for _ in range(3):
        made = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", "--append", "-o", str(path), "--",
                               "/bin/true"], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"probe: perf stat cannot count task-clock here: {made.stderr.strip()[:120]}")
    assert read_dataset(str(path)).format == "perf-stat"
    _refused(perfctl("compare", str(path), str(path), "--paired"), "A and B are the same file")


def test_two_selections_of_one_file_stay_allowed(tmp_path, programs):
    """F@ab=A F@ab=B are two sets of runs of one file: read; F@ab=A twice is one set: refused."""
    path = tmp_path / "ab.jsonl"
    made = perfctl("ab", "-q", "--min-runs", "4", "--max-runs", "4", "-e", "page-faults", "-o", str(path), "--",
                   str(programs / "pagetouch"), "100", ":::", str(programs / "pagetouch"), "120")
    assert path.exists(), made.stderr
    both = perfctl("compare", f"{path}@ab=A", f"{path}@ab=B", "--metric", "page-faults")
    assert both.returncode in (0, 3), both.stderr
    _refused(perfctl("compare", f"{path}@ab=A", f"{path}@ab=A"), "A and B are the same file")


# --- 4. Google Benchmark: a run is (name, family_index, per_family_instance_index, repetition_index) ----------

def _repetitions(family: int, times: list[float], name: str = "BM_x") -> list[dict]:
    """Entries as the library's JSON reporter writes them (json_reporter.cc PrintRunData, 1.8): one per
    repetition of one benchmark instance."""
    return [{"name": name, "family_index": family, "per_family_instance_index": 0, "run_name": name,
             "run_type": "iteration", "repetitions": len(times), "repetition_index": index, "threads": 1,
             "iterations": 1000, "real_time": time, "cpu_time": time, "time_unit": "ns"}
            for index, time in enumerate(times)]


A_TIMES = [100, 101, 102, 103, 104, 100.5, 101.5, 102.5]
B_TIMES = [98, 99, 97, 98.5, 99.5, 97.5, 98.2, 98.8]


def _gbench(path, entries) -> str:
    path.write_text(json.dumps({"context": {"library_version": "v1.8.3"}, "benchmarks": entries}))
    return str(path)


def _table(result) -> dict:
    assert result.returncode in (0, 3, 4), result.stderr  # 4: pooled runs of two families read as disturbed
    return json.loads(result.stdout)


def test_google_benchmark_repetitions_read_twice_count_once(tmp_path):
    """gA4.json (every repetition 4 times) vs gB: n 32/8 and "trivial difference inside" instead of A's own
    "relevant difference crosses", no note."""
    once = _gbench(tmp_path / "a.json", _repetitions(0, A_TIMES))
    four = _gbench(tmp_path / "a4.json", _repetitions(0, A_TIMES) * 4)
    b = _gbench(tmp_path / "b.json", _repetitions(0, B_TIMES))
    plain = _table(perfctl("compare", once, b, "--format", "json"))
    repeated = _table(perfctl("compare", four, b, "--format", "json"))
    assert [(r["n_a"], r["n_b"]) for r in repeated["benchmarks"]] == [(8, 8)]
    assert repeated["benchmarks"][0]["ratio_a_over_b"] == plain["benchmarks"][0]["ratio_a_over_b"]
    assert any("A: left out 24 samples whose name, family_index, per_family_instance_index and repetition_index "
               "an earlier sample already had" in note for note in repeated["notes"]), repeated["notes"]


def test_two_google_benchmark_families_under_one_name_are_refused_unless_pooled(tmp_path):
    """gAB.json (A's runs plus B's as a second family, also BM_x) vs gB: 16/8 equivalence, exit 0."""
    mixed = _gbench(tmp_path / "ab.json", _repetitions(0, A_TIMES) + _repetitions(1, B_TIMES))
    b = _gbench(tmp_path / "b.json", _repetitions(0, B_TIMES))
    _refused(perfctl("compare", mixed, b), "BM_x: left out: its runs mix 2", "family_index 0: 8 runs",
             "family_index 1: 8 runs", "--pool")
    pooled = _table(perfctl("compare", mixed, b, "--pool", "--format", "json"))
    assert [(r["n_a"], r["n_b"]) for r in pooled["benchmarks"]] == [(16, 8)]
    assert any("pooled runs" in note for note in pooled["notes"])


@pytest.mark.parametrize("key, value, said", [
    ("repetition_index", -1, "expected a non-negative integer, got -1"),
    ("repetition_index", 1 << 40, "1099511627776 is not below repetitions 8"),
    ("repetition_index", True, "expected a non-negative integer, got True"),
    ("family_index", "0", "expected a non-negative integer, got '0'"),
    ("per_family_instance_index", 0.5, "expected a non-negative integer, got 0.5"),
])
def test_google_benchmark_indexes_the_library_does_not_write_are_refused(tmp_path, key, value, said):
    """Every repetition_index -1 (hostile/g_repidx.json) was read silently."""
    entries = _repetitions(0, A_TIMES)
    for entry in entries:
        entry[key] = value
    bad = _gbench(tmp_path / "bad.json", entries)
    b = _gbench(tmp_path / "b.json", _repetitions(0, B_TIMES))
    _refused(perfctl("compare", bad, b), f"bad.json: benchmarks[0].{key}: {said}")


def test_google_benchmark_files_without_indexes_are_read_whole(tmp_path):
    """Files of libraries before 1.6 write no indexes: nothing tells their entries apart, nothing is dropped."""
    entries = _repetitions(0, A_TIMES)
    for entry in entries:
        for key in ("family_index", "per_family_instance_index", "repetition_index", "repetitions"):
            del entry[key]
    old = _gbench(tmp_path / "old.json", entries * 2)
    dataset = read_dataset(old)
    assert len(dataset.benchmarks["BM_x"].metrics["wall-time"]) == 16 and not dataset.notes


# --- 5. pyperf: a run is its benchmark, host, date and values --------------------------------------------------

@pytest.fixture(scope="module")
def pyperf_runs(tmp_path_factory, programs):
    """Two real pyperf results of examples/bin/spin (3 processes each), and A merged with itself by pyperf."""
    out = tmp_path_factory.mktemp("pyperf")
    files = {}
    for side, seconds in (("A", "0.002"), ("B", "0.0025")):
        files[side] = out / f"{side}.json"
        subprocess.run([sys.executable, "-m", "pyperf", "command", "--quiet", "-p", "3", "-n", "2", "-w", "1",
                        "-o", str(files[side]), "--", str(programs / "spin"), seconds], check=True,
                       capture_output=True)
    files["AA"] = out / "AA.json"
    subprocess.run([sys.executable, "-m", "pyperf", "convert", str(files["A"]), "--add", str(files["A"]), "-o",
                    str(files["AA"])], check=True, capture_output=True)
    return files


def test_pyperf_runs_merged_twice_count_once(pyperf_runs):
    """pyperf convert A --add A, then compare AA B: 6/3 "relevant difference beyond", exit 3 (A: 3/3)."""
    merged = read_dataset(str(pyperf_runs["AA"]))
    assert sum(len(b["runs"]) for b in json.loads(pyperf_runs["AA"].read_text())["benchmarks"]) >= 6
    plain = _table(perfctl("compare", str(pyperf_runs["A"]), str(pyperf_runs["B"]), "--format", "json"))
    doubled = _table(perfctl("compare", str(pyperf_runs["AA"]), str(pyperf_runs["B"]), "--format", "json"))
    assert [(r["n_a"], r["n_b"]) for r in doubled["benchmarks"]] == [(3, 3)]
    assert doubled["benchmarks"][0]["verdict"] == plain["benchmarks"][0]["verdict"]
    assert any("left out 3 samples whose benchmark, host, date and values an earlier sample already had" in note
               for note in merged.notes), merged.notes


def test_pyperf_runs_of_two_processes_are_both_read(pyperf_runs):
    """Two real results merged (A --add B under one name would be a mixture; here A's runs and B's under
    their own names are each read whole): nothing of a distinct run is dropped."""
    dataset = read_dataset(str(pyperf_runs["A"]))
    assert [len(b.metrics["wall-time"]) for b in dataset.benchmarks.values()] == [3] and not dataset.notes


# --- 11. pairing fields of perfctl samples ------------------------------------------------------------------

@pytest.fixture(scope="module")
def samples(tmp_path_factory, programs):
    out = tmp_path_factory.mktemp("pairing")
    files = {}
    for side, pages in (("A", 300), ("B", 320)):
        files[side] = out / f"{side}.jsonl"
        made = perfctl("stat", "-q", "-r", "4", "-e", "page-faults", "-o", str(files[side]), "--",
                       str(programs / "pagetouch"), str(pages))
        assert made.returncode == 0, made.stderr
    return files


@pytest.mark.parametrize("change, said", [
    (lambda s: s.update(run_index=True), "run_index: expected an integer 0 to 2^32 - 1, got a boolean"),
    (lambda s: s.update(run_index=(1 << 32) + 2), "run_index: expected an integer 0 to 2^32 - 1, got 4294967298"),
    (lambda s: s.update(run_index=1.0), "run_index: expected an integer 0 to 2^32 - 1, got a number"),
    (lambda s: s.update(extra={"round": 0.5, "seed": 1}), "extra.round: expected an integer 0 to 2^32 - 1"),
    (lambda s: s.update(extra={"round": -1, "seed": 1}), "extra.round: expected an integer 0 to 2^32 - 1, got -1"),
    (lambda s: s.update(extra={"round": 1, "seed": "x"}), "extra.seed: expected an integer 0 to 2^64 - 1"),
    (lambda s: s.update(extra=[1]), "extra: expected an object, got a list"),
])
def test_a_pairing_field_that_is_no_index_is_refused_naming_the_line(samples, tmp_path, change, said):
    """run_index true, 2^32 + k and extra.round 0.5 were read as "no index"; --paired then paired by position
    and said the runs "carry no round or run index". Refused as wall_ns -5 is, naming the line, whether the
    record is read, a warm-up or a repeat of a run read before."""
    lines = samples["A"].read_text().splitlines()
    samples_at = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "sample"]
    for target, repeat in ((samples_at[-1], False), (samples_at[0], True)):
        records = [json.loads(line) for line in lines]
        change(records[target])
        if repeat:  # the bad line repeats run 1's uuid, after it
            records.append(records[target])
            records[target] = json.loads(lines[target])
        bad = tmp_path / "bad.jsonl"
        bad.write_text("".join(json.dumps(r) + "\n" for r in records))
        number = len(records) if repeat else target + 1
        _refused(perfctl("compare", str(bad), str(samples["B"]), "--paired"), f"bad.jsonl:{number}: {said}")


def test_pairing_fields_perfctl_writes_are_read(samples):
    result = perfctl("compare", str(samples["A"]), str(samples["B"]), "--paired", "--metric", "page-faults")
    assert result.returncode in (0, 3) and "carry no round or run index" not in result.stdout, result.stderr
