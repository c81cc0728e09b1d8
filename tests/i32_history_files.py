"""Sample files for issue 32's history tests (tests/test_i32_cli.py, tests/test_i32_html.py), made by real
`perfctl stat` runs: a program ``bench`` beside the samples, rewritten at each of commits c1..c8 of branch
main as a new build would be (its path and arguments the same: one benchmark, as the server's series are
name and argv), which runs examples/bin/spin (CPU time in a busy loop) for 0.010 s up to c4 and 0.013 s from
c5 (about 1.3 times the task-clock); five runs and a warm-up a commit, each with a numeric ``build`` label
that counts down (8 at c1, 1 at c8) for --order-by."""

from __future__ import annotations

from pathlib import Path

from conftest import perfctl

ROOT = Path(__file__).resolve().parent.parent
SPIN = ROOT / "examples" / "bin" / "spin"
COMMITS = [f"c{n}" for n in range(1, 9)]
WORK = {commit: "0.010" if n < 4 else "0.013" for n, commit in enumerate(COMMITS)}


def build(directory: Path, work: str) -> Path:
    """The benchmark as built at a commit: the same path, its work ``work`` seconds of spin."""
    program = directory / "bench"
    program.write_text(f"#!/bin/sh\nexec {SPIN} {work}\n")
    program.chmod(0o755)
    return program


def measure_history(path: Path) -> Path:
    for n, commit in enumerate(COMMITS):
        program = build(path.parent, WORK[commit])
        done = perfctl("stat", "-q", "--no-progress", "-r", "5", "--warmup", "1", "-e", "task-clock", "--name", "spin",
                       "--label", f"commit={commit}", "--label", "branch=main", "--label", f"build={8 - n}",
                       "-o", str(path), "--", str(program))
        assert done.returncode == 0, done.stderr
    return path
