"""The agent against a hostile client and a hostile machine (issue 11, agent side): allowlist bypasses through
symlinks and `*`, jobs that would block the worker or leak file digests, a full spool disk, a spool that is
not a database. Real server and agent processes; pure functions tested directly."""

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest
from conftest import needs_root, one_line, perfctl
from fleet import free_port, wait_for

from perfctl.agent import session
from perfctl.agent.allowlist import allowed, glob_regex
from perfctl.agent.runner import RunError, make_control
from perfctl.agent.spool import Spool, SpoolError, SpoolFull
from perfctl.v1 import fleet_pb2 as pb
from perfctl.v1 import fleet_pb2_grpc as rpc

TRACE_PIPE = "/sys/kernel/tracing/trace_pipe"



@pytest.fixture
def shared_dir():
    """A directory every user may enter (pytest's tmp_path is under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="perfctl-hardening-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _jobs(fleet, server):
    result = fleet.client("jobs", "--json", server=server)
    assert result.returncode == 0, result.stderr
    return {j["job_id"]: j for j in json.loads(result.stdout)}


def _submit(fleet, server, machine, *args) -> str:
    result = fleet.client("submit", "--machines", machine, *args, server=server)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[1]


def _finished(fleet, server, job_id, timeout=60):
    return wait_for(lambda: (j := _jobs(fleet, server)[job_id])["state"] in ("done", "failed", "refused") and j,
                    timeout, f"job {job_id} to finish")


def _machine(fleet, server, name):
    result = fleet.client("machines", "--json", server=server)
    if result.returncode != 0:
        return None
    return {m["name"]: m for m in json.loads(result.stdout)}.get(name)


def _agent(fleet, name, server, spool, allow, extra=()):
    args = ["agent", "--server", server, "--name", name, "--token-file", fleet.agent_token(name), "--spool",
            str(spool), "--user", "nobody", "--audit-every", "0", *extra]
    for pattern in allow:
        args += ["--allow", pattern]
    return fleet.start(name, args)


def _server(fleet):
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    return server


def _connected(fleet, server, name, timeout=60):
    wait_for(lambda: (m := _machine(fleet, server, name)) and m["connected"], timeout, f"{name} to connect")


def _samples(fleet, server, machine):
    channel = grpc.insecure_channel(server)
    token = open(fleet.client_token).read()
    try:
        return list(rpc.QueryServiceStub(channel).GetSamples(pb.GetSamplesRequest(machine=machine),
                                                             metadata=(("authorization", f"Bearer {token}"),)))
    finally:
        channel.close()


# --- finding 3: the allowlist ---

@pytest.mark.parametrize("pattern, path, matches", [
    ("/opt/bench/*", "/opt/bench/x", True),
    ("/opt/bench/*", "/opt/bench/sub/x", False),  # fnmatch's * crossed /
    ("/opt/bench/**", "/opt/bench/sub/x", True),
    ("/opt/**/x", "/opt/a/b/x", True),
    ("/opt/bench/?", "/opt/bench/x", True),
    ("/opt/bench?x", "/opt/bench/x", False),
    ("/opt/bench/[ab]*", "/opt/bench/bx", True),
    ("/opt/bench/[!ab]*", "/opt/bench/cx", True),
    ("/opt/bench/[!ab]*", "/opt/bench/ax", False),
    ("/opt/bench[!a]x", "/opt/bench/x", False),  # a class never matches /
    ("/opt/bench/[]]", "/opt/bench/]", True),
    ("/opt/bench/[x", "/opt/bench/[x", True),  # unclosed [ is literal, as in fnmatch
    ("/opt/b.nch", "/opt/bench", False),
    ("/opt/bench", "/opt/bench/x", False),  # anchored
])
def test_glob_star_stops_at_slash_and_double_star_crosses_it(pattern, path, matches):
    assert bool(glob_regex(pattern).fullmatch(path)) is matches


def test_allowed_judges_the_real_path_not_a_symlink_or_a_subdirectory(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "root").symlink_to("/")
    (bench / "sub").mkdir()
    shutil.copy("/bin/true", bench / "sub" / "true")
    shutil.copy("/bin/true", bench / "true")
    (bench / "link-to-true").symlink_to(bench / "true")
    patterns = [f"{bench}/*"]
    python = f"{bench}/root/usr/bin/python3"
    assert not allowed(python, patterns)
    assert not allowed(f"{bench}/sub/true", patterns)
    assert allowed(f"{bench}/sub/true", [f"{bench}/**"])
    assert allowed(f"{bench}/true", patterns) and allowed(f"{bench}/link-to-true", patterns)
    # the pattern's directories are resolved as the executable is: /bin may be a symlink to /usr/bin
    assert allowed("/bin/true", ["/bin/*"]) and allowed(os.path.realpath("/bin/true"), ["/bin/*"])


@needs_root
def test_a_symlink_to_root_in_an_allowed_directory_runs_nothing(fleet, shared_dir):
    (shared_dir / "root").symlink_to("/")
    shutil.copy("/bin/true", shared_dir / "true")
    server = _server(fleet)
    _agent(fleet, "box-a", server, fleet.dir / "spool", [f"{shared_dir}/*"])
    _connected(fleet, server, "box-a")
    marker = shared_dir / "ran"
    escape = _submit(fleet, server, "box-a", "-r", "1", "--", f"{shared_dir}/root/usr/bin/python3", "-c",
                     f"open('{marker}', 'w')")
    job = _finished(fleet, server, escape)
    assert job["state"] == "refused", job
    assert job["message"] == f"{shared_dir}/root/usr/bin/python3 is not allowed by this agent's --allow patterns"
    assert not marker.exists()
    fine = _finished(fleet, server, _submit(fleet, server, "box-a", "-r", "2", "--", f"{shared_dir}/true"))
    assert fine["state"] == "done" and fine["samples"] == 2, fine


@needs_root
def test_a_refusal_tells_a_client_nothing_about_paths_root_can_see(fleet, shared_dir, tmp_path):
    private = tmp_path / "advpriv"
    private.mkdir(mode=0o700)
    (private / "link").symlink_to("/srv/secret/key.pem")
    (private / "exists").write_text("x\n")
    (shared_dir / "out").symlink_to(private / "exists")  # inside the allowlist, pointing out of it
    (shared_dir / "dangling").symlink_to(private / "nothere")
    shutil.copy("/bin/true", shared_dir / "true")
    server = _server(fleet)
    _agent(fleet, "box-a", server, fleet.dir / "spool", [f"{shared_dir}/*", "/usr/bin/*"],
           ["--workdir", str(shared_dir)])
    _connected(fleet, server, "box-a")
    refused = [str(private / "exists"), str(private / "nothere"), str(private / "link"),
               f"{shared_dir}/../{tmp_path.name}/advpriv/exists", f"{shared_dir}/out", f"{shared_dir}/dangling"]
    jobs = {path: _submit(fleet, server, "box-a", "-r", "1", "--", path) for path in refused}
    missing = _submit(fleet, server, "box-a", "-r", "1", "--", f"{shared_dir}/nothere")
    relative = _submit(fleet, server, "box-a", "-r", "1", "--", "./true")
    bare = _submit(fleet, server, "box-a", "-r", "1", "--", "true")
    for path, job_id in jobs.items():
        job = _finished(fleet, server, job_id)
        # the same shape whether the path exists or not; no symlink's target
        assert (job["state"], job["message"]) == \
            ("refused", f"{path} is not allowed by this agent's --allow patterns"), job
    job = _finished(fleet, server, missing)  # inside the allowlist, "not found" may be said
    assert (job["state"], job["message"]) == ("failed", f"command not found: {shared_dir}/nothere"), job
    assert _finished(fleet, server, relative)["state"] == "done"  # against --workdir
    assert _finished(fleet, server, bare)["state"] == "done"  # in the clean environment's PATH
    assert "/srv/secret" not in fleet.log("box-a")


@needs_root
@pytest.mark.skipif(shutil.which("perf") is None, reason="probe: no perf(1) (apt-get install linux-perf)")
def test_a_job_that_cannot_run_as_asked_fails_with_one_log_line(fleet):
    server = _server(fleet)
    _agent(fleet, "box-a", server, fleet.dir / "spool", ["/bin/*"])
    _connected(fleet, server, "box-a")
    job_id = _submit(fleet, server, "box-a", "--backend", "perf-stat", "-r", "1", "--", "/bin/true")
    job = _finished(fleet, server, job_id)
    assert job["state"] == "failed" and job["message"].startswith("--user is not available with --backend "
                                                                  "perf-stat"), job
    log = fleet.log("box-a")
    assert "Traceback" not in log, log
    said = [line for line in log.splitlines() if f"job {job_id} failed" in line]
    assert len(said) == 1 and f"job {job_id} failed: --user is not available" in said[0], log


# --- finding 2: identifying a job's benchmark ---

def _digest_of(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def _in_thread(function, timeout):
    """Run ``function`` so that a test fails instead of hanging when it blocks."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as err:  # noqa: BLE001 - shown by the assertion
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still blocked after {timeout} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.skipif(not os.access(TRACE_PIPE, os.R_OK), reason=f"probe: {TRACE_PIPE} not readable here")
def test_identify_does_not_block_on_a_pseudo_file_that_never_ends():
    _, bench = _in_thread(lambda: session.identify(["/bin/true", TRACE_PIPE], make_control(clean_env=True)), 20)
    assert bench.input_digest  # named, and the worker goes on


