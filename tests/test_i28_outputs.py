"""Issue 28, part 1: no output perfctl is asked to write destroys one of its inputs (perfctl/output_files.py,
docs/outputs.md). Every refusal is checked the same way: exit 2, one line on stderr naming the option, the
protected file's bytes unchanged, and nothing run (the benchmark, a script that leaves a mark, left none)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from conftest import perfctl


@pytest.fixture
def bench(tmp_path) -> Path:
    """A benchmark that marks every run it makes: ``ran`` exists once it has run."""
    script = tmp_path / "bench"
    script.write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'ran'}\n")
    script.chmod(0o755)
    return script


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused(result, command: str, option: str, why: str) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"{command}: refusing {option} "), result.stderr
    assert why in lines[0], lines[0]


def _nothing_ran(tmp_path: Path) -> None:
    assert not (tmp_path / "ran").exists(), "the benchmark ran"


def _stat(tmp_path, *args, **kwargs):
    return perfctl("stat", "-r", "2", "-e", "task-clock", "--no-progress", *args, cwd=tmp_path, **kwargs)


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "data.txt"
    path.write_text("".join(f"{i}\n" for i in range(1000)))
    return path


# --- stat --html: the executable and the files its arguments name, in every form of path --------------------


def test_stat_html_refuses_the_executable(tmp_path, bench):
    """`stat --html ./bench -- ./bench` replaced the executable with the HTML page, exit 0."""
    before = _digest(bench)
    _refused(_stat(tmp_path, "--html", "./bench", "--", "./bench"), "perfctl stat", "--html",
             "it is the benchmark's executable")
    assert _digest(bench) == before
    _nothing_ran(tmp_path)


def test_stat_html_refuses_the_executable_found_through_path(tmp_path, bench):
    """The benchmark named without a slash is found through PATH, as the runner finds it."""
    before = _digest(bench)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    _refused(_stat(tmp_path, "--html", str(bench), "--", "bench", env=env), "perfctl stat", "--html",
             "it is the benchmark's executable")
    assert _digest(bench) == before
    _nothing_ran(tmp_path)


def test_stat_html_refuses_a_file_in_the_arguments(tmp_path, bench, data):
    """`--html data.txt -- gzip -c data.txt` replaced the input with the page."""
    before = _digest(data)
    _refused(_stat(tmp_path, "--html", "data.txt", "--", "./bench", "-c", "data.txt"), "perfctl stat", "--html",
             "the benchmark's arguments name it (data.txt)")
    assert _digest(data) == before
    _nothing_ran(tmp_path)


def test_stat_html_refuses_a_file_given_as_an_option_value(tmp_path, bench, data):
    before = _digest(data)
    _refused(_stat(tmp_path, "--html", str(data), "--", "./bench", "--input=data.txt"), "perfctl stat", "--html",
             "the benchmark's arguments name it (--input=data.txt)")
    assert _digest(data) == before
    _nothing_ran(tmp_path)


def test_stat_html_refuses_a_symlink_to_an_argument(tmp_path, bench, data):
    (tmp_path / "link.html").symlink_to(data)
    before = _digest(data)
    _refused(_stat(tmp_path, "--html", "link.html", "--", "./bench", "./data.txt"), "perfctl stat", "--html",
             "the benchmark's arguments name it")
    assert _digest(data) == before and (tmp_path / "link.html").is_symlink()
    _nothing_ran(tmp_path)


def test_stat_html_refuses_a_hard_link_to_an_argument(tmp_path, bench, data):
    os.link(data, tmp_path / "other-name.html")
    before = _digest(data)
    _refused(_stat(tmp_path, "--html", "other-name.html", "--", "./bench", "data.txt"), "perfctl stat", "--html",
             "the benchmark's arguments name it")
    assert _digest(data) == before
    _nothing_ran(tmp_path)


def test_stat_html_refuses_the_samples_file_before_any_run(tmp_path, bench):
    """`stat -o same.html --html same.html` refused only after all the runs."""
    _refused(_stat(tmp_path, "-o", "same.html", "--html", "./same.html", "--", "./bench"), "perfctl stat",
             "--html", "-o names the same file")
    assert not (tmp_path / "same.html").exists()
    _nothing_ran(tmp_path)


# --- stat -o: appended only to perfctl's own JSON Lines ----------------------------------------------------


def test_stat_o_refuses_a_file_that_is_not_perfctls(tmp_path, bench):
    """`-o notes.txt` deleted the user's last line (it had no newline), then appended samples."""
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"line one\nmy last line")
    _refused(_stat(tmp_path, "-o", "notes.txt", "--", "./bench"), "perfctl stat", "-o",
             "it is not perfctl JSON Lines")
    assert notes.read_bytes() == b"line one\nmy last line"
    _nothing_ran(tmp_path)


