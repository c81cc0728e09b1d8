"""The identity of a run in a compare of files: the same run on both sides refused, a uuid written in another
form, runs whose lines are out of order, --benchmark with one benchmark a side under two names, and the header
that says how runs were paired. Real measurements of examples/bin/pagetouch by the real CLI."""

import json
import random
import re
import uuid

import pytest
from conftest import perfctl


@pytest.fixture(scope="module")
def measured(tmp_path_factory, programs):
    """Three real measurements of 5 runs each: A and B of one program under one name (touch), and C under
    another name (other)."""
    out = tmp_path_factory.mktemp("identity")
    files = {}
    for side, pages, name in (("A", 300, "touch"), ("B", 330, "touch"), ("C", 300, "other")):
        path = out / f"{side}.jsonl"
        result = perfctl("stat", "-q", "-r", "5", "-e", "page-faults", "--name", name, "-o", str(path), "--",
                         str(programs / "pagetouch"), str(pages))
        assert result.returncode == 0, result.stderr
        files[side] = path
    return files


def _lines(path) -> list[str]:
    return path.read_text().splitlines()


def _document(*args):
    result = perfctl("compare", *map(str, args), "--metric", "page-faults", "--format", "json")
    assert result.stdout, result.stderr
    return json.loads(result.stdout), result


def test_the_same_runs_on_both_sides_are_refused(measured, tmp_path):
    """compare F F (or F@ab=A F@ab=A) compared each run with itself: equivalence [1.000, 1.000], exit 0."""
    result = perfctl("compare", str(measured["A"]), str(measured["A"]), "--paired")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("perfctl compare: A and B are the same file") and "compared with itself" in line
    copy = tmp_path / "copy.jsonl"  # another file, the same runs: told by their uuids
    copy.write_bytes(measured["A"].read_bytes())
    result = perfctl("compare", str(measured["A"]), str(copy), "--paired")
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode == 2 and line.startswith("perfctl compare: A and B are the same 5 runs"), line
    labelled = tmp_path / "ab.jsonl"
    records = [json.loads(line) for line in _lines(measured["A"])]
    labelled.write_text("".join(json.dumps({**r, "labels": {"ab": "A"}} if r["type"] == "sample" else r) + "\n"
                                for r in records))
    result = perfctl("compare", f"{labelled}@ab=A", f"{labelled}@ab=A")
    assert result.returncode == 2 and "A and B are the same file" in result.stderr


def test_runs_of_the_other_side_are_left_out_of_the_side_that_holds_more(measured, tmp_path):
    """A file holding A's runs and B's, compared with A, put A's 5 runs into B too (n 5/10, silently)."""
    both = tmp_path / "AB.jsonl"
    both.write_text(measured["A"].read_text() + measured["B"].read_text())
    document, result = _document(measured["A"], both)
    assert [(r["n_a"], r["n_b"]) for r in document["benchmarks"]] == [(5, 5)], result.stdout
    assert "B: left out 5 samples that are also the other side's (same uuid): a run is A's or B's, not both" \
        in document["notes"]
    plain, _ = _document(measured["A"], measured["B"])
    assert document["benchmarks"][0]["ratio_a_over_b"] == plain["benchmarks"][0]["ratio_a_over_b"]
    document, _ = _document(both, measured["B"])  # the other way round: A loses B's runs
    assert [(r["n_a"], r["n_b"]) for r in document["benchmarks"]] == [(5, 5)]
    assert any(n.startswith("A: left out 5 samples that are also the other side's") for n in document["notes"])
    # both sides hold runs of their own and the shared ones: no side can claim them, left out of both
    a_and_c, b_and_c = tmp_path / "AC.jsonl", tmp_path / "BC.jsonl"
    a_and_c.write_text(measured["A"].read_text() + measured["C"].read_text())
    b_and_c.write_text(measured["B"].read_text() + measured["C"].read_text())
    document, _ = _document(a_and_c, b_and_c)
    assert [(r["benchmark"], r["n_a"], r["n_b"]) for r in document["benchmarks"]] == [("touch", 5, 5)]
    assert any(n.startswith("A and B: left out 5 samples that are also the other side's") for n in document["notes"])


@pytest.mark.parametrize("form", [str.upper, lambda u: "{" + u + "}", lambda u: u.replace("-", ""),
                                  lambda u: "urn:uuid:" + u])
