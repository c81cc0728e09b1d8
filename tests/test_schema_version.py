"""The running replica's schema check (server/schema_version.py, every SCHEMA_CHECK_S) logs nothing. It read the
revision through alembic's MigrationContext, which logs "Context impl ..." and "Will assume ... DDL" at INFO each
time: two lines per replica every 10 s. A real server, run for 25 s."""

import time

from fleet import free_port, wait_for

from perfctl.server.schema_version import SCHEMA_CHECK_S

ALEMBIC_LINES = ("Context impl", "Will assume")


def test_a_serving_replica_logs_no_alembic_line_after_its_start(fleet, tmp_path):
    server = f"127.0.0.1:{free_port()}"
    fleet.start_server(server, ["--data-dir", str(tmp_path / "data")])
    wait_for(lambda: "listening on" in fleet.log("server"), 60, "the server to listen")
    time.sleep(25)
    assert 25 > 2 * SCHEMA_CHECK_S  # the check ran at least twice meanwhile
    after_start = fleet.log("server").split("listening on", 1)[1]
    assert fleet.client("machines", server=server).returncode == 0
    flood = [line for line in after_start.splitlines() if any(word in line for word in ALEMBIC_LINES)]
    assert flood == [], flood
