"""Issue 28, third hostile review: counts past 2^53 decided exactly on every path (files unpaired and
--paired, both families, a server's stored runs unpaired and paired), each left-out run of --paired named
with its true reason, and blocks of A and B that never alternated refused. Real `perfctl stat` files
edited as a user would, a real `perfctl server` with a real SQLite database."""

import json
import random
import time
import uuid
from fractions import Fraction

import pytest
from conftest import measure, perfctl
from fleet import start_server
from test_fleet_compare import cli, job, stamped

from perfctl.analysis.verdicts import Verdict, beyond, read_off, relevance

E949, E1000 = 949_999_999_999_999_999, 10**18  # ratio 0.949999999999999999: just beyond the band's 0.95
M1, M2 = 2**64 - 1, 2**64 - 2  # one float; their ratio 1 + 5.4e-20 is above 1
V949 = [E949] * 4 + [950_001_000_000_000_000 + k * 10**12 for k in range(4)]  # the reviewer's v949.jsonl


def _sample(stat_lines, index, faults=None, **fields):
    s = json.loads(json.dumps(stat_lines[1]))
    s["uuid"], s["run_index"] = str(uuid.uuid4()), index
    s.update(fields)
    for reading in s["readings"]:
        if faults is not None and reading["event"] == "page-faults":
            reading["value"] = faults
    return s


