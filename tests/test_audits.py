"""Audit history: drift of one machine, and the fleet-wide spread per kernel (pure functions)."""

from perfctl.analysis.audits import drift, fleet_spread


def _report(audit_id, verdict="trusted", kernel="6.1", microcode="0x1", a=1.0, b=1.0, excess=1500.0):
    return {"audit_id": audit_id, "verdict": verdict, "kernel": kernel, "microcode": microcode,
            "fit": {"a": a, "b": b, "a_interval": [a - 0.01, a + 0.01], "b_interval": [b - 0.01, b + 0.01]},
            "kernels": [{"kernel": "loop N=10", "backend": "perf_event", "expected": 24, "median_excess": excess,
                         "page_faults": 1000, "interrupts": 500}]}


def test_drift_names_what_changed():
    assert drift([_report("a1"), _report("a2")]) == []
    changes = drift([_report("a1"), _report("a2", verdict="degraded", microcode="0x2", b=1.5)])
    assert any("verdict trusted -> degraded" in c for c in changes)
    assert any("microcode 0x1 -> 0x2" in c for c in changes)
    assert any("b moved from 1.000 to 1.500" in c for c in changes)


def test_spread_uses_corrected_counts_or_the_dbi_reference():
    rows = fleet_spread({"m1": _report("1"), "m2": _report("2", excess=1501.0)})
    assert rows[0]["source"] == "corrected hardware" and rows[0]["machines"] == 2
    assert rows[0]["median"] == 24.5 and rows[0]["cv"] > 0
    no_pmu = {"fit": None, "kernels": [{"kernel": "loop N=10", "backend": "dbi", "expected": 24, "exact": True}]}
    rows = fleet_spread({"x": no_pmu, "y": no_pmu})
    assert rows[0]["source"] == "dbi" and rows[0]["cv"] == 0.0


def test_agent_reaudits_when_due(tmp_path):
    import time

    from perfctl.agent.daemon import Agent, AgentConfig

    agent = Agent(AgentConfig(server="127.0.0.1:1", name="x", spool_dir=str(tmp_path), token="t" * 20,
                              allow=["/bin/*"], user=None, audit_every_hours=24))
    assert agent._audit_due() == "never audited"
    fingerprint = f"{agent.inventory.kernel.release} {agent.inventory.cpu.microcode}"
    agent.spool.add_audit("id1", "{}", {"audit_time_ns": str(time.time_ns()), "audit_fingerprint": fingerprint})
    assert agent._audit_due() is None
    agent.spool.add_audit("id2", "{}", {"audit_fingerprint": "an older kernel"})
    assert agent._audit_due() == "kernel or microcode changed"
    agent.spool.add_audit("id3", "{}", {"audit_time_ns": str(time.time_ns() - 25 * 3600 * 10**9),
                                        "audit_fingerprint": fingerprint})
    assert agent._audit_due() == "scheduled"
    agent.config.audit_every_hours = 0
    assert agent._audit_due() is None
    assert [row[0] for row in agent.spool.unreported_audits()] == ["id1", "id2", "id3"]
    agent.spool.close()
