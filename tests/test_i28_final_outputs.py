"""Issue 28, after the second hostile review: perfctl never replaces an existing file it did not write
(perfctl/output_files.py rule 5, docs/outputs.md). A file the benchmark names only indirectly (a list file,
a script, a glob or a variable in a shell string) cannot be found by reading its arguments; an existing
output is therefore replaced only when it carries the signature of perfctl's own output of that kind, or
with --force. Each refusal: exit 2, one line naming the file and --force, the file's bytes unchanged, nothing
run. And every cache output is checked before the trace (`cache mrc --plot out.txt`)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import perfctl

from perfctl.output_files import CSV, Output, check
from perfctl.report.cache import PIRATE_CSV_SIGNATURE

USERS = b"the user's own notes, not perfctl's\n"


def _refused_not_perfctls(result, command: str, option: str, target: Path, before: bytes) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{command}: refusing {option} ") and "it exists and is not perfctl's" in lines[0]
    assert "--force" in lines[0], lines[0]
    assert target.read_bytes() == before


def _stat(tmp_path, *args):
    return perfctl("stat", "-r", "1", "-e", "task-clock", "--no-progress", *args, cwd=tmp_path)


@pytest.fixture
def marked(tmp_path) -> Path:
    """Where a benchmark leaves a mark when it ran."""
    return tmp_path / "ran"


# --- the review's indirect cases: named only through a list file, a script, a glob, a variable ---------------


@pytest.mark.parametrize("case", ["xargs -a", "sh job.sh", "sh -c glob", "sh -c $var"])
def test_stat_html_refuses_a_file_the_benchmark_names_only_indirectly(tmp_path, marked, case):
    """`perfctl stat --html in2.txt -- xargs -a in2.lst wc -l` (and the others) replaced in2.txt with the
    report, exit 0: no reading of the arguments sees in2.txt."""
    target = tmp_path / "in2.txt"
    target.write_bytes(USERS)
    (tmp_path / "in2.lst").write_text("in2.txt\n")
    (tmp_path / "job.sh").write_text(f"echo ran >> {marked}\nwc -l in2.txt\n")
    mark = f"echo ran >> {marked}; "
    argv = {"xargs -a": ["xargs", "-a", "in2.lst", "wc", "-l"],
            "sh job.sh": ["sh", "job.sh"],
            "sh -c glob": ["sh", "-c", mark + "cat in*.txt"],
            "sh -c $var": ["sh", "-c", mark + 'n=in2; cat "$n.txt"']}[case]
    result = _stat(tmp_path, "--html", "in2.txt", "--", *argv)
    _refused_not_perfctls(result, "perfctl stat", "--html", target, USERS)
    assert not marked.exists(), "the benchmark ran"


def test_stat_html_replaces_its_own_report_when_the_command_is_run_again(tmp_path):
    first = _stat(tmp_path, "--html", "r.html", "--", "true")
    assert first.returncode == 0, first.stderr
    page = (tmp_path / "r.html").read_bytes()
    assert b'<meta name=generator content="perfctl">' in page[:200]
    os.utime(tmp_path / "r.html", (0, 0))
    again = _stat(tmp_path, "--html", "r.html", "--", "true")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "r.html").stat().st_mtime > 0  # written again


def test_a_report_written_before_the_marker_is_still_perfctls(tmp_path):
    """Reports perfctl wrote before it signed them (its fixed page start, its footer) are replaced too."""
    assert _stat(tmp_path, "--html", "r.html", "--", "true").returncode == 0
    old = (tmp_path / "r.html").read_bytes().replace(b'<meta name=generator content="perfctl">', b"")
    (tmp_path / "r.html").write_bytes(old)
    again = _stat(tmp_path, "--html", "r.html", "--", "true")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "r.html").read_bytes() != old


def test_force_replaces_a_file_not_perfctls_but_never_an_argument_or_input(tmp_path, marked):
    target = tmp_path / "in2.txt"
    target.write_bytes(USERS)
    forced = _stat(tmp_path, "--force", "--html", "in2.txt", "--", "true")
    assert forced.returncode == 0, forced.stderr
    assert target.read_bytes().startswith(b"<!DOCTYPE html>")
    (tmp_path / "job.sh").write_text(f"echo ran >> {marked}\n")
    before = (tmp_path / "job.sh").read_bytes()
    result = _stat(tmp_path, "--force", "--html", "job.sh", "--", "sh", "job.sh")
    assert result.returncode == 2 and "the benchmark's arguments name it" in result.stderr, result.stderr
    assert (tmp_path / "job.sh").read_bytes() == before and not marked.exists()


def test_an_empty_file_is_replaced(tmp_path):
    """An empty file holds nothing to lose (mktemp's file): replaced, as an empty -o file is appended to."""
    (tmp_path / "empty.html").touch()
    result = _stat(tmp_path, "--html", "empty.html", "--", "true")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "empty.html").read_bytes().startswith(b"<!DOCTYPE html>")