def test_inputs_are_regular_files_read_up_to_a_size(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.write_bytes(b"0123456789")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    content = hashlib.sha256(b"0123456789").hexdigest().encode()
    assert session.input_digest(["data"], str(tmp_path)) == _digest_of(b"data\0", content)
    assert _in_thread(lambda: session.input_digest([str(fifo)], "/"), 10) == _digest_of(str(fifo).encode() + b"\0")
    monkeypatch.setattr(session, "_MAX_HASHED_INPUT", 4)
    status = os.stat(data)
    assert session.input_digest(["data"], str(tmp_path)) == \
        _digest_of(b"data\0", f"size-mtime:{status.st_size}:{status.st_mtime_ns}".encode())


def test_hashing_inputs_is_bounded_in_time(tmp_path, monkeypatch):
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(200 << 20)  # sparse: fast to make, ~0.5 s to hash
    monkeypatch.setattr(session, "HASH_SECONDS", 0.01)
    with pytest.raises(RunError, match="input files took more than"):
        session.identify(["/bin/true", str(big)], make_control(clean_env=True))


@needs_root
def test_inputs_are_hashed_with_the_users_permissions(shared_dir):
    secret = shared_dir / "secret"
    secret.write_bytes(b"root only")
    os.chmod(secret, 0o600)
    control = make_control(clean_env=True, user="nobody", cwd=str(shared_dir))
    arg_only = _digest_of(b"secret\0")
    assert session.identify(["/bin/cat", "secret"], control)[1].input_digest == arg_only
    os.chmod(secret, 0o644)
    readable = _digest_of(b"secret\0", hashlib.sha256(b"root only").hexdigest().encode())
    assert session.identify(["/bin/cat", "secret"], control)[1].input_digest == readable
    os.chmod(shared_dir, 0o700)  # the file is readable, its directory is not searchable by nobody
    assert session.identify(["/bin/cat", "secret"], control)[1].input_digest == arg_only
    # without --user (perfctl stat as root) the file counts
    assert session.identify(["/bin/cat", "secret"], make_control(clean_env=True, cwd=str(shared_dir)))[1] \
        .input_digest == readable


@needs_root
@pytest.mark.skipif(not os.path.exists(TRACE_PIPE), reason=f"probe: no {TRACE_PIPE}")
def test_jobs_naming_blocking_files_neither_hang_the_agent_nor_stay_queued(fleet, shared_dir):
    fifo = shared_dir / "fifo"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o777)  # "executable": opening it to read its magic blocked the agent, as root
    server = _server(fleet)
    _agent(fleet, "box-a", server, fleet.dir / "spool", ["/bin/*", "/usr/bin/*"])
    _connected(fleet, server, "box-a")
    pipe_job = _submit(fleet, server, "box-a", "-r", "1", "--", "/bin/true", TRACE_PIPE)
    fifo_job = _submit(fleet, server, "box-a", "-r", "1", "--", str(fifo))
    after = _submit(fleet, server, "box-a", "-r", "3", "--", "/bin/true")
    assert _finished(fleet, server, pipe_job)["state"] == "done"
    assert _finished(fleet, server, fifo_job)["state"] == "refused"
    assert _finished(fleet, server, after)["samples"] == 3


