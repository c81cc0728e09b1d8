"""Issue 32, bounded reads of the client (docs/operations.md "Bounded answers"): `perfctl changes` lists the
newest --limit changes and counts the rest (the CI gate -q still sees their open regressions), and `perfctl
report --history MACHINE` lists the fleet's newest --limit open changes and says how many more there are. A
real server over SQLite whose history tables are filled as bench/history_server.py fills them (30 series x
1,000 jobs, a change every ~200 jobs: no runs, which a listing does not read)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fleet import start_sqlite_server, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


@pytest.fixture()
def server(fleet):
    from history_server import fill_history

    from perfctl.server.storage import Storage, database_url

    storage = Storage(database_url(str(fleet.dir / "data"), None))
    try:
        made = fill_history(storage, series=30, jobs=1000)
    finally:
        storage.close()
    assert made > 20, made
    address = start_sqlite_server(fleet)
    wait_for(lambda: fleet.client("changes", "--limit", "1", server=address).returncode == 0, 60,
             "the server to answer")
    return address


def every_change(fleet, server) -> list[dict]:
    result = fleet.client("changes", "--format", "json", "--limit", "100000", server=server)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return json.loads(result.stdout)


def test_changes_lists_the_newest_limit_and_counts_the_rest(fleet, server):
    rows = every_change(fleet, server)
    listed = fleet.client("changes", "--limit", "5", "--width", "200", server=server)
    assert listed.returncode == 0, listed.stderr
    flat = " ".join(listed.stdout.split())
    assert f"{len(rows):,} changes in all" in flat, flat
    assert f"The newest 5 listed; {len(rows) - 5:,} more (--limit to see them)." in flat, flat
    assert sum(row["id"] in listed.stdout for row in rows) == 5  # the newest 5, each once
    assert all(row["id"] in listed.stdout for row in rows[:5])
    default = fleet.client("changes", "--format", "json", server=server)  # --limit 100 by default
    assert len(json.loads(default.stdout)) == min(100, len(rows)), default.stderr
    assert len(rows) > 100, len(rows)
    assert default.stderr.strip() == f"perfctl changes: {len(rows) - 100:,} more; --limit to see them"
    # the CI gate sees an open regression that is not among those listed
    new = [row for row in rows if row["state"] == "new"]
    regressions = [row for row in new if row["regression"]]
    first = next(i for i, row in enumerate(new) if row["regression"])
    assert first >= 1, new[:3]  # the seeded history's newest new change is no regression: it is left out below
    gate = fleet.client("changes", "--state", "new", "-q", "--limit", str(first), server=server)
    assert gate.returncode == 3, (gate.stdout, gate.stderr)
    assert f"{len(regressions)} open regression" in " ".join(gate.stdout.split()), gate.stdout


def test_the_history_page_lists_the_newest_open_changes(fleet, server, tmp_path):
    new = [row for row in every_change(fleet, server) if row["state"] == "new"]
    assert len(new) > 2, len(new)
    page = tmp_path / "history.html"
    made = fleet.client("report", "--history", "box-0000", "--benchmark", "bench-0", "--limit", "2", "-o", str(page),
                        server=server)
    assert made.returncode == 0, made.stderr
    html = page.read_text()
    assert f"The fleet’s open changes (2 of {len(new):,})" in html, html[:3000]
    assert f"The newest 2 listed; {len(new) - 2:,} more (--limit to see them)." in html, html[:3000]
    listed = html.split('<table id="open-changes">')[1].split("</table>")[0]
    assert listed.count("<tr>") == 2 + 1 and new[0]["id"] in listed and new[2]["id"] not in listed, listed
