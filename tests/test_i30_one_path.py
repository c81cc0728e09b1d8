"""Issue 30: `perfctl stat`, `perfctl ab` and a fleet job of the same command produce their samples through one
path (agent/measurement.py): every run is started the same way and every sample carries the same fields.

How a run started is observed, not asserted from the code: the benchmark's parent is the gate's loop (gate.c
-L: agent/run/looped.py LoopedGate) or the measuring process itself (one gate per run, the gate exec'ing the benchmark).
A real `perfctl server` (SQLite) and agent on loopback; stat and ab as a user runs them, with the controls an
agent's job runs under (a clean environment, --user nobody, in /)."""

import json
import os
import threading
import time

import grpc
from conftest import needs_root, perfctl, processes_with
from fleet import free_port, wait_for

from perfctl import wire
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

SLEEP = "/usr/bin/sleep"
RUNS = 3


def _argv(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


class Starts:
    """While running: how each run of the benchmark with ``token`` in its arguments was started, read off its
    parent as it runs ("looped": the gate's loop; "gated": the measuring process, whose gate became the run)."""

    def __init__(self, token: str):
        self.token, self.seen, self._done = token, {}, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            for pid in processes_with(self.token):
                try:
                    argv = _argv(pid)
                    if os.path.basename(argv[0]) != b"sleep" or pid in self.seen:
                        continue  # a gate or loop not yet exec'd into the benchmark: its argv[0] is the gate
                    with open(f"/proc/{pid}/stat") as f:
                        parent = int(f.read().rsplit(")", 1)[1].split()[1])
                    options = _argv(parent)
                except (OSError, IndexError, ValueError):
                    continue  # it ended meanwhile
                options = options[:options.index(b"--")] if b"--" in options else options
                self.seen[pid] = "looped" if b"-L" in options and b"perfctl" not in options else "gated"
            time.sleep(0.01)

    def stop(self) -> set[str]:
        self._done.set()
        self._thread.join()
        return set(self.seen.values())


def _shape(sample: dict) -> dict:
    """What a sample carries, not the values measured: its fields with a value (the job id, labels and extra
    apart: they say which command made it), each reading's fields with a value, the benchmark, the controls."""
    return {
        "fields": sorted(k for k, v in sample.items() if v not in (None, {}, [])
                         and k not in ("job_id", "labels", "extra")),
        "readings": sorted((r["event"], r["scope"], r["backend"], r["status"],
                            tuple(sorted(k for k, v in r.items() if v is not None))) for r in sample["readings"]),
        "benchmark": sample["benchmark"], "environment": sample["environment"], "backends": sample["backends"],
        "outcome": sample["outcome"],
    }


def _file_samples(path) -> list[dict]:
    return [line for line in map(json.loads, path.read_text().splitlines()) if line["type"] == "sample"]


def _local(tmp_path, command: str, options: list[str], argv: list[str], token: str):
    out = tmp_path / f"{command}.jsonl"
    starts = Starts(token)
    try:
        result = perfctl(command, *options, "--clean-env", "--user", "nobody", "--no-progress", "-o", str(out),
                         "--", *argv, cwd="/")
    finally:
        seen = starts.stop()
    assert result.returncode in ((0,) if command == "stat" else (0, 3, 4)), result.stderr
    return _file_samples(out), seen


def _fleet(fleet, argv: list[str], token: str):
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    fleet.start_agent("box-a", server)
    wait_for(lambda: (r := fleet.client("machines", "--json", server=server)).returncode == 0 and
             sum(m["connected"] for m in json.loads(r.stdout)) == 1, 60, "the agent to connect")

    def jobs():
        result = fleet.client("jobs", "--json", server=server)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    starts = Starts(token)
    try:
        submitted = fleet.client("submit", "--machines", "box-a", "-r", str(RUNS), "--", *argv, server=server)
        assert submitted.returncode == 0, submitted.stderr
        wait_for(lambda: jobs()[0]["state"] in ("done", "failed", "refused"), 120, "the job to end")
    finally:
        seen = starts.stop()
    (job,) = jobs()
    assert job["state"] == "done", (job, fleet.log("box-a"))
    token_ = open(fleet.client_token).read()

    def samples():
        with grpc.insecure_channel(server) as channel:
            return list(rpc.QueryServiceStub(channel).GetSamples(pb.GetSamplesRequest(machine="box-a"),
                                                                 metadata=(("authorization", f"Bearer {token_}"),)))

    stored = wait_for(lambda: len(found := samples()) == RUNS and found, 30, "every sample stored")
    return [wire.proto_to_dict(s) for s in stored], seen, job["job_id"]


@needs_root
def test_stat_ab_and_a_fleet_job_start_their_runs_alike_and_record_the_same_fields(tmp_path, fleet):
    token = f"0.000000{time.monotonic_ns() % 1000:03d}"  # a unique argument: sleep adds it to 0.15 s
    argv = [SLEEP, "0.15", token]
    stat, stat_starts = _local(tmp_path, "stat", ["-r", str(RUNS)], argv, token)
    ab, ab_starts = _local(tmp_path, "ab", ["--max-runs", str(RUNS), "--min-runs", str(RUNS)],
                           [*argv, ":::", *argv], token)
    job, job_starts, job_id = _fleet(fleet, argv, token)

    # one mechanism, the same for all three (the gate's loop wherever this machine lets stat use it)
    assert len(stat_starts) == 1, stat_starts
    assert ab_starts == stat_starts and job_starts == stat_starts, (stat_starts, ab_starts, job_starts)
    assert len(stat) == RUNS and len(ab) == 2 * RUNS and len(job) == RUNS
    shapes = [_shape(sample) for sample in (*stat, *ab, *job)]
    assert all(shape == shapes[0] for shape in shapes), [s for s in shapes if s != shapes[0]][:1] + shapes[:1]
    assert shapes[0]["outcome"] == "ok" and shapes[0]["environment"]["user"] == "nobody"
    # what tells them apart is only what says which measurement made them
    assert all(s["extra"] == {} and "labels" not in s and s.get("job_id") is None for s in stat)
    assert all(set(s["extra"]) == {"round", "order", "seed"} and s["labels"] == {"ab": s["labels"]["ab"]}
               for s in ab if not s["warmup"])
    assert all(s["extra"] == {} and "labels" not in s and s["job_id"] == job_id for s in job)