@needs_root
def test_a_job_whose_preparation_was_cut_short_is_failed_not_retried_forever(fleet):
    server = _server(fleet)
    spool = fleet.dir / "spool"
    _agent(fleet, "box-a", server, spool, ["/bin/*"])
    _connected(fleet, server, "box-a")
    fleet.kill("box-a", 15)
    job_id = _submit(fleet, server, "box-a", "-r", "1", "--", "/bin/true")
    # what the spool holds when an agent dies (killed, or hung and restarted) while preparing a job
    job = pb.Job(commands=[pb.Command(name="true", argv=["/bin/true"])], repetitions=1)
    kept = Spool(str(spool))
    kept.add_job(job_id, job.SerializeToString())
    kept.set_job_state(job_id, "preparing", report=False)
    kept.close()
    _agent(fleet, "box-a", server, spool, ["/bin/*"])
    job = _finished(fleet, server, job_id)
    assert job["state"] == "failed" and "stopped while preparing" in job["message"], job


# --- finding 6: a full spool disk ---

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


def _metric(port: int, name: str) -> float | None:
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else None


@needs_root
def test_a_full_spool_disk_pauses_the_agent_which_resumes_when_space_returns(fleet, small_fs):
    server = _server(fleet)
    spool = small_fs / "spool"
    port = free_port()
    agent = _agent(fleet, "box-a", server, spool, ["/bin/*"], ["--metrics", f"127.0.0.1:{port}"])
    _connected(fleet, server, "box-a")
    filler = _fill(small_fs)
    job_id = _submit(fleet, server, "box-a", "-r", "40", "--", "/bin/true")
    wait_for(lambda: "database or disk is full" in fleet.log("box-a"), 60, "the agent to find its disk full")
    time.sleep(6)  # several retries
    assert "cannot rollback" not in fleet.log("box-a")
    assert agent.poll() is None, fleet.log("box-a")
    assert fleet.log("box-a").count("measuring paused") == 1  # said once, not per retry
    assert _metric(port, "perfctl_agent_spool_full") == 1
    assert _metric(port, "perfctl_agent_connected") == 1 and _machine(fleet, server, "box-a")["connected"]
    assert _jobs(fleet, server)[job_id]["state"] != "done"

    # killed and restarted with the disk still full: it starts, connects and waits
    fleet.kill("box-a")
    agent = _agent(fleet, "box-a", server, spool, ["/bin/*"], ["--metrics", f"127.0.0.1:{port}"])
    wait_for(lambda: _metric(port, "perfctl_agent_spool_full") == 1, 60, "the restarted agent to wait for space")
    _connected(fleet, server, "box-a")
    assert agent.poll() is None, fleet.log("box-a")

    filler.unlink()
    job = wait_for(lambda: (j := _jobs(fleet, server)[job_id])["state"] == "done" and j, 120, "the job to finish")
    assert job["samples"] == 40
    samples = wait_for(lambda: len(s := _samples(fleet, server, "box-a")) >= 40 and s, 60, "every sample stored")
    assert len(samples) == 40 and sorted(s.run_index for s in samples) == list(range(40))
    assert len({s.uuid for s in samples}) == 40
    assert "measuring resumed" in fleet.log("box-a")


