"""A write that a full disk cuts short takes back only its own bytes (perfctl/output_files.py append_whole):
never what another writer appended meanwhile, never an earlier line (fourth review of issue 28). Real
filesystems: a small tmpfs mounted for each test (root), filled by a real program."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import perfctl


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "mnt"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_line_the_benchmark_appended_survives_perfctls_failed_write(tmp_path, small_disk):
    """The samples file's last page has 200 bytes left and no other page is free; the benchmark appends a
    short line of its own to the file, then perfctl's sample fits only in part. Before: the file was cut back
    to the size perfctl had seen, taking the benchmark's line with it. Now only perfctl's own piece goes."""
    samples = small_disk / "o.jsonl"
    made = perfctl("stat", "-r", "1", "-e", "page-faults", "-o", str(samples), "--", "/bin/true")
    assert made.returncode == 0, made.stderr
    pad = 4096 - 200 - samples.stat().st_size % 4096 - 1
    with open(samples, "a") as f:
        f.write(json.dumps({"type": "note", "pad": "x" * (pad - 27)}) + "\n")
    assert samples.stat().st_size % 4096 == 4096 - 200
    subprocess.run(["dd", "if=/dev/zero", f"of={small_disk}/fill", "bs=4k"], capture_output=True)
    before = samples.read_bytes()
    theirs = json.dumps({"type": "note", "by": "the benchmark"}) + "\n"
    (tmp_path / "blob").write_text(theirs)
    script = tmp_path / "app.sh"  # names the file only inside: perfctl refuses a benchmark whose argv does
    script.write_text(f"cat {tmp_path}/blob >> {samples}\n")
    full = perfctl("stat", "-r", "3", "-e", "page-faults", "-o", str(samples), "--", "sh", str(script))
    assert full.returncode == 2 and "No space left on device" in full.stderr, full.stderr
    assert samples.read_bytes() == before + theirs.encode()


def test_token_add_on_a_full_disk_leaves_the_tokens_file_as_it_was(small_disk):
    """A tokens file whose last page has 20 bytes left, on a disk with no other page free: the new token's
    line is written in part. Before: the cut line stayed, the server refused the whole file (every token
    revoked) and every later `token add` refused it; the message was a bare errno."""
    tokens = small_disk / "tokens"
    made = perfctl("token", "add", "--file", str(tokens), "--client", "ci")
    assert made.returncode == 0, made.stderr
    with open(tokens, "a") as f:
        f.write("#" * (4096 - 20 - tokens.stat().st_size - 1) + "\n")
    before = tokens.read_bytes()
    assert len(before) == 4096 - 20
    subprocess.run(["dd", "if=/dev/zero", f"of={small_disk}/fill", "bs=4k"], capture_output=True)
    added = perfctl("token", "add", "--file", str(tokens), "--agent", "newbox")
    assert added.returncode == 2, added.stdout
    assert added.stderr.strip() == (f"perfctl token: cannot write {tokens}: No space left on device; no token "
                                    "was added"), added.stderr
    assert tokens.read_bytes() == before
    os.unlink(small_disk / "fill")
    again = perfctl("token", "add", "--file", str(tokens), "--agent", "newbox")
    assert again.returncode == 0 and tokens.read_bytes().startswith(before), again.stderr
