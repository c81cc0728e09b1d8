"""The JSON Lines reader's shortcut for plain measured runs (DatasetBuilder._add_measured) builds exactly what
the general checks build, and hands every run it cannot vouch for to them: the same Dataset, to the last
note, variant count and float, on files that mix benchmarks, layouts, warm-ups, failures, multiplexed,
unsupported and interfered-with readings, and the same one-line error for each hostile line."""

import copy
import json
import random
import uuid

import pytest

from perfctl.formats import DatasetError, read_dataset
from perfctl.formats.jsonl import DatasetBuilder
from perfctl.model import InterferencePolicy


def _reading(event, value, **fields):
    return {"event": event, "backend": "perf_event", "scope": "all", "status": "ok", "unit": None,
            "value": value, **fields}


def _sample(rng: random.Random, index: int) -> dict:
    name = rng.choice(["alpha", "beta", "gamma"])
    readings = [_reading("task-clock", rng.randrange(10**6, 2 * 10**6), unit="ns"),
                _reading("page-faults", rng.randrange(100, 200))]
    kind = rng.randrange(10)
    if kind == 1:
        readings.append(_reading("cycles", 12345, status="multiplexed", scaled=rng.random() * 1e9))
    elif kind == 2:
        readings.append(_reading("instructions", None, status="unsupported", reason="no PMU"))
    elif kind == 3:
        readings.append(_reading("cycles", None, status="error", reason="EBUSY"))
    elif kind == 4:  # interfered with above the 5% limit in some runs
        readings.append(_reading("interference-time", rng.choice([0, 10**5]), backend="ebpf", unit="ns"))
    elif kind == 6:  # interference eBPF could not tell (a switch the kernel did not report): flagged
        readings.append(_reading("interference-time", 10**4, backend="ebpf", unit="ns", status="error",
                                 reason="the kernel ran 1 of the benchmark's context switches without reporting them"))
    elif kind == 5:  # the same event counted by two backends, and a user-space scope
        readings += [_reading("task-clock", 5.5, backend="ebpf", unit="ns"), _reading("page-faults", 3, scope="user")]
    rng.shuffle(readings)
    return {"type": "sample", "schema_version": 1, "uuid": str(uuid.UUID(int=index)),
            "machine_id": rng.choice(["m", "m", "n"]),
            "benchmark": {"name": name, "argv": ["./" + name] + (["-x"] if rng.random() < 0.1 else []),
                          "executable": "/x", "executable_sha256": rng.choice(["a" * 64, "a" * 64, None]),
                          "input_digest": "0" * 64},
            "run_index": index, "warmup": rng.random() < 0.1, "start_time_ns": rng.choice([None, 10**18 + index]),
            "wall_ns": rng.choice([rng.randrange(10**6, 3 * 10**6), 1.5e6]),
            "outcome": rng.choice(["ok"] * 8 + ["timeout", "failed"]), "exit_status": 0, "signal": None,
            "environment": {}, "readings": readings, "backends": ["perf_event"], "extra": {}}


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _general_only(monkeypatch) -> None:
    monkeypatch.setattr(DatasetBuilder, "_add_measured", lambda self, record, key=None: False)


@pytest.mark.parametrize("policy", [InterferencePolicy(), InterferencePolicy(exclude=True)])
def test_the_shortcut_builds_what_the_general_checks_build(tmp_path, monkeypatch, policy):
    rng = random.Random(15)
    path = _write(tmp_path / "runs.jsonl", [{"type": "machine", "machine_id": "m"}]
                  + [_sample(rng, i) for i in range(3000)])
    fast = read_dataset(path, interference=policy)
    taken = DatasetBuilder(path, interference=policy)
    assert sum(taken._add_measured(_sample(random.Random(i), i)) for i in range(200)) > 50  # it is used
    _general_only(monkeypatch)
    general = read_dataset(path, interference=policy)
    assert fast == general
    # Counter equality ignores order; the notes list variants in it ("runs mix ..."), so it must agree too
    assert [list(b.variants) for b in fast.benchmarks.values()] == \
        [list(b.variants) for b in general.benchmarks.values()]
    assert fast.notes == general.notes and any("interfered" in note for note in fast.notes)
    assert sum(len(b.metrics["wall-time"]) for b in fast.benchmarks.values()) > 1500


HOSTILE = [
    lambda s: s["benchmark"].update(name={"a": 1}),
    lambda s: s["benchmark"].update(argv=["x", ["y"]]),
    lambda s: s["benchmark"].update(executable_sha256=7),
    lambda s: s.update(schema_version=True),
    lambda s: s.update(wall_ns=-1),
    lambda s: s.update(wall_ns=float(2**65)),
    lambda s: s.update(wall_ns=True),
    lambda s: s.update(start_time_ns="now"),
    lambda s: s.update(machine_id=["m"]),
    lambda s: s["readings"][0].update(event={"x": 1}),
    lambda s: s["readings"][0].update(value=None),
    lambda s: s["readings"][0].update(value="12"),
    lambda s: s["readings"][0].update(status="fine"),
    lambda s: s["readings"][0].update(unit=3),
    lambda s: s["readings"].append(dict(s["readings"][0])),  # a counter read twice in one run
    lambda s: s["readings"].append({"event": "cycles", "status": "error", "reason": "x", "value": -5}),
    lambda s: s["readings"].append({"event": "cycles", "status": "multiplexed", "value": 1}),  # no scaled
    lambda s: s["readings"].append({"event": "cycles", "status": "multiplexed", "value": 1, "scaled": -2.5}),
    lambda s: s["readings"].append({"event": "cycles", "status": "unsupported", "reason": "x", "scaled": "1"}),
    lambda s: s.update(readings={"a": 1}),
]


@pytest.mark.parametrize("change", HOSTILE)
def test_a_hostile_run_gets_the_general_checks_one_line_error(tmp_path, monkeypatch, change):
    rng = random.Random(3)
    good = [_sample(rng, i) | {"warmup": False, "outcome": "ok"} for i in range(20)]
    bad = copy.deepcopy(good[5])
    change(bad)
    path = _write(tmp_path / "runs.jsonl", good[:10] + [bad] + good[10:])
    builder = DatasetBuilder(path)
    for record in good[:10]:
        builder.add(record)
    before = copy.deepcopy(builder.dataset)
    assert builder._add_measured(copy.deepcopy(bad)) is False
    assert builder.dataset == before  # refused having changed nothing
    with pytest.raises(DatasetError) as fast:
        read_dataset(path)
    _general_only(monkeypatch)
    with pytest.raises(DatasetError) as general:
        read_dataset(path)
    assert str(fast.value) == str(general.value)
    assert str(fast.value).startswith(f"{path}:11: ") and "\n" not in str(fast.value)