def test_a_uuid_in_another_form_is_the_same_run(measured, tmp_path, form):
    """A copied with its uuids upper-cased, in braces, without dashes or as URNs: n was 10, no note."""
    lines = _lines(measured["A"])
    copy = [json.dumps({**record, "uuid": form(record["uuid"])}) for record in map(json.loads, lines[1:])]
    path = tmp_path / "A2.jsonl"
    path.write_text("\n".join(lines + copy) + "\n")
    document, result = _document(path, measured["B"])
    assert [(r["n_a"], r["n_b"]) for r in document["benchmarks"]] == [(5, 5)], result.stdout
    assert any("left out 5 samples whose uuid an earlier sample already had" in n for n in document["notes"])


def test_a_uuid_that_is_no_uuid_is_refused_naming_its_line(measured, tmp_path):
    lines = _lines(measured["A"])
    for bad in ("x", "5ea2ea64-1f1e-4079-92b0-549841927b2", "+5ea2ea641f1e407992b0549841927b2"):
        record = json.loads(lines[2])
        path = tmp_path / "bad.jsonl"
        path.write_text("\n".join(lines[:2] + [json.dumps({**record, "uuid": bad})] + lines[3:]) + "\n")
        result = perfctl("compare", str(path), str(measured["B"]))
        assert result.returncode == 2
        assert result.stderr.strip() == f"perfctl compare: {path}:3: uuid: not a uuid: {bad!r}"


def test_runs_without_a_uuid_are_counted_in_a_note(measured, tmp_path):
    lines = _lines(measured["A"])
    anonymous = [json.dumps({k: v for k, v in json.loads(line).items() if k != "uuid"}) for line in lines[1:]]
    path = tmp_path / "anon.jsonl"
    path.write_text("\n".join(lines[:1] + anonymous + anonymous) + "\n")
    document, _ = _document(path, measured["B"])
    assert "A: 10 samples carry no uuid: a run read twice among them cannot be told from two runs" in document["notes"]
    # read twice without a uuid, each run index is met twice in one measurement: no run can tell which of its
    # two is the partner, so they are left out, never paired by place (issue 28, second review), and why
    document, _ = _document(path, measured["B"], "--paired")
    (row,) = document["benchmarks"]
    assert "A holds 5 rounds (run indexes) twice in one measurement, e.g. round 0 of A's measurement 1" in \
        row["warnings"] and "never paired by place" in row["warnings"], row["warnings"]
    assert row["n_a"] == row["n_b"] == 0 and "paired by position" not in document["statement"][-1]


def test_runs_out_of_line_order_keep_their_partners(measured, tmp_path):
    """B's lines reversed (machine line first) paired 1 run of 5; shuffled, 0."""
    lines = _lines(measured["B"])
    for order in (lambda runs: runs[::-1], lambda runs: random.Random(7).sample(runs, len(runs))):
        path = tmp_path / "Bmoved.jsonl"
        path.write_text("\n".join(lines[:1] + order(lines[1:])) + "\n")
        moved, _ = _document(measured["A"], path, "--paired")
        kept, _ = _document(measured["A"], measured["B"], "--paired")
        (row,) = moved["benchmarks"]
        assert (row["n_a"], row["n_b"]) == (5, 5)
        assert "paired by round (run index): 5 pairs" in row["warnings"]
        assert row["ratio_a_over_b"] == kept["benchmarks"][0]["ratio_a_over_b"]
        assert moved["statement"][-1].endswith("paired by round (run index)")


def test_benchmark_names_either_side_of_a_renamed_pair(measured):
    """One benchmark a side under two names: --benchmark touch (A's) said 'no benchmark in common between
    A (touch) and C ()'; either name now selects the pair, as compare does without it."""
    for name in ("touch", "other"):
        document, result = _document(measured["A"], measured["C"], "--benchmark", name)
        assert result.returncode in (0, 3), result.stderr
        assert [r["benchmark"] for r in document["benchmarks"]] == ["touch"]
        assert "one benchmark per file: comparing 'touch' (A) with 'other' (B)" in document["statement"]
    result = perfctl("compare", str(measured["A"]), str(measured["C"]), "--benchmark", "nosuch")
    assert result.returncode == 2 and "no benchmark named 'nosuch' in A or B" in result.stderr


def test_the_uuid_forms_read_are_those_of_uuid_module():
    """The forms canonical_uuid reads give uuid.UUID's canonical text."""
    from perfctl.dataset import canonical_uuid

    value = uuid.uuid4()
    for text in (str(value), str(value).upper(), "{" + str(value) + "}", value.hex, value.urn, value.urn.upper()):
        assert canonical_uuid(text) == str(value), text
    for text in ("{" + str(value), str(value) + "}", " " + value.hex[1:], value.hex[:31] + "_", ""):
        with pytest.raises(ValueError, match=re.escape("not a uuid")):
            canonical_uuid(text)
