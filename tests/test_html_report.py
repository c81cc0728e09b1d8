"""The HTML reports, opened in a real headless Chromium (tests/browser.py): no console error, no network
request, plots drawn, and the numbers on the page equal to the JSON output's. Samples are real: `perfctl
stat` runs the example programs with the real software counters of this machine."""

from __future__ import annotations

import json
import math
import os
import uuid
from pathlib import Path

import pytest
from browser import Browser, chromium, measured_builds
from conftest import needs_root, perfctl

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "examples" / "bin"

pytestmark = pytest.mark.skipif(chromium() is None, reason="probe: no chromium on PATH (deploy/setup.sh installs it)")

# A is matmul built -O0, B -O2; sort and pagetouch are the same program on both sides
SIDES = {"A": [("matmul", ["matmul-O0", "120"]), ("sort", ["sort", "20000"]), ("pagetouch", ["pagetouch", "500"])],
         "B": [("matmul", ["matmul", "120"]), ("sort", ["sort", "20000"]), ("pagetouch", ["pagetouch", "500"])]}


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Path]:
    return measured_builds(tmp_path_factory.mktemp("report"), SIDES, warmup=2)


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


def screenshot_dir(tmp_path: Path) -> Path:
    """Where a person finds the screenshots: $PERFCTL_SCREENSHOTS when set, else the test's directory."""
    directory = Path(os.environ.get("PERFCTL_SCREENSHOTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def assert_clean(page) -> None:
    assert page.events.errors == [], page.events.errors
    assert page.events.network() == [], page.events.network()


def drawn_plots(page) -> list[dict]:
    """Each SVG's size on the page and how many shapes it holds."""
    return page.evaluate("""Array.from(document.querySelectorAll('svg')).map(function (s) {
        var box = s.getBoundingClientRect();
        return {width: box.width, height: box.height, label: s.getAttribute('aria-label'),
                shapes: s.querySelectorAll('path, line, rect, circle').length};
    })""")


def table_values(page, selector: str, key: str) -> list[dict]:
    return page.evaluate(f"""Array.from(document.querySelectorAll('{selector} tbody tr')).map(function (row) {{
        var out = {{key: row.dataset.{key}, metric: row.dataset.metric, text: {{}}, value: {{}}}};
        row.querySelectorAll('td[data-field]').forEach(function (cell) {{
            out.value[cell.dataset.field] = cell.dataset.value;
            out.text[cell.dataset.field] = cell.textContent;
        }});
        return out;
    }})""")


def test_the_comparison_report_in_a_browser_shows_what_the_json_says(samples, browser, tmp_path):
    from perfctl import units

    out = tmp_path / "report.html"
    made = perfctl("report", str(samples["A"]), str(samples["B"]), "--metric", "task-clock", "-o", str(out))
    compared = perfctl("compare", str(samples["A"]), str(samples["B"]), "--metric", "task-clock", "--format",
                       "json")
    # B is faster on matmul; sort and pagetouch are the same program, and noise may still show a difference
    assert made.returncode == compared.returncode and made.returncode in (0, 3), (made.stderr, compared.stderr)
    assert str(out) in made.stderr and out.stat().st_size > 0
    document = json.loads(compared.stdout)
    page = browser.open(str(out))
    assert_clean(page)
    plots = drawn_plots(page)
    # the forest plot, then per benchmark a strip, an ECDF and the runs in order
    assert len(plots) == 1 + 3 * len(document["benchmarks"])
    assert all(p["width"] > 100 and p["height"] > 50 and p["shapes"] > 3 for p in plots), plots
    rows = table_values(page, "#verdicts", "benchmark")
    assert [(r["key"], r["metric"]) for r in rows] == [(b["benchmark"], b["metric"]) for b in document["benchmarks"]]
    for row, expected in zip(rows, document["benchmarks"]):
        for field in ("n_a", "n_b", "median_a", "median_b", "ratio_a_over_b", "ratio_low", "ratio_high"):
            if expected[field] is None:
                assert row["value"][field] == "", field
            else:
                assert math.isclose(float(row["value"][field]), expected[field], rel_tol=0, abs_tol=0), field
        assert row["value"]["verdict"] == expected["verdict"]
        assert row["value"]["finding"] == row["text"]["finding"] == expected["finding"]  # the direction in words
        unit = document["units"][expected["metric"]]
        assert row["text"]["median_a"] == units.quantity(expected["median_a"], unit)
        assert row["text"]["ratio_a_over_b"] == units.ratio(expected["ratio_a_over_b"])
    matmul = next(b for b in document["benchmarks"] if b["benchmark"] == "matmul")
    assert matmul["verdict"] == "relevant difference" and matmul["ratio_a_over_b"] > 1.5
    # the machines: the same one measured both sides, with its latest audit as `perfctl stat` recorded it
    assert page.evaluate("document.querySelector('#machines + p').textContent") == "the two inventories are the same"
    machine = json.loads(samples["A"].read_text().splitlines()[0])
    items = dict(page.evaluate("Array.from(document.querySelectorAll('#same-inventory tr')).map(function (r) {"
                               " return [r.cells[0].textContent, r.cells[1].textContent]; })"))
    assert items["audit.verdict"] == (machine["audit"]["verdict"] or "-")
    assert items["kernel.release"] == machine["kernel"]["release"] and items["hostname"] == machine["hostname"]
    # every counter both sides recorded, beside time: page faults and interrupts are real software counts
    counters = page.evaluate("Array.from(document.querySelectorAll('#b0 table')[1].querySelectorAll('tbody tr'))"
                             ".map(function (r) { return r.cells[0].textContent; })")
    assert {"page-faults", "wall-time", "task-clock", "timer-interrupts"} <= set(counters)
    page.screenshot(str(screenshot_dir(tmp_path) / "compare-report.png"))
    assert (screenshot_dir(tmp_path) / "compare-report.png").stat().st_size > 10_000


def test_compare_and_stat_write_html_beside_their_usual_output(samples, browser, tmp_path):
    out = tmp_path / "compare.html"
    done = perfctl("compare", str(samples["A"]), str(samples["B"]), "--html", str(out))
    assert done.returncode in (0, 3) and "A/B [98.33%]" in done.stdout  # the table still printed
    page = browser.open(str(out))
    assert_clean(page)
    assert page.evaluate("document.querySelectorAll('#verdicts tbody tr').length") == 3

    stat_html, stat_jsonl = tmp_path / "stat.html", tmp_path / "stat.jsonl"
    done = perfctl("stat", "-r", "6", "--warmup", "1", "-e", "page-faults,task-clock", "--html", str(stat_html),
                   "-o", str(stat_jsonl), "--", str(BIN / "pagetouch"), "300")
    assert done.returncode == 0, done.stderr
    page = browser.open(str(stat_html))
    assert_clean(page)
    records = [json.loads(line) for line in stat_jsonl.read_text().splitlines()[1:]]
    measured = [r for r in records if not r["warmup"]]
    faults = sorted(next(x["value"] for x in r["readings"] if x["event"] == "page-faults") for r in measured)
    rows = {r["key"]: r for r in table_values(page, "#events", "event")}
    assert float(rows["page-faults"]["value"]["median"]) == (faults[2] + faults[3]) / 2
    assert int(rows["page-faults"]["value"]["n"]) == 6
    assert faults[0] > 300  # pagetouch touches 300 pages: each one a real fault
    assert all(p["shapes"] > 3 for p in drawn_plots(page))
    page.screenshot(str(screenshot_dir(tmp_path) / "stat-report.png"))


def test_hostile_names_are_text_on_the_page(samples, browser, tmp_path):
    hostile = '</svg><img src="http://192.0.2.1/x"><script>console.error("owned")</script>\x1b[31m'
    files = []
    for side in ("A", "B"):
        records = [json.loads(line) for line in samples[side].read_text().splitlines()]
        renamed = [records[0]] + [{**r, "benchmark": {**r["benchmark"], "name": hostile}} for r in records
                                  if r["type"] == "sample" and r["benchmark"]["name"] == "sort"]
        files.append(tmp_path / f"{side}.jsonl")
        files[-1].write_text("".join(json.dumps(r) + "\n" for r in renamed))
    out = tmp_path / "hostile.html"
    done = perfctl("report", str(files[0]), str(files[1]), "-o", str(out))
    assert done.returncode in (0, 3, 4), done.stderr  # real runs of one program: any verdict, even disturbed
    page = browser.open(str(out))
    assert_clean(page)
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 0  # a table of 1 row has no filter
    shown = page.evaluate("document.querySelector('#verdicts tbody td').textContent")
    assert "<script>" in shown and "\\x1b" in shown


def test_a_thousand_benchmarks_make_a_page_that_opens_closed(samples, browser, tmp_path):
    """1,000 benchmarks of 20 runs each side (the real runs of one benchmark, under 1,000 names): the page
    stays one file of a stated size (docs/report.md), its sections start closed, all rows are there."""
    records = [json.loads(line) for line in samples["A"].read_text().splitlines()]
    machine = records[0]
    runs = [r for r in records if r["type"] == "sample" and r["benchmark"]["name"] == "pagetouch"]
    for side in ("A", "B"):
        with open(tmp_path / f"{side}.jsonl", "w") as f:
            f.write(json.dumps(machine) + "\n")
            for i in range(1000):
                for k in range(20):
                    run = runs[k % len(runs)]
                    f.write(json.dumps({**run, "uuid": str(uuid.uuid4()), "run_index": k, "warmup": False,
                                        "benchmark": {**run["benchmark"], "name": f"bench-{i:04d}"}}) + "\n")
    out = tmp_path / "many.html"
    done = perfctl("report", str(tmp_path / "A.jsonl"), str(tmp_path / "B.jsonl"), "--metric", "page-faults",
                   "-o", str(out), timeout=600)
    assert done.returncode in (0, 3, 4), done.stderr
    size = out.stat().st_size
    assert size < 5_000_000, size  # 8.2 MB before the page budget bounded the sections (docs/report.md)
    page = browser.open(str(out))
    assert_clean(page)
    assert page.evaluate("document.querySelectorAll('#verdicts tbody tr').length") == 1000
    assert page.evaluate("document.querySelectorAll('details[open]').length") == 0
    print(f"1,000 benchmarks x 20 runs per side: {size / 1e6:.1f} MB")


def test_an_unwritable_report_is_one_line_and_exit_2(samples, tmp_path):
    done = perfctl("report", str(samples["A"]), str(samples["B"]), "-o", str(tmp_path / "missing" / "r.html"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "r.html" in done.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "missing"] or not (tmp_path / "missing").exists()


def test_a_confidence_sequence_has_its_plot():
    """Room for `perfctl ab` (a later issue): a sequence given to the page is drawn over rounds."""
    from perfctl.report import svg

    drawn = svg.sequence([1, 2, 3, 4], [1.2, 1.1, 1.05, 1.04], [0.8, 0.95, 1.0, 1.01], [1.6, 1.3, 1.1, 1.07], 0.05)
    assert drawn.count("<path") >= 2 and 'aria-label="confidence sequence' in drawn



@needs_root  # agents run benchmarks as nobody
def test_reports_of_machines_and_of_the_fleet_from_a_real_server(fleet, browser, tmp_path):
    """Two agents run one job through a real server (SQLite); `perfctl report box-a box-b` fetches their
    stored runs and inventories, and its numbers equal the server's own compare; `perfctl report
    --machines` draws the audits the server stored (sent here by box-a and box-b's agent identities)."""
    import grpc
    from test_fleet import _run_job, _start

    from perfctl.v1 import fleet_pb2 as pb
    from perfctl.v1 import fleet_pb2_grpc as rpc

    server = _start(fleet, ["--data-dir", str(fleet.dir / "data")])
    jobs = _run_job(fleet, server, ["box-a", "box-b"], "-r", "6", "--warmup", "1", "-e", "page-faults,task-clock",
                    "--", "/bin/true", ":::", "/bin/sleep", "0.001")
    assert [j["state"] for j in jobs] == ["done", "done"]
    out = tmp_path / "machines.html"
    made = fleet.client("report", "box-a", "box-b", "--metric", "page-faults", "-o", str(out), server=server)
    served = fleet.client("compare", "box-a", "box-b", "--metric", "page-faults", "--format", "json", server=server)
    assert made.returncode == served.returncode, (made.stderr, served.stdout)
    document = json.loads(served.stdout)
    page = browser.open(str(out))
    assert_clean(page)
    rows = table_values(page, "#verdicts", "benchmark")
    assert sorted(r["key"] for r in rows) == sorted(b["benchmark"] for b in document["benchmarks"])
    for row in rows:
        expected = next(b for b in document["benchmarks"] if b["benchmark"] == row["key"])
        assert float(row["value"]["median_a"]) == expected["median_a"]
        assert row["value"]["verdict"] == expected["verdict"]
    # the server's record of each machine, side by side: both never audited
    assert page.evaluate("Array.from(document.querySelectorAll('#same-inventory td')).some(function (c) {"
                         " return c.textContent === 'never audited'; })")

    channel = grpc.insecure_channel(server)
    agent = rpc.AgentServiceStub(channel)
    base = 1_790_000_000 * 10**9
    sent = {"box-a": [("trusted", "6.1.0-1"), ("degraded", "6.1.0-2")], "box-b": [("no-PMU", "6.1.0-1")]}
    for machine, audits in sent.items():
        md = (("authorization", f"Bearer {open(fleet.agent_token(machine)).read()}"),)
        for k, (verdict, kernel) in enumerate(audits):
            audit_id = str(uuid.uuid4())
            report = {"audit_id": audit_id, "verdict": verdict, "time_ns": base + k * 86400 * 10**9,
                      "kernel": kernel, "microcode": "0x1", "kernels": [], "fit": None, "reasons": []}
            agent.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=json.dumps(report)), metadata=md)
    fleet_html = tmp_path / "fleet.html"
    done = fleet.client("report", "--machines", "-o", str(fleet_html), server=server)
    assert done.returncode == 0, done.stderr
    page = browser.open(str(fleet_html))
    assert_clean(page)
    drift = page.evaluate("Array.from(document.querySelectorAll('#drift + .wide td')).map(function (c) {"
                          " return c.textContent; })")
    assert "box-a" in drift and any("verdict trusted -> degraded" in c for c in drift)
    assert any("kernel 6.1.0-1 -> 6.1.0-2" in c for c in drift)
    assert all(p["shapes"] > 3 for p in drawn_plots(page))
    page.screenshot(str(screenshot_dir(tmp_path) / "fleet-report.png"))


def _hyperfine(path: Path, commands: dict) -> str:
    path.write_text(json.dumps({"results": [{"command": c, "times": t, "exit_codes": [0] * len(t)}
                                            for c, t in commands.items()]}))
    return str(path)


def test_the_report_never_replaces_what_is_not_a_report_file(tmp_path):
    """A device or pipe is refused (as root, `-o /dev/null` would otherwise replace /dev/null), a link is
    followed, an existing file keeps its mode, and an input is never overwritten: one line, exit 2."""
    a = _hyperfine(tmp_path / "a.json", {"x": [0.010, 0.011, 0.012, 0.010, 0.011, 0.012, 0.011]})
    b = _hyperfine(tmp_path / "b.json", {"x": [0.020, 0.021, 0.022, 0.020, 0.021, 0.022, 0.021]})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target, why in ((fifo, "not a regular file"), (Path(a), "one of the inputs"), (tmp_path, "a directory")):
        done = perfctl("report", a, b, "-o", str(target))
        assert done.returncode == 2 and why in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert json.loads(Path(a).read_text())["results"][0]["command"] == "x"  # the input as it was
    private = tmp_path / "private.html"
    private.write_text("")  # empty: a file that is not perfctl's report is refused (test_i28_final_outputs.py)
    os.chmod(private, 0o600)
    link = tmp_path / "link.html"
    link.symlink_to(private)
    assert perfctl("report", a, b, "-o", str(link)).returncode == 3  # B is slower
    assert link.is_symlink() and private.read_text().startswith("<!DOCTYPE html>")
    assert private.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".perfctl-")] == []


