"""What readers read, exactly (issue 28, after the second hostile review): a file cut at a line end inside
its last run, counts beyond 2^53 kept as the integers they are up to the verdict, and StatCC's cold share."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import perfctl

from perfctl.formats import DatasetError, read_dataset

DATA = Path(__file__).parent / "data"
needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="probe: perf(1) not on PATH (linux-perf)")
needs_hyperfine = pytest.mark.skipif(shutil.which("hyperfine") is None, reason="probe: hyperfine not on PATH")


# --- 1. a file cut at a line end inside its last run -------------------------------------------------------

def _perf_stat_runs(path: Path, syntax: str, runs: int, events: str = "task-clock,page-faults,context-switches"):
    for _ in range(runs):
        subprocess.run(["perf", "stat", syntax, "-o", str(path), "--append", "-e", events, "--", "/bin/true"],
                       check=True)
    return path.read_text().splitlines(keepends=True)


@needs_perf
@pytest.mark.parametrize("syntax", ["-x,", "-j"])
def test_perf_stat_cut_at_each_line_end_of_its_last_run_is_refused_or_read_whole(tmp_path, syntax):
    """Every prefix of a real perf stat file that ends at a line end: the last run is whole (read), has no
    event (a note), or lacks some of the events (refused in one line naming its first line, exit 2). Before,
    the short run was read with a note that `-q` and `--format csv` do not print, and its task-clock entered
    the verdict (6/6 runs against 5 whole ones)."""
    lines = _perf_stat_runs(tmp_path / "whole.out", syntax, 3)
    headers = [n for n, line in enumerate(lines, 1) if line.startswith("# started on")]
    event_lines = [n for n, line in enumerate(lines, 1) if n > headers[-1] and line.strip()]
    assert len(headers) == 3 and len(event_lines) == 3
    cut = tmp_path / "cut.out"
    for end in range(headers[-1], len(lines) + 1):
        cut.write_text("".join(lines[:end]))
        kept = [n for n in event_lines if n <= end]
        if 0 < len(kept) < 3:
            with pytest.raises(DatasetError) as err:
                read_dataset(str(cut))
            message = str(err.value)
            assert message.startswith(f"{cut}:{kept[0]}: the run from line {kept[0]} lacks ")
            assert "the last run, cut at a line end" in message and "\n" not in message
            result = perfctl("compare", "-q", str(cut), str(tmp_path / "whole.out"))
            assert result.returncode == 2 and result.stderr == f"perfctl compare: {message}\n"
            continue
        dataset = read_dataset(str(cut))
        counts = {len(values) for values in dataset.benchmarks["cut"].metrics.values()}
        assert counts == ({3} if kept else {2})  # whole runs only
        assert bool(dataset.notes) == (not kept)  # the empty last run: said


@needs_perf
def test_perf_stat_run_short_in_the_middle_is_refused(tmp_path):
    """A run cut at a line end and then appended to (perf stat --append again) lacks events in the middle
    of the file: incomplete as well, refused naming it."""
    first = _perf_stat_runs(tmp_path / "a.out", "-x,", 2)
    later = _perf_stat_runs(tmp_path / "b.out", "-x,", 2)
    cut = first[:-1]  # the last run's last event (context-switches) lost
    path = tmp_path / "appended.csv"
    path.write_text("".join(cut + later))
    result = perfctl("compare", str(path), str(tmp_path / "b.out"))
    assert result.returncode == 2
    short_first = next(n for n, line in enumerate(cut, 1) if n > 5 and "task-clock" in line)
    assert result.stderr == (f"perfctl compare: {path}:{short_first}: the run from line {short_first} lacks "
                             "context-switches, which other runs count (perf writes every event of a run): a run "
                             "cut and then appended to, or recorded with other -e events; remove its lines or "
                             "record it again\n")


def _line_cuts(path: Path) -> list[str]:
    text = path.read_text()
    return [text[:i + 1] for i, char in enumerate(text) if char == "\n" and text[i + 1:].strip()]


@needs_hyperfine
@pytest.mark.parametrize("source", ["hyperfine", "googlebench.json", "pytest_benchmark.json", "pyperf"])
def test_json_exports_cut_at_any_line_end_are_refused(tmp_path, source):
    """The same class in the one-document formats: an export cut at any line end before its last is no
    longer JSON, so no record of it is read half (hyperfine, Google Benchmark, pytest-benchmark, pyperf)."""
    if source == "hyperfine":
        path = tmp_path / "h.json"
        subprocess.run(["hyperfine", "-N", "-r", "3", "--export-json", str(path), "true"], check=True,
                       capture_output=True)
    elif source == "pyperf":
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"version": "1.0", "metadata": {"name": "x", "unit": "second"}, "benchmarks": [
            {"runs": [{"values": [0.1, 0.2]}, {"values": [0.3]}]}]}, indent=2))
    else:
        path = DATA / source
    cuts = _line_cuts(path)
    assert len(cuts) > 5
    read_dataset(str(path))
    for number, text in enumerate(cuts, 1):
        cut = tmp_path / f"cut{number}.json"
        cut.write_text(text)
        with pytest.raises(DatasetError) as err:
            read_dataset(str(cut))
        assert "\n" not in str(err.value)


def test_perfctl_jsonl_cut_at_a_line_end_holds_whole_runs_only(tmp_path):
    """perfctl's JSON Lines: a run is one line, so a cut at a line end leaves whole runs (read) and a cut
    inside the last line is no JSON (refused, naming the line): no run is read half."""
    path = tmp_path / "s.jsonl"
    assert perfctl("stat", "-r", "3", "-o", str(path), "--", "true").returncode in (0, 1)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    assert len(lines) == 4  # machine line and 3 samples
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:3]))
    assert len(read_dataset(str(cut)).benchmarks["true"].metrics["wall-time"]) == 2
    cut.write_text("".join(lines[:3]) + lines[3][:len(lines[3]) // 2])
    with pytest.raises(DatasetError, match=r":4: not a perfctl sample line"):
        read_dataset(str(cut))