def test_a_file_the_benchmark_writes_during_the_runs_is_not_replaced(tmp_path):
    """New when checked, written by the benchmark while perfctl ran: left as it is, the report kept beside it
    under the name the one line gives."""
    (tmp_path / "w.sh").write_text("echo the benchmark result > late.txt\n")
    result = _stat(tmp_path, "--html", "late.txt", "--", "sh", "w.sh")
    assert result.returncode == 2, result.stderr
    last = result.stderr.splitlines()[-1]
    assert "refusing --html late.txt: it is not perfctl's HTML report now" in last, result.stderr
    assert (tmp_path / "late.txt").read_text() == "the benchmark result\n"
    kept = last.split("the new file is ")[1].split(" ")[0]
    assert (tmp_path / kept).read_bytes().startswith(b"<!DOCTYPE html>")


# --- compare --html and report -o ------------------------------------------------------------------------------


@pytest.mark.parametrize("command,option", [("compare", "--html"), ("report", "-o")])
def test_compare_and_report_refuse_a_file_not_perfctls_and_replace_their_own(tmp_path, ab_file, command, option):
    target = tmp_path / "notes.txt"
    target.write_bytes(USERS)
    argv = [command, "F.jsonl@ab=A", "F.jsonl@ab=B", "--metric", "task-clock"]
    result = perfctl(*argv, option, "notes.txt", cwd=tmp_path)
    _refused_not_perfctls(result, f"perfctl {command}", option, target, USERS)
    assert result.stdout == ""  # refused before anything was compared
    for _ in range(2):  # written, then replaced by the same command run again
        again = perfctl(*argv, option, "r.html", cwd=tmp_path)
        assert again.returncode in (0, 3, 4) and "r.html" in again.stderr, again.stderr
    forced = perfctl(*argv, option, "notes.txt", "--force", cwd=tmp_path)
    assert forced.returncode in (0, 3, 4) and target.read_bytes().startswith(b"<!DOCTYPE html>"), forced.stderr
    same = perfctl(*argv, option, "F.jsonl", "--force", cwd=tmp_path)
    assert same.returncode == 2 and "it is one of the inputs" in same.stderr


# --- cache mrc --csv/--rds/--plot, cache pirate --csv ----------------------------------------------------------


@pytest.fixture
def lackey_log(tmp_path) -> Path:
    log = tmp_path / "trace.log"
    accesses = "".join(f" L {0x1000 + 64 * (i % 50):x},8\n" for i in range(2000))
    log.write_text(accesses + "==1==   guest instrs:  9,000\n")
    return log


@pytest.mark.parametrize("option,name", [("--csv", "c.csv"), ("--rds", "s.rds"), ("--plot", "p.png"),
                                         ("--plot", "p.svg"), ("--plot", "p.pdf")])