def test_values_near_the_float_limit_draw_without_nan(browser, tmp_path):
    """Times of 1e300..1.7e308 ns: the statistics overflow where they must (then '-', as JSON's null), and
    no coordinate of any plot is nan or inf (a browser rejects the attribute with a console error)."""
    huge = [1e300, 1e305, 1.7e308, 1e306, 1e307, 5e307, 1e304]
    a = _hyperfine(tmp_path / "a.json", {"huge": [v / 1e9 for v in huge]})
    b = _hyperfine(tmp_path / "b.json", {"huge": [v / 2e9 for v in huge]})
    out = tmp_path / "huge.html"
    done = perfctl("report", a, b, "-o", str(out))
    assert done.returncode in (0, 3, 4) and "Traceback" not in done.stderr, done.stderr
    text = out.read_text()
    assert not any(bad in text for bad in ('"nan', "nan ", '"inf', ">inf<", "Mnan")), text[:2000]
    page = browser.open(str(out))
    assert_clean(page)


def test_benchmark_selects_from_files_too(tmp_path):
    a = _hyperfine(tmp_path / "a.json", {"x": [0.01] * 7, "y": [0.02] * 7})
    b = _hyperfine(tmp_path / "b.json", {"x": [0.01] * 7, "y": [0.02] * 7})
    done = perfctl("compare", a, b, "--benchmark", "y", "--format", "json")
    assert done.returncode == 0 and [r["benchmark"] for r in json.loads(done.stdout)["benchmarks"]] == ["y"]
    done = perfctl("compare", a, b, "--benchmark", "nosuch")
    assert done.returncode == 2 and "no benchmark named 'nosuch' in A or B" in done.stderr


def test_a_machine_line_longer_than_the_detection_window_is_still_perfctl(samples, tmp_path):
    """A machine line of more than 4 KiB (a big inventory) does not defeat format detection."""
    lines = samples["A"].read_text().splitlines()
    machine = {**json.loads(lines[0]), "notes": "x" * 6000}
    padded = tmp_path / "padded.jsonl"
    padded.write_text("\n".join([json.dumps(machine)] + lines[1:]) + "\n")
    done = perfctl("compare", str(padded), str(samples["B"]), "--format", "json")
    assert done.returncode in (0, 3, 4), done.stderr  # real runs of one program: any verdict, even disturbed
    assert json.loads(done.stdout)["format"] == "perfctl"
