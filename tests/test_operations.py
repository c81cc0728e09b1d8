"""A server that starts with no options, the agent and commands on its host that find it, and `perfctl prune`
(docs/operations.md). Real processes: `perfctl server`, `perfctl agent`, the client commands."""

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time

import pytest
from conftest import sample_of, stored_long_ago
from fleet import free_port, perfctl_command, wait_for

from perfctl import state
from perfctl.server.storage import Storage, database_url
from perfctl.v1 import fleet_pb2 as pb


def _run(*args, env, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(perfctl_command(*args), capture_output=True, text=True, timeout=timeout, env=env)


def _default_port_reason() -> str | None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds: only a live listener is in the way
        try:
            s.bind(("127.0.0.1", 7433))
        except OSError as err:
            return f"probe: 127.0.0.1:7433, the zero-config address, is taken here ({err.strerror})"
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="probe: euid is not 0 (the agent opens counters and runs as nobody)")
def test_a_server_with_no_options_and_an_agent_and_client_that_find_it(tmp_path):
    reason = _default_port_reason()
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "PERFCTL_STATE_DIR": str(tmp_path / "state")}
    for key in ("PERFCTL_SERVER", "PERFCTL_TOKEN", "PERFCTL_TOKEN_FILE", "PERFCTL_TLS_CA"):
        env.pop(key, None)
    env["PERFCTL_CONFIG"] = str(tmp_path / "no-client.json")
    logs = {}

    def start(key, *args):
        logs[key] = open(tmp_path / f"{key}.log", "ab")
        return subprocess.Popen(perfctl_command(*args), stdout=logs[key], stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def log(key):
        return (tmp_path / f"{key}.log").read_text()

    server = start("server", "server")
    agent = None
    try:
        wait_for(lambda: "listening on 127.0.0.1:7433" in log("server"), 60, "the server to listen")
        directory = tmp_path / "state"
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for name in (state.TOKENS, state.CLIENT_TOKEN, state.AGENT_TOKEN):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
        assert "first start" in log("server") and (directory / "perfctl.db").exists()
        agent = start("agent", "agent", "--allow", "/bin/*", "--user", "nobody", "--audit-every", "0")
        host = state.host_name()

        def connected():
            listed = _run("machines", "--json", env=env)
            return listed.returncode == 0 and [m["name"] for m in json.loads(listed.stdout) if m["connected"]]
        assert wait_for(connected, 60, "the agent to connect") == [host], log("agent")
        assert (directory / "spool").is_dir()
        submitted = _run("submit", "--machines", host, "-r", "5", "-e", "page-faults", "--wait", "--", "/bin/true",
                         env=env, timeout=120)
        assert submitted.returncode == 0, submitted.stderr
        storage = Storage(database_url(str(directory), None))
        try:
            assert storage.count_samples() == 5
        finally:
            storage.close()
        # a second start finds its tokens: none made again
        server.terminate()
        assert server.wait(timeout=30) == 0
        server = start("server", "server")
        wait_for(lambda: log("server").count("listening on") == 2, 60, "the server to listen again")
        assert log("server").count("first start") == 1
        assert len((directory / state.TOKENS).read_text().splitlines()) == 2
        # never plaintext off loopback by default
        exposed = _run("server", "--listen", "0.0.0.0:7434", env=env)
        assert exposed.returncode == 2 and "refusing plaintext" in exposed.stderr, exposed.stderr
    finally:
        for process in (agent, server):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
        for handle in logs.values():
            handle.close()


def test_prune_says_what_it_deletes_and_refuses_bad_input(tmp_path):
    data = tmp_path / "data"
    storage = Storage(database_url(str(data), None))
    try:
        storage.register(pb.MachineInfo(name="box", machine_id="m" * 16, inventory_json="{}", agent_version="t"), 1)
        samples = subprocess.run([sys.executable, "-m", "perfctl", "stat", "-r", "4", "-e", "page-faults", "--json",
                                  "--", "/bin/true"], capture_output=True, text=True, timeout=60)
        assert samples.returncode == 0, samples.stderr
        from perfctl import wire

        runs = [wire.sample_to_proto(sample_of(json.loads(line))) for line in samples.stdout.splitlines()
                if json.loads(line).get("type") == "sample"]
        for age_days, run in zip((200, 200, 1, 1), runs):
            run.start_time_ns = time.time_ns() - int(age_days * 86400e9)
        assert storage.ingest("box", runs) == (4, 0)
    finally:
        storage.close()
    stored_long_ago(database_url(str(data), None), 365)  # their starts alone decide here
    env = dict(os.environ)
    dry = _run("prune", "--older-than", "90d", "--data-dir", str(data), "--dry-run", env=env)
    assert dry.returncode == 0 and dry.stdout.startswith("would delete 2 runs received and started before "), dry.stdout
    assert dry.stdout.splitlines()[1:] == ["box\t2"]
    done = _run("prune", "--older-than", "90d", "--data-dir", str(data), env=env)
    assert done.returncode == 0 and done.stdout.startswith("deleted 2 runs"), done.stdout
    assert "audits, jobs and machines are kept" in done.stdout
    again = _run("prune", "--older-than", "90d", "--data-dir", str(data), env=env)
    assert again.stdout.startswith("deleted 0 runs") and again.stdout.splitlines()[1:] == []
    for args, said in ((["--older-than", "soon"], "not a duration"), (["--older-than", "0"], "positive duration"),
                       (["--older-than", "1d", "--machine", "ghost"], "no machine named 'ghost'"),
                       (["--older-than", "1d", "--db", "postgresql://nobody@/x?host=/nonexistent"],
                        "cannot open the database")):
        bad = _run("prune", *args, "--data-dir", str(data), env=env)
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    storage = Storage(database_url(str(data), None))
    try:
        assert storage.count_samples() == 2
    finally:
        storage.close()


def test_the_local_token_goes_to_the_local_server_only(tmp_path, monkeypatch):
    """A zero-config host's client token is used for 127.0.0.1:7433 alone: a command given another server and
    no token must not send this host's token there."""
    from perfctl import client
    from perfctl.cli import build_parser
    from perfctl.cli.options import connection_of

    monkeypatch.setenv("PERFCTL_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("PERFCTL_CONFIG", str(tmp_path / "none.json"))
    for key in ("PERFCTL_SERVER", "PERFCTL_TOKEN", "PERFCTL_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / state.CLIENT_TOKEN).write_text("local-secret\n")
    (tmp_path / state.CLIENT_TOKEN).chmod(0o600)
    local = client.settings(connection_of(build_parser("machines").parse_args(["machines"])))
    assert (local.server, local.token) == (state.LOCAL_SERVER, "local-secret")
    with pytest.raises(client.ClientError, match="no token"):
        client.settings(connection_of(build_parser("machines").parse_args(["machines", "--server", "10.9.9.9:7433"])))


def test_a_first_start_that_failed_is_made_again(tmp_path):
    """The tokens file is the first start's last step: one that failed on the way leaves none, and the next
    start makes all three files."""
    reason = _default_port_reason()
    if reason:
        pytest.skip(reason)
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    (directory / state.CLIENT_TOKEN).mkdir()  # cannot be written as a file
    env = {**os.environ, "PERFCTL_STATE_DIR": str(directory)}
    failed = _run("server", env=env)
    assert failed.returncode == 2 and "Is a directory" in failed.stderr, failed.stderr
    assert not (directory / state.TOKENS).exists()
    (directory / state.CLIENT_TOKEN).rmdir()
    server = subprocess.Popen(perfctl_command("server"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    try:
        wait_for(lambda: (directory / state.AGENT_TOKEN).exists(), 60, "the first start's tokens")
        assert len((directory / state.TOKENS).read_text().splitlines()) == 2
        assert (directory / state.CLIENT_TOKEN).read_text().strip()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_prune_never_makes_the_database_it_was_to_prune(tmp_path):
    env = {**os.environ, "PERFCTL_STATE_DIR": str(tmp_path / "nostate")}
    for args in ([], ["--data-dir", str(tmp_path / "typo")]):
        result = _run("prune", "--older-than", "1d", "--dry-run", *args, env=env)
        assert result.returncode == 2 and "no server database in" in result.stderr, result.stderr
    assert not (tmp_path / "nostate").exists() and not (tmp_path / "typo").exists()


def test_a_client_passes_over_a_refusing_replica_at_once(fleet, tmp_path):
    """--server a,b with a down: a refuses the connection, and b is asked without waiting out the 5 s."""
    up, down = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    fleet.start_server(up, ["--data-dir", str(tmp_path / "data")])
    wait_for(lambda: fleet.client("machines", server=up).returncode == 0, 60, "the server")
    start = time.monotonic()
    listed = fleet.client("machines", "--json", server=f"{down},{up}")
    elapsed = time.monotonic() - start
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
    assert elapsed < 4, elapsed
    none = fleet.client("machines", server=f"{down},{down}")
    assert none.returncode == 2 and "none of the servers" in none.stderr, none.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="probe: euid is not 0 (the agent opens counters and runs as nobody)")
def test_a_job_whose_runs_fail_fails_the_wait_and_says_how(fleet, tmp_path):
    """`submit --wait -- /bin/false` exited 0 after "done 5/5 runs": every run had failed, and nothing said so.
    Now the server counts the job's failed runs when it ends, the wait exits 1 as `perfctl stat` does, and the
    agent's message says how the first failed. A job whose runs all end ok still exits 0."""
    address = f"127.0.0.1:{free_port()}"
    fleet.start_server(address, ["--data-dir", str(tmp_path / "data")])
    fleet.start_agent("box", address)
    wait_for(lambda: "agent box registered" in fleet.log("server"), 60, "the agent")
    failing = fleet.client("submit", "--machines", "box", "-r", "4", "--warmup", "1", "--wait", "--",
                           "/bin/sh", "-c", "echo cannot open input >&2; exit 3", server=address, timeout=120)
    assert failing.returncode == 1, failing.stderr
    (job_id,) = [line.split("\t")[1] for line in failing.stdout.splitlines()]
    assert f"box\t{job_id}\tdone\t5/5 runs (4 failed)\t" in failing.stderr, failing.stderr
    assert re.search(r"a measured run that failed: run \d+ exited with status 3: cannot open input",
                     failing.stderr), failing.stderr
    assert "perfctl submit: 1 of 1 job done; box done, 4 measured runs failed (" in failing.stderr
    fine = fleet.client("submit", "--machines", "box", "-r", "4", "--wait", "--", "/bin/true", server=address,
                        timeout=120)
    assert fine.returncode == 0 and "4/4 runs\t4 runs\n" in fine.stderr, fine.stderr
    listed = json.loads(fleet.client("jobs", "--json", server=address).stdout)
    assert [job["failed_runs"] for job in listed] == [4, 0]
    quiet = fleet.client("jobs", "-q", server=address)
    assert job_id[:8] in quiet.stdout and len([line for line in quiet.stdout.splitlines() if "│ box" in line]) == 1