def _every_run_once(fleet, server, job_id, runs, before=()):
    job = wait_for(lambda: (j := _jobs(fleet, server)[job_id])["state"] in ("done", "failed") and j, 180,
                   f"job {job_id} to finish")
    assert (job["state"], job["samples"]) == ("done", runs), job
    samples = wait_for(lambda: len(s := [x for x in _samples(fleet, server, "box-a") if x.job_id == job_id])
                       >= runs and s, 60, "every sample stored")
    assert sorted(s.run_index for s in samples) == list(range(runs))
    assert len({s.uuid for s in samples}) == runs


@needs_root
def test_a_disk_filled_while_a_job_runs_pauses_it_and_it_finishes_once_space_returns(fleet, small_fs):
    """The reviewer's sequence: the WAL must not keep the space freed after the filler goes (SQLite's
    default autocheckpoint is 4 MB, twice this filesystem), before or after a restart on the full disk."""
    server = _server(fleet)
    spool = small_fs / "spool"
    port = free_port()
    extra = ["--metrics", f"127.0.0.1:{port}"]
    agent = _agent(fleet, "box-a", server, spool, ["/bin/*"], extra)
    _connected(fleet, server, "box-a")
    first = _submit(fleet, server, "box-a", "-r", "400", "--", "/bin/true")
    time.sleep(1.5)
    filler = _fill(small_fs)
    time.sleep(4)  # paused (the default WAL had taken the space) or, a small WAL reused, not even that
    filler.unlink()
    _every_run_once(fleet, server, first, 400)
    wait_for(lambda: _metric(port, "perfctl_agent_spool_full") == 0, 30, "the full-disk metric to clear")
    wait_for(lambda: _metric(port, "perfctl_agent_samples_pending") == 0, 30, "the spool to empty")

    # Again, killed and restarted while full. The server is down meanwhile, so that nothing is acked and the
    # spool must grow: a small WAL alone can absorb a filler arriving while acks keep the spool small.
    second = _submit(fleet, server, "box-a", "-r", "400", "--", "/bin/sleep", "0.05")  # 20 s at least
    wait_for(lambda: _jobs(fleet, server)[second]["state"] == "running", 30, "the job to start")
    # SIGKILL, not SIGTERM: a graceful stop waits up to its grace for the agent's open stream, and the job
    # could end meanwhile, with nothing left to write when the disk fills (seen once in CI)
    fleet.kill("server", 9)
    time.sleep(1.5)
    filler = _fill(small_fs)
    wait_for(lambda: _metric(port, "perfctl_agent_spool_full") == 1, 60, "the agent to pause")
    fleet.kill("box-a")  # SIGKILL: the WAL stays as it was
    agent = _agent(fleet, "box-a", server, spool, ["/bin/*"], extra)
    wait_for(lambda: _metric(port, "perfctl_agent_spool_full") == 1, 60, "the restarted agent to wait for space")
    fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
    _connected(fleet, server, "box-a")
    time.sleep(3)  # a few retries on the full disk, connected
    filler.unlink()
    _every_run_once(fleet, server, second, 400)
    wait_for(lambda: _metric(port, "perfctl_agent_samples_pending") == 0, 30, "the spool to empty")
    assert agent.poll() is None, fleet.log("box-a")
    assert _metric(port, "perfctl_agent_spool_full") == 0


