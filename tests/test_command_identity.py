"""A command's identity (agent/session.py identify, input_digest): inputs are regular files read up to a size,
hashed within a time bound and with the permissions of the user the run is for, and a pseudo file that never
ends does not block the agent."""

import hashlib
import os
import threading

import pytest
from conftest import TRACE_PIPE, needs_root

from perfctl.agent import session
from perfctl.agent.runner import RunError, make_control


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
