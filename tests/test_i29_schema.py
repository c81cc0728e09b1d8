"""Issue 29, point 7, mixed versions: a replica serves only a schema it knows (server/schema_version.py). A
database stamped with a revision of a newer perfctl is refused at start with one line saying which is newer;
a replica serving PostgreSQL when a newer one migrates it stops within SCHEMA_CHECK_S and exits non-zero with
that line; `--no-migrate` refuses an older database. Real servers, real SQLite and PostgreSQL."""

import subprocess
import time

import pytest
from fleet import Postgres, free_port, perfctl_command, postgres_reason, wait_for
from sqlalchemy import create_engine, text

from perfctl.server.schema_version import SCHEMA_CHECK_S, _scripts, known_heads
from perfctl.server.storage import Storage, database_url

FUTURE = "0099_from_a_newer_perfctl"



def _stamp(url: str, revision: str) -> None:
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :revision"), {"revision": revision})
    engine.dispose()


def _server(fleet, db_args: list[str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(perfctl_command("server", "--listen", f"127.0.0.1:{free_port()}", *db_args, "--tokens",
                                          fleet.tokens, *extra), capture_output=True, text=True, timeout=60)


def test_a_server_refuses_a_database_a_newer_perfctl_migrated(fleet, tmp_path):
    data = tmp_path / "data"
    url = database_url(str(data), None)
    Storage(url).close()  # made at this perfctl's head
    _stamp(url, FUTURE)
    result = _server(fleet, ["--data-dir", str(data)])
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith(f"the database was migrated by a newer perfctl (revision {FUTURE}; this one knows up to "
                         f"{', '.join(known_heads())}): upgrade this perfctl, or stop it"), line
    assert line.startswith("perfctl server: cannot open the database sqlite:///"), line
    # prune opens the database the same way: refused, not migrated or half-read
    prune = subprocess.run(perfctl_command("prune", "--older-than", "1d", "--data-dir", str(data)),
                           capture_output=True, text=True, timeout=60)
    assert prune.returncode == 2 and "migrated by a newer perfctl" in prune.stderr, prune.stderr


def test_no_migrate_refuses_an_older_database_and_starts_on_a_current_one(fleet, tmp_path):
    data = tmp_path / "data"
    url = database_url(str(data), None)
    Storage(url).close()
    (head,) = known_heads()
    older = _scripts().get_revision(head).down_revision  # the revision before this perfctl's newest
    _stamp(url, older)
    result = _server(fleet, ["--data-dir", str(data)], "--no-migrate")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"the database is at revision {older}, older than this perfctl ({head})" in line, line
    assert "start without --no-migrate to migrate it" in line
    _stamp(url, head)
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(data)], ["--no-migrate"])
    wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server to answer")


@pytest.mark.skipif(postgres_reason() is not None, reason=f"{postgres_reason()}")
def test_a_serving_replica_stops_when_a_newer_perfctl_migrates_the_database(fleet):
    postgres = Postgres()
    try:
        url = postgres.new_database()
        server = f"127.0.0.1:{free_port()}"
        process = fleet.start_server(server, ["--db", url])
        wait_for(lambda: fleet.client("machines", server=server).returncode == 0, 60, "the server to answer")
        _stamp(url, FUTURE)  # what a newer replica's migration leaves behind
        stamped = time.monotonic()
        process.wait(timeout=SCHEMA_CHECK_S + 30)
        took = time.monotonic() - stamped
        assert process.returncode == 2, fleet.log("server")
        assert took <= SCHEMA_CHECK_S + 15, took
        last = fleet.log("server").strip().splitlines()[-1]
        assert last == (f"perfctl server: the database was migrated by a newer perfctl (revision {FUTURE}; this one "
                        f"knows up to {', '.join(known_heads())}): upgrade this perfctl, or stop it"), last
        # and it does not come back on it
        result = _server(fleet, ["--db", url])
        assert result.returncode == 2 and "migrated by a newer perfctl" in result.stderr, result.stderr
    finally:
        postgres.stop()
