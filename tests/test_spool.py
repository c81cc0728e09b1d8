"""The agent's spool (agent/spool.py) on real disks: a full spool disk pauses the agent, which resumes when space
returns (with or without a job running, and a spool that filled its own disk drains once the server is back); a
spool that is not SQLite, damaged, or in use by another agent, and the agent's other start errors, end in one
line. Small tmpfs mounts, a real server and agent."""

import contextlib
import os
import sqlite3
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from conftest import needs_root, one_line, perfctl
from fleet import (
    free_port,
    listed_jobs,
    listed_machine,
    metric,
    start_agent_with,
    start_sqlite_server,
    stored_samples,
    submit_job,
    wait_connected,
    wait_for,
)

from perfctl.agent.spool import Spool, SpoolError, SpoolFull


def _mount_reason() -> str | None:
    if os.geteuid() != 0:
        return "probe: euid is not 0 (mounting a small tmpfs needs root)"
    probe = tempfile.mkdtemp(prefix="perfctl-mount-probe-")
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True,
                                text=True)
        if result.returncode != 0:
            return f"probe: mount -t tmpfs failed: {result.stderr.strip()}"
        subprocess.run(["umount", probe], check=True)
        return None
    finally:
        os.rmdir(probe)


@contextlib.contextmanager
def _tmpfs(tmp_path: Path, size: str):
    """A tmpfs of ``size`` at tmp_path/spoolfs for a spool to fill; skipped with the probe's reason."""
    reason = _mount_reason()
    if reason:
        pytest.skip(reason)
    mount = tmp_path / "spoolfs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def small_fs(tmp_path):
    with _tmpfs(tmp_path, "2m") as mount:
        yield mount


@pytest.fixture
def spool_fs(tmp_path):
    """8 MiB: a spool reserve of 512 KiB, and thousands of samples before it is full."""
    with _tmpfs(tmp_path, "8m") as mount:
        yield mount


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as err:
        assert err.errno == 28, err  # ENOSPC
    try:
        while True:
            os.write(fd, b"\0")
    except OSError:
        pass
    os.close(fd)
    return filler


@needs_root
def test_a_full_spool_disk_pauses_the_agent_which_resumes_when_space_returns(fleet, small_fs):
    server = start_sqlite_server(fleet)
    spool = small_fs / "spool"
    port = free_port()
    agent = start_agent_with(fleet, "box-a", server, spool, ["/bin/*"], ["--metrics", f"127.0.0.1:{port}"])
    wait_connected(fleet, server, "box-a")
    filler = _fill(small_fs)
    job_id = submit_job(fleet, server, "box-a", "-r", "40", "--", "/bin/true")
    wait_for(lambda: "database or disk is full" in fleet.log("box-a"), 60, "the agent to find its disk full")
    time.sleep(6)  # several retries
    assert "cannot rollback" not in fleet.log("box-a")
    assert agent.poll() is None, fleet.log("box-a")
    assert fleet.log("box-a").count("measuring paused") == 1  # said once, not per retry
    assert metric(port, "perfctl_agent_spool_full") == 1
    assert metric(port, "perfctl_agent_connected") == 1 and listed_machine(fleet, server, "box-a")["connected"]
    assert listed_jobs(fleet, server)[job_id]["state"] != "done"

    # killed and restarted with the disk still full: it starts, connects and waits
    fleet.kill("box-a")
    agent = start_agent_with(fleet, "box-a", server, spool, ["/bin/*"], ["--metrics", f"127.0.0.1:{port}"])
    wait_for(lambda: metric(port, "perfctl_agent_spool_full") == 1, 60, "the restarted agent to wait for space")
    wait_connected(fleet, server, "box-a")
    assert agent.poll() is None, fleet.log("box-a")

    filler.unlink()
    job = wait_for(lambda: (j := listed_jobs(fleet, server)[job_id])["state"] == "done" and j, 120, "the job to finish")
    assert job["samples"] == 40
    samples = wait_for(lambda: len(s := stored_samples(fleet, server, "box-a")) >= 40 and s, 60, "every sample stored")
    assert len(samples) == 40 and sorted(s.run_index for s in samples) == list(range(40))
    assert len({s.uuid for s in samples}) == 40
    assert "measuring resumed" in fleet.log("box-a")


def _every_run_once(fleet, server, job_id, runs, before=()):
    job = wait_for(lambda: (j := listed_jobs(fleet, server)[job_id])["state"] in ("done", "failed") and j, 180,
                   f"job {job_id} to finish")
    assert (job["state"], job["samples"]) == ("done", runs), job
    samples = wait_for(lambda: len(s := [x for x in stored_samples(fleet, server, "box-a") if x.job_id == job_id])
                       >= runs and s, 60, "every sample stored")
    assert sorted(s.run_index for s in samples) == list(range(runs))
    assert len({s.uuid for s in samples}) == runs


