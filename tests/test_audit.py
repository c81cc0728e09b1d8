"""`perfctl audit`: the real audit on this machine, and its assessment with a simulated counter source (a
test double) standing in for the PMU this machine does not have; an audit a signal stops keeps the last complete
one, one that cannot build its kernels is a strict JSON document and exit 2, and an audit file that is damaged or
someone else could have written is never used for corrections."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import audit_document, one_line, perfctl, pmu_as_if, pmu_reason, signal_when, tracepoint_reason
from doubles import SimulatedCounterSource

from perfctl.agent.audit import assess
from perfctl.agent.audit_report import KernelRuns
from perfctl.agent.inventory import Check

KERNELS = [("loop N=1000000", 2_000_004, 0, 0.002), ("pagetouch P=1000", 4_013, 1000, 0.004),
           ("pagetouch P=100000", 400_013, 100_000, 0.2), ("loop N=2000000000", 4_000_000_004, 0, 1.5),
           ("fldcw N=1000000", 3_000_004, 0, 0.003)]


def _hardware_runs(source, runs=5):
    out = []
    for label, exact, pages, seconds in KERNELS:
        counts = [source.run(exact, pages, seconds) for _ in range(runs)]
        out.append(KernelRuns(label, "perf_event", exact, 0, 0, pages, [c["instructions"] for c in counts],
                              [c["page_faults"] for c in counts], [c["interrupts"] for c in counts]))
    return out


def _dbi_run(exact=2_000_004, counted=2_000_004):
    return KernelRuns("loop N=1000000", "dbi", exact, 0, 0, 0, [counted] * 3, rep_iterations=[0] * 3, fldcw=[0] * 3)


def test_a_machine_whose_artifacts_are_modelled_is_trusted():
    result = assess(_hardware_runs(SimulatedCounterSource(a=1, b=1, disturbance_rate=0.05, seed=4)) + [_dbi_run()],
                    True, "", [])
    assert result.verdict == "trusted", result.reasons
    assert result.fit.a == pytest.approx(1, abs=0.01) and result.fit.b == pytest.approx(1, abs=0.01)


def test_exact_counts_are_trusted_whatever_the_round_off():
    """Exact artifacts leave residuals of floating-point round-off only: the intervals must not collapse onto
    it (a third of these seeds were 'degraded' by "unexplained excess of 0.0 instructions" before)."""
    for seed in range(100):
        result = assess(_hardware_runs(SimulatedCounterSource(a=1, b=1, disturbance_rate=0, seed=seed)) + [_dbi_run()],
                        True, "", [])
        assert result.verdict == "trusted", (seed, result.reasons)
        low, high = result.fit.intercept_interval
        assert low < 0 < high and high - low > 0.1, (seed, result.fit.intercept_interval)
        assert result.fit.a_interval[0] < 1 < result.fit.a_interval[1], seed


@pytest.mark.parametrize("extra, flagged", [(2, True), (-2, True), (1, True), (0, False)])
def test_a_constant_excess_of_whole_instructions_is_found(extra, flagged):
    class Offset(SimulatedCounterSource):
        def run(self, exact, pages, seconds, fldcw=0, hz=250):
            result = super().run(exact, pages, seconds, fldcw, hz)
            result["instructions"] += extra  # e.g. a kernel whose analytic count is off by `extra`
            return result

    result = assess(_hardware_runs(Offset(seed=11, disturbance_rate=0)) + [_dbi_run()], True, "", [])
    assert any("unexplained excess" in r for r in result.reasons) == flagged, result.reasons
    assert result.fit.intercept == pytest.approx(extra, abs=1e-6)


def test_unexplained_or_noisy_excess_degrades():
    class Drifting(SimulatedCounterSource):
        def run(self, exact, pages, seconds, fldcw=0, hz=250):
            result = super().run(exact, pages, seconds, fldcw, hz)
            result["instructions"] += 40 + float(self.rng.normal(0, 30))  # an artifact nobody models
            return result

    result = assess(_hardware_runs(Drifting(seed=5, disturbance_rate=0)) + [_dbi_run()], True, "", [])
    assert result.verdict == "degraded"
    assert any("unexplained excess" in r or "vary" in r for r in result.reasons)


def test_dbi_disagreement_or_missing_faults_are_untrusted():
    runs = _hardware_runs(SimulatedCounterSource(seed=6))
    assert assess(runs + [_dbi_run(counted=2_000_005)], True, "", []).verdict == "untrusted"
    short = KernelRuns("pagetouch P=1000", "perf_event", 4_013, 0, 0, 1000, [], [10, 10], [0, 0])
    assert assess([short], False, "no PMU", []).verdict == "untrusted"


def test_environment_problems_degrade_with_their_reason():
    check = Check("NMI watchdog", "on", "it holds a hardware counter", "sysctl kernel.nmi_watchdog=0", ok=False)
    result = assess(_hardware_runs(SimulatedCounterSource(seed=7)) + [_dbi_run()], True, "", [check])
    assert result.verdict == "degraded" and any("NMI watchdog" in r for r in result.reasons)


def test_without_a_pmu_the_audit_says_what_it_could_not_check():
    result = assess([_dbi_run()], False, "perf_event_open(instructions) -> ENOENT", [])
    assert result.verdict == "no-PMU" and result.fit is None
    assert any("ENOENT" in item for item in result.not_checked)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="probe: valgrind not on PATH")
def test_real_audit_of_this_machine():
    result = perfctl("audit", "--json", "-r", "2", timeout=300)
    assert result.returncode in (0, 3, 4), result.stderr
    report = json.loads(result.stdout)
    dbi = [k for k in report["kernels"] if k["backend"] == "dbi"]
    assert len(dbi) == 5 and all(k["exact"] for k in dbi)  # valgrind reproduces every formula
    touch = next(k for k in report["kernels"] if k["kernel"] == "pagetouch P=1000" and k["backend"] == "perf_event")
    assert 1000 <= touch["page_faults"] <= 1010
    long_loop = next(k for k in report["kernels"] if k["kernel"] == "loop N=6000000000")
    if tracepoint_reason() is None:
        assert long_loop["interrupts"] > 20  # a fraction of a second of CPU at HZ >= 100
    assert all(c["fix"] for c in report["checks"] if not c["ok"])
    if pmu_reason() is not None:
        assert report["verdict"] == "no-PMU" and report["fit"] is None
        assert any("PMU" in item for item in report["not_checked"])
    else:
        assert report["verdict"] in ("trusted", "degraded") and report["fit"] is not None
    assert np.isfinite(report["seconds"])


def _report(**overrides):
    from perfctl.agent import inventory
    from perfctl.agent.audit_report import AuditResult

    inv = inventory.collect()
    return AuditResult.from_dict(audit_document(inv, **{"audit_id": "a" * 8, **overrides})), inv


def test_an_audit_result_reads_back_from_its_json():
    """to_dict is what `perfctl audit --json` prints, audit-latest.json keeps and the server stores: the
    report's keys in their order, a kernel's by its backend; from_dict reads it back to the same result."""
    from perfctl.agent.audit_report import AuditResult, KernelResult

    document = audit_document(__import__("perfctl.agent.inventory", fromlist=["x"]).collect(), kernels=[
        KernelResult("loop", "dbi", 10, 2, 0.0, exact=True).to_dict(),
        KernelResult("loop", "perf_event", 10, 5, None, median_excess=3.0, page_faults=1.0).to_dict()])
    result = AuditResult.from_dict(json.loads(json.dumps(document)))
    assert json.dumps(result.to_dict()) == json.dumps(document)
    assert result.fit.a_interval == (1.0, 1.0) and result.kernels[0].exact and result.kernels[1].interrupts is None
    assert list(document["kernels"][0]) == ["kernel", "backend", "expected", "runs", "cv", "exact"]
    with pytest.raises(ValueError, match="no hostname"):
        AuditResult.from_dict({k: v for k, v in document.items() if k != "hostname"})


def test_a_correction_needs_a_current_passing_audit_of_this_machine():
    from perfctl.agent.corrections import correction_for

    report, inv = _report()
    correction, why = correction_for(report, inv)
    assert correction.a == 1.0 and correction.audit_id == "aaaaaaaa" and "model wm2008-1" in why
    for overrides, expected in (({"machine_id": "other"}, "another machine"), ({"kernel": "0.1"}, "changed"),
                                ({"time_ns": 0}, "older than 7 days"),
                                ({"verdict": "no-PMU", "fit": None}, "no artifact fit")):
        assert correction_for(_report(**overrides)[0], inv)[0] is None
        assert expected in correction_for(_report(**overrides)[0], inv)[1]
    assert "no audit" in correction_for(None, inv)[1]


def test_corrected_values_sit_beside_the_raw_ones():
    from perfctl.agent.corrections import apply_correction
    from perfctl.analysis.correction import Correction
    from perfctl.model import Reading

    readings = [Reading("instructions", "perf_event", "user", "ok", value=10_000),
                Reading("page-faults", "perf_event", "user", "ok", value=40),
                Reading("timer-interrupts", "perf_event", "all", "ok", value=7)]
    out = apply_correction(readings, Correction(a=1.0, b=1.0, k_fldcw=2.0, audit_id="x1"), fldcw_executed=3)
    assert out[0].value == 10_000 and out[0].corrected == 10_000 - 40 - 7 - 3
    assert (out[0].correction_model, out[0].audit_id) == ("wm2008-1/irq-all-perf_event", "x1")
    assert apply_correction(readings[:1], Correction(1, 1, 1, "x"), 0) == readings[:1]  # faults missing: unchanged


def test_correction_takes_user_mode_interrupts_from_ebpf():
    """With eBPF accounting the run, IRQ_user is the user-mode ticks scaled to all timer interrupts, not
    perf_event's count of every timer interrupt (half of them kernel-mode here)."""
    from perfctl.agent.corrections import apply_correction
    from perfctl.analysis.correction import Correction
    from perfctl.model import Reading

    readings = [Reading("instructions", "perf_event", "user", "ok", value=10_000),
                Reading("page-faults", "perf_event", "user", "ok", value=40),
                Reading("timer-interrupts", "perf_event", "all", "ok", value=100),
                Reading("timer-interrupts", "ebpf", "all", "ok", value=100),
                Reading("timer-ticks", "ebpf", "user", "ok", value=45),
                Reading("timer-ticks", "ebpf", "kernel", "ok", value=45)]
    out = apply_correction(readings, Correction(a=1.0, b=2.0, k_fldcw=1.0, audit_id="x2"))
    assert out[0].corrected == 10_000 - 40 - 2.0 * 50
    assert out[0].correction_model == "wm2008-1/irq-user-ebpf"
    # eBPF's ticks in error (e.g. a tree it could not follow): back to perf_event's count
    failed = [*readings[:5], Reading("timer-ticks", "ebpf", "kernel", "error", value=45, reason="untracked")]
    assert apply_correction(failed, Correction(1.0, 2.0, 1.0, "x3"))[0].corrected == 10_000 - 40 - 200


