"""A server or an agent stopped at any moment of its start exits 0, as when stopped later (its --help: "0
stopped by SIGTERM, SIGINT or SIGHUP"). perfctl holds the stop signals from its first instruction
(output.hold_stops_at_start) until the serving command's own handlers take the one received meanwhile
(output.take_stop_held_at_start); releasing Python's handlers before then ended an agent stopped in its first
second with 143, or killed by the signal itself (-15), and a systemd unit marked failed. Real processes."""

import signal
import time

import pytest
from conftest import needs_root
from fleet import free_port

# after perfctl holds the stop signals: at once, in the imports, up to the loop's own handlers and past them
# (a start takes 0.5-2 s here, more when busy). Before the hold (the interpreter's own start, some 50 ms) a
# signal has its default action: no program can catch it before it installs a handler.
MOMENTS = (0.0, 0.3, 0.8, 2.5)


def _catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler for ``sig`` (/proc/PID/status SigCgt, a hex mask of signal bits)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def _stopped_at(fleet, key: str, args: list[str], moment: float, sig: int) -> tuple[int, str]:
    process = fleet.start(key, args)
    deadline = time.monotonic() + 30
    while not (_catches(process.pid, signal.SIGTERM) and _catches(process.pid, signal.SIGHUP)):
        assert time.monotonic() < deadline and process.poll() is None, fleet.log(key)
        time.sleep(0.002)
    time.sleep(moment)
    process.send_signal(sig)
    try:
        code = process.wait(timeout=30)
    finally:
        fleet.processes.pop(key, None)
    return code, fleet.log(key)


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_server_stopped_while_it_starts_exits_0(fleet, moment):
    code, log = _stopped_at(fleet, f"server-{moment}", ["server", "--listen", f"127.0.0.1:{free_port()}",
                                                         "--data-dir", str(fleet.dir / f"data-{moment}"),
                                                         "--tokens", fleet.tokens], moment, signal.SIGTERM)
    assert code == 0, (code, log[-2000:])


@needs_root
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_agent_stopped_while_it_starts_exits_0(fleet, moment, sig):
    # no server: the agent starts, waits for one, and is stopped wherever it is
    args = ["agent", "--server", f"127.0.0.1:{free_port()}", "--name", "box", "--token-file",
            fleet.agent_token("box"), "--spool", str(fleet.dir / f"spool-{moment}-{sig}"), "--allow", "/bin/*",
            "--user", "nobody", "--audit-every", "0"]
    code, log = _stopped_at(fleet, f"agent-{moment}-{sig}", args, moment, sig)
    assert code == 0, (code, log[-2000:])
