"""The exec gate's loop record has one definition, gate.c's ``struct record``: perfctl reads its layout off
the source (agent/gate.py record_layout) and checks the size the loop binary reports against it at load."""

import os
import shutil
import struct
import subprocess

import pytest
from conftest import needs_root

from perfctl.agent import build, gate
from perfctl.agent.run import RunError
from perfctl.agent.runner import Runner, make_control

needs_compiler = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="probe: no C compiler")


def _source() -> str:
    with open(gate.SOURCE) as f:
        return f.read()


def test_the_layout_read_off_gate_c_is_the_one_the_runner_reads():
    layout = gate.loop_record()
    assert layout.fields == gate.RECORD_FIELDS_READ  # every field is one perfctl reads, in gate.c's order
    assert layout.kinds == {"RECORD_EXITED": 0, "RECORD_STOPPED": 1}
    assert layout.format.size == 8 * len(layout.fields)
    record = layout.unpack(struct.pack("=7q", 1, 42, os.CLD_STOPPED, 19, 0, 10, 20))
    assert (record.kind, record.pid, record.code, record.status, record.end_ns - record.start_ns) == (1, 42, 5, 19, 10)


@pytest.mark.parametrize("edit, said", [
    (("    long max_rss_kib; ", "    int max_rss_kib; "), "struct record's 'int max_rss_kib;' is not one long"),
    (("    long end_ns; ", ""), "lacks end_ns, which perfctl reads"),
    (("RECORD_STOPPED = 1", "RECORD_STOPPED"), "enum record_kind's 'RECORD_STOPPED' has no explicit value"),
    (("struct record {", "struct loop_record {"), "defines no struct record"),
])
def test_a_gate_c_whose_record_perfctl_cannot_read_is_a_clear_error(edit, said):
    old, new = edit
    source = _source()
    assert old in source
    with pytest.raises(RunError, match=said):
        gate.record_layout(source.replace(old, new, 1))


@needs_compiler
def test_the_compiled_loop_reports_the_record_size_read_off_its_source(tmp_path):
    binary, _ = build.build_static(gate.SOURCE, gate.CFLAGS, "gate")
    releases, release_end = os.pipe()
    records, records_end = os.pipe()
    loop = subprocess.Popen([binary, "-L", str(records_end), "--", "/bin/true"], stdin=releases,
                            pass_fds=(records_end,))
    os.close(releases)
    os.close(records_end)
    try:
        assert struct.unpack("=q", os.read(records, 8))[0] == gate.loop_record().format.size
        os.write(release_end, b"\n")
        record = gate.loop_record().unpack(os.read(records, gate.loop_record().format.size))
        assert (record.kind, record.code, record.status) == (0, os.CLD_EXITED, 0)
    finally:
        os.close(release_end)
        assert loop.wait(timeout=10) == 0  # the release pipe's EOF ends the loop
        os.close(records)


def _loop_refused(tmp_path, old: str, new: str, said: str) -> None:
    """A gate binary built from gate.c with ``old`` replaced by ``new``: starting its loop raises RunError
    matching ``said``, before any run."""
    source = _source()
    assert old in source
    (tmp_path / "gate.c").write_text(source.replace(old, new, 1))
    binary = tmp_path / "gate"
    subprocess.run([shutil.which("cc") or shutil.which("gcc"), *gate.CFLAGS, "-o", str(binary),
                    str(tmp_path / "gate.c")], check=True)
    runner = Runner(gate.Gate((str(binary),), "gate built by the test", True))
    runner.loop_runs = True
    try:
        if runner.counting_cgroup()[0] is None:
            pytest.skip(f"probe: {runner.counting_cgroup()[1]}")
        with pytest.raises(RunError, match=said):
            runner.looped(["/bin/true"], make_control())
    finally:
        runner.close()


@needs_root
@needs_compiler
def test_a_loop_built_from_another_record_layout_is_refused_at_load(tmp_path):
    """A gate binary whose record has a field more than the gate.c perfctl read (a binary from another
    version) is refused when its loop starts, before any run, with both sizes said."""
    _loop_refused(tmp_path, "    long end_ns; ", "    long end_ns;\n    long spare;",
                  "the exec gate's loop writes 64-byte records, but .*gate.c defines 56-byte ones")


@needs_root
@needs_compiler
def test_a_loop_that_writes_no_record_size_is_named_as_an_older_gate(tmp_path):
    """A gate binary from before the size word (the adversarial tester's: a stale cache entry) waits silent
    for its first release: perfctl said the loop had ended ("killed?"), which it had not."""
    _loop_refused(tmp_path, "    if (syscall3(__NR_write, launch.loop, (long)&record_size, sizeof record_size) != "
                  "sizeof record_size)", "    if (0)",
                  "the exec gate's loop wrote no record size within 5 s: the gate binary was built from an older "
                  ".*gate.c")