def test_cache_mrc_refuses_a_file_not_perfctls_and_replaces_its_own(tmp_path, lackey_log, option, name):
    target = tmp_path / name
    target.write_bytes(USERS)
    argv = ["cache", "mrc", "--from-lackey", "trace.log", "--sizes", "4K,8K", "-q"]
    _refused_not_perfctls(perfctl(*argv, option, name, cwd=tmp_path), "perfctl cache mrc", option, target, USERS)
    target.unlink()
    for _ in range(2):  # written, then replaced by the same command run again
        result = perfctl(*argv, option, name, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert target.stat().st_size > 0 and target.read_bytes() != USERS
    other = {"--csv": "--rds", "--rds": "--csv", "--plot": "--csv"}[option]  # perfctl's, but another kind
    wrong = perfctl(*argv, other, name, cwd=tmp_path)
    assert wrong.returncode == 2 and "it exists and is not perfctl's" in wrong.stderr, wrong.stderr


@pytest.mark.parametrize("name,why", [("out.txt", "name the format by the extension"),
                                      ("notes.png", "it exists and is not perfctl's plot")])
def test_cache_mrc_plot_is_refused_before_the_trace_naming_the_users_file(tmp_path, marked, name, why):
    """`cache mrc --plot out.txt` was refused after the whole trace, naming the temporary file
    (.perfctl-xxxx.txt) matplotlib could not write."""
    (tmp_path / "notes.png").write_bytes(USERS)
    bench = tmp_path / "bench"
    bench.write_text(f"#!/bin/sh\necho ran >> {marked}\n")
    bench.chmod(0o755)
    result = perfctl("cache", "mrc", "--plot", name, "--", "./bench", cwd=tmp_path)
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"perfctl cache mrc: refusing --plot {name}: ") and why in lines[0], lines[0]
    assert ".perfctl-" not in lines[0]
    assert not marked.exists(), "the benchmark was traced"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".perfctl-")] == []


def test_cache_pirate_csv_refuses_a_file_not_perfctls_before_anything_runs(tmp_path, marked):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("cache pirate needs two CPUs this process may use")
    target = tmp_path / "p.csv"
    target.write_bytes(USERS)
    bench = tmp_path / "bench"
    bench.write_text(f"#!/bin/sh\necho ran >> {marked}\n")
    bench.chmod(0o755)
    cpus = sorted(os.sched_getaffinity(0))
    result = perfctl("cache", "pirate", "--llc", "1M", "--target-cpu", str(cpus[0]), "--pirate-cpu", str(cpus[1]),
                     "--csv", "p.csv", "--", "./bench", cwd=tmp_path)
    _refused_not_perfctls(result, "perfctl cache pirate", "--csv", target, USERS)
    assert not marked.exists()


def test_a_pirate_csv_perfctl_wrote_is_known_by_its_header(tmp_path):
    """The signature every pirate CSV starts with (report/cache.py writes its columns in this order)."""
    own = tmp_path / "own.csv"
    own.write_bytes(PIRATE_CSV_SIGNATURE + b"0,0,1.5,3,0,True\r\n")
    check("perfctl cache pirate", [Output("--csv", str(own), CSV, signature=PIRATE_CSV_SIGNATURE)])
    mine = tmp_path / "mine.csv"
    mine.write_bytes(b"target_bytes,x\r\n1,2\r\n")
    with pytest.raises(Exception, match="it exists and is not perfctl's CSV"):
        check("perfctl cache pirate", [Output("--csv", str(mine), CSV, signature=PIRATE_CSV_SIGNATURE)])


# --- report size whatever the names; Markdown escapes only what a user gave ------------------------------------


def _renamed(source: Path, target: Path, name: str) -> Path:
    lines = []
    for line in source.read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "sample":
            record["benchmark"]["name"] = name
        lines.append(json.dumps(record))
    target.write_text("\n".join(lines) + "\n")
    return target


@pytest.fixture
def two_sides(tmp_path) -> tuple[Path, Path]:
    paths = []
    for side in ("a", "b"):
        path = tmp_path / f"{side}.jsonl"
        result = perfctl("stat", "-r", "5", "-e", "task-clock", "--no-progress", "--name", "short", "-o", str(path),
                         "--", "/bin/true")
        assert result.returncode == 0, result.stderr
        paths.append(path)
    return paths[0], paths[1]


