"""The server as a process: its listen address, its decode workers (they end with it, a dead one is replaced, their
default number) and a client given a host that is not a name; each ends in one line."""

import os
import signal
import subprocess
import threading

import grpc
import psutil
import pytest
from fleet import fresh, perfctl_command, start_server, wait_for

from perfctl.server.auth import add_token

# --- finding 7 and 11: the listen address ---

def test_a_second_server_on_a_taken_port_exits_with_one_line(tmp_path, fleet):
    first = start_server(fleet)
    second = subprocess.run(perfctl_command("server", "--listen", first.address, "--data-dir",
                                            str(tmp_path / "other"), "--tokens", fleet.tokens),
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip() == f"perfctl server: cannot listen on {first.address}: address in use"
    assert fleet.processes["server"].poll() is None  # the first one still serves


def test_a_second_server_on_localhost_of_a_taken_port_exits_with_one_line(tmp_path, fleet):
    """localhost resolves to ::1 and 127.0.0.1: gRPC alone would bind ::1, fail 127.0.0.1 and serve, so
    agents and clients would split between two servers."""
    first = start_server(fleet)
    port = first.address.rsplit(":", 1)[1]
    second = subprocess.run(perfctl_command("server", "--listen", f"localhost:{port}", "--data-dir",
                                            str(tmp_path / "other"), "--tokens", fleet.tokens),
                            capture_output=True, text=True, timeout=30)  # before the fix: it serves
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip() == f"perfctl server: cannot listen on localhost:{port}: address in use"
    assert fleet.processes["server"].poll() is None


@pytest.mark.parametrize("listen, message", [
    ("127.1:7441", "'127.1' is not a full IPv4 address"), ("", "must be HOST:PORT"), (":", "must be HOST:PORT"),
    ("localhost:\u0661\u0667\u0665\u0661\u0661", "must be HOST:PORT"),  # Arabic-Indic digits int() would take
    (":7441", "must be HOST:PORT"), ("127.0.0.1:99999", "port 1-65535"), ("[::1]:x", "must be HOST:PORT"),
    ("::1:7441", "in brackets"), ("[::1:7441", "unbalanced brackets"), ("[nope]:7441", "not an IPv6 address"),
    ("a..b:1", "'a..b' is not a host name"), ("a" * 300 + ":1", "is not a host name"),
])
def test_a_malformed_listen_address_is_one_line(tmp_path, listen, message):
    tokens = str(tmp_path / "tokens")
    add_token(tokens, "client", "tester")
    result = subprocess.run(perfctl_command("server", "--listen", listen, "--data-dir", str(tmp_path / "d"),
                                            "--tokens", tokens), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("perfctl server: ")
    assert message in result.stderr


# --- finding 13: decode workers end with their server ---

def test_a_killed_server_leaves_no_worker_processes(fleet):
    children = []
    try:
        start_server(fleet, ["--decode-workers", "2"])
        process = psutil.Process(fleet.processes["server"].pid)
        children = wait_for(lambda: len(c := process.children(recursive=True)) >= 3 and c, 30,
                            "2 decode workers and the resource tracker")
        # SIGKILL to the server alone, not its process group: nothing of the server's own runs on the way out
        os.kill(process.pid, signal.SIGKILL)
        fleet.processes.pop("server").wait(timeout=10)
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], [(p.pid, p.cmdline()) for p in alive]
    finally:
        for child in children:  # a failed assertion must not leave them running
            try:
                child.kill()  # psutil checks the pid still names the same process
            except psutil.NoSuchProcess:
                pass


# --- second review, finding 4: a decode worker that dies ---

def _decode_workers(server_pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(server_pid).children(recursive=True)
            if any("spawn_main" in part for part in p.cmdline())]


def test_a_killed_decode_worker_is_replaced_and_the_batch_still_acked(fleet, measured):
    server = start_server(fleet, ["--decode-workers", "2"])
    server.register("box-a")
    pid = fleet.processes["server"].pid
    for round_number in (1, 2):
        workers = wait_for(lambda: len(w := _decode_workers(pid)) == 2 and w, 30, "2 decode workers")
        workers[0].send_signal(signal.SIGKILL)  # as the OOM killer would
        workers[0].wait(timeout=10)
        results: list = []
        def stream(sequence: int, results=results) -> None:
            try:
                results.append(server.send("box-a", fresh(measured[0]), sequence=sequence)[0])
            except grpc.RpcError as err:
                results.append((err.code(), err.details()))
        # concurrent streams all hit the broken pool: it is replaced once, each batch is acked
        threads = [threading.Thread(target=stream, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted((a.sequence, a.stored) for a in results) == [(n, 1) for n in range(4)], results
        assert fleet.log("server").count("a decode worker died") == round_number


# --- second review, finding 6: a host name the resolver cannot encode ---

@pytest.mark.parametrize("address", ["a..b:1", "a" * 300 + ":1", ".lab:7441"])
def test_a_client_given_a_host_that_is_not_a_name_exits_with_one_line(tmp_path, address):
    token = tmp_path / "client.tok"
    token.write_text(add_token(str(tmp_path / "tokens"), "client", "tester"))
    os.chmod(token, 0o600)
    result = subprocess.run(perfctl_command("machines", "--server", address, "--token-file", str(token)),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "is not a host name" in result.stderr
    assert result.stderr.startswith("perfctl machines: address ")


def test_decode_workers_default_to_the_cpus_the_server_may_run_on(monkeypatch):
    from perfctl.cli import server as server_cli

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert server_cli.default_decode_workers() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert server_cli.default_decode_workers() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    assert server_cli.default_decode_workers() == 4
