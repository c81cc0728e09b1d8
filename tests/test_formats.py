"""perfctl JSON Lines: what is written reads back the same, and bad files fail with file and line."""

import pytest
from conftest import measure

from perfctl.formats import jsonl


def _write(path, samples):
    with open(path, "w") as f:
        writer = jsonl.JsonlWriter(f)
        writer.write_machine({"type": "machine", "machine_id": "m"})
        for sample in samples:
            writer.write_sample(sample)


def test_samples_round_trip(tmp_path):
    samples = measure(["/bin/true"], ["page-faults", "instructions"], runs=2)
    _write(tmp_path / "s.jsonl", samples)
    machine, *read = jsonl.read(str(tmp_path / "s.jsonl"))
    assert machine["machine_id"] == "m"
    assert read == samples


def test_torn_last_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "s.jsonl"
    _write(path, measure(["/bin/true"], ["page-faults"], runs=2))
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    with pytest.raises(jsonl.SampleFileError, match=r"s\.jsonl:3: not a perfctl sample line"):
        list(jsonl.read(str(path)))


@pytest.mark.parametrize("line, message", [
    ('{"type": "other"}', "unknown record type"),
    ('[1, 2]', "unknown record type"),
    ('{"type": "sample", "schema_version": 99}', "schema_version"),
    ('{"type": "sample", "schema_version": 1}', "not a perfctl sample line"),
])
def test_bad_lines_are_refused(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(jsonl.SampleFileError, match=message):
        list(jsonl.read(str(path)))


def test_unknown_status_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    _write(path, measure(["/bin/true"], ["page-faults"]))
    path.write_text(path.read_text().replace('"status":"ok"', '"status":"fine"'))
    with pytest.raises(jsonl.SampleFileError, match="unknown status 'fine'"):
        list(jsonl.read(str(path)))


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(jsonl.SampleFileError, match="No such file"):
        list(jsonl.read(str(tmp_path / "absent.jsonl")))
