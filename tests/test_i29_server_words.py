"""Issue 29, point 7, last bullet: what the server says and refuses. "an agent token" (was "a agent token");
`--metrics` off loopback needs --insecure as --listen does (one rule: security.require_loopback_or_insecure),
for the server and the agent; `--retain 6m` is six minutes and the server says so as it starts, and months
are refused rather than read as minutes. Real server and agent processes."""

import os
import subprocess

from fleet import free_port, perfctl_command, wait_for


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(perfctl_command(*args), capture_output=True, text=True, timeout=60)


def test_an_agent_token_is_named_with_an(fleet):
    token = fleet.agent_token("box-a")  # in the tokens file before the server reads it
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server to answer")
    result = subprocess.run(perfctl_command("machines", "--server", server, "--token-file", token),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "perfctl machines: PERMISSION_DENIED: an agent token cannot call this"


def test_metrics_off_loopback_need_insecure_as_listen_does(fleet, tmp_path):
    port = free_port()
    data = tmp_path / "data"
    refused = _run("server", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(data), "--tokens",
                   fleet.tokens, "--metrics", f"0.0.0.0:{port}")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"perfctl server: refusing plain-HTTP metrics on 0.0.0.0:{port}: not loopback; "
                                      "give --insecure to serve them there (they have no TLS)")
    assert not data.exists() or not os.listdir(data)  # refused before the database was made or migrated
    agent = _run("agent", "--server", "127.0.0.1:1", "--name", "box-a", "--token-file", fleet.agent_token("box-a"),
                 "--spool", str(tmp_path / "spool"), "--allow", "/bin/true", "--user", "nobody", "--metrics",
                 f"0.0.0.0:{port}")
    assert agent.returncode == 2 and "refusing plain-HTTP metrics on 0.0.0.0" in agent.stderr, agent.stderr
    assert len(agent.stderr.strip().splitlines()) == 1
    # with --insecure the server serves them there
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(data)], ["--metrics", f"0.0.0.0:{port}", "--insecure"])
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server to answer")
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert b"perfctl_" in response.read()


def test_retain_is_said_back_in_words_and_months_are_refused(fleet, tmp_path):
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(tmp_path / "data")], ["--retain", "6m"])
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server to answer")
    assert "retention: keeping runs for 6 minutes (older ones are deleted at start and then hourly)" in \
        fleet.log("server")
    for text in ("6mo", "6M", "1y", "6 months"):
        refused = _run("server", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "other"),
                       "--tokens", fleet.tokens, "--retain", text)
        assert refused.returncode == 2, text
        (line,) = refused.stderr.strip().splitlines()
        assert "months and years are not a fixed length: give days, e.g. 180d" in line, line
    help_text = " ".join(_run("server", "--help").stdout.split())
    assert "m is minutes: 6m keeps runs six minutes" in help_text
    # one parser for every duration (options.duration): a wait refuses months the same way
    wait = _run("jobs", "--server", server, "--wait", "--wait-timeout", "6mo", "x")
    assert wait.returncode == 2 and "months and years are not a fixed length" in wait.stderr, wait.stderr