@needs_root
def test_a_spool_that_filled_its_own_disk_drains_once_the_server_is_back(fleet, spool_fs):
    """The server away, the agent measures until its samples alone fill the spool's filesystem. With the
    server back the acks must free samples, though each delete needs WAL room on that full filesystem and the
    WAL's last frames need the database to grow: without the spool's reserve the agent waited forever, acked
    but unable to delete, measuring never resumed (spool.db 7.5 MB and its WAL filled an 8 MB tmpfs)."""
    try:
        server = _server(fleet)
        port = free_port()
        agent = _agent(fleet, "box-a", server, spool_fs / "spool", ["/bin/*"], ["--metrics", f"127.0.0.1:{port}"])
        _connected(fleet, server, "box-a")
        job_id = _submit(fleet, server, "box-a", "-r", "100000", "--", "/bin/true")
        wait_for(lambda: _jobs(fleet, server)[job_id]["state"] == "running", 30, "the job to start")
        fleet.kill("server", 9)
        wait_for(lambda: _metric(port, "perfctl_agent_spool_full") == 1, 180, "the samples to fill the spool's disk")
        spooled = _metric(port, "perfctl_agent_samples_spooled_total")
        assert spooled > 1000, spooled  # the spool held thousands of samples, not a few
        fleet.start_server(server, ["--data-dir", str(fleet.dir / "data")])
        _connected(fleet, server, "box-a")
        # every sample spooled before is acked and deleted, and measuring goes on past it
        wait_for(lambda: _metric(port, "perfctl_agent_samples_acked_total") >= spooled, 120, "the spool to drain")
        wait_for(lambda: _metric(port, "perfctl_agent_samples_spooled_total") > spooled + 1000, 120,
                 "measuring to resume")
        assert _metric(port, "perfctl_agent_spool_full") == 0 and agent.poll() is None, fleet.log("box-a")
        assert "measuring resumed" in fleet.log("box-a")
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


