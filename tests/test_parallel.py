"""perfctl/parallel.py: work in a forked child gives back its value or raises its exception in the parent,
dies with a cancel, and is done in-process where a fork is unsafe; `perfctl compare` of files large enough
to be read in two processes prints exactly what it prints when read in one, and reports a bad file the same."""

import json
import os
import threading
import time

import pytest

import perfctl.cli.compare as compare_cli
from perfctl import cli
from perfctl.formats import DatasetError
from perfctl.parallel import Forked


def _pid_of_child() -> int:
    return os.getpid()


def test_the_value_comes_from_a_child():
    with Forked(_pid_of_child) as child:
        pid = child.result()
    assert pid != os.getpid()
    assert child.result() == pid  # asked again: the same answer, no second wait


def _refuse(path):
    raise DatasetError(f"{path}: not a perfctl sample line")


class _Unpicklable(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def _unpicklable():
    raise _Unpicklable()


def test_the_childs_exception_is_raised_in_the_parent():
    with Forked(_refuse, "a.jsonl") as child, pytest.raises(DatasetError, match="^a.jsonl: not a perfctl sample"):
        child.result()
    with Forked(_unpicklable) as child, pytest.raises(RuntimeError, match="_Unpicklable: holds a lock"):
        child.result()


def _killed():
    os.kill(os.getpid(), 9)


def test_a_child_killed_is_an_error_not_a_hang():
    with Forked(_killed) as child, pytest.raises(ChildProcessError, match="without a result"):
        child.result()


def test_leaving_early_kills_the_child():
    with Forked(time.sleep, 600) as child:
        pid = child._pid
        assert pid and os.path.exists(f"/proc/{pid}")
    assert child._pid is None and not os.path.exists(f"/proc/{pid}")  # killed and reaped


def test_with_another_thread_running_it_is_done_here():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with Forked(_pid_of_child) as child:
            assert child.result() == os.getpid()
    finally:
        stop.set()
        thread.join()
    with Forked(_pid_of_child, worth=False) as child:
        assert child.result() == os.getpid()


def _runs(path, factor: float, runs: int) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"type": "machine", "machine_id": "m"}) + "\n")
        for b in range(40):
            for run in range(runs):
                value = int(1e6 * (1 + b) * factor * (1 + 0.01 * ((run * 7919) % 13)))
                f.write(json.dumps({
                    "type": "sample", "schema_version": 1, "uuid": f"{b}-{run}", "machine_id": "m",
                    "benchmark": {"name": f"bench{b}", "argv": ["x"], "executable": "/x"},
                    "run_index": run, "warmup": False, "start_time_ns": None, "wall_ns": value, "outcome": "ok",
                    "readings": [{"event": "task-clock", "backend": "perf_event", "scope": "all", "status": "ok",
                                  "unit": "ns", "value": value, "padding": "x" * 400}]}) + "\n")


def _compare(monkeypatch, capsys, threshold: int, *paths) -> tuple[int, str, str]:
    monkeypatch.setattr(compare_cli, "PARALLEL_READ_BYTES", threshold)
    code = cli.main(["compare", *paths, "--format", "json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_reads_big_files_in_two_processes_to_the_same_answer(tmp_path, monkeypatch, capsys):
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    _runs(a, 1.0, 60)
    _runs(b, 1.05, 60)
    forked = _compare(monkeypatch, capsys, 0, a, b)
    alone = _compare(monkeypatch, capsys, 1 << 62, a, b)
    assert forked == alone and forked[0] == 3 and json.loads(forked[1])["benchmarks"]
    with open(b, "a") as f:
        f.write('{"type": "sample", "schema_version": 1, "benchmark": {"name": 7}}\n')
    code, out, err = _compare(monkeypatch, capsys, 0, a, b)
    assert (code, out) == (2, "") and err.startswith(f"perfctl compare: {b}:2402: benchmark") and err.count("\n") == 1
    assert _compare(monkeypatch, capsys, 1 << 62, a, b) == (code, out, err)
    code, out, err = _compare(monkeypatch, capsys, 0, b, a)  # A bad: its error, though B is read meanwhile
    assert code == 2 and err.startswith(f"perfctl compare: {b}:2402:")


@pytest.mark.parametrize("parameters", [{}, {"paired": True}, {"family": "sparc", "correction": "holm"}])
def test_compare_split_over_two_processes_gives_the_same_floats(parameters):
    import numpy as np

    from perfctl.analysis.compare import SPLIT_MIN, Parameters, compare

    rng = np.random.default_rng(16)
    a, b = {}, {}
    for index in range(SPLIT_MIN + 9):
        key = (f"bench{index:03d}", "wall-time" if index % 3 else "instructions")
        a[key] = list(rng.lognormal(10, 0.02, 30))
        b[key] = list(rng.lognormal(10 + 0.05 * (index % 4), 0.02, 30))
    a["one-run", "wall-time"], b["one-run", "wall-time"] = [1.0], [1.0, 2.0]  # cannot be judged
    a["ties", "wall-time"], b["ties", "wall-time"] = [5.0] * 30, [5.0] * 29 + [6.0]
    if parameters.get("paired"):
        b["one-run", "wall-time"] = [1.0]
    together = compare(a, b, Parameters(**parameters))
    split = compare(a, b, Parameters(**parameters), split=True)
    assert repr(split) == repr(together)
    assert any(row.cannot_conclude for row in split.benchmarks)
    assert len({row.sparc.relevance for row in split.benchmarks if row.sparc}) > 1


def test_a_pipe_is_read_here_so_its_copy_is_never_left_behind(tmp_path, monkeypatch):
    """A pipe is copied to a temporary file before it is read; a child killed early (the other file bad,
    Ctrl-C) would leave that copy, so compare forks only for two regular files."""
    import argparse

    monkeypatch.setattr(compare_cli, "PARALLEL_READ_BYTES", 0)
    a, fifo = tmp_path / "a.jsonl", tmp_path / "b.fifo"
    _runs(a, 1.0, 2)
    os.mkfifo(fifo)
    assert compare_cli._worth_two(argparse.Namespace(a=str(a), b=str(a)))
    assert not compare_cli._worth_two(argparse.Namespace(a=str(a), b=str(fifo)))
    assert not compare_cli._worth_two(argparse.Namespace(a=str(tmp_path / "missing"), b=str(a)))