def test_stat_says_why_instructions_are_not_corrected():
    result = perfctl("stat", "-r", "1", "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    if pmu_reason() is not None:
        assert "instructions not corrected: no PMU counts them here" in result.stdout
    else:
        # with a PMU the sentence follows from this machine's latest audit: say exactly that one
        from perfctl.agent import inventory
        from perfctl.agent.corrections import latest_correction

        correction, why = latest_correction(inventory.collect())
        expected = f"instructions {why}" if correction else f"instructions not corrected: {why}"
        assert expected in result.stdout, result.stdout


def test_the_corrector_follows_the_latest_audit(tmp_path, monkeypatch):
    """make_corrector's decision on a machine with a PMU (the inventory says so; no counter is read): no
    audit, an audit of this machine, and the correction it then applies."""
    from perfctl.agent import audit_report, corrections, inventory
    from perfctl.agent.events import parse_events
    from perfctl.model import Benchmark, Reading

    monkeypatch.setattr(audit_report, "latest_path", lambda: str(tmp_path / "audit-latest.json"))
    inv = pmu_as_if(inventory.collect())
    specs = parse_events(["instructions", "page-faults:u", "timer-interrupts"])
    bench = Benchmark("true", ("/bin/true",), "/bin/true", "0" * 64, "0" * 64)
    corrector, said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert corrector is None and said == "instructions not corrected: no audit of this machine: run perfctl audit"
    document = audit_document(inv, audit_id="b" * 8)
    audit_report.save_latest(audit_report.AuditResult.from_dict({**document, "fit": {**document["fit"], "b": 2.0}}))
    corrector, said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert said == "instructions corrected with model wm2008-1, audit bbbbbbbb"
    readings = [Reading("instructions", "perf_event", "user", "ok", value=1000),
                Reading("page-faults", "perf_event", "user", "ok", value=10),
                Reading("timer-interrupts", "perf_event", "all", "ok", value=3)]
    assert corrector(readings)[0].corrected == 1000 - 10 - 2 * 3
    without_faults = parse_events(["instructions", "timer-interrupts"])
    assert "needs page-faults:u" in corrections.make_corrector(inv, ["/bin/true"], bench, None, None, without_faults)[1]


def test_an_interrupted_audit_keeps_its_partial_results_and_never_says_trusted():
    import signal
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "perfctl", "audit", "--json", "-r", "40"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    report = json.loads(stdout)
    assert report["complete"] is False and report["verdict"] != "trusted"
    assert any("interrupted" in item for item in report["not_checked"])


def test_kernels_without_a_compiler_fail_with_one_reason(tmp_path, monkeypatch):
    from perfctl.agent.build import BuildError, build_static

    source = tmp_path / "k.S"
    source.write_text(".globl _start\n_start: ret\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # use the per-user cache, where nothing is built yet
    with pytest.raises(BuildError, match="no C compiler"):
        build_static(str(source), ("-nostdlib",), "k")


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as strict parsers (jq, Go, browsers) do."""

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _cache_env(directory) -> dict:
    return {**os.environ, "PERFCTL_CACHE_DIR": str(directory)}


def _kernel_processes(directory) -> list[int]:
    """Processes running a program from ``directory`` (the audit's calibration kernels)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/exe").startswith(str(directory)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_an_audit_which_keeps_the_last_complete_one(tmp_path, monkeypatch, signum):
    """systemd, timeout(1) and CI cancellation send SIGTERM, a closed terminal SIGHUP: the audit stops like
    Ctrl-C, exits 128 + N, prints its partial report as strict JSON, records it in audit-interrupted.json
    and leaves audit-latest.json, the last complete audit that corrections use, as it was."""
    from perfctl.agent import audit_report, inventory

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("PERFCTL_CACHE_DIR", str(cache))
    complete = audit_document(inventory.collect(), audit_id="complete-one", verdict="no-PMU", fit=None)
    latest = audit_report.save_latest(audit_report.AuditResult.from_dict(complete))
    assert latest == str(cache / "audit-latest.json")
    kept = (cache / "audit-latest.json").read_bytes()

    process = subprocess.Popen([sys.executable, "-m", "perfctl", "audit", "--json", "-r", "40"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_cache_env(cache))
    # each kernel run lasts milliseconds: seen once is enough
    stdout, stderr = signal_when(process, lambda: _kernel_processes(cache), signum, "a calibration kernel run",
                                 settle=0.5)
    assert process.returncode == 128 + signum, stderr
    report = _strict_json(stdout)
    assert report["complete"] is False and report["interrupted_by"] == signal.Signals(signum).name
    assert report["verdict"] != "trusted"
    assert (cache / "audit-latest.json").read_bytes() == kept
    assert _strict_json((cache / "audit-interrupted.json").read_text())["audit_id"] == report["audit_id"]
    assert "corrections keep using the last complete audit" in stderr and "Traceback" not in stderr
    assert not [name for name in os.listdir(cache) if name.startswith(".audit-")]
    assert _kernel_processes(cache) == []


def test_an_audit_that_cannot_build_its_kernels_exits_2_with_a_json_document(tmp_path):
    """A read-only cache: the kernels cannot be built. One line on stderr, exit 2 (docs/audit.md), and with
    --json a document on stdout saying so rather than nothing for the script that reads it."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755,ro", "tmpfs", str(cache)], check=True)
    try:
        result = subprocess.run([sys.executable, "-m", "perfctl", "audit", "--json", "-r", "2"], capture_output=True,
                                text=True, env=_cache_env(cache), timeout=120)
    finally:
        subprocess.run(["umount", str(cache)], check=True)
    one_line(result, "perfctl audit: cannot build the calibration kernels", code=2)
    document = _strict_json(result.stdout)
    assert document["complete"] is False and document["error"] == result.stderr.strip()


def test_an_audit_file_someone_else_could_have_written_is_not_used_for_corrections(tmp_path, monkeypatch):
    """audit-latest.json decides every corrected count: a copy others may write, or a symbolic link to a
    file of someone else's choosing, is refused with the reason, as the exec gate is."""
    from perfctl.agent import audit_report, corrections, inventory
    from perfctl.agent.events import parse_events
    from perfctl.model import Benchmark

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("PERFCTL_CACHE_DIR", str(cache))
    inv = pmu_as_if(inventory.collect())  # the decision only; no counter
    specs = parse_events(["instructions", "page-faults:u", "timer-interrupts"])
    bench = Benchmark("true", ("/bin/true",), "/bin/true", "0" * 64, "0" * 64)
    report = audit_document(inv)
    path = audit_report.save_latest(audit_report.AuditResult.from_dict(report))
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)[1].endswith("audit cccccccc")

    os.chmod(path, 0o666)
    said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert said[0] is None and "the latest audit is not trusted" in said[1], said

    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps({**report, "audit_id": "d" * 8}))
    os.unlink(path)
    os.symlink(elsewhere, path)
    said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert said[0] is None and "the latest audit is not trusted" in said[1] and "dddddddd" not in said[1], said


def _kept_audit(inv, **fields) -> dict:
    return audit_document(inv, **fields)


HOSTILE_AUDITS = {
    "time_ns a word": {"time_ns": "soon"}, "time_ns a list": {"time_ns": [1]}, "time_ns true": {"time_ns": True},
    "fit a string": {"fit": "x"}, "fit without a": {"fit": {"b": 1.0}}, "fit.a NaN": {"fit": {"a": "NaN", "b": 1}},
    "fit.a a string": {"fit": {"a": "1", "b": None}}, "fit.b huge": {"fit": {"a": 1, "b": 10**400}},
    "no erratum": {"erratum": None}, "erratum a string": {"erratum": "x"}, "no audit id": {"audit_id": None},
    "audit id with escapes": {"audit_id": "\x1b[2Jx"},
}


@pytest.mark.parametrize("text", [*HOSTILE_AUDITS, "1e400", "deep", "binary"])
def test_a_damaged_audit_file_is_refused_with_a_reason_and_never_crashes_a_measurement(tmp_path, monkeypatch, text):
    """audit-latest.json is ours (owner, mode) but its content may be damaged or edited: `perfctl stat` and the
    agent read it before every measurement with a PMU, so each bad field is a reason, never a traceback."""
    from perfctl.agent import corrections, inventory
    from perfctl.agent.events import parse_events
    from perfctl.model import Benchmark

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("PERFCTL_CACHE_DIR", str(cache))
    inv = pmu_as_if(inventory.collect())  # the decision only; no counter
    if text in HOSTILE_AUDITS:
        content = json.dumps(_kept_audit(inv, **HOSTILE_AUDITS[text])).replace('"NaN"', "NaN")
    else:
        content = {"1e400": json.dumps(_kept_audit(inv)).replace('"a": 1.0', '"a": 1e400'),
                   "deep": "[" * 100_000 + "]" * 100_000, "binary": "\x00\xff{"}[text]
    (cache / "audit-latest.json").write_text(content, errors="surrogateescape")
    os.chmod(cache / "audit-latest.json", 0o644)
    specs = parse_events(["instructions", "page-faults:u", "timer-interrupts"])
    bench = Benchmark("true", ("/bin/true",), "/bin/true", "0" * 64, "0" * 64)
    corrector, said = corrections.make_corrector(inv, ["/bin/true"], bench, None, None, specs)
    assert corrector is None, said
    assert said.startswith("instructions not corrected: ") and ("malformed" in said or "not JSON" in said), said
    assert "\x1b" not in said
