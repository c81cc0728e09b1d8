"""Fast version of bench/sequential.py (issue 16): perfctl ab's confidence sequence, checked after every
round, keeps its error at or below alpha on every data family, and so do its wrong verdicts; the naive
procedure (compare's fixed-n test after every round) shows the inflation the design avoids; and the
vectorised simulation those rates come from gives exactly SequentialComparison's settlements."""

import contextlib
import io
import re

import pytest
from conftest import bench_module

bench = bench_module("sequential")


@pytest.fixture(scope="module")
def quick_run():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = bench.main(["--quick"])
    return code, out.getvalue()


def _targets(output):
    return re.findall(r"^(PASS|FAIL): (.*)$", output, flags=re.MULTILINE)


def test_quick_mode_passes_every_target(quick_run):
    code, output = quick_run
    targets = _targets(output)
    failed = [label for status, label in targets if status != "PASS"]
    assert not failed, output
    assert code == 0, output


def test_quick_mode_checks_every_family_and_target(quick_run):
    _, output = quick_run
    labels = [label for _, label in _targets(output)]
    for family in bench.FAMILIES:
        assert sum(label.startswith(f"validity, {family},") for label in labels) == 2, family
        assert sum(label.startswith(f"wrong verdicts, {family},") for label in labels) == 2, family
        assert any(label.startswith(f"naive inflation shown, {family}:") for label in labels), family
    assert any(label.startswith("vectorised path identical to SequentialComparison") for label in labels)
    # the rounds-to-verdict table: one row per true ratio, each with a fixed n beside it
    rows = re.findall(r"^\s+(1\.00|1\.01|1\.03|1\.10|1\.50)\s+(inside the band|faster beyond the margin)\s",
                      output, flags=re.MULTILINE)
    assert [ratio for ratio, _ in rows] == ["1.00", "1.01", "1.03", "1.10", "1.50"], output


def test_vectorised_path_equals_sequential_comparison_on_fresh_streams():
    # a seed the quick run does not use: every round's CS, verdict, settlement and contradiction, and every
    # stop round, identical; the step-change streams must reach the contradicted branch and the stretches'
    # alarm, the drifting ones the exchangeability test's (13 kinds of i.i.d. streams, a step, a drift)
    compared, problems = bench.equality_check(streams=130, rounds=120, seed=4242)
    assert problems == []
    assert compared == 130 // 14 * 14 * 120


def test_equality_check_can_fail():
    # the check reports a disagreement when the vectorised path is wrong (its ranks shifted by one)
    original = bench.cs_ranks

    def shifted(rounds, alpha=bench.ALPHA):
        lower, upper = original(rounds, alpha)
        return lower + (lower >= 1), upper

    bench.cs_ranks = shifted
    try:
        _, problems = bench.equality_check(streams=13, rounds=80, seed=7)
    finally:
        bench.cs_ranks = original
    assert problems


def test_the_pass_rule_fails_a_rate_shown_above_alpha():
    """A CS that missed twice as often as it may (0.10 at alpha 0.05) fails even in the quick mode's 400
    streams; a rate within Monte Carlo noise of alpha does not."""
    assert not bench.within_alpha(40, 400) and not bench.within_alpha(200, 2000)
    assert bench.within_alpha(24, 400) and bench.within_alpha(100, 2000)