@needs_root
def test_a_disk_filled_while_a_job_runs_pauses_it_and_it_finishes_once_space_returns(fleet, small_fs):
    """The reviewer's sequence: the WAL must not keep the space freed after the filler goes (SQLite's
    default autocheckpoint is 4 MB, twice this filesystem), before or after a restart on the full disk."""
    server = start_sqlite_server(fleet)
    spool = small_fs / "spool"
    port = free_port()
    extra = ["--metrics", f"127.0.0.1:{port}"]
    agent = start_agent_with(fleet, "box-a", server, spool, ["/bin/*"], extra)
    wait_connected(fleet, server, "box-a")
    first = submit_job(fleet, server, "box-a", "-r", "400", "--", "/bin/true")
    time.sleep(1.5)
    filler = _fill(small_fs)
    time.sleep(4)  # paused (the default WAL had taken the space) or, a small WAL reused, not even that
    filler.unlink()
    _every_run_once(fleet, server, first, 400)
    wait_for(lambda: metric(port, "perfctl_agent_spool_full") == 0, 30, "the full-disk metric to clear")
    wait_for(lambda: metric(port, "perfctl_agent_samples_pending") == 0, 30, "the spool to empty")

    # Again, killed and restarted while full. The server is down meanwhile, so that nothing is acked and the
    # spool must grow: a small WAL alone can absorb a filler arriving while acks keep the spool small.
    second = submit_job(fleet, server, "box-a", "-r", "400", "--", "/bin/sleep", "0.05")  # 20 s at least
    wait_for(lambda: listed_jobs(fleet, server)[second]["state"] == "running", 30, "the job to start")
    # SIGKILL, not SIGTERM: a graceful stop waits up to its grace for the agent's open stream, and the job
    # could end meanwhile, with nothing left to write when the disk fills (seen once in CI)
    fleet.kill("server", 9)
    time.sleep(1.5)
    filler = _fill(small_fs)
    wait_for(lambda: metric(port, "perfctl_agent_spool_full") == 1, 60, "the agent to pause")
    fleet.kill("box-a")  # SIGKILL: the WAL stays as it was
    agent = start_agent_with(fleet, "box-a", server, spool, ["/bin/*"], extra)
    wait_for(lambda: metric(port, "perfctl_agent_spool_full") == 1, 60, "the restarted agent to wait for space")
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    wait_connected(fleet, server, "box-a")
    time.sleep(3)  # a few retries on the full disk, connected
    filler.unlink()
    _every_run_once(fleet, server, second, 400)
    wait_for(lambda: metric(port, "perfctl_agent_samples_pending") == 0, 30, "the spool to empty")
    assert agent.poll() is None, fleet.log("box-a")
    assert metric(port, "perfctl_agent_spool_full") == 0


@needs_root
def test_a_spool_that_filled_its_own_disk_drains_once_the_server_is_back(fleet, spool_fs):
    """The server away, the agent measures until its samples alone fill the spool's filesystem. With the
    server back the acks must free samples, though each delete needs WAL room on that full filesystem and the
    WAL's last frames need the database to grow: without the spool's reserve the agent waited forever, acked
    but unable to delete, measuring never resumed (spool.db 7.5 MB and its WAL filled an 8 MB tmpfs)."""
    try:
        server = start_sqlite_server(fleet)
        port = free_port()
        agent = start_agent_with(fleet, "box-a", server, spool_fs / "spool", ["/bin/*"],
                                 ["--metrics", f"127.0.0.1:{port}"])
        wait_connected(fleet, server, "box-a")
        job_id = submit_job(fleet, server, "box-a", "-r", "100000", "--", "/bin/true")
        wait_for(lambda: listed_jobs(fleet, server)[job_id]["state"] == "running", 30, "the job to start")
        fleet.kill("server", 9)
        wait_for(lambda: metric(port, "perfctl_agent_spool_full") == 1, 180, "the samples to fill the spool's disk")
        spooled = metric(port, "perfctl_agent_samples_spooled_total")
        assert spooled > 1000, spooled  # the spool held thousands of samples, not a few
        fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
        wait_connected(fleet, server, "box-a")
        # every sample spooled before is acked and deleted, and measuring goes on past it
        wait_for(lambda: metric(port, "perfctl_agent_samples_acked_total") >= spooled, 120, "the spool to drain")
        wait_for(lambda: metric(port, "perfctl_agent_samples_spooled_total") > spooled + 1000, 120,
                 "measuring to resume")
        assert metric(port, "perfctl_agent_spool_full") == 0 and agent.poll() is None, fleet.log("box-a")
        assert "measuring resumed" in fleet.log("box-a")
    finally:
        fleet.stop_all()  # before the filesystem goes


