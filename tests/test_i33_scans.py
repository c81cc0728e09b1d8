"""Issue 33, parameter scans: hyperfine's `-P NAME MIN MAX [-D STEP]` and `-L NAME a,b,c` in `perfctl stat`
and `perfctl ab` (perfctl/cli/scan.py), one benchmark per value named and labelled NAME=value, the errors
of a bad scan before anything runs, compare pairing the values, and the reports' plot of the metric
against the parameter (perfctl/report/scanplot.py) in a real Chromium. Real programs (head, true), real
counters (task-clock, valgrind's instruction counts)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from browser import Browser, chromium
from conftest import one_line, perfctl

HEAD = ["head", "-c", "{n}", "/dev/zero"]


def samples(text: str) -> list[dict]:
    return [r for r in map(json.loads, text.splitlines()) if r.get("type") == "sample"]


def test_stat_P_measures_each_value_named_and_labelled_with_it():
    done = perfctl("stat", "-r", "2", "-e", "task-clock", "--json", "-P", "n", "1", "3", "--", *HEAD)
    assert done.returncode == 0, done.stderr
    runs = samples(done.stdout)
    assert [(s["benchmark"]["name"], s["labels"], s["benchmark"]["argv"]) for s in runs] == [
        (f"head n={n}", {"n": str(n)}, ["head", "-c", str(n), "/dev/zero"]) for n in (1, 1, 2, 2, 3, 3)]
    # a table per value, each titled by its command
    assert re.findall(r"perfctl stat: head -c (\d) /dev/zero", done.stderr) == ["1", "2", "3"]


def test_stat_P_with_a_decimal_step_and_L_lists_take_every_combination():
    done = perfctl("stat", "-r", "1", "-e", "task-clock", "--json", "-P", "x", "0", "1", "-D", "0.25",
                   "--name", "t", "--", "true", "{x}")
    assert done.returncode == 0, done.stderr
    assert [s["benchmark"]["argv"][1] for s in samples(done.stdout)] == ["0", "0.25", "0.5", "0.75", "1"]
    done = perfctl("stat", "-r", "1", "-e", "task-clock", "--json", "--label", "build=x", "-L", "a", "p,q",
                   "-L", "b", "2,1", "--", "true", "{a}-{b}", "{a}")
    assert done.returncode == 0, done.stderr
    runs = samples(done.stdout)
    assert [s["benchmark"]["name"] for s in runs] == ["true a=p b=2", "true a=p b=1", "true a=q b=2",
                                                      "true a=q b=1"]
    assert runs[1]["labels"] == {"build": "x", "a": "p", "b": "1"}
    assert runs[2]["benchmark"]["argv"] == ["true", "q-2", "q"]


@pytest.mark.parametrize("scan, says", [
    (["-P", "n", "5", "1"], "MIN 5 is above MAX 1"),
    (["-P", "n", "1", "5", "-D", "0"], "the step must be positive"),
    (["-D", "2"], "-D/--parameter-step-size needs -P/--parameter-scan"),
    (["-P", "n", "1", "2.5"], "MAX 2.5 is not an integer"),
    (["-P", "n", "1", "x"], "MAX is not a plain decimal number (like 3, -2 or 0.25; at most 12 digits either side "
                            "of the point): 'x'"),
    (["-P", "m", "1", "3"], "neither the command nor a hook uses {m}"),
    (["-P", "n", "1", "5000"], "gives 5000 benchmarks, at most 1000"),
    (["-L", "n", "1,2", "-L", "n", "3"], "parameter given twice"),
    (["-L", "n", ",".join(map(str, range(40))), "-L", "m", ",".join(map(str, range(40)))],
     "gives 1600 benchmarks, at most 1000"),
    (["-P", "n", "1", "2", "-L", "n", "3"], "exclude each other"),
    (["-L", "n!", "1"], "-L 'n!': the parameter's name: key must be"),
    (["-L", "n=x", "1"], "-L 'n=x': the parameter's name"),  # was labelled n: x=1
    (["-L", "n", "1,,2"], "-L n '1,,2': value 2 is empty"),
    (["-L", "n", ",,,"], "value 1 is empty"),
    (["-P", "n", "1e30", "1e30"], "MIN is not a plain decimal number"),  # was a decimal.InvalidOperation
    (["-P", "n", "1e999999999", "1e999999999", "-D", "1"], "MIN is not a plain decimal number"),
    (["-P", "n", "0", "1", "-D", "1e-999999999"], "-D STEP is not a plain decimal number"),  # decimal.Overflow
    (["-P", "n", "1e2", "1e2"], "MIN is not a plain decimal number"),
    (["-P", "n", "1_0", "1_0"], "MIN is not a plain decimal number"),
    (["-P", "n", "\u0661", "\u0661"], "MIN is not a plain decimal number"),  # Arabic-Indic 1
    (["-P", "n", "0", "1", "-D", "0.000000000001"], "gives 1000000000001 benchmarks, at most 1000"),
    (["-L", "n", "1", "--label", "n=2"], "n is a parameter of the scan"),
    (["-L", "n", "1,2", "--csv"], "--csv cannot tell a scan's values apart"),
    (["-L", "n", "1,2,1"], "-L n: value '1' given twice"),
])
def test_a_bad_scan_is_one_line_and_exit_2_before_anything_runs(tmp_path, scan, says):
    output = tmp_path / "samples.jsonl"
    command = [*HEAD, "{m}"] if "-L" in scan and "m" in scan else HEAD
    done = perfctl("stat", "-r", "1", "-e", "task-clock", "-o", str(output), *scan, "--", *command)
    line = one_line(done, "perfctl stat: ", code=2)
    assert says in line, line
    assert not output.exists()  # nothing ran, nothing was written


@pytest.mark.parametrize("form", ["json", "csv"])
def test_ab_with_a_scan_refuses_one_document_for_many_comparisons(form):
    # csv: a document per value, each with its header and no column for the value, is not one CSV document
    done = perfctl("ab", "--format", form, "-L", "n", "1,2", "--", *HEAD, ":::", *HEAD)
    assert f"--format {form} takes one comparison, not a scan" in one_line(done, "perfctl ab: ", code=2)


def _program(path, marker) -> str:
    """An executable script that leaves ``marker`` behind when it runs."""
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return str(path)


def test_every_points_program_is_checked_before_the_first_point_runs(tmp_path):
    """-L v a,b -- ./prog-{v} without prog-b: exit 2 naming the value before prog-a runs once, nothing
    written (stat's --html of the scan used to be lost midway)."""
    marker = tmp_path / "ran"
    _program(tmp_path / "prog-a", marker)
    output, html = tmp_path / "samples.jsonl", tmp_path / "scan.html"
    done = perfctl("stat", "-r", "1", "-e", "task-clock", "-o", str(output), "--html", str(html), "-L", "v", "a,b",
                   "--", str(tmp_path / "prog-{v}"))
    line = one_line(done, "perfctl stat: v=b: command not found: ", code=2)
    assert line.endswith("prog-b"), line
    assert not marker.exists() and not output.exists() and not html.exists()


@pytest.mark.parametrize("option, name", [("-o", "b.jsonl"), ("--html", "b.html")])
def test_an_output_a_later_value_names_is_refused_before_the_first_value_runs(tmp_path, option, name):
    """-o b.jsonl -L f a.txt,b.jsonl: f=b.jsonl's arguments name the output. Refused before f=a.txt runs (it
    used to write f=a.txt's samples into b.jsonl, then refuse it saying "nothing was done")."""
    marker = tmp_path / "ran"
    program = _program(tmp_path / "prog", marker)
    output = tmp_path / name
    output.write_text("")
    done = perfctl("stat", "-r", "1", "-e", "task-clock", option, str(output), "--force", "-L", "f",
                   f"{tmp_path / 'a.txt'},{output}", "--", program, "{f}")
    line = one_line(done, f"perfctl stat: f={output}: refusing {option} {output}: the benchmark's arguments name it",
                    code=2)
    assert line.endswith("nothing was done"), line
    assert not marker.exists() and output.read_text() == ""


def test_a_failing_hook_stops_the_scan(tmp_path):
    """hyperfine stops on a failing --setup: the later values would run the same hook and fail alike (it
    used to run the setup once per value, each "stopped after 0 measured runs")."""
    count = tmp_path / "count"
    for command in (["stat", "-r", "2"], ["ab", "--max-runs", "4"]):
        count.unlink(missing_ok=True)
        ab = [":::", "true"] if command[0] == "ab" else []
        done = perfctl(*command, "-e", "task-clock", "-L", "n", "1,2,3", "--setup", f"echo {{n}} >> {count}; exit 1",
                       "--", "true", "{n}", *ab)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert count.read_text() == "1\n", command
        assert f"perfctl {command[0]}: the scan stops at n=1 (a hook failed); 2 later values not run" in done.stderr


def test_the_hooks_get_the_value_and_may_be_the_only_words_using_it(tmp_path):
    """hyperfine replaces {NAME} in --prepare, --setup and --cleanup: each point's hooks run with its value,
    in their order; a NAME only a hook uses is a scan of the same command."""
    log = tmp_path / "hooks.log"
    done = perfctl("stat", "-r", "2", "-e", "task-clock", "--json", "-L", "n", "1,2",
                   "--setup", f"echo setup {{n}} >> {log}", "--prepare", f"echo prepare {{n}} >> {log}",
                   "--cleanup", f"echo cleanup {{n}} >> {log}", "--", "true")
    assert done.returncode == 0, done.stderr
    assert log.read_text().split("\n") == [
        "setup 1", "prepare 1", "prepare 1", "cleanup 1", "setup 2", "prepare 2", "prepare 2", "cleanup 2", ""]
    runs = samples(done.stdout)
    assert [(s["benchmark"]["name"], s["benchmark"]["argv"]) for s in runs] == [
        ("true n=1", ["true"]), ("true n=1", ["true"]), ("true n=2", ["true"]), ("true n=2", ["true"])]


def test_the_default_name_is_the_program_as_typed_so_the_points_are_one_scan(tmp_path):
    """-L cc a,b -- ./bench-{cc}: the points are named bench-{cc} cc=a and bench-{cc} cc=b, one base (the
    substituted names, bench-a and bench-b, were two scans of one value each: no plot in compare)."""
    from perfctl.report.scanplot import scans

    for cc in "ab":
        _program(tmp_path / f"bench-{cc}", tmp_path / "ran")
    done = perfctl("stat", "-r", "1", "-e", "task-clock", "--json", "-L", "cc", "a,b", "--",
                   str(tmp_path / "bench-{cc}"))
    assert done.returncode == 0, done.stderr
    names = [s["benchmark"]["name"] for s in samples(done.stdout)]
    assert names == ["bench-{cc} cc=a", "bench-{cc} cc=b"]
    assert scans(names) == {("bench-{cc}", "cc"): [("a", names[0]), ("b", names[1])]}


def test_ab_with_L_settles_each_value_as_its_own_pair_and_exits_on_the_worst(tmp_path):
    """valgrind's exact instruction counts: at n=1 both sides run the same command (equivalent at once);
    at n=400000 B copies 400,000 bytes more than A, a relevant slowdown: the scan exits 3."""
    output = tmp_path / "ab.jsonl"
    done = perfctl("ab", "--backend", "dbi", "--max-runs", "6", "--seed", "1", "-o", str(output), "-L", "n",
                   "1,400000", "--", "head", "-c", "1", "/dev/zero", ":::", *HEAD, timeout=600)
    assert done.returncode == 3, (done.stdout, done.stderr)
    verdicts = re.findall(r"^B (\w+)", done.stdout, re.M)
    assert verdicts[0] == "equivalent" and verdicts[1] == "slower", done.stdout
    runs = samples(output.read_text())
    assert {(s["benchmark"]["name"], s["labels"]["ab"], s["labels"]["n"]) for s in runs} == {
        ("head n=1", "A", "1"), ("head n=1", "B", "1"), ("head n=400000", "A", "400000"),
        ("head n=400000", "B", "400000")}


# -- the reports' plot ---------------------------------------------------------------------------------


def _plot_svg_facts(page) -> list[dict]:
    return page.evaluate("""Array.from(document.querySelectorAll('#scans ~ .plots svg, .plot.scan svg'))
        .map(function (s) { return {
            lines: Array.from(s.querySelectorAll('polyline.scan-line')).map(function (l) {
                return {side: l.dataset.side, points: l.points.numberOfItems}; }),
            ticks: Array.from(s.querySelectorAll('g.axis text.tick')).map(function (t) {
                return [t.textContent, parseFloat(t.getAttribute('x'))]; }),
            title: (s.querySelector('g.axis text.axis-title') || {}).textContent,
            outside: Array.from(s.querySelectorAll('text')).filter(function (t) {
                var b = t.getBBox(); return !t.hasAttribute('transform')  // rotated: its box is in its own turned frame
                    && (b.x < -1 || b.x + b.width > s.viewBox.baseVal.width + 1); })
                .map(function (t) { return t.textContent; })}; })""")


@pytest.mark.skipif(chromium() is None, reason="probe: no chromium on PATH (deploy/setup.sh installs it)")
def test_stat_and_compare_reports_plot_the_metric_against_the_parameter(tmp_path):
    files = {}
    for side in "AB":
        files[side] = tmp_path / f"{side}.jsonl"
        html = tmp_path / f"stat-{side}.html"
        done = perfctl("stat", "-q", "-r", "3", "-e", "task-clock", "-o", str(files[side]), "--html", str(html),
                       "-L", "n", "10,1000,100000", "--", *HEAD)
        assert done.returncode == 0, done.stderr
    compared = tmp_path / "compare.html"
    done = perfctl("compare", "-q", str(files["A"]), str(files["B"]), "--html", str(compared))
    assert done.returncode in (0, 3, 4), done.stderr
    document = json.loads(perfctl("compare", str(files["A"]), str(files["B"]), "--format", "json").stdout)
    # the values pair by name, each with its own
    assert {(r["benchmark"], r["n_a"], r["n_b"]) for r in document["benchmarks"]} >= {
        (f"head n={n}", 3, 3) for n in (10, 1000, 100000)}
    with Browser(width=900, height=900) as browser:
        stat_page = browser.open(str(tmp_path / "stat-A.html"))
        assert stat_page.events.errors == []
        plots = _plot_svg_facts(stat_page)
        compare_page = browser.open(str(compared))
        assert compare_page.events.errors == []
        compare_plots = _plot_svg_facts(compare_page)
    assert plots and all(len(p["lines"]) == 1 and p["lines"][0]["points"] == 3 for p in plots), plots
    assert compare_plots, compare_plots
    for plot in plots + compare_plots:
        assert [text for text, _ in plot["ticks"]] == ["10", "1000", "100000"], plot
        assert plot["title"] == "n"
        assert plot["outside"] == [], plot  # every label inside the plot
        # five decades: a log axis, the values evenly apart
        xs = [x for _, x in plot["ticks"]]
        assert abs((xs[1] - xs[0]) - (xs[2] - xs[1])) < 1, xs
    assert all(sorted(line["side"] for line in p["lines"]) == ["A", "B"] for p in compare_plots), compare_plots


def test_compare_plots_a_P_scan_in_numeric_order(tmp_path):
    """compare's rows come sorted by name (head n=1, head n=10, head n=11, ..., head n=2): the plot joins
    the points in numeric order, its ticks ascending, a line that never doubles back."""
    files = []
    for side in "AB":
        files.append(tmp_path / f"{side}.jsonl")
        done = perfctl("stat", "-q", "-r", "1", "-e", "task-clock", "-o", str(files[-1]), "-P", "n", "1", "12",
                       "--", *HEAD)
        assert done.returncode == 0, done.stderr
    page = tmp_path / "compare.html"
    done = perfctl("compare", "-q", *map(str, files), "--html", str(page))
    assert done.returncode in (0, 3, 4), done.stderr
    text = page.read_text()
    (plot,) = re.findall(r'<div class="plot scan">(.*?)</svg>', text, re.S)
    lines = re.findall(r'<polyline class="scan-line" data-side="(\w)"[^>]* points="([^"]*)"', plot)
    assert [side for side, _ in lines] == ["A", "B"]
    for _, points in lines:
        xs = [float(point.split(",")[0]) for point in points.split()]
        assert len(xs) == 12 and xs == sorted(xs) and len(set(xs)) == 12, xs
    ticks = [int(t) for t in re.findall(r'class="tick">(\d+)<', plot)]
    assert ticks == sorted(ticks) and ticks[0] == 1 and ticks[-1] == 12, ticks


@pytest.mark.skipif(shutil.which("sh") is None, reason="probe: no sh")
def test_the_stat_scan_report_says_each_values_shell_cost_and_failed_runs(tmp_path):
    """What the terminal prints under each value's table is in the scan's HTML too, by value: the shell's
    cost under --shell, the runs that failed (n=1's command exits 1)."""
    html = tmp_path / "scan.html"
    done = perfctl("stat", "-q", "-r", "2", "-e", "task-clock", "--shell", "--html", str(html), "-L", "n", "0,1",
                   "--", "head -c 1 /dev/zero >/dev/null; exit {n}")
    assert done.returncode == 1, done.stderr
    notes = re.search(r"<h2 id=notes>Notes</h2><ul>(.*?)</ul>", html.read_text(), re.S).group(1)
    items = re.findall(r"<li>(.*?)</li>", notes)
    for n in "01":
        assert any(item.startswith(f"n={n}: shell /bin/sh -c &#x27;&#x27;") for item in items), items
    assert any(item.startswith("n=0: medians less the shell&#x27;s:") for item in items), items
    # every run of n=1 failed: nothing to subtract, and said so rather than an empty list
    assert any(item.startswith("n=1: shell") and item.endswith("nothing subtracted, no run of the command was "
                                                                 "summarized") for item in items), items
    assert "n=1: 2 of 2 runs failed" in items and not any(i.startswith("n=0: 2 of") for i in items), items


def test_the_stat_scan_report_keeps_a_value_without_runs(tmp_path):
    """n=3's --setup fails: no runs, exit 1 (a failing hook ends the scan; n=3 is its last value); the report
    still lists n=3, with why, and plots the others."""
    html = tmp_path / "scan.html"
    done = perfctl("stat", "-q", "-r", "1", "-e", "task-clock", "--html", str(html), "-L", "n", "1,2,3",
                   "--setup", "test {n} != 3", "--", *HEAD)
    assert done.returncode == 1, done.stderr
    text = html.read_text()
    assert re.findall(r"<tr><td>(n=\d)</td>", text) == ["n=1", "n=2", "n=3"]
    assert "<li>n=3: no measured runs" in text
    assert re.search(r'<polyline class="scan-line"[^>]* points="\S+ \S+"', text)


def test_list_values_are_plotted_in_the_order_given_and_numbers_linearly():
    from perfctl.report.scanplot import ScanLine, plot, scans

    def ticks(svg: str) -> list[tuple[str, float]]:
        return [(t, float(x)) for x, t in re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle" '
                                                      r'class="tick">([^<]*)<', svg)]

    line = ScanLine("A", [3.0, 1.0, 2.0], [2.5, 0.5, 1.5], [3.5, 1.5, 2.5])
    listed = ticks(plot("mode", ["fast", "slow", "auto"], [line], "task-clock", "ns"))
    assert [t for t, _ in listed] == ["fast", "slow", "auto"]
    numbers = ticks(plot("n", ["1", "2", "4"], [line], "task-clock", "ns"))
    assert [t for t, _ in numbers] == ["1", "2", "4"]
    (_, x1), (_, x2), (_, x4) = numbers
    assert abs((x4 - x2) - 2 * (x2 - x1)) < 1  # two decades or less: a linear axis
    # a scan is two values or more of one parameter after one base name; other names are not scans
    assert scans(["sort n=1", "sort n=2", "sort", "head n=1", "a=b", "x m=1 n=2", "x m=1 n=3"]) == {
        ("sort", "n"): [("1", "sort n=1"), ("2", "sort n=2")], ("x m=1", "n"): [("2", "x m=1 n=2"),
                                                                             ("3", "x m=1 n=3")]}


def test_without_a_scan_the_benchmark_and_its_labels_are_as_before():
    done = perfctl("stat", "-r", "1", "-e", "task-clock", "--json", "--name", "plain", "--", "true")
    assert done.returncode == 0, done.stderr
    (run,) = samples(done.stdout)
    assert run["benchmark"]["name"] == "plain" and "labels" not in run