def _write(path, stat_lines, faults) -> str:
    """A perfctl JSON Lines file of len(faults) runs whose page-faults are ``faults`` (exact counts)."""
    lines = [stat_lines[0]] + [_sample(stat_lines, index, value) for index, value in enumerate(faults)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _exact_verdict(a: list[int], b: list[int], margin: Fraction = Fraction(1, 20)) -> tuple[str, str]:
    """The verdict and the band column of constant or ordered counts, from the exact ratios themselves: every
    A_i/B_j (all of them below, on or above 1 and the edges, as in the cases below)."""
    ratios = [Fraction(x, y) for x in a for y in b]
    low, high = min(ratios), max(ratios)
    difference = high < 1 or low > 1
    inside = 1 - margin <= low and high <= 1 + margin
    column = "inside" if inside else "beyond" if high < 1 - margin or low > 1 + margin else "crosses"
    return relevance(difference, inside).value, column


def _row(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("true "))


CASES = {  # name: (A's page-faults, B's, the verdict of the exact ratios)
    "949999999999999999 vs 10^18": ([E949] * 10, [E1000] * 10),
    "2^64-1 vs 2^64-2": ([M1] * 10, [M2] * 10),
    "10^15+1 vs 10^15 (within the rank tests' tie tolerance)": ([10**15 + 1] * 10, [10**15] * 10),
}


@pytest.mark.parametrize("options", [[], ["--paired"], ["--family", "sparc"], ["--family", "sparc", "--paired"]],
                         ids=["unpaired", "paired", "sparc", "sparc-paired"])
@pytest.mark.parametrize("case", list(CASES))
def test_counts_past_2_53_give_the_exact_verdict_on_every_path(tmp_path, stat_lines, case, options):
    """Before: --paired went through float arrays (949999999999999999 vs 10^18 read "0.950x [0.950, 0.950]
    trivial difference inside", exit 0; 2^64-1 vs 2^64-2 "equivalence"), and --family sparc's difference test
    took 2^64-1 and 2^64-2 (one float) or 10^15+1 and 10^15 (within 1e-12) as ties: "equivalence" beside an
    interval that excludes 1. Now each path gives the exact ratios' verdict, read off its printed interval."""
    a, b = CASES[case]
    file_a, file_b = _write(tmp_path / "a.jsonl", stat_lines, a), _write(tmp_path / "b.jsonl", stat_lines, b)
    args = ["compare", file_a, file_b, "--metric", "page-faults", *options]
    text, document = perfctl(*args, "-v", "--width", "250"), perfctl(*args, "--format", "json")
    (row,) = json.loads(document.stdout)["benchmarks"]
    verdict, column = _exact_verdict(a, b)
    assert row["verdict"] == verdict, (case, options, row)
    # the verdict table's row: the finding, then the ±margin column; SPARC's words in the details table
    assert _row(text.stdout).split()[-1] == column and row["finding"] in _row(text.stdout), _row(text.stdout)
    assert verdict in text.stdout.split("details:")[1], text.stdout
    shown = read_off(row["ratio_low"], row["ratio_high"], 0.05)
    assert relevance(*shown).value == verdict, row  # the verdict reads off the interval printed beside it
    assert text.returncode == (3 if verdict == Verdict.RELEVANT.value and a[0] < b[0] else 0), text.stdout


@pytest.mark.parametrize("options", [[], ["--paired"]], ids=["unpaired", "paired"])
def test_non_constant_counts_past_2_53_cross_the_edge(tmp_path, stat_lines, options):
    """The reviewer's v949 against 10^18: 4 ratios just beyond 0.95, 4 inside. Unpaired it read "relevant
    difference crosses"; --paired read "trivial difference inside" from the floats. Now both: crosses."""
    file_a = _write(tmp_path / "a.jsonl", stat_lines, V949)
    file_b = _write(tmp_path / "b.jsonl", stat_lines, [E1000] * 8)
    result = perfctl("compare", file_a, file_b, "--metric", "page-faults", "--format", "json", *options)
    (row,) = json.loads(result.stdout)["benchmarks"]
    assert row["verdict"] == "relevant difference" and result.returncode == 3, row
    # the float 0.95 is 0.9499999999999999556, below the band's edge 19/20: compared as the rationals they are
    assert Fraction(row["ratio_low"]) < Fraction(19, 20) < Fraction(row["ratio_high"]) < 1, row
    assert beyond(row["ratio_low"], row["ratio_high"], 0.05) is None, row


# --- a server's stored runs ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(module_fleet):
    """box-c: one job of 10 runs with page-faults 949999999999999999 (v=m1), then one of 10^18 (v=m2)."""
    running = start_server(module_fleet)
    running.register("box-c")
    runs = measure(["/bin/true"], ["page-faults", "task-clock"], runs=10)
    now = time.time_ns()
    for sequence, (label, faults, start) in enumerate((("m1", E949, now - 10**9), ("m2", E1000, now - 10**8)),
                                                      start=1):
        job_id = job(running, "box-c")
        messages = stamped(runs, start_ns=start, job_id=job_id, labels={"v": label})
        for index, message in enumerate(messages):
            message.run_index = index
            for reading in message.readings:
                if reading.event == "page-faults":
                    reading.value = faults
        running.send("box-c", *messages, sequence=sequence)
    yield running


@pytest.mark.parametrize("options", [[], ["--paired"], ["--family", "sparc"]], ids=["unpaired", "paired", "sparc"])
def test_server_compares_the_counts_sent(server, options):
    """Stored as float64, 949999999999999999 became 9.5e17: the server said "trivial difference inside",
    exit 0. The counts sent are read back from the payloads: "relevant difference beyond", exit 3."""
    result = cli(server, "compare", "box-c@v=m1", "box-c@v=m2", "--metric", "page-faults", *options, "-v",
                 "--width", "250")
    row = _row(result.stdout)
    assert "B slower beyond ±5%" in row and row.split()[-1] == "beyond", result.stdout + result.stderr
    assert "[0.94999999999999996, 0.94999999999999996]" in row, row
    assert result.returncode == 3, result.stdout + result.stderr


# --- --paired: each run left out under its true reason; blocks that never alternated ----------------------

def _ab_file(path, stat_lines, rounds: dict[str, list[int]]) -> str:
    """One `perfctl ab` session's file, by hand: A's and B's runs of the given rounds (a round listed twice
    is held twice: two sessions of one seed joined without their machine lines), lines shuffled."""
    samples = [_sample(stat_lines, r, extra={"round": r, "order": int(side == "B"), "seed": 7}, labels={"ab": side})
               for side, held in rounds.items() for r in held]
    random.Random(1).shuffle(samples)
    path.write_text("".join(json.dumps(line) + "\n" for line in [stat_lines[0], *samples]))
    return str(path)


def _pairing_note(path, metric="task-clock") -> tuple[str, int]:
    result = perfctl("compare", f"{path}@ab=A", f"{path}@ab=B", "--paired", "--metric", metric, "--format", "json")
    (row,) = json.loads(result.stdout)["benchmarks"]
    # a row that cannot conclude carries its notes as one text, a judged row as a list
    notes = row["warnings"] if isinstance(row["warnings"], str) else "; ".join(row["warnings"])
    return notes, result.returncode


def test_rounds_held_twice_are_not_called_rounds_without_a_partner(tmp_path, stat_lines):
    """Two sessions of one seed joined and shuffled: every round held twice on both sides. The note said
    "left out 20 runs of A and 20 of B whose round has no run on the other side", which is false; now only
    the true reason: each side's rounds held twice, and how many runs that leaves out."""
    path = _ab_file(tmp_path / "abks.jsonl", stat_lines, {"A": list(range(10)) * 2, "B": list(range(10)) * 2})
    note, code = _pairing_note(path)
    assert "whose round has no run on the other side" not in note, note
    assert "A holds 10 rounds (run indexes) twice" in note and "its 20 runs of those rounds are left out" in note
    assert "B holds 10 rounds (run indexes) twice" in note, note
    assert code == 4, note


def test_each_left_out_run_is_counted_under_its_own_reason(tmp_path, stat_lines):
    """A holds round 3 twice and lacks round 7: A's two runs of round 3 and B's round 3 (their partner) are
    left out for the round held twice, B's round 7 for having no partner; 8 pairs."""
    path = _ab_file(tmp_path / "mixed.jsonl", stat_lines,
                    {"A": [0, 1, 2, 3, 3, 4, 5, 6, 8, 9], "B": list(range(10))})
    note, _ = _pairing_note(path)
    assert "paired by round (run index): 8 pairs" in note, note
    assert "left out 0 runs of A and 1 of B whose round has no run on the other side" in note, note
    assert "A holds 1 rounds (run indexes) twice" in note, note
    assert "its 2 runs of those rounds are left out, with their 1 partners of B" in note, note


@pytest.mark.parametrize("order", ["AAABBB", "ABB", "BBAA"])
def test_blocks_that_never_alternated_are_refused(tmp_path, order):
    """`stat -o` three times on A, then three times on B: --paired paired A's 3rd measurement with B's 1st
    (next to each other only because one series ended where the other began), left the other 4 out and
    exited 0. The sides were not measured alternately: refused in one line saying so, exit 2."""
    files = {side: tmp_path / f"{side}.jsonl" for side in "AB"}
    for side in order:
        result = perfctl("stat", "-q", "-r", "2", "--name", "t", "-o", str(files[side]), "--", "/bin/true")
        assert result.returncode == 0, result.stderr
    result = perfctl("compare", str(files["A"]), str(files["B"]), "--paired")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
    first, then = order[0], "B" if order[0] == "A" else "A"
    assert "the sides were not measured alternately" in lines[0], lines
    assert f"every measurement of {first} was taken before every one of {then}" in lines[0], lines
    assert "Traceback" not in result.stderr


def test_blocks_measured_in_turn_still_pair(tmp_path):
    """A, B, A, B: alternated, each A pairs with the B after it (the rule refuses only sides that never
    interleave)."""
    files = {side: tmp_path / f"{side}.jsonl" for side in "AB"}
    for side in "ABAB":
        result = perfctl("stat", "-q", "-r", "2", "--name", "t", "-o", str(files[side]), "--", "/bin/true")
        assert result.returncode == 0, result.stderr
    result = perfctl("compare", str(files["A"]), str(files["B"]), "--paired", "--format", "json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["benchmarks"]
    assert (row["n_a"], row["n_b"]) == (4, 4), row
    assert "paired by round (run index): 4 pairs" in row["warnings"], row["warnings"]
