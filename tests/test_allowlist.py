"""Which programs an agent's jobs may run (agent/allowlist.py): `*` stops at a slash and `**` crosses it, the real
path is judged (not a symbolic link, not a subdirectory), a symbolic link to / in an allowed directory runs
nothing, and a refusal tells a client nothing about the paths root can see. Pure functions tested directly, and
a real server and agent."""

import os
import shutil

import pytest
from conftest import needs_root
from fleet import finished_job, start_agent_with, start_sqlite_server, submit_job, wait_connected

from perfctl.agent.allowlist import allowed, glob_regex


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
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", [f"{shared_dir}/*"])
    wait_connected(fleet, server, "box-a")
    marker = shared_dir / "ran"
    escape = submit_job(fleet, server, "box-a", "-r", "1", "--", f"{shared_dir}/root/usr/bin/python3", "-c",
                     f"open('{marker}', 'w')")
    job = finished_job(fleet, server, escape)
    assert job["state"] == "refused", job
    assert job["message"] == f"{shared_dir}/root/usr/bin/python3 is not allowed by this agent's --allow patterns"
    assert not marker.exists()
    fine = finished_job(fleet, server, submit_job(fleet, server, "box-a", "-r", "2", "--", f"{shared_dir}/true"))
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
    server = start_sqlite_server(fleet)
    start_agent_with(fleet, "box-a", server, fleet.dir / "spool", [f"{shared_dir}/*", "/usr/bin/*"],
           ["--workdir", str(shared_dir)])
    wait_connected(fleet, server, "box-a")
    refused = [str(private / "exists"), str(private / "nothere"), str(private / "link"),
               f"{shared_dir}/../{tmp_path.name}/advpriv/exists", f"{shared_dir}/out", f"{shared_dir}/dangling"]
    jobs = {path: submit_job(fleet, server, "box-a", "-r", "1", "--", path) for path in refused}
    missing = submit_job(fleet, server, "box-a", "-r", "1", "--", f"{shared_dir}/nothere")
    relative = submit_job(fleet, server, "box-a", "-r", "1", "--", "./true")
    bare = submit_job(fleet, server, "box-a", "-r", "1", "--", "true")
    for path, job_id in jobs.items():
        job = finished_job(fleet, server, job_id)
        # the same shape whether the path exists or not; no symlink's target
        assert (job["state"], job["message"]) == \
            ("refused", f"{path} is not allowed by this agent's --allow patterns"), job
    job = finished_job(fleet, server, missing)  # inside the allowlist, "not found" may be said
    assert (job["state"], job["message"]) == ("failed", f"command not found: {shared_dir}/nothere"), job
    assert finished_job(fleet, server, relative)["state"] == "done"  # against --workdir
    assert finished_job(fleet, server, bare)["state"] == "done"  # in the clean environment's PATH
    assert "/srv/secret" not in fleet.log("box-a")