@needs_root
def test_an_agent_stopped_on_a_tiny_full_spool_drains_it_when_restarted(fleet, tmp_path):
    """The adversarial tester's sequence on a 1.6 MB spool filesystem (a reserve of 100 KiB): the server away,
    the agent fills the spool, is stopped (SIGTERM) and started again with the server. The WAL had grown past
    what the reserve could land (397 KiB of frames for the database to take in), so the acks' deletes never
    found room once the reserve was given back: the agent waited for good, silent, 561 acked samples in it."""
    with _tmpfs(tmp_path, "1600k") as spool_fs:
        try:
            server = start_sqlite_server(fleet)
            port = free_port()
            options = ["--metrics", f"127.0.0.1:{port}"]
            start_agent_with(fleet, "box-a", server, spool_fs / "spool", ["/bin/*"], options)
            wait_connected(fleet, server, "box-a")
            job_id = submit_job(fleet, server, "box-a", "-r", "6000", "--", "/bin/true")
            wait_for(lambda: listed_jobs(fleet, server)[job_id]["state"] == "running", 30, "the job to start")
            fleet.kill("server", 15)
            wait_for(lambda: metric(port, "perfctl_agent_spool_full") == 1, 180, "the samples to fill the spool")
            fleet.kill("box-a", 15)
            fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
            start_agent_with(fleet, "box-a", server, spool_fs / "spool", ["/bin/*"], options)
            wait_connected(fleet, server, "box-a")
            _every_run_once(fleet, server, job_id, 6000)
        finally:
            fleet.stop_all()  # before the filesystem goes


def test_a_spool_full_of_its_own_samples_deletes_them_all_and_refills(spool_fs):
    """The spool alone fills its filesystem: every ack's delete still goes through (the reserve, then a few
    samples per transaction), and new samples fit in the pages the deletes freed."""
    spool = Spool(str(spool_fs / "spool"))
    assert (spool_fs / "spool" / "spool.reserve").stat().st_size == 512 << 10  # a sixteenth of 8 MiB
    spool.add_job("j", b"spec")
    added = 0
    with pytest.raises(SpoolFull):
        while True:
            spool.add_sample(str(uuid.uuid4()), os.urandom(700), "j", added + 1)
            added += 1
    assert added > 5000
    # job records on the full disk never take the reserve: 20 jobs of 5 KB here left acks of 500 unable to
    # delete for good (the helper's find), when they did
    for job in range(20):
        with contextlib.suppress(SpoolFull):
            spool.add_job(f"full-{job}", os.urandom(5000))
    seqs = [seq for seq, _ in spool.pending(0, added)]
    for start in range(0, len(seqs), 500):  # as acks come, a batch at a time, none refused
        spool.acked(seqs[start:start + 500])
    assert spool.count() == 0 and spool.room_for_samples()
    assert spool.add_job("after", os.urandom(5000))  # the pages the acks freed hold it
    for more in range(3000):
        spool.add_sample(str(uuid.uuid4()), os.urandom(700), "j", added + more + 1)
    assert spool.count() == 3000
    spool.close()


def test_a_full_spool_says_so_and_keeps_what_it_had(tmp_path):
    spool = Spool(str(tmp_path))
    spool.add_job("j", b"spec")
    spool.add_sample("11111111-1111-4111-8111-111111111111", b"x", "j", 1)
    # max_page_count: SQLite's own way to be out of space, with the error (and rollback) a full disk gives
    pages = spool._db.execute("PRAGMA page_count").fetchone()[0]
    spool._db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(SpoolFull, match="database or disk is full"):  # was "cannot rollback - no transaction"
        for index in range(2, 100):
            spool.add_sample(f"11111111-1111-4111-8111-{index:012d}", b"y" * 3000, "j", index)
    kept = spool.count()
    assert kept >= 1 and spool.job("j")[1] == kept  # each sample with its progress, or neither
    spool._db.execute("PRAGMA max_page_count=1073741823")
    spool.add_sample("22222222-2222-4222-8222-222222222222", b"z", "j", kept + 1)
    assert spool.count() == kept + 1
    spool.close()


