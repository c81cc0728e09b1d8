"""perfctl/parallel.py: work in a forked child gives back its value or raises its exception in the parent,
dies with a cancel, and is done in-process where a fork is unsafe; `perfctl compare` of files large enough
to be read in two processes prints exactly what it prints when read in one, and reports a bad file the same.

Each check that needs a fork runs in a fresh interpreter: the test session's own process holds threads that
other tests left (gRPC channels, servers' helpers), and there Forked rightly computes in-process."""

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import perfctl.cli.compare as compare_cli

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                              reason="probe: one CPU to run on: perfctl does not fork (perfctl/parallel.py)")


def _fresh(code: str) -> str:
    """Run ``code`` in a new interpreter (no threads but its own); its stdout."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


@two_cpus
def test_forked_gives_the_childs_value_or_exception_and_kills_it_when_left():
    out = _fresh("""
        import os, threading, time
        from perfctl.formats import DatasetError
        from perfctl.parallel import Forked

        def refuse(path):
            raise DatasetError(f"{path}: not a perfctl sample line")

        class Unpicklable(Exception):
            def __init__(self):
                super().__init__("holds a lock")
                self.lock = threading.Lock()

        def unpicklable():
            raise Unpicklable()

        def killed():
            os.kill(os.getpid(), 9)

        with Forked(os.getpid) as child:
            pid = child.result()
        assert pid != os.getpid() and child.result() == pid  # asked again: the same answer, no second wait
        for function, args, kind, text in ((refuse, ("a.jsonl",), DatasetError, "a.jsonl: not a perfctl sample"),
                                           (unpicklable, (), RuntimeError, "Unpicklable: holds a lock"),
                                           (killed, (), ChildProcessError, "without a result")):
            with Forked(function, *args) as child:
                try:
                    child.result()
                except kind as err:
                    assert text in str(err), err
                else:
                    raise AssertionError(f"{function.__name__}: no {kind.__name__}")
        with Forked(time.sleep, 600) as child:  # leaving early kills and reaps the child
            pid = child._pid
            assert pid and os.path.exists(f"/proc/{pid}")
        assert child._pid is None and not os.path.exists(f"/proc/{pid}")
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        with Forked(os.getpid) as child:  # another thread running: done here
            assert child.result() == os.getpid()
        stop.set()
        thread.join()
        with Forked(os.getpid, worth=False) as child:
            assert child.result() == os.getpid()
        print("ok")
    """)
    assert out == "ok\n"


def _runs(path, factor: float, runs: int, benchmarks: int = 40) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"type": "machine", "machine_id": "m"}) + "\n")
        for b in range(benchmarks):
            for run in range(runs):
                value = int(1e6 * (1 + b) * factor * (1 + 0.01 * ((run * 7919) % 13)))
                f.write(json.dumps({
                    "type": "sample", "schema_version": 1, "machine_id": "m",
                    "uuid": str(uuid.UUID(int=round(factor * 1000) << 64 | b << 32 | run)),  # A's and B's differ
                    "benchmark": {"name": f"bench{b}", "argv": ["x"], "executable": "/x"},
                    "run_index": run, "warmup": False, "start_time_ns": None, "wall_ns": value, "outcome": "ok",
                    "readings": [{"event": "task-clock", "backend": "perf_event", "scope": "all", "status": "ok",
                                  "unit": "ns", "value": value, "padding": "x" * 1200}]}) + "\n")


def _compare(*args: str, one_cpu: bool = False) -> tuple[int, str, str]:
    """The real command; ``one_cpu`` pins it to one CPU, where it reads and tests in one process."""
    command = (["taskset", "-c", str(min(os.sched_getaffinity(0)))] if one_cpu else []) + \
        [sys.executable, "-m", "perfctl", "compare", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return result.returncode, result.stdout, result.stderr


@two_cpus
def test_compare_reads_big_files_in_two_processes_to_the_same_answer(tmp_path):
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    _runs(a, 1.0, 60)
    _runs(b, 1.05, 60)
    assert os.path.getsize(a) + os.path.getsize(b) > compare_cli.PARALLEL_READ_BYTES
    forked = _compare(a, b, "--format", "json")
    alone = _compare(a, b, "--format", "json", one_cpu=True)
    assert forked == alone and forked[0] == 3 and json.loads(forked[1])["benchmarks"]
    with open(b, "a") as f:
        f.write('{"type": "sample", "schema_version": 1, "benchmark": {"name": 7}}\n')
    code, out, err = _compare(a, b)
    assert (code, out) == (2, "") and err.startswith(f"perfctl compare: {b}:2402: benchmark") and err.count("\n") == 1
    assert _compare(a, b, one_cpu=True) == (code, out, err)
    code, out, err = _compare(b, a)  # A bad: its error, though B is read meanwhile
    assert code == 2 and err.startswith(f"perfctl compare: {b}:2402:")


@two_cpus
@pytest.mark.parametrize("parameters", [{}, {"paired": True}, {"family": "sparc", "correction": "holm"}])
def test_compare_split_over_two_processes_gives_the_same_floats(parameters, tmp_path):
    out = _fresh(f"""
        import os
        import numpy as np
        import perfctl.analysis.compare as analysis
        from perfctl.analysis.compare import Parameters, compare
        from perfctl.cli.compare import SPLIT_MIN, split_tests

        rng = np.random.default_rng(16)
        a, b = {{}}, {{}}
        for index in range(SPLIT_MIN + 9):
            key = (f"bench{{index:03d}}", "wall-time" if index % 3 else "instructions")
            a[key] = list(rng.lognormal(10, 0.02, 30))
            b[key] = list(rng.lognormal(10 + 0.05 * (index % 4), 0.02, 30))
        a["one-run", "wall-time"], b["one-run", "wall-time"] = [1.0], [1.0, 2.0]  # cannot be judged
        a["ties", "wall-time"], b["ties", "wall-time"] = [5.0] * 30, [5.0] * 29 + [6.0]
        parameters = Parameters(**{parameters!r})
        if parameters.paired:
            b["one-run", "wall-time"] = [1.0]
        together = compare(a, b, parameters)
        examined, log = analysis._examined, {str(tmp_path / "pids")!r}

        def recorded(*args, **kwargs):  # which processes tested benchmarks
            with open(log, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            return examined(*args, **kwargs)

        analysis._examined = recorded
        split = compare(a, b, parameters, workers=split_tests)
        assert repr(split) == repr(together)
        assert any(row.cannot_conclude for row in split.benchmarks)
        assert len({{row.sparc.relevance for row in split.benchmarks if row.sparc}}) > 1
        pids = open(log).read().split()
        print(len(pids), len(set(pids)), str(os.getpid()) in pids)
    """)
    assert out == f"{compare_cli.SPLIT_MIN + 11} 2 True\n"  # each benchmark once, in this process or in another


def test_a_pipe_is_read_here_so_its_copy_is_never_left_behind(tmp_path, monkeypatch):
    """A pipe is copied to a temporary file before it is read; a child killed early (the other file bad,
    Ctrl-C) would leave that copy, so compare forks only for two regular files."""

    monkeypatch.setattr(compare_cli, "PARALLEL_READ_BYTES", 0)
    a, fifo = tmp_path / "a.jsonl", tmp_path / "b.fifo"
    _runs(a, 1.0, 2)
    os.mkfifo(fifo)
    assert compare_cli._worth_two(str(a), str(a))
    assert not compare_cli._worth_two(str(a), str(fifo))
    assert not compare_cli._worth_two(str(tmp_path / "missing"), str(a))


def test_analysis_is_pure_and_the_caller_splits_the_work():
    """analysis/ starts no process and reads nothing (criterion.rs: analysis apart from reporting): of
    perfctl it imports only itself, and nothing that forks or does I/O. The command line hands compare() a
    map-like ``workers`` (cli/compare.py split_tests, perfctl/parallel.py halves) to split the work."""
    import ast
    from pathlib import Path

    refused = {"os", "subprocess", "multiprocessing", "concurrent.futures", "threading", "socket"}
    for path in (Path(__file__).resolve().parents[1] / "analysis").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert name.startswith("perfctl.analysis") or not name.startswith("perfctl"), (path.name, name)
                assert name not in refused, (path.name, name)
