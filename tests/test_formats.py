"""perfctl JSON Lines: what the writer writes reads back the same, and bad files fail with file and line."""

import json

import pytest
from conftest import measure, read_records

from perfctl.formats import DatasetError
from perfctl.formats.jsonl import read_dataset
from perfctl.formats.jsonl_writer import JsonlWriter, sample_record


def _write(path, samples):
    with open(path, "wb") as f:
        writer = JsonlWriter([(str(path), f)])
        writer.write_machine({"type": "machine", "machine_id": "m"})
        for sample in samples:
            writer.write_sample(sample)


def _as_read(record: dict) -> dict:
    """``record`` as JSON reads it back (tuples become lists)."""
    return json.loads(json.dumps(record))


def test_samples_round_trip(tmp_path):
    samples = measure(["/bin/true"], ["page-faults", "instructions"], runs=2)
    _write(tmp_path / "s.jsonl", samples)
    machine, *records = read_records(tmp_path / "s.jsonl")
    assert machine["machine_id"] == "m"
    assert records == [_as_read(sample_record(s)) for s in samples]
    dataset = read_dataset(str(tmp_path / "s.jsonl"))
    assert dataset.benchmarks["true"].metrics["page-faults"] == [s.reading("page-faults").value for s in samples]
    assert dataset.benchmarks["true"].metrics["wall-time"] == [s.wall_ns for s in samples]


def test_one_writer_writes_the_same_line_to_every_output(tmp_path):
    """-o FILE and stdout's --json take one serialization: the same bytes, in the same order."""
    samples = measure(["/bin/true"], ["page-faults"], runs=2)
    with open(tmp_path / "a.jsonl", "wb") as binary, open(tmp_path / "b.jsonl", "w") as text:
        writer = JsonlWriter([("a", binary), ("b", text)])
        writer.write_machine({"type": "machine", "machine_id": "m"})
        for sample in samples:
            writer.write_sample(sample)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert len(read_records(tmp_path / "a.jsonl")) == 3


def test_a_failed_output_is_named():
    from perfctl.output_files import OutputError

    with open("/dev/full", "wb", buffering=0) as full:
        writer = JsonlWriter([("the full one", full)])
        with pytest.raises(OutputError) as caught:
            writer.write_machine({"type": "machine"})
    assert caught.value.where == "the full one" and caught.value.error.errno == 28  # ENOSPC


def test_torn_last_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "s.jsonl"
    _write(path, measure(["/bin/true"], ["page-faults"], runs=2))
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    with pytest.raises(DatasetError, match=r"s\.jsonl:3: not a perfctl sample line"):
        read_dataset(str(path))


@pytest.mark.parametrize("line, message", [
    ('{"type": "other"}', "unknown record type"),
    ('[1, 2]', "unknown record type"),
    ('{"type": "sample", "schema_version": 99}', "schema_version"),
    ('{"type": "sample", "schema_version": 1}', "bad.jsonl:1: "),
])
def test_bad_lines_are_refused(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DatasetError, match=message):
        read_dataset(str(path))


def test_unknown_status_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    _write(path, measure(["/bin/true"], ["page-faults"]))
    path.write_text(path.read_text().replace('"status":"ok"', '"status":"fine"'))
    with pytest.raises(DatasetError, match="unknown status 'fine'"):
        read_dataset(str(path))


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="No such file"):
        read_dataset(str(tmp_path / "absent.jsonl"))


def test_each_sample_line_reads_back_as_what_json_makes_of_its_dict(tmp_path):
    """The writer writes with orjson where it can and json where orjson would differ: either way the line is
    ASCII and reads back as json.dumps of the sample's record does, whatever the sample holds."""
    import dataclasses

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
    writer = JsonlWriter()
    for sample in samples:
        line = writer.sample_line(sample)
        assert line.isascii() and b"\n" not in line
        expected = json.dumps(sample_record(sample), separators=(",", ":"))
        assert json.dumps(json.loads(line)) == json.dumps(json.loads(expected))  # NaN too, key order too
    _write(tmp_path / "s.jsonl", samples)
    read = read_records(tmp_path / "s.jsonl")[1:]
    assert [json.dumps(r) for r in read] == [json.dumps(_as_read(sample_record(s))) for s in samples]
    # compare's reader (orjson, which refuses the lone surrogate json wrote for argv bytes that are not UTF-8)
    surrogate = dataclasses.replace(real[0], benchmark=dataclasses.replace(real[0].benchmark, argv=("\udcff",)))
    _write(tmp_path / "argv.jsonl", [surrogate, real[1]])
    assert "\\udcff" in (tmp_path / "argv.jsonl").read_text()
    assert list(read_dataset(str(tmp_path / "argv.jsonl")).benchmarks) == [real[0].benchmark.name]


def test_a_reading_is_found_by_the_name_a_file_gives_it():
    """Sample.reading finds a reading by the name a file gives it (model.counter_labels, which names the
    runs read from files and from a server too), where two backends count one event."""
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