def test_stat_o_refuses_the_executable(tmp_path, programs):
    """`-o ./bench -- ./bench` cut 4,111 bytes off the ELF and appended JSON; every run then failed (ETXTBSY)."""
    elf = tmp_path / "spin"
    shutil.copy(programs / "spin", elf)
    before = _digest(elf)
    result = _stat(tmp_path, "-o", "./spin", "--", "./spin", "0.001")
    _refused(result, "perfctl stat", "-o", "it is the benchmark's executable")
    assert _digest(elf) == before and "task-clock" not in result.stdout


def test_stat_o_refuses_a_file_in_the_arguments_even_when_it_is_perfctls(tmp_path, bench):
    """A samples file the benchmark reads (or writes) is an input like any other."""
    samples = tmp_path / "s.jsonl"
    assert _stat(tmp_path, "-o", str(samples), "--", "/bin/true").returncode == 0
    before = _digest(samples)
    _refused(_stat(tmp_path, "-o", "s.jsonl", "--", "./bench", "./s.jsonl"), "perfctl stat", "-o",
             "the benchmark's arguments name it")
    assert _digest(samples) == before
    _nothing_ran(tmp_path)


def test_stat_o_appends_to_perfctls_file_and_never_cuts_a_whole_record(tmp_path):
    """A perfctl file whose last record lacks only its newline keeps the record (the newline is added); an
    empty file takes samples."""
    samples = tmp_path / "s.jsonl"
    assert _stat(tmp_path, "-o", str(samples), "--", "/bin/true").returncode == 0
    whole = samples.read_bytes()
    samples.write_bytes(whole.rstrip(b"\n"))
    result = _stat(tmp_path, "-o", str(samples), "--", "/bin/true")
    assert result.returncode == 0 and "without its newline; added the newline" in result.stderr, result.stderr
    lines = samples.read_bytes().splitlines()
    assert samples.read_bytes().startswith(whole) and len(lines) == 2 * 3  # machine + 2 runs, twice
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert _stat(tmp_path, "-o", str(empty), "--", "/bin/true").returncode == 0
    assert len(empty.read_bytes().splitlines()) == 3


def test_stat_o_never_cuts_a_last_line_that_is_not_perfctls(tmp_path, bench):
    """Only a line of perfctl's own that a kill cut short is cut off; a note someone added to the end of a
    sample file without a newline is not perfctl's to delete."""
    samples = tmp_path / "s.jsonl"
    assert _stat(tmp_path, "-o", str(samples), "--", "/bin/true").returncode == 0
    samples.write_bytes(samples.read_bytes() + b"measured after the kernel update")
    before = _digest(samples)
    _refused(_stat(tmp_path, "-o", "s.jsonl", "--", "./bench"), "perfctl stat", "-o",
             "its last line is not perfctl's and has no newline")
    assert _digest(samples) == before
    _nothing_ran(tmp_path)


# --- ab -o --------------------------------------------------------------------------------------------------


def _ab(tmp_path, *args):
    return perfctl("ab", "-e", "task-clock", "--no-progress", "--max-runs", "2", *args, cwd=tmp_path)


def test_ab_o_refuses_the_second_commands_executable(tmp_path, bench):
    before = _digest(bench)
    _refused(_ab(tmp_path, "-o", str(bench), "--", "/bin/true", ":::", "./bench"), "perfctl ab", "-o",
             "it is the benchmark's executable")
    assert _digest(bench) == before
    _nothing_ran(tmp_path)


def test_ab_o_refuses_a_file_in_an_argument(tmp_path, bench, data):
    before = _digest(data)
    _refused(_ab(tmp_path, "-o", "data.txt", "--", "./bench", ":::", "./bench", "--in=./data.txt"), "perfctl ab",
             "-o", "the benchmark's arguments name it (--in=./data.txt)")
    assert _digest(data) == before
    _nothing_ran(tmp_path)


