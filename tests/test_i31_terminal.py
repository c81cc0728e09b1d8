"""What a person sees in a real terminal: `perfctl stat`, `compare` and `ab` run in tmux at 80 and 100
columns, their screens captured. Every line fits the terminal, nothing is cut ("…"), no interval is broken
across lines, and compare and ab lead with the sentence that says what changed and why the exit code is
what it is (issue 31). Piped output is laid out for 100 columns, or --width, or $COLUMNS."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from conftest import perfctl

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="probe: tmux not on PATH (deploy/setup.sh)")


def on_screen(tmp_path, columns: int, *args: str) -> tuple[str, int]:
    """The screen of ``perfctl ARGS`` run in a tmux window ``columns`` wide (a private tmux server), its
    lines as the program wrote them (tmux's own wrapping of a too-long line joined back: -J), and the exit
    code."""
    socket, marker = f"perfctl-{uuid.uuid4().hex[:8]}", "__perfctl_exit="
    command = " ".join(shlex.quote(word) for word in (sys.executable, "-m", "perfctl", *args))
    script = tmp_path / f"run-{socket}.sh"
    # COLUMNS unset: the width is the terminal's (a test runner may export one)
    script.write_text(f"unset COLUMNS LINES\ncd {shlex.quote(os.getcwd())}\n{command}\necho {marker}$?\nsleep 600\n")
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", str(columns), "-y", "400", "bash", str(script)], check=True,
                   env={**os.environ, "TERM": "xterm-256color"})
    try:
        deadline = time.monotonic() + 240
        while True:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "0"], check=True,
                                    capture_output=True, text=True).stdout
            found = re.search(rf"^{marker}(\d+)$", screen, re.M)
            if found:
                break
            assert time.monotonic() < deadline, screen
            time.sleep(0.2)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    text = screen[:found.start()].rstrip("\n")
    return text, int(found.group(1))


def assert_readable(text: str, columns: int) -> None:
    lines = text.splitlines()
    too_long = [line for line in lines if len(line.rstrip()) > columns]
    assert not too_long, f"lines wider than {columns} columns:\n" + "\n".join(too_long)
    assert "…" not in text, text  # rich's ellipsis: a name or a number cut
    for line in lines:  # an interval is one number: never broken across lines
        assert line.count("[") == line.count("]"), (line, text)


FINDINGS = ("B slower beyond ±5%", "B faster beyond ±5%", "B slower, within ±5%", "B faster, within ±5%", "B slower",
            "B faster", "equivalent within ±5%", "no difference shown", "disturbed", "cannot conclude")


def verdict_of(body: str, name: str) -> str:
    """The verdict printed for benchmark ``name``: the end of its table row ("sort  8/8 ... B slower"), or
    what follows "name: " on its own lines ("sort: B slower; n A/B 8/8; ...")."""
    for line in body.splitlines():
        if line.startswith(f"{name}: "):
            return line[len(name) + 2:].split(";")[0]
        if line.startswith(f"{name} ") or line.startswith(name[:8]) and "×" in line:
            return next((f for f in FINDINGS if line.rstrip().endswith(f)), line)
    raise AssertionError(f"no row for {name}:\n{body}")


@pytest.fixture(scope="module")
def builds(programs, tmp_path_factory):
    """Two builds of a small suite: sort over four times the work in B (slower beyond the reach of a busy
    machine's disturbance, analysis/disturbance.py rule 4), hashtable the same on both sides.
    Measured as examples/compare-builds.sh does, in rounds that alternate A and B (a busy spell of the machine
    then falls on both sides alike), with runs of 5-30 ms."""
    out = tmp_path_factory.mktemp("builds")
    for _round in range(3):
        for side, n in (("A", "50000"), ("B", "200000")):
            for name, argv in (("sort", [str(programs / "sort"), n]),
                               ("hashtable-with-a-long-name", [str(programs / "hashtable"), "100000"])):
                result = perfctl("stat", "-q", "-r", "4", "--warmup", "1", "--name", name,
                                 "-o", str(out / f"{side}.jsonl"), "--", *argv)
                assert result.returncode == 0, result.stderr
    return out / "A.jsonl", out / "B.jsonl"


@pytest.mark.parametrize("columns", [80, 100])
def test_compare_on_a_terminal_leads_with_what_changed(builds, tmp_path, columns):
    a, b = builds
    text, code = on_screen(tmp_path, columns, "compare", str(a), str(b))
    assert code == 3, text
    assert_readable(text, columns)
    first = text.split("\n\n")[0]  # the headline: a paragraph of its own, first
    said = " ".join(first.split())
    # sort does four times the work in B; hashtable the same (on a busy machine its blocks may differ too)
    assert re.match(r"B slower on [12] of 2 benchmarks: ", said) and "sort 0." in said, text
    assert re.search(r"Exit 3: (hashtable-with-a-long-name, )?sort slower \(--fail-on relevant\)\.", said), text
    body = text[len(first):]
    # the verdict with its direction beside each benchmark, whole (rich crops without an ellipsis), in a
    # table row or first on the row's own lines when the table does not fit
    assert verdict_of(body, "sort") == "B slower beyond ±5%", text
    assert verdict_of(body, "hashtable-with-a-long-name") in FINDINGS, text
    assert "statistical" not in body and "Bonferroni over 2" in " ".join(body.split())  # method: the footer


@pytest.mark.parametrize("columns", [80, 100])
def test_stat_on_a_terminal_cuts_no_name_or_number(programs, tmp_path, columns):
    text, code = on_screen(tmp_path, columns, "stat", "-r", "5", "--", str(programs / "sort"), "30000")
    assert code == 0, text
    assert_readable(text, columns)
    for event in ("wall-time", "task-clock", "page-faults", "context-switches"):
        assert re.search(rf"^\s*{event}\b", text, re.M), (event, text)


@pytest.mark.parametrize("columns", [80, 100])
def test_ab_on_a_terminal_leads_with_its_verdict(programs, tmp_path, columns):
    text, code = on_screen(tmp_path, columns, "ab", "--max-runs", "20", "--", str(programs / "spin"), "0.002", ":::",
                           str(programs / "spin"), "0.004")
    assert code in (3, 4), text  # twice the spinning: slower, or (on a very busy machine) not yet settled
    assert_readable(text, columns)
    # the live display is gone once the rounds end: the summary starts with the headline
    start = re.search(r"^(B slower than A|B: )", text, re.M)
    assert start, text
    said = " ".join(text[start.start():].split("\n\n")[0].split())
    assert re.match(r"B (slower than A|: no difference shown)", said), text
    assert re.search(r"Exit [34]: ", said), text


def test_piped_output_is_laid_out_for_100_columns_or_as_asked(builds):
    a, b = builds
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    piped = perfctl("compare", str(a), str(b), env=env)
    assert max(len(line) for line in piped.stdout.splitlines()) <= 100, piped.stdout
    assert max(len(line) for line in piped.stdout.splitlines()) > 80, piped.stdout  # the headline fills it
    for width, env_columns in ((60, None), (140, None), (None, "72")):
        args = ("--width", str(width)) if width else ()
        done = perfctl("compare", str(a), str(b), *args, env={**env, **({"COLUMNS": env_columns} if env_columns
                                                                         else {})})
        limit = width or int(env_columns)
        assert max(len(line) for line in done.stdout.splitlines()) <= limit, (limit, done.stdout)
        assert "…" not in done.stdout
    wrapped = perfctl("compare", str(a), str(b), "--width", "60", env=env).stdout.splitlines()
    # wrapped prose keeps its indent: a continuation line never restarts at column 0
    headline = wrapped[:wrapped.index("")]
    assert len(headline) > 1 and all(line.startswith("  ") for line in headline[1:]), headline