# --- finding 11: the agent command at start ---

def _agent_start(tmp_path, spool, *extra, user="nobody", allow="/bin/*", token=None):
    token_file = tmp_path / "agent.tok"
    token_file.write_text(token or "t" * 40)
    os.chmod(token_file, 0o600)
    args = ["agent", "--server", "127.0.0.1:1", "--name", "a", "--token-file", str(token_file), "--spool",
            str(spool), "--allow", allow, "--audit-every", "0", *extra]
    if user:
        args += ["--user", user]
    return perfctl(*args, timeout=60)


def _one_line(result) -> str:
    return one_line(result, code=2)


@needs_root
def test_a_spool_that_is_not_sqlite_is_one_line(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "spool.db").write_text("garbage\n" * 100)
    line = _one_line(_agent_start(tmp_path, spool))
    assert line.startswith(f"perfctl agent: spool {spool}/spool.db is not an SQLite database: "), line


@needs_root
def test_agent_start_errors_are_one_line(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "spool directory" in _one_line(_agent_start(tmp_path, a_file / "spool"))
    (tmp_path / "dir-db" / "spool.db").mkdir(parents=True)
    assert "cannot open spool" in _one_line(_agent_start(tmp_path, tmp_path / "dir-db"))
    assert "no such user" in _one_line(_agent_start(tmp_path, tmp_path / "s", user="no-such-user-here"))
    assert "absolute path" in _one_line(_agent_start(tmp_path, tmp_path / "s", allow="bin/*"))
    assert "--workdir" in _one_line(_agent_start(tmp_path, tmp_path / "s", "--workdir", str(tmp_path / "none")))


@needs_root
def test_a_second_agent_on_the_same_spool_is_one_line(fleet):
    server = _server(fleet)
    spool = fleet.dir / "spool"
    _agent(fleet, "box-a", server, spool, ["/bin/*"])
    _connected(fleet, server, "box-a")
    line = _one_line(_agent_start(fleet.dir, spool))
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
    server = _server(fleet)
    spool = fleet.dir / "spool"
    database = _damaged_spool(spool, only_samples=True)  # found by the sender, inside the TaskGroup
    agent = _agent(fleet, "box-a", server, spool, ["/bin/*"])
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
