"""README.md's "A fleet in two minutes", run as written: the ```sh block under that heading, taken from the
README itself, in bash, from the repository's root, with a real server and two real agents on loopback.

What a test must change, and only that:
- the port: every ``127.0.0.1:7433`` becomes a free port (substituted in the text; a server of the reader's
  own, or another test, may hold 7433);
- the directories: ``mktemp -d`` creates its directory under the test's tmp_path (TMPDIR, not the text);
- the client's settings: PERFCTL_* variables of the environment the tests run in are dropped, and
  PERFCTL_CONFIG names a file that does not exist, so only what the block exports is used;
- bash runs the block with -e, so a line that fails stops it there (the exit code then is that line's);
- COLUMNS=120, the width at which `perfctl benchmarks` must keep each benchmark on one line.
The server and agents the block starts in the background are stopped afterwards (SIGTERM to the process
group the block ran in).
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import needs_root
from fleet import free_port

ROOT = Path(__file__).resolve().parent.parent
README_PORT = "127.0.0.1:7433"

pytestmark = needs_root  # the agents run the benchmark as nobody


def quickstart_block() -> str:
    """The first ```sh block after the heading "A fleet in two minutes" in README.md."""
    readme = (ROOT / "README.md").read_text()
    heading = readme.index("## A fleet in two minutes")
    match = re.compile(r"```sh\n(.*?)```", re.S).search(readme, heading)
    assert match, "README.md: no ```sh block after the heading 'A fleet in two minutes'"
    return match[1]


def _stop_group(pgid: int) -> None:
    """SIGTERM the block's process group (its background server and agents); SIGKILL what is left after 30 s."""
    for sig, patience in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def test_the_readme_fleet_quickstart_runs_as_written(tmp_path):
    block = quickstart_block()
    assert block.count(README_PORT) == 3  # server --listen, agents --server, PERFCTL_SERVER
    script = block.replace(README_PORT, f"127.0.0.1:{free_port()}")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PERFCTL_")}
    environment.update(TMPDIR=str(tmp_path), PERFCTL_CONFIG=str(tmp_path / "no-client-config.json"), COLUMNS="120")
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    started = time.monotonic()
    with open(out, "w") as stdout, open(err, "w") as stderr:
        # files, not pipes: the background server and agents keep their copies of them open
        block_run = subprocess.Popen(["bash", "-e", "-c", script], cwd=ROOT, env=environment, stdout=stdout,
                                     stderr=stderr, start_new_session=True)
        try:
            code = block_run.wait(timeout=300)
        finally:
            took = time.monotonic() - started
            _stop_group(block_run.pid)
    stdout, stderr = out.read_text(), err.read_text()
    said = f"exit {block_run.returncode} after {took:.0f} s\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    print(f"the README block took {took:.1f} s")

    # submit printed a job id per machine, then waited until both jobs were done: 20 of 20 runs each
    assert re.search(r"^box-a\t[0-9a-f-]{36}\nbox-b\t[0-9a-f-]{36}\n", stdout, re.M), said
    for machine in ("box-a", "box-b"):
        assert re.search(rf"^{machine}\t[0-9a-f-]{{36}}\tdone\t20/20 runs\t", stderr, re.M), said
    assert "perfctl submit: 2 of 2 jobs done" in stderr, said
    # machines: a short row each, connected; benchmarks: gzip on both, 20 runs each, with the job's label
    assert re.search(r"│ box-a +│ yes +│", stdout) and re.search(r"│ box-b +│ yes +│", stdout), said
    lines = stdout.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("benchmarks")))
    listing = lines[start:lines.index(next(line for line in lines[start:] if line.startswith("└")))]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in listing if re.match(r"│ box-[ab] +│ gzip ", line)]
    assert sorted(row[0] for row in rows) == ["box-a", "box-b"] and all(row[6] == "20" for row in rows), said
    assert all(row[5] == "try=quickstart" for row in rows), said
    # a benchmark is one line (COLUMNS=120 where the width follows it; tests/test_i31_conventions.py checks
    # 120 and 100 columns): digests cut to 12 hex digits, argv whole or cut in its middle
    assert len(listing) == 4 + len(rows), "\n".join(listing)
    assert all(re.fullmatch("[0-9a-f]{12}", row[2]) and row[4].startswith("/usr/bin/gzip") for row in rows), said
    # the server and the agents log to their files, never into the client's output; an agent started before
    # the server waits for it in one calm line, without a stack of "Connection refused" warnings
    assert not re.search(r"\d\d:\d\d:\d\d,\d{3} perfctl", stdout + stderr), said
    (logs,) = {path.parent for path in tmp_path.glob("tmp*/box-a.log")}
    for name in ("server", "box-a", "box-b"):
        log = (logs / f"{name}.log").read_text()
        assert "Connection refused" not in log and "Traceback" not in log, log
        assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", line) for line in log.splitlines()), log
        if name != "server":
            assert log.count("waiting for server") <= 1 and "failed to connect" not in log, log
    # the last line: compare judged the two machines in a verdict table (exit 0 or 3, or 4 when nothing could
    # be judged)
    assert code in (0, 3, 4), said
    assert "no measured runs" not in stdout + stderr and "Traceback" not in stdout + stderr, said
    assert "Connection refused" not in stdout + stderr, said
    assert re.search(r"^benchmark +n A/B +median A +median B +A/B \[95%\] +verdict", stdout, re.M), said
    verdicts = "B slower|B faster|equivalent within ±5%|no difference shown|disturbed"
    assert re.search(rf"^gzip +20/20 .*({verdicts})", stdout, re.M), said  # the job's 20 runs a side
    assert took < 120, f"the two-minute quickstart took {took:.0f} s\n{said}"
