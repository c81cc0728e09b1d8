"""Issue 28, section 5 (edges and crashes): a ratio on the band's edge decided exactly, printed intervals
that read as their verdict, --family sparc on empty families and p-values summed past 1, machine lines
nested deep, and ratios beyond what a float holds. Real files from `perfctl stat`, edited as a user would."""

import io
import json
import math
import re
import time
import uuid
from fractions import Fraction

import numpy as np
import pytest
from conftest import perfctl
from rich.console import Console

from perfctl import units
from perfctl.analysis.ab import Settlement
from perfctl.analysis.compare import Parameters, compare
from perfctl.analysis.rank_tests import _center_critical_rank, _shift_critical_rank, mann_whitney, wilcoxon_signed_rank
from perfctl.analysis.ratio_edges import equivalence_tests
from perfctl.analysis.sparc import ratio_interval, sparc_tests
from perfctl.analysis.verdicts import Verdict, band, beyond, read_off
from perfctl.pairing import CompareContext
from perfctl.report import VERBOSE, svg
from perfctl.report.ab import _sequence, live_line
from perfctl.report.compare import CompareReport


def _write(path, stat_lines, faults, machine_text=None, first_sample_before_machine=False):
    """A perfctl JSON Lines file of len(faults) runs whose page-faults are ``faults`` (exact counts)."""
    machine, sample = stat_lines
    samples = []
    for index, value in enumerate(faults):
        s = json.loads(json.dumps(sample))
        s["uuid"], s["run_index"] = str(uuid.uuid4()), index
        for reading in s["readings"]:
            if reading["event"] == "page-faults":
                reading["value"] = value
        samples.append(json.dumps(s))
    machine_line = machine_text or json.dumps(machine)
    lines = samples[:1] + [machine_line] + samples[1:] if first_sample_before_machine else [machine_line, *samples]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _row(stdout):
    """The benchmark's row of the verdict table (printed with -v --width 250: its ±margin column last)."""
    return next(line for line in stdout.splitlines() if line.startswith("true "))


WIDE = ("-v", "--width", "250")  # the verdict table whole, with its ±margin column


# --- a ratio on the band's edge ----------------------------------------------------------------------------

