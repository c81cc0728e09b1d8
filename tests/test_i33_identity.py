"""Issue 33: what a benchmark is when hooks run around it. A --setup that builds the program (hyperfine's
documented use), a --prepare that swaps it between runs: each sample carries the identity (executable_sha256)
of the binary that actually ran, and a program made by --setup need not exist before it. Real programs
(examples/), real runs, the software task-clock event."""

import hashlib
import json

from conftest import perfctl


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _samples(path) -> list[dict]:
    return [record for line in path.read_text().splitlines() if (record := json.loads(line))["type"] == "sample"]


def _stat(tmp_path, *options, runs="2"):
    out = tmp_path / "s.jsonl"
    result = perfctl("stat", "-r", runs, "-e", "task-clock", "-o", str(out), *options, cwd=tmp_path)
    return result, out


def test_a_program_built_by_setup_need_not_exist_before_and_is_the_one_identified(programs, tmp_path):
    result, out = _stat(tmp_path, "--setup", f"cp {programs / 'work'} built", "--", "./built", "1")
    assert result.returncode == 0, result.stderr
    assert {s["benchmark"]["executable_sha256"] for s in _samples(out)} == {_digest(programs / "work")}


def test_a_program_rebuilt_by_setup_is_identified_after_it(programs, tmp_path):
    (tmp_path / "prog").write_bytes((programs / "spin").read_bytes())
    (tmp_path / "prog").chmod(0o755)
    result, out = _stat(tmp_path, "--setup", f"cp {programs / 'work'} prog", "--", "./prog", "1")
    assert result.returncode == 0, result.stderr
    assert {s["benchmark"]["executable_sha256"] for s in _samples(out)} == {_digest(programs / "work")}


def test_a_prepare_that_swaps_the_program_gives_each_run_its_own_identity(programs, tmp_path):
    # each run's --prepare puts the other program in place: work, spin, work, spin (both take "1")
    swap = f"if cmp -s prog {programs / 'work'}; then cp {programs / 'spin'} prog; else cp {programs / 'work'} prog; fi"
    (tmp_path / "prog").write_bytes((programs / "spin").read_bytes())
    (tmp_path / "prog").chmod(0o755)
    result, out = _stat(tmp_path, "--prepare", swap, "--", "./prog", "1", runs="4")
    assert result.returncode == 0, result.stderr
    digests = [s["benchmark"]["executable_sha256"] for s in _samples(out)]
    assert digests == [_digest(programs / "work"), _digest(programs / "spin")] * 2


def test_an_argument_file_changed_by_prepare_changes_the_input_digest(programs, tmp_path):
    (tmp_path / "in.txt").write_text("a\n")
    result, out = _stat(tmp_path, "--prepare", "echo b >> in.txt", "--", "/usr/bin/sort", "in.txt", runs="3")
    assert result.returncode == 0, result.stderr
    assert len({s["benchmark"]["input_digest"] for s in _samples(out)}) == 3


def test_a_setup_that_does_not_make_the_program_is_said_so(tmp_path):
    result, out = _stat(tmp_path, "--setup", "true", "--", "./never-made")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--setup did not leave a command that runs: command not found: ./never-made" in result.stderr
    assert not out.exists() or _samples(out) == []


def test_without_setup_a_missing_program_is_refused_before_anything_runs(tmp_path):
    result, out = _stat(tmp_path, "--prepare", "touch ran", "--", "./never-made")
    assert result.returncode == 2 and "command not found: ./never-made" in result.stderr
    assert not (tmp_path / "ran").exists() and not out.exists()


def test_ab_takes_a_program_its_setup_builds(programs, tmp_path):
    result = perfctl("ab", "-e", "task-clock", "--max-runs", "3", "--min-runs", "3", "--format", "json",
                     "--setup", "true", "--setup", f"cp {programs / 'work'} built", "--",
                     str(programs / "work"), "1", ":::", "./built", "1", cwd=tmp_path, timeout=120)
    assert result.returncode in (0, 3, 4), result.stderr  # 4: not settled in 3 rounds, as task-clock may not be
    assert json.loads(result.stdout)["rounds"] == 3


def test_a_hook_script_is_never_an_output(programs, tmp_path):
    script = tmp_path / "prep.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    script.chmod(0o755)
    for output in (["--html", "prep.sh", "--force"], ["-o", "prep.sh"]):
        result = perfctl("stat", "-r", "1", "-e", "task-clock", *output, "--prepare", "./prep.sh", "--",
                         str(programs / "work"), "1", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "refusing" in result.stderr and "--prepare ./prep.sh names it; nothing was done" in result.stderr
    assert script.read_text() == "#!/bin/sh\ntrue\n"


def test_a_file_a_hooks_words_name_is_never_an_output(programs, tmp_path):
    result, out = _stat(tmp_path, "--cleanup", "rm -f s.jsonl", "--", str(programs / "work"), "1")
    assert result.returncode == 2 and "refusing -o" in result.stderr
    assert "--cleanup rm -f s.jsonl names it" in result.stderr


def test_an_output_a_hook_removes_is_an_error_naming_the_samples_lost(programs, tmp_path):
    # the script's words do not name the file: only its end can tell
    script = tmp_path / "rm-out.sh"
    script.write_text("#!/bin/sh\nrm -f s.jsonl\n")
    script.chmod(0o755)
    result, out = _stat(tmp_path, "--prepare", "./rm-out.sh", "--", str(programs / "work"), "1")
    assert result.returncode == 2 and not out.exists()
    assert "s.jsonl is gone" in result.stderr and "the 2 samples written there are lost" in result.stderr
