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


def test_each_sample_line_reads_back_as_what_json_makes_of_its_dict(tmp_path):
    """sample_line writes with orjson where it can and json where orjson would differ: either way the line is
    ASCII and reads back as json.dumps of the sample's dict does, whatever the sample holds."""
    import dataclasses
    import json

    from perfctl.model import Reading

    real = measure(["/bin/true"], ["page-faults", "instructions", "context-switches"], runs=2)

    def odd(value, **fields):
        reading = Reading(event="x", backend="ebpf", scope="all", status="error", unit="count", value=value,
                          reason="why")
        return dataclasses.replace(real[0], readings=real[0].readings + (reading,), **fields)

    nan_elsewhere = dataclasses.replace(real[0].readings[-1], scaled=float("inf"), corrected=float("nan"))
    samples = [*real, odd(1.5e300), odd(float("nan")), odd(float("-inf")), odd(2**70), odd(-3, extra={"r": 1e-7}),
               odd(1, extra={"nested": {"x": [1.0, float("nan")]}}),
               dataclasses.replace(real[0], readings=real[0].readings[:-1] + (nan_elsewhere,)),
               odd(0.1, stderr_tail="caf\u00e9 \x1b[31m \u2028 \"q\"\n\t", labels={"k": "v", "e": ""}),
               odd(7, benchmark=dataclasses.replace(real[0].benchmark, argv=("/bin/true", "\udcfe", "a b"))),
               odd(1, exit_status=None, signal=9, outcome="signal", extra={"outlived": 2})]
    for sample in samples:
        line = jsonl.sample_line(sample)
        assert line.isascii() and "\n" not in line
        expected = json.dumps(sample.to_dict(), separators=(",", ":"))
        assert json.dumps(json.loads(line)) == json.dumps(json.loads(expected))  # NaN too, key order too
    _write(tmp_path / "s.jsonl", samples)
    read = list(jsonl.read(str(tmp_path / "s.jsonl")))[1:]
    assert [json.dumps(s.to_dict()) for s in read] == [json.dumps(s.to_dict()) for s in samples]
    # compare's reader (orjson, which refuses the lone surrogate json wrote for argv bytes that are not UTF-8)
    surrogate = dataclasses.replace(real[0], benchmark=dataclasses.replace(real[0].benchmark, argv=("\udcff",)))
    _write(tmp_path / "argv.jsonl", [surrogate, real[1]])
    assert "\\udcff" in (tmp_path / "argv.jsonl").read_text()
    assert list(jsonl.read_dataset(str(tmp_path / "argv.jsonl")).benchmarks) == [real[0].benchmark.name]


def test_a_reading_is_found_by_the_name_a_file_gives_it():
    """Sample.reading finds a plain label without naming every reading (ab asks once per run): the same
    reading as by the names distinct_labels gives, where two backends count one event."""
    import dataclasses

    from perfctl.model import Reading, distinct_labels

    real = measure(["/bin/true"], ["page-faults", "context-switches"])[0]
    twins = tuple(dataclasses.replace(r, backend="ebpf", value=(r.value or 0) + 1) for r in real.readings)
    sample = dataclasses.replace(real, readings=real.readings + twins + (
        Reading(event="x", backend="ebpf", scope="user", status="ok", unit="count", value=1, reason=None),))
    names = distinct_labels([(r.label, r.backend) for r in sample.readings])
    assert len(set(names)) == len(names) and "page-faults@ebpf" in names and "x:u" in names
    for reading, name in zip(sample.readings, names):
        assert sample.reading(name) is reading
    assert sample.reading("absent") is None and sample.reading("absent@ebpf") is None