def test_a_3_mb_benchmark_name_keeps_the_page_small(tmp_path, two_sides):
    """A 3 MB name, repeated in the title, headings, table, tooltips and plots, made a 6 MB page (the
    documented bound is 5 MB): every text is cut to 2,000 characters (svg.TEXT_LIMIT)."""
    from perfctl.report.svg import NAME_SHOWN, TEXT_LIMIT

    huge = "N" * 1000 + "M" * 3_000_000 + "E" * 1000
    a, b = (_renamed(side, tmp_path / f"big-{side.name}", huge) for side in two_sides)
    result = perfctl("report", str(a), str(b), "--metric", "task-clock", "-o", "big.html", cwd=tmp_path)
    assert result.returncode in (0, 3, 4), result.stderr
    page = (tmp_path / "big.html").read_text()
    assert len(page.encode()) < 200_000, len(page.encode())
    longest = max(len(part) for part in re.findall(r"[NME]{100,}", page))  # the longest piece of the name shown
    assert longest < TEXT_LIMIT
    assert "characters left out" in page and NAME_SHOWN < TEXT_LIMIT
    assert "NNN" in page and "EEE" in page  # its start and its end are shown


def test_a_long_name_is_cut_with_the_whole_name_in_a_tooltip(tmp_path, two_sides):
    """Shown: 160 characters (svg.NAME_SHOWN), its start and end; the tooltip: the whole name up to 300
    (svg.NAME_LIMIT)."""
    long = "bench-" + "x" * 240 + "-end"
    a, b = (_renamed(side, tmp_path / f"long-{side.name}", long) for side in two_sides)
    result = perfctl("report", str(a), str(b), "--metric", "task-clock", "-o", "long.html", cwd=tmp_path)
    assert result.returncode in (0, 3, 4), result.stderr
    page = (tmp_path / "long.html").read_text()
    assert f'<span title="{long}">' in page  # the whole name, in the tooltip
    assert "<td class=name><a href=\"#b0\"><span title=" in page
    cell = page.split("<td class=name>")[1].split("</td>")[0]
    shown = cell.split(">", 2)[2]  # past <a ...> and <span ...>
    assert shown.startswith("bench-x") and shown.split("</span>")[0].endswith("x-end")
    assert len(shown.split("</span>")[0]) <= 160
    longer = "bench-" + "y" * 1000 + "-end"
    a, b = (_renamed(side, tmp_path / f"longer-{side.name}", longer) for side in two_sides)
    result = perfctl("report", str(a), str(b), "--metric", "task-clock", "-o", "longer.html", cwd=tmp_path)
    assert result.returncode in (0, 3, 4), result.stderr
    title = (tmp_path / "longer.html").read_text().split("<td class=name><a href=\"#b0\"><span title=\"")[1]
    title = title.split('"')[0]
    assert len(title) <= 300 and title.startswith("bench-yyy") and title.endswith("yyy-end")
    assert "characters left out" in title


def test_markdown_escapes_only_what_a_user_gave(tmp_path, two_sides):
    a, b = (_renamed(side, tmp_path / f"md-{side.name}", "**bold**_[x](http://evil)") for side in two_sides)
    result = perfctl("compare", str(a), str(b), "--metric", "task-clock", "--format", "markdown", cwd=tmp_path)
    assert result.returncode in (0, 3, 4), result.stderr
    out = result.stdout
    assert "> metric: metric chosen with --metric" in out and "metric\\:" not in out  # perfctl's prose as written
    assert "A/B [95%]" in out and "Verdicts: relevant difference: the interval" in out
    assert "\\*\\*bold\\*\\*\\_\\[x\\]\\(http\\:" in out  # the user's name escaped
    assert "md-a\\.jsonl" in out  # file names are the user's too


def test_a_text_that_quotes_perfctls_marker_is_not_perfctls_report(tmp_path):
    """The signature is the page's fixed start, not a string anywhere near it: notes quoting the marker
    (as docs/outputs.md does) are the user's."""
    notes = tmp_path / "notes.md"
    before = b'# perfctl notes\n<meta name=generator content="perfctl">\nmy findings\n'
    notes.write_bytes(before)
    _refused_not_perfctls(_stat(tmp_path, "--html", "notes.md", "--", "true"), "perfctl stat", "--html", notes,
                          before)