def test_ab_o_refuses_a_file_that_is_not_perfctls(tmp_path, bench):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b'{"results": []}')  # JSON, but no perfctl line: a hyperfine export
    _refused(_ab(tmp_path, "-o", "notes.txt", "--", "./bench", ":::", "./bench"), "perfctl ab", "-o",
             "it is not perfctl JSON Lines")
    assert notes.read_bytes() == b'{"results": []}'
    _nothing_ran(tmp_path)


# --- compare --html and report -o: the input behind an @selector ---------------------------------------------


@pytest.mark.parametrize("form", ["plain", "./x", "symlink", "hard link"])
def test_compare_html_refuses_the_file_behind_the_selectors(tmp_path, ab_file, form):
    """`compare F@ab=A F@ab=B --html F` (the follow-up ab prints) replaced the sample file with the report:
    the check compared the literal 'F@ab=A' with 'F'."""
    target = {"plain": "F.jsonl", "./x": "./F.jsonl", "symlink": "link.html", "hard link": "hard.html"}[form]
    if form == "symlink":
        (tmp_path / target).symlink_to(ab_file)
    elif form == "hard link":
        os.link(ab_file, tmp_path / target)
    before = _digest(ab_file)
    result = perfctl("compare", "F.jsonl@ab=A", "F.jsonl@ab=B", "--metric", "task-clock", "--html", target,
                     cwd=tmp_path)
    _refused(result, "perfctl compare", "--html", "it is one of the inputs (F.jsonl@ab=A)")
    assert _digest(ab_file) == before and result.stdout == ""  # nothing compared either
    fine = perfctl("compare", "F.jsonl@ab=A", "F.jsonl@ab=B", "--metric", "task-clock", "--html", "r.html",
                   cwd=tmp_path)
    assert fine.returncode in (0, 3, 4) and (tmp_path / "r.html").read_bytes().startswith(b"<!DOCTYPE html>")


@pytest.mark.parametrize("form", ["plain", "hard link"])
def test_report_o_refuses_the_file_behind_the_selectors(tmp_path, ab_file, form):
    target = "F.jsonl" if form == "plain" else "hard.html"
    if form == "hard link":
        os.link(ab_file, tmp_path / target)
    before = _digest(ab_file)
    result = perfctl("report", "F.jsonl@ab=A", "F.jsonl@ab=B", "--metric", "task-clock", "-o", target, cwd=tmp_path)
    _refused(result, "perfctl report", "-o", "it is one of the inputs (F.jsonl@ab=A)")
    assert _digest(ab_file) == before


# --- cache: --csv, --rds, --plot -----------------------------------------------------------------------------


def test_cache_mrc_refuses_its_lackey_log_and_two_outputs_naming_one_file(tmp_path):
    log = tmp_path / "trace.log"
    accesses = "".join(f" L {0x1000 + 64 * (i % 50):x},8\n" for i in range(2000))
    log.write_text(accesses + "==1==   guest instrs:  9,000\n")
    before = _digest(log)
    result = perfctl("cache", "mrc", "--from-lackey", "trace.log", "--sizes", "4K", "--csv", "./trace.log",
                     cwd=tmp_path)
    _refused(result, "perfctl cache mrc", "--csv", "it is one of the inputs (trace.log)")
    assert _digest(log) == before
    result = perfctl("cache", "mrc", "--from-lackey", "trace.log", "--sizes", "4K", "--rds", "out", "--csv",
                     str(tmp_path / "out"), cwd=tmp_path)
    _refused(result, "perfctl cache mrc", "--csv", "--rds names the same file")
    assert not (tmp_path / "out").exists()
    fine = perfctl("cache", "mrc", "--from-lackey", "trace.log", "--sizes", "4K", "--rds", "t.rds", "--csv", "t.csv",
                   cwd=tmp_path)
    assert fine.returncode == 0, fine.stderr
    assert (tmp_path / "t.csv").read_text().startswith("bytes,") and (tmp_path / "t.rds").stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".perfctl-")] == []


def test_cache_mrc_refuses_the_traced_executable_before_tracing(tmp_path, bench):
    before = _digest(bench)
    result = perfctl("cache", "mrc", "--sizes", "4K", "--csv", "bench", "--", "./bench", cwd=tmp_path)
    _refused(result, "perfctl cache mrc", "--csv", "it is the benchmark's executable")
    assert _digest(bench) == before
    _nothing_ran(tmp_path)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="probe: the Pirate needs a second CPU")