def _agent_start(tmp_path, spool, *extra, user="nobody", allow="/bin/*", token=None):
    token_file = tmp_path / "agent.tok"
    token_file.write_text(token or "t" * 40)
    os.chmod(token_file, 0o600)
    args = ["agent", "--server", "127.0.0.1:1", "--name", "a", "--token-file", str(token_file), "--spool",
            str(spool), "--allow", allow, "--audit-every", "0", *extra]
    if user:
        args += ["--user", user]
    return perfctl(*args, timeout=60)


@needs_root
def test_a_spool_that_is_not_sqlite_is_one_line(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "spool.db").write_text("garbage\n" * 100)
    line = one_line(_agent_start(tmp_path, spool), code=2)
    assert line.startswith(f"perfctl agent: spool {spool}/spool.db is not an SQLite database: "), line


@needs_root
def test_agent_start_errors_are_one_line(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "spool directory" in one_line(_agent_start(tmp_path, a_file / "spool"), code=2)
    (tmp_path / "dir-db" / "spool.db").mkdir(parents=True)
    assert "cannot open spool" in one_line(_agent_start(tmp_path, tmp_path / "dir-db"), code=2)
    assert "no such user" in one_line(_agent_start(tmp_path, tmp_path / "s", user="no-such-user-here"), code=2)
    assert "absolute path" in one_line(_agent_start(tmp_path, tmp_path / "s", allow="bin/*"), code=2)
    assert "--workdir" in one_line(_agent_start(tmp_path, tmp_path / "s", "--workdir", str(tmp_path / "none")), code=2)


@needs_root
def test_a_second_agent_on_the_same_spool_is_one_line(fleet):
    server = start_sqlite_server(fleet)
    spool = fleet.dir / "spool"
    start_agent_with(fleet, "box-a", server, spool, ["/bin/*"])
    wait_connected(fleet, server, "box-a")
    line = one_line(_agent_start(fleet.dir, spool), code=2)
    assert "in use by another process" in line, line


def _damaged_spool(spool: Path, only_samples: bool = False) -> Path:
    """A spool with rows whose pages after the first (header and schema) are random bytes, as the
    reviewer's repro: SQLite opens it, and the first query of a table finds it malformed. ``only_samples``:
    only the samples table's pages, so that the worker finds nothing wrong and the network side does."""
    kept = Spool(str(spool))
    kept.add_job("j", b"spec" * 100)
    for index in range(40):
        kept.add_sample(f"11111111-1111-4111-8111-{index:012d}", os.urandom(1000), "j", index + 1)
    kept.set_job_state("j", "done", report=False)
    kept.close()
    database = spool / "spool.db"
    connection = sqlite3.connect(database)
    connection.execute("PRAGMA journal_mode=DELETE")
    roots = {name: page for name, page in connection.execute("SELECT name, rootpage FROM sqlite_master")}
    connection.close()
    size = database.stat().st_size
    assert size > 3 * 4096
    keep = {1} | ({page for name, page in roots.items() if "samples" not in name} if only_samples else set())
    with open(database, "r+b") as f:  # the header and the schema stay: SQLite opens it
        for page in range(2, size // 4096 + 1):
            if page not in keep:
                f.seek((page - 1) * 4096)
                f.write(os.urandom(4096))
    return database


@needs_root
def test_a_spool_damaged_past_its_first_page_stops_the_agent_with_one_line(tmp_path):
    spool = tmp_path / "spool"
    database = _damaged_spool(spool)
    result = _agent_start(tmp_path, spool)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "unexpected error" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"perfctl agent: spool {database} is damaged: "), result.stderr
    assert sum("damaged" in line for line in result.stderr.splitlines()) == 1, result.stderr


@needs_root
def test_a_damaged_spool_stops_a_connected_agent_with_one_line(fleet):
    server = start_sqlite_server(fleet)
    spool = fleet.dir / "spool"
    database = _damaged_spool(spool, only_samples=True)  # found by the sender, inside the TaskGroup
    agent = start_agent_with(fleet, "box-a", server, spool, ["/bin/*"])
    assert agent.wait(timeout=60) == 2, fleet.log("box-a")
    log = fleet.log("box-a")
    assert f"registered with {server}" in log, log
    assert "Traceback" not in log and "unexpected error" not in log, log
    assert log.strip().splitlines()[-1].startswith(f"perfctl agent: spool {database} is damaged: "), log


def test_spool_errors_name_the_file(tmp_path):
    (tmp_path / "spool.db").write_bytes(os.urandom(8192))
    with pytest.raises(SpoolError, match="is not an SQLite database"):
        Spool(str(tmp_path))
    assert stat.S_ISREG(os.stat(tmp_path / "spool.db").st_mode)  # left as it was, for the operator
