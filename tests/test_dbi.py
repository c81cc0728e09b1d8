"""The dbi backend reproduces the calibration kernels' counts exactly (they are known by construction)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import measure, perfctl, value

from perfctl.agent import calibration

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="probe: valgrind not on PATH")
DBI_EVENTS = ["instructions", "rep-iterations", "fldcw-instructions"]


@pytest.mark.parametrize("name, params", [
    ("loop", {"N": 1}), ("loop", {"N": 123457}),
    ("rep_stosb", {"K": 1, "L": 1}), ("rep_stosb", {"K": 37, "L": 65536}),
    ("rep_movsb", {"K": 1, "L": 1}), ("rep_movsb", {"K": 53, "L": 32768}),
    ("fldcw", {"N": 1000}), ("fldcw", {"N": 99991}),
    ("pagetouch", {"P": 1}), ("pagetouch", {"P": 777}),
])
def test_dbi_counts_match_the_kernels_formulas_exactly(name, params):
    kernel = calibration.build(name, **params)
    sample = measure([kernel.path], DBI_EVENTS, backend="dbi")[0]
    assert sample.outcome == "ok"
    assert value(sample, "instructions:u") == kernel.instructions
    assert value(sample, "rep-iterations:u") == kernel.rep_iterations
    assert value(sample, "fldcw-instructions:u") == kernel.fldcw
    assert sample.reading("instructions:u").backend == "dbi"


def test_pagetouch_takes_a_fault_per_page_under_perf_event():
    kernel = calibration.build("pagetouch", P=2000)
    faults = value(measure([kernel.path], ["page-faults"])[0], "page-faults")
    assert kernel.touched_pages <= faults <= kernel.touched_pages + 5


def test_dynamic_programs_repeat_exactly_under_dbi():
    counts = {value(s, "instructions:u") for s in measure(["/bin/true"], ["instructions"], runs=3, backend="dbi")}
    assert len(counts) == 1 and counts.pop() > 10_000  # ld.so and libc start-up, the same every run


def test_what_dbi_cannot_count_is_unsupported_with_the_reason():
    sample = measure([calibration.build("loop", N=10).path], ["instructions:k", "page-faults"], backend="dbi")[0]
    assert "user mode only" in sample.reading("instructions:k").reason
    assert sample.reading("page-faults").status == "unsupported"
    other = measure(["/bin/true"], ["rep-iterations", "page-faults"])[0]
    assert other.reading("rep-iterations:u").status == "unsupported"
    assert "dbi backend" in other.reading("rep-iterations:u").reason


def test_a_binary_valgrind_cannot_run_is_a_recorded_failed_run(tmp_path):
    bogus = tmp_path / "bogus"
    bogus.write_bytes(b"\x7fELF" + os.urandom(200))
    bogus.chmod(0o755)
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", "1", "--backend", "dbi", "-e", "instructions", "-o", str(out), "--", str(bogus))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "1 of 1 run failed" in result.stdout
    assert '"status":"error"' in out.read_text()


def test_missing_valgrind_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "perfctl", "stat", "--backend", "dbi", "--", "/bin/true"],
                            capture_output=True, text=True, env={**os.environ, "PATH": str(tmp_path)})
    assert result.returncode == 2 and "needs valgrind" in result.stderr.strip()


def test_kernel_parameters_are_checked():
    with pytest.raises(ValueError, match="positive integer"):
        calibration.build("loop", N=0)
    with pytest.raises(KeyError):
        calibration.build("nonexistent")


@pytest.mark.skipif(os.geteuid() != 0, reason="probe: euid is not 0 (--user needs root)")
def test_the_dbi_log_is_no_file_another_user_could_edit(tmp_path):
    """The log was a named mode-0666 perfctl-dbi-*.log in TMPDIR for the whole measurement: any local user
    could rewrite the totals between the run and the read. Now it is an unlinked 0600 file valgrind gets as
    --log-fd; the counts stay exact, also when the benchmark runs as nobody."""
    kernel = calibration.build("loop", N=123457)
    with tempfile.TemporaryDirectory(prefix="test-dbi-") as tmpdir:  # in /tmp: valgrind as nobody needs TMPDIR
        os.chmod(tmpdir, 0o1777)
        _watch_dbi_run(kernel, tmpdir, tmp_path / "s.jsonl")


def _watch_dbi_run(kernel, tmpdir: str, out) -> None:
    process = subprocess.Popen([sys.executable, "-m", "perfctl", "stat", "-r", "5", "--backend", "dbi",
                                "-e", "instructions:u", "--user", "nobody", "-o", str(out), "--", kernel.path],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": tmpdir})
    exposed, looks = set(), 0
    while process.poll() is None:
        looks += 1
        for entry in os.scandir(tmpdir):
            if entry.name.startswith(("perfctl-dbi-", "perfctl-lackey-")):
                try:
                    if entry.stat().st_mode & 0o002:
                        exposed.add(entry.name)
                except FileNotFoundError:
                    pass
        time.sleep(0.01)
    stderr = process.stderr.read()
    assert process.returncode == 0, stderr
    assert looks > 10, "the run ended before the temp dir could be watched"
    assert exposed == set()
    samples = [json.loads(line) for line in out.read_text().splitlines() if '"type":"sample"' in line]
    counts = [r["value"] for s in samples for r in s["readings"] if r["event"] == "instructions"]
    assert counts == [kernel.instructions] * 5