def test_cache_pirate_refuses_a_file_in_the_arguments(tmp_path, bench, data):
    before = _digest(data)
    result = perfctl("cache", "pirate", "--llc", "1M", "--sizes", "0,512K", "--csv", "data.txt", "--", "./bench",
                     "data.txt", cwd=tmp_path)
    _refused(result, "perfctl cache pirate", "--csv", "the benchmark's arguments name it (data.txt)")
    assert _digest(data) == before
    _nothing_ran(tmp_path)


# --- token add --file: a line appended only to a tokens file that ends with a newline -----------------------


@pytest.mark.parametrize("content, why", [
    (b"line one\nmy last line", "not a tokens file"),
    (b"client local " + b"t" * 43, "its last line has no newline"),  # a real tokens file, hand-edited
])
def test_token_add_refuses_a_file_it_would_damage(tmp_path, content, why):
    """`token add --file notes.txt` joined its token to the user's last line, exit 0."""
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    path.chmod(0o600)
    _refused(perfctl("token", "add", "--file", str(path), "--client", "ci"), "perfctl token", "--file", why)
    assert path.read_bytes() == content
    fresh = tmp_path / "tokens"
    assert perfctl("token", "add", "--file", str(fresh), "--client", "ci").returncode == 0
    assert perfctl("token", "add", "--file", str(fresh), "--agent", "box").returncode == 0
    assert [line.split()[:2] for line in fresh.read_text().splitlines()] == [["client", "ci"], ["agent", "box"]]


# --- review 28: a program named through PATH after a wrapper, files inside words and shell strings ----------


@pytest.mark.parametrize("wrapper", [["env"], ["nice", "-n", "5"], ["timeout", "60"], ["taskset", "-c", "0"],
                                     ["env", "-i"], ["sh", "-c", "exec bench"]])
def test_stat_html_refuses_a_program_a_wrapper_finds_through_path(tmp_path, bench, wrapper):
    """`--html binx/spin -- env spin` (spin found on PATH by env) replaced the executable with HTML, exit 0."""
    (tmp_path / "binx").mkdir()
    program = tmp_path / "binx" / "bench"
    shutil.move(bench, program)
    before = _digest(program)
    env = {**os.environ, "PATH": f"{tmp_path / 'binx'}:{os.environ['PATH']}"}
    _refused(_stat(tmp_path, "--html", "binx/bench", "--", *wrapper, *([] if wrapper[0] == "sh" else ["bench"]),
                   env=env), "perfctl stat", "--html", "the benchmark's arguments name it")
    assert _digest(program) == before
    _nothing_ran(tmp_path)


def test_cache_pirate_refuses_a_program_a_wrapper_finds_through_path(tmp_path, bench):
    (tmp_path / "binx").mkdir()
    program = tmp_path / "binx" / "bench"
    shutil.move(bench, program)
    before = _digest(program)
    env = {**os.environ, "PATH": f"{tmp_path / 'binx'}:{os.environ['PATH']}"}
    result = perfctl("cache", "pirate", "--llc", "1M", "--sizes", "0,512K", "--csv", "binx/bench", "--", "nice",
                     "bench", cwd=tmp_path, env=env)
    _refused(result, "perfctl cache pirate", "--csv", "the benchmark's arguments name it (bench)")
    assert _digest(program) == before
    _nothing_ran(tmp_path)


@pytest.mark.parametrize("word", ["-fdata.txt", "-vfdata.txt", "@data.txt", "data.txt:3", "--in,data.txt"])
def test_stat_html_refuses_a_file_named_inside_a_word(tmp_path, bench, data, word):
    """`--html pat.txt -- grep -fpat.txt data.txt` (a glued short option) replaced pat.txt, exit 0."""
    before = _digest(data)
    _refused(_stat(tmp_path, "--html", "data.txt", "--", "./bench", word), "perfctl stat", "--html",
             f"the benchmark's arguments name it ({word})")
    assert _digest(data) == before
    _nothing_ran(tmp_path)


@pytest.mark.parametrize("script", ["gzip -c data.txt >/dev/null", "./bench; cat <data.txt",
                                    "sh -c 'sh -c \"wc -l data.txt\"'", "./bench >out.txt"])