@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("a, margin", [(95, "0.05"), (105, "0.05"), (90, "0.1"), (75, "0.25"), (50, "0.5")])
def test_constant_counts_on_the_band_edge_are_inside(tmp_path, stat_lines, a, margin, paired):
    """95 page faults against 100 is 19/20, the closed band's lower edge: trivial difference, inside, exit 0
    (it printed 'relevant difference beyond' and exited 3); 105/100 and other margins' edges alike."""
    file_a = _write(tmp_path / "a.jsonl", stat_lines, [a] * 30)
    file_b = _write(tmp_path / "b.jsonl", stat_lines, [100] * 30)
    args = ["compare", file_a, file_b, "--metric", "page-faults", "--margin", margin] + (["--paired"] if paired else [])
    result = perfctl(*args, *WIDE)
    row = _row(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    way = "slower" if a < 100 else "faster"
    assert f"B {way}, within ±{float(margin) * 100:g}%" in row and row.rstrip().endswith("inside"), row
    edge = f"{a / 100:.3f}"
    assert f"[{edge}, {edge}]" in row, row
    assert perfctl(*args, "--fail-on", "beyond").returncode == 0


def _exact_reading(x, y, level, margin, paired):
    """(read_off, beyond) of the exact interval: the k-th smallest and largest of the exact ratios x_i/y_j
    (paired: of the Walsh ratios sqrt(r_i r_j), compared through their squares), in rationals."""
    if paired:
        r = [Fraction(a) / Fraction(b) for a, b in zip(x, y)]
        values = sorted(r[i] * r[j] for i in range(len(r)) for j in range(i, len(r)))
        k = _center_critical_rank(len(x), (1 - level) / 2)

        def side(v, t):
            return (v > t * t) - (v < t * t)
    else:
        values = sorted(Fraction(a) / Fraction(b) for a in x for b in y)
        k = _shift_critical_rank(len(x), len(y), (1 - level) / 2)

        def side(v, t):
            return (v > t) - (v < t)
    if k < 1:
        return None
    low, high = values[k - 1], values[len(values) - k]
    lower_edge, upper_edge = band(margin)
    difference = side(high, 1) < 0 or side(low, 1) > 0
    equivalence = side(low, lower_edge) >= 0 and side(high, upper_edge) <= 0
    shown = "slower" if side(high, lower_edge) < 0 else "faster" if side(low, upper_edge) > 0 else None
    return (difference, equivalence), shown


def _sizes(rng, most):
    """Paired or not, and the two sides' sizes (equal when paired), each from 2 to most - 1."""
    paired = bool(rng.integers(0, 2))
    n = int(rng.integers(2, most))
    return paired, n, (n if paired else int(rng.integers(2, most)))


def _on_edge(y, edge, n, paired, rng):
    """Counts x = round(edge * y): on the band's edge as closely as integers can be (y's own runs when
    paired, n drawn from them otherwise)."""
    return np.array([round(v * edge) for v in (y if paired else rng.choice(y, n))], dtype=float)


def test_interval_ends_read_as_the_exact_interval():
    """Counts built on 1 and on the edges (x = round(edge * y), some moved by one count), at several
    margins, levels and magnitudes up to 10^15: the verdict read off the computed interval is the one read
    off the exact rational interval, every time (186 of 2132 differed before)."""
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(1500):
        margin = float(rng.choice([0.05, 0.1, 0.5, 0.25, 0.01, 0.2]))
        paired, n, m = _sizes(rng, 12)
        base = int(rng.choice([20, 100, 1000, 10**9, 10**15]))
        edge = float(rng.choice([1 - margin, 1, 1 + margin]))
        y = (rng.choice([base, base * 2, base * 4], m) if rng.random() < .5 else np.full(m, base)).astype(float)
        x = _on_edge(y, edge, n, paired, rng)
        if rng.random() < 0.5:
            x = x + rng.integers(-1, 2, n)
        level = float(rng.choice([0.95, 0.99, 0.8]))
        expected = _exact_reading(list(x), list(y), level, margin, paired)
        if expected is None:
            continue
        low, high = ratio_interval(x, y, level, paired=paired, margin=margin)
        assert (read_off(low, high, margin), beyond(low, high, margin)) == expected, (x, y, margin, level, paired)
        tests = sparc_tests(x, y, margin, paired=paired, confidence=level)
        assert (tests.ratio_low, tests.ratio_high) == (low, high)
        checked += 1
    assert checked > 1000


def test_exact_ends_stay_fast_where_every_ratio_is_on_a_threshold():
    """The exact placement counts in O(n log n): 20,000 paired runs of A = B (every ratio exactly 1, all
    runs distinct) and 20,000 a side of 95 against 100 (every ratio on the edge) take well under a second
    each here (a first version compared every pair of distinct runs: 62 s at 1,000 runs)."""
    values = np.round(np.random.default_rng(1).lognormal(np.log(1e6), 0.1, 20000))
    started = time.perf_counter()
    assert ratio_interval(values, values.copy(), 0.95, paired=True, margin=0.05) == (1.0, 1.0)
    edge = ratio_interval(np.full(20000, 95.0), np.full(20000, 100.0), 0.95, margin=0.05)
    assert read_off(*edge, 0.05) == (True, True) and beyond(*edge, 0.05) is None
    assert time.perf_counter() - started < 20


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("a, margin", [(95, "0.05"), (105, "0.05"), (97, "0.03"), (90, "0.1")])
def test_sparc_family_on_the_band_edge_agrees_with_its_margin_column(tmp_path, stat_lines, a, margin, paired):
    """--family sparc, constant 95 against 100 at margin 0.05: the TOST tied every run with the edge (p = 1)
    and printed 'relevant difference inside', exit 3, beside [0.950, 0.950]. The band is closed: trivial
    difference, inside, exit 0, as the default family says."""
    file_a = _write(tmp_path / "a.jsonl", stat_lines, [a] * 6)
    file_b = _write(tmp_path / "b.jsonl", stat_lines, [100] * 6)
    result = perfctl("compare", file_a, file_b, "--metric", "page-faults", "--margin", margin, "--family", "sparc",
                     *(["--paired"] if paired else []), *WIDE)
    row = _row(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f", within ±{float(margin) * 100:g}%" in row and row.rstrip().endswith("inside"), row


def _closed_band_statistics(x, y, margin, paired):
    """The TOST statistics of the closed band in rationals: unpaired, U = #{x_i / y_j > 1 + margin} and
    #{x_i / y_j >= 1 - margin}; paired, W+ of r_i - c, a ratio on the edge the smallest difference, toward
    the band (the limit of c from outside)."""
    lower_edge, upper_edge = band(margin)
    if not paired:
        ratios = [Fraction(a) / Fraction(b) for a in x for b in y]
        return float(sum(r > upper_edge for r in ratios)), float(sum(r >= lower_edge for r in ratios))
    ratios = [Fraction(a) / Fraction(b) for a, b in zip(x, y)]

    def w_plus(edge, toward):
        keyed = [(abs(r - edge), (r - edge) or toward) for r in ratios]
        magnitudes = sorted(k for k, _ in keyed)
        rank = {v: (magnitudes.index(v) + 1 + len(magnitudes) - magnitudes[::-1].index(v)) / 2 for v in magnitudes}
        return float(sum(rank[k] for k, sign in keyed if sign > 0))
    return w_plus(upper_edge, -1), w_plus(lower_edge, 1)


def test_sparc_equivalence_tests_count_the_closed_band_exactly():
    """Counts on and one count off the edges (x = round(edge * y)), margins whose decimal is not a binary
    float: the TOST statistics are the closed band's, counted in rationals; and continuous data give the
    p-values of the float-scaled tests (c y, r_i - c) they had."""
    rng = np.random.default_rng(12)
    for _ in range(300):
        margin = float(rng.choice([0.05, 0.03, 0.1, 0.01, 0.2, 0.001]))
        paired, n, m = _sizes(rng, 10)
        base = int(rng.choice([100, 1000, 952, 10**9, 10**15]))
        edge = float(rng.choice([1 - margin, 1 + margin]))
        y = rng.choice([base, base * 2, base * 3], m).astype(float)
        x = _on_edge(y, edge, n, paired, rng)
        x = x + rng.integers(-1, 2, n) * (rng.random(n) < 0.3)
        tests_x, tests_y = (x, y) if paired else (np.sort(x), np.sort(y))
        upper, lower = equivalence_tests(tests_x, tests_y, margin, paired)
        assert (upper.statistic, lower.statistic) == _closed_band_statistics(x, y, margin, paired), (x, y, margin)
    for paired in (False, True):
        x, y = rng.lognormal(0, 0.05, 20), rng.lognormal(0, 0.05, 20)
        tests = sparc_tests(x, y, 0.05, paired=paired)
        if paired:
            before = (wilcoxon_signed_rank(x / y - 1.05, "less"), wilcoxon_signed_rank(x / y - 0.95, "greater"))
        else:
            xs, ys = np.sort(x), np.sort(y)
            before = (mann_whitney(xs, 1.05 * ys, "less"), mann_whitney(xs, 0.95 * ys, "greater"))
        assert (tests.upper_pvalue, tests.lower_pvalue) == (before[0].pvalue, before[1].pvalue)


def test_margin_too_small_to_tell_from_one_is_refused(tmp_path, stat_lines):
    file_a = _write(tmp_path / "a.jsonl", stat_lines, [95] * 5)
    result = perfctl("compare", file_a, file_a, "--metric", "page-faults", "--margin", "1e-7")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == ["perfctl compare: margin: must be between 1e-06 and 1, got 1e-07"]


# --- printed digits ----------------------------------------------------------------------------------------

FINDING = (r"(B slower beyond ±\d+%|B faster beyond ±\d+%|B slower, within ±\d+%|B faster, within ±\d+%|B slower|"
           r"B faster|equivalent within ±\d+%|no difference shown)")
ROW = re.compile(r"^(b\d+)\s.*?× \[([\d.…]+), ([\d.…]+)\]\s+" + FINDING + r"\s+(beyond|inside|crosses)\s*$")
# the Markdown table writes perfctl's own interval as it is ([low, high], plain text in Markdown)
MARKDOWN_ROW = re.compile(r"^\| (b\d+) \|.*?× \[([\d.…]+), ([\d.…]+)\] \| " + FINDING
                          + r" \| (beyond|inside|crosses) \|")


def _reading(low: Fraction, high: Fraction, margin: Fraction) -> tuple[str, str]:
    """What a reader makes of a printed interval against the printed band: SPARC's verdict and the ±margin
    column (report/compare.py's legend), from the printed decimals alone."""
    lower_edge, upper_edge = 1 - margin, 1 + margin
    difference, equivalence = high < 1 or low > 1, lower_edge <= low and high <= upper_edge
    verdict = (("trivial difference" if equivalence else "relevant difference") if difference
               else ("equivalence" if equivalence else "indeterminate"))
    relation = "beyond" if high < lower_edge or low > upper_edge else "inside" if equivalence else "crosses"
    return verdict, relation


def _finding(low: Fraction, high: Fraction, margin: Fraction) -> tuple[str, str]:
    """The verdict with its direction (analysis/verdicts.py finding) and the ±margin column, read off a
    printed interval against the printed band alone."""
    verdict, relation = _reading(low, high, margin)
    way, band = "slower" if high < 1 else "faster", f"±{float(margin) * 100:g}%"
    said = {"relevant difference": f"B {way} beyond {band}" if relation == "beyond" else f"B {way}",
            "trivial difference": f"B {way}, within {band}", "equivalence": f"equivalent within {band}",
            "indeterminate": "no difference shown"}[verdict]
    return said, relation


def _random_comparison(rng, benchmarks=30):
    """A comparison with many intervals near 1 and near the band's edges (where 3 decimals mislead)."""
    margin_text = str(rng.choice(["0.05", "0.1", "0.02", "0.25"]))
    a, b = {}, {}
    for i in range(benchmarks):
        n, m = int(rng.integers(3, 40)), int(rng.integers(3, 40))
        margin = float(margin_text)
        centre = float(rng.choice([1.0, 1 - margin, 1 + margin, rng.uniform(0.9, 1.1)]))
        noise = float(rng.choice([0.001, 0.005, 0.02]))
        y = rng.lognormal(np.log(1000), noise, m)
        x = rng.lognormal(np.log(1000 * centre), noise, n)
        if rng.random() < 0.3:  # counts
            x, y = np.round(x), np.round(y)
        a[f"b{i}", "t"], b[f"b{i}", "t"] = x, y
    return margin_text, compare(a, b, Parameters(margin=float(margin_text)))


def test_printed_intervals_read_as_their_verdicts():
    """Many random comparisons: in every table and Markdown row, the interval as printed, read against the
    printed band, gives the printed verdict and ±margin relation (before: 31 of 2322 table rows did not,
    e.g. '[0.980, 0.999] relevant difference crosses' at ±0.02, or 0.750 on the 0.75 edge read 'crosses')."""
    rng = np.random.default_rng(0)
    rows = 0
    for _ in range(40):
        margin_text, comparison = _random_comparison(rng)
        context = CompareContext("A", "B", "test", ("t",), "t")
        out = io.StringIO()
        CompareReport(comparison, context, verbosity=VERBOSE).table(Console(file=out, width=250))
        assert f"±{float(margin_text) * 100:g}%" in out.getvalue()
        for pattern, text in ((ROW, out.getvalue()), (MARKDOWN_ROW, CompareReport(comparison, context).markdown())):
            for line in text.splitlines():
                match = pattern.match(line)
                if match is None or "…" in match.group(2, 3):
                    continue
                _, low, high, verdict, relation = match.groups()
                rows += 1
                assert _finding(Fraction(low), Fraction(high), Fraction(margin_text)) == (verdict, relation), line
    assert rows > 2000


HTML_ROW = re.compile(r'data-field="ratio_low"[^>]*>([^<]*)</td><td[^>]*data-field="ratio_high"[^>]*>([^<]*)</td>'
                      r'.*?data-field="verdict" data-value="([^"]*)".*?data-field="margin" data-value="([^"]*)"')


def test_html_intervals_read_as_their_verdicts():
    """The HTML report's verdict table prints the same ends (units.ratio_ends) as the terminal."""
    rng = np.random.default_rng(3)
    rows = 0
    for _ in range(8):
        margin_text, comparison = _random_comparison(rng)
        page = CompareReport(comparison, CompareContext("A", "B", "test", ("t",), "t")).html()
        for low, high, verdict, relation in HTML_ROW.findall(page):
            if "…" in (low, high) or verdict not in VERDICT_NAMES:
                continue
            rows += 1
            assert _reading(Fraction(low), Fraction(high), Fraction(margin_text)) == (verdict, relation), (low, high)
    assert rows > 150


VERDICT_NAMES = ("relevant difference", "trivial difference", "equivalence", "indeterminate")


def test_ab_sequence_prints_the_digits_its_verdict_needs():
    """perfctl ab's lines print a confidence sequence through the same owner, at four decimals or more."""
    s = Settlement(rounds=40, ratio=0.97, low=0.937, high=0.99996, verdict=Verdict.RELEVANT, beyond=None,
                   settled=True, contradicted=False, margin=0.05, alpha=0.05, method="mixture")
    assert "[0.93700, 0.99996]" in live_line("B", s) and "[0.93700, 0.99996]" in _sequence(s)
    on_edge = Settlement(rounds=40, ratio=0.95, low=0.9500000000000001, high=0.96, verdict=Verdict.TRIVIAL,
                         beyond=None, settled=True, contradicted=False, margin=0.05, alpha=0.05, method="mixture")
    assert _sequence(on_edge) == "[0.9500, 0.9600]"


def test_ratio_ends_take_the_digits_the_reading_needs():
    assert units.ratio(0.96, 0.937, 0.99996, 0.05) == "0.96000× [0.93700, 0.99996]"  # not [0.937, 1.000]
    assert units.ratio_ends(0.9499999, 0.99, 0.05) == ("0.9499999", "0.9900000")  # not on the 0.950 edge
    assert units.ratio_ends(1.0500001, 1.2, 0.05) == ("1.0500001", "1.2000000")
    assert units.ratio_ends(0.9500000000000001, 0.96, 0.05) == ("0.950", "0.960")  # on the edge: inside
    assert units.ratio_ends(1.0004, 1.02, 0.05) == ("1.0004", "1.0200")  # not rounded onto 1
    assert units.ratio_ends(0.94, 0.9996, None) == ("0.9400", "0.9996")  # 1 alone, without a band
    assert units.ratio(1.2, 1.1, 1.3, 0.05) == "1.200× [1.100, 1.300]"
    assert units.ratio_ends(None, 1.02, 0.05) == ("…", "1.020")


# --- --family sparc ----------------------------------------------------------------------------------------

def test_sparc_family_randomized_sweep_never_crashes():
    """150 random comparisons under --family sparc, with few runs, exact small samples (whose one-sided
    exact p-value summed to 1.0000000000000002 and made Holm refuse it) and benchmarks that cannot be
    judged (an empty family divided alpha by 0): each one completes, with adjusted p-values in [0, 1]."""
    rng = np.random.default_rng(28)
    empty = clipped = 0
    for _ in range(150):
        a, b = {}, {}
        single = rng.random() < 0.1  # a side with one run in every benchmark: nothing can be judged
        for i in range(int(rng.integers(1, 5))):
            n, m = (1, int(rng.integers(1, 25))) if single else (int(rng.integers(1, 25)), int(rng.integers(1, 25)))
            x = rng.lognormal(0, float(rng.choice([0.01, 0.1, 1])), n)
            y = rng.lognormal(float(rng.normal(0, 1)), float(rng.choice([0.01, 0.1, 1])), m)
            a[f"b{i}", "t"], b[f"b{i}", "t"] = x, y
        correction = str(rng.choice(["holm", "bonferroni", "bh"]))
        comparison = compare(a, b, Parameters(family="sparc", correction=correction))
        judged = [r for r in comparison.benchmarks if r.sparc is not None]
        empty += not judged
        for r in judged:
            t = r.sparc.tests
            assert all(0 <= p <= 1 for p in (t.difference_pvalue, t.upper_pvalue, t.lower_pvalue,
                                               r.sparc.difference_adjusted, r.sparc.equivalence_adjusted))
            clipped += t.lower_pvalue == 1.0 or t.upper_pvalue == 1.0
    assert empty > 5 and clipped > 5  # both roots were reached


def test_sparc_family_on_files_nothing_judged_and_p_at_one(tmp_path, stat_lines):
    one_a = _write(tmp_path / "one_a.jsonl", stat_lines, [95])
    one_b = _write(tmp_path / "one_b.jsonl", stat_lines, [100])
    result = perfctl("compare", one_a, one_b, "--metric", "page-faults", "--family", "sparc", *WIDE)
    assert result.returncode == 4 and "Traceback" not in result.stderr, result.stderr
    assert "cannot conclude" in _row(result.stdout)
    low_a = _write(tmp_path / "low_a.jsonl", stat_lines, [50, 51, 52, 53])
    many_b = _write(tmp_path / "many_b.jsonl", stat_lines, list(range(100, 116)))
    result = perfctl("compare", low_a, many_b, "--metric", "page-faults", "--family", "sparc", *WIDE)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert "B slower" in _row(result.stdout) and "relevant difference" in result.stdout


# --- nested machine lines, extreme ratios --------------------------------------------------------------------

@pytest.mark.parametrize("nested", ['{"a": %s}', '[%s]'])
def test_machine_line_nested_1000_deep_is_reported(tmp_path, stat_lines, nested):
    """A machine line nested 1,000 deep (read by orjson, which allows 1024 levels) ended `compare --html`
    and `report` in a RecursionError; the report is written, and the deep item says it is not shown."""
    machine = json.dumps(stat_lines[0])
    deep = _nest(nested, 1000)
    file_a = _write(tmp_path / "a.jsonl", stat_lines, [95, 96, 97, 98, 99] * 6,
                    machine_text=machine[:-1] + ', "nest": ' + deep + "}", first_sample_before_machine=True)
    file_b = _write(tmp_path / "b.jsonl", stat_lines, [100, 101, 102, 103, 104] * 6)
    page = tmp_path / "compare.html"
    result = perfctl("compare", file_a, file_b, "--metric", "page-faults", "--html", str(page))
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    report = tmp_path / "report.html"
    result = perfctl("report", file_a, file_b, "--metric", "page-faults", "-o", str(report))
    assert result.returncode in (0, 3) and "Traceback" not in result.stderr, result.stderr
    for written in (page, report):
        text = written.read_text()
        assert "hostname" in text
        if nested.startswith("{"):
            assert "not shown: nested deeper than 16 levels" in text
        else:
            assert "[[[[...]]]]" in text


def test_flatten_is_bounded_in_items_and_keeps_order(stat_lines):
    from perfctl.report.html import FLATTEN_ITEMS, flatten

    machine = dict(stat_lines[0], wide={f"k{i}": i for i in range(5 * FLATTEN_ITEMS)})
    items = flatten(machine)
    assert len(items) == FLATTEN_ITEMS + 1 and items["(more items)"].startswith("not shown")
    plain = flatten(stat_lines[0])
    assert plain["cpu.vendor"] == stat_lines[0]["cpu"]["vendor"] and list(plain)[0] == next(iter(stat_lines[0]))


def _nest(pattern: str, depth: int) -> str:
    text = "1"
    for _ in range(depth):
        text = pattern % text
    return text


def _hyperfine(path, seconds):
    path.write_text(json.dumps({"results": [{"command": "bench", "times": seconds,
                                             "exit_codes": [0] * len(seconds)}]}))
    return str(path)


def test_ratio_beyond_a_float_is_refused_in_one_line(tmp_path):
    """A ≈ 1.8e19 ns against B ≈ 1e-300 ns ended compare in an OverflowError and --html in log(0): the
    benchmark cannot be concluded, with one line saying why; the HTML report is written."""
    big = _hyperfine(tmp_path / "big.json", [1.8e10 * (1 + i * 1e-3) for i in range(10)])
    tiny = _hyperfine(tmp_path / "tiny.json", [1e-309 * (1 + i * 1e-3) for i in range(10)])
    page = tmp_path / "r.html"
    for first, second, exponent in ((big, tiny, "10^319"), (tiny, big, "10^-319")):
        result = perfctl("compare", first, second, "--html", str(page))
        assert result.returncode == 4 and "Traceback" not in result.stderr, result.stderr
        assert f"cannot conclude: A/B ratios reach {exponent}, beyond 10^±300" in " ".join(result.stdout.split())
        assert page.stat().st_size > 1000
    # within 10^300 both ways: judged
    small = _hyperfine(tmp_path / "small.json", [1e-280 * (1 + i * 1e-3) for i in range(10)])
    result = perfctl("compare", big, small)
    assert result.returncode == 0 and "B faster beyond ±5%" in result.stdout, result.stdout + result.stderr


def test_log_scales_take_zero_and_overflowing_spans():
    """svg's log scales: ends 10^±300 apart (their span overflowed and padded to 0: log(0)), an end of 0 or
    5e-324, infinity and NaN are drawn, never raised on."""
    wide = svg.forest([svg.ForestRow("x", 1.8e28, 1e-300, 1.8e300, "relevant difference", "other")], 0.05)
    zero = svg.forest([svg.ForestRow("x", 0.0, 0.0, 5e-324, "relevant difference", "other")], 0.05)
    sequence = svg.sequence([1, 2, 3], [1e-300, 1e300, 1.0], [5e-324, 1e-300, 0.5], [1e308, math.inf, 2.0], 0.05)
    for drawing in (wide, zero, sequence):
        assert drawing.startswith("<svg") and "nan" not in drawing and "inf" not in drawing
    scale = svg.Scale(1e-300, 1e300, 0, 100, log=True)
    assert scale(0.0) <= scale(1e-300) == 0 and scale(1.0) == pytest.approx(50)
    assert 100 <= scale(math.inf) < 102 and scale(math.nan) == pytest.approx(50)


def test_ratios_and_quantities_far_from_one_print_their_significant_digits(tmp_path):
    """2 ms against 1e-300 s printed a 298-digit ratio and 'median B 0 ns'; 2^64 against 1 printed
    18446744073709524992.000× (exp(log)'s last digits); a ratio of 5e-324 printed 0.000× [0.000, 0.000]."""
    base = _hyperfine(tmp_path / "base.json", [2e-3 * (1 + i * 1e-3) for i in range(10)])
    tiny = _hyperfine(tmp_path / "tiny.json", [1e-300 * (1 + i * 1e-3) for i in range(10)])
    result = perfctl("compare", base, tiny, "--width", "120")
    row = next(line for line in result.stdout.splitlines() if line.startswith("bench "))
    assert re.search(r" 1\.00\de-291 ns +\d\.\d{3}e\+297× \[\d\.\d{3}e\+297, \d\.\d{3}e\+297\] ", row), row
    assert max(len(line) for line in result.stdout.splitlines()) < 200
    assert units.ratio(2.0**64 * (1 - 2**-50), 2.0**64 * (1 - 2**-50), 2.0**64, 0.05) == \
        "1.845e+19× [1.845e+19, 1.845e+19]"
    assert units.ratio(5e-324, 5e-324, 1e-320, 0.05) == "4.941e-324× [4.941e-324, 1.000e-320]"
    assert units.ratio(1e-7) == "1.000e-07×" and units.ratio(123456.789) == "123456.789×"
    # scientific ends still read as their values against the band: at margin 0.9999999 its edge is 1/10^7,
    # and the float 1e-7 lies below it (9.99999999999999954748e-08): "1.000e-07" would print it on the edge
    assert units.ratio_ends(9e-8, 1e-7, 0.9999999) == ("8.9999999999999999e-08", "9.9999999999999995e-08")
    assert units.ratio_ends(9e-8, 1.0000000000000002e-7, 0.9999999) == ("9.000e-08", "1.000e-07")
    assert units.quantity(1e-300, "s") == "1e-291 ns" and units.quantity(0.25, "ns") == "0.25 ns"
    assert units.count(1e-300) == "1e-300" and units.count(0.5) == "0.50"