def test_stat_html_and_ab_o_refuse_a_file_named_in_a_shell_string(tmp_path, bench, data, script):
    """`--html data.txt -- sh -c 'gzip -c data.txt >/dev/null'` replaced data.txt, exit 0. A file the string
    writes (out.txt, not there yet) is refused as a word of its own is."""
    target = "out.txt" if "out.txt" in script else "data.txt"
    before = _digest(data)
    _refused(_stat(tmp_path, "--html", target, "--", "sh", "-c", script), "perfctl stat", "--html",
             "the benchmark's arguments name it")
    _refused(_ab(tmp_path, "-o", target, "--", "./bench", ":::", "bash", "-c", script), "perfctl ab", "-o",
             "the benchmark's arguments name it")
    assert _digest(data) == before and not (tmp_path / "out.txt").exists()
    _nothing_ran(tmp_path)


def test_stat_html_still_writes_a_file_no_argument_names(tmp_path, data):
    result = _stat(tmp_path, "--html", "r.html", "--", "sh", "-c", "gzip -c data.txt >/dev/null")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.html").read_bytes().startswith(b"<!DOCTYPE html>")


def test_a_name_inside_a_word_that_is_no_file_of_the_benchmarks_is_not_refused(tmp_path, data):
    """Only the parts programs glue a file into are read as files (after -X, between = @ : ,): the "out" at
    the end of --layout is not, and a report named out is written (--force: it is not perfctl's report, which
    --force allows; a file the arguments name it would still refuse)."""
    (tmp_path / "out").write_text("an old report\n")
    result = _stat(tmp_path, "--force", "--html", "out", "--", "sh", "-c", "true", "--layout")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").read_bytes().startswith(b"<!DOCTYPE html>")


# --- review 28: files read to reach a server are inputs -----------------------------------------------------


@pytest.mark.parametrize("option", ["--token-file", "--tls-ca", "--tls-cert", "--tls-key", "PERFCTL_TOKEN_FILE",
                                    "PERFCTL_CONFIG"])
def test_compare_html_and_report_o_refuse_a_credential(tmp_path, ab_file, option):
    """`report A B -o tok --token-file tok` replaced the token file with HTML (exit 3)."""
    secret = tmp_path / "secret"
    secret.write_text('{"token_file": "elsewhere"}\n' if option == "PERFCTL_CONFIG" else "t" * 43 + "\n")
    secret.chmod(0o600)
    before = _digest(secret)
    env = {**os.environ}
    extra: list[str] = []
    if option.startswith("--"):
        extra = [option, "secret"]
    else:
        env[option] = "secret"
    sides = ["F.jsonl@ab=A", "F.jsonl@ab=B", "--metric", "task-clock"]
    _refused(perfctl("compare", *sides, "--html", "secret", *extra, cwd=tmp_path, env=env), "perfctl compare",
             "--html", f"it is one of the inputs ({option} ")
    _refused(perfctl("report", *sides, "-o", "./secret", *extra, cwd=tmp_path, env=env), "perfctl report", "-o",
             f"it is one of the inputs ({option} ")
    assert _digest(secret) == before


# --- review 28: a tokens file open to other users takes no secret -------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_token_add_refuses_a_file_other_users_can_read(tmp_path, mode):
    """`touch t; chmod 644 t; token add --file t` wrote the secret into the world-readable file, exit 0."""
    path = tmp_path / "t"
    path.write_bytes(b"")
    path.chmod(mode)
    result = perfctl("token", "add", "--file", str(path), "--agent", "a1")
    _refused(result, "perfctl token", "--file", "open to its group or other users")
    assert path.read_bytes() == b"" and result.stdout == ""
    path.chmod(0o600)
    assert perfctl("token", "add", "--file", str(path), "--agent", "a1").returncode == 0


def test_add_token_refuses_the_file_it_opened_when_other_users_can_read_it(tmp_path):
    """The check on the file actually opened: a file made readable after the command's check gets nothing."""
    from perfctl.server.auth import TokenFileError, add_token

    path = tmp_path / "t"
    path.write_bytes(b"")
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match="open to its group or other users"):
        add_token(str(path), "agent", "a1")
    assert path.read_bytes() == b""


# --- review 28: an empty output name ------------------------------------------------------------------------


@pytest.mark.parametrize("argv, command, option", [
    (["stat", "-r", "2", "-o", "", "--", "./bench"], "perfctl stat", "-o"),
    (["stat", "-r", "2", "--html", "", "--", "./bench"], "perfctl stat", "--html"),
    (["ab", "--max-runs", "2", "-o", "", "--", "./bench", ":::", "./bench"], "perfctl ab", "-o"),
    (["compare", "F.jsonl@ab=A", "F.jsonl@ab=B", "--html", ""], "perfctl compare", "--html"),
    (["report", "F.jsonl@ab=A", "F.jsonl@ab=B", "-o", ""], "perfctl report", "-o"),
    (["cache", "mrc", "--sizes", "4K", "--csv", "", "--", "./bench"], "perfctl cache mrc", "--csv"),
    (["cache", "mrc", "--sizes", "4K", "--plot", "", "--", "./bench"], "perfctl cache mrc", "--plot"),
    (["token", "add", "--file", "", "--client", "ci"], "perfctl token", "--file"),
])
def test_an_empty_output_name_is_refused(tmp_path, bench, ab_file, argv, command, option):
    """`stat -o ""` ran and wrote nothing, exit 0; `report -o ""` said "cannot write : it is a directory"."""
    result = perfctl(*argv, cwd=tmp_path)
    _refused(result, command, option, "an empty name names no file")
    assert result.stdout == ""
    _nothing_ran(tmp_path)


# --- review 28: stdout's file is an output ------------------------------------------------------------------


def _to_file(stdout: Path, *argv: str, cwd: Path, append: bool = False):
    """perfctl with stdout redirected to a regular file (> f, or >> f)."""
    import subprocess
    import sys

    with open(stdout, "ab" if append else "wb") as out:
        return subprocess.run([sys.executable, "-m", "perfctl", *argv], stdout=out, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("argv, option", [
    (["stat", "-r", "2", "-e", "task-clock", "-o", "x", "--csv", "--", "./bench"], "-o"),
    (["stat", "-r", "2", "-e", "task-clock", "-o", "./x", "--json", "--", "./bench"], "-o"),
    (["stat", "-r", "2", "-e", "task-clock", "--html", "x", "--", "./bench"], "--html"),
    (["compare", "F.jsonl@ab=A", "F.jsonl@ab=B", "--html", "x"], "--html"),
    (["token", "add", "--file", "/dev/stdout", "--client", "ci"], "--file"),
])
def test_an_output_that_is_stdouts_file_is_refused(tmp_path, bench, ab_file, argv, option):
    """`stat -o x --csv > x` mixed CSV into the samples; `token add --file /dev/stdout > f` corrupted f."""
    stdout = tmp_path / "x"
    result = _to_file(stdout, *argv, cwd=tmp_path)
    _refused(result, f"perfctl {argv[0]}", option, "it is stdout's file")
    assert stdout.read_bytes() == b""
    _nothing_ran(tmp_path)


def test_stdout_appended_to_an_input_is_refused(tmp_path, ab_file, bench, data):
    """`compare A B >> A` would append the table to the samples it reads; `stat -- cat data.txt >> data.txt`
    would append the summary to the benchmark's input."""
    before = _digest(ab_file)
    result = _to_file(ab_file, "compare", "F.jsonl@ab=A", "F.jsonl@ab=B", cwd=tmp_path, append=True)
    assert result.returncode == 2 and result.stderr.strip().endswith(
        "it is one of the inputs (F.jsonl@ab=A); nothing was done"), result.stderr
    assert "refusing stdout" in result.stderr and len(result.stderr.splitlines()) == 1
    assert _digest(ab_file) == before
    before = _digest(data)
    result = _to_file(data, "stat", "-r", "2", "--", "./bench", "data.txt", cwd=tmp_path, append=True)
    assert result.returncode == 2 and "refusing stdout" in result.stderr, result.stderr
    assert _digest(data) == before
    _nothing_ran(tmp_path)


def test_an_output_that_is_stdins_file_is_refused(tmp_path, data):
    """`perfctl stat --html in.txt -- wc -l < in.txt` replaced in.txt with the report, exit 0 (second hostile
    review): the file on perfctl's stdin is a file the user gave it, protected as an input is."""
    before = _digest(data)
    with open(data, "rb") as stdin:
        result = _stat(tmp_path, "--html", "data.txt", "--", "wc", "-l", stdin=stdin)
    _refused(result, "perfctl stat", "--html", "it is stdin's file")
    assert _digest(data) == before
    with open(data, "rb") as stdin:  # a file that is not stdin's is still written
        result = _stat(tmp_path, "--html", "r.html", "--", "wc", "-l", stdin=stdin)
    assert result.returncode == 0, result.stderr
