"""The operators' view in deploy/: the Prometheus alerting rules pass promtool's checks and their own unit
tests (deploy/prometheus/perfctl-alerts.test.yml), the Grafana dashboard is importable, and both use only
metrics that perfctl exports, in PromQL that Prometheus parses."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "perfctl-alerts.yml"
RULE_TESTS = PROMETHEUS / "perfctl-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "perfctl-dashboard.json"
PROMTOOL = "/usr/bin/promtool"

# Mirrors the metrics server/metrics.py and agent/daemon.py define,
# histograms by their base name: a rule or panel naming anything else would stay silent or empty forever, so a
# renamed metric must be renamed here too.
KNOWN_METRICS = frozenset({
    # server
    "perfctl_samples_ingested_total", "perfctl_samples_duplicate_total", "perfctl_batches_total",
    "perfctl_ingest_latency_seconds", "perfctl_ingest_errors_total", "perfctl_agents_connected", "perfctl_jobs",
    "perfctl_jobs_lost_total", "perfctl_jobs_offered_again_total", "perfctl_machine_last_heartbeat_timestamp_seconds",
    "perfctl_machine_audit_verdict", "perfctl_machine_audit_timestamp_seconds", "perfctl_database_size_bytes",
    "perfctl_samples_stored", "perfctl_open_regressions", "perfctl_history_queued",
    "perfctl_history_set_aside",
    # both, per process and task (perfctl/supervise.py)
    "perfctl_task_restarts_total",
    # agent
    "perfctl_agent_samples_spooled_total", "perfctl_agent_samples_acked_total", "perfctl_agent_batches_pending",
    "perfctl_agent_samples_pending", "perfctl_agent_connected", "perfctl_agent_spool_full",
    # Prometheus' own, per scrape target: the rules on perfctl-server and perfctl-agent targets that are down
    "up",
})

# What the dashboard's template variables stand for when its expressions are checked outside Grafana.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "1m", "__range": "6h", "machine": "box-a",
                     "agent": "box-a:9101"}

PROMQL_KEYWORDS = frozenset({"and", "or", "unless", "bool", "inf", "nan"})


def promtool_reason() -> str | None:
    """Why promtool cannot run here, or None when it can."""
    if not os.access(PROMTOOL, os.X_OK):
        return f"no {PROMTOOL} (deploy/setup.sh installs the Debian package prometheus)"
    return None


needs_promtool = pytest.mark.skipif(promtool_reason() is not None, reason=f"probe: {promtool_reason()}")


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def assert_succeeded(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (f"{' '.join(result.args)} exited {result.returncode}:\n"
                                    f"{result.stdout}{result.stderr}")


def rule_expressions(text: str) -> list[str]:
    """Each `expr:` of a rules file, inline or a folded/literal block (no YAML parser in the locked
    environment; every rule must yield one, which test_rule_expressions_found checks)."""
    expressions = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not match:
            continue
        indent, value = len(match.group(1)), match.group(2).strip()
        if value in (">-", ">", "|", "|-"):
            block = []
            for following in lines[i + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                block.append(following.strip())
            value = " ".join(part for part in block if part)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        expressions.append(value)
    return expressions


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_expressions() -> list[str]:
    """Every panel target's PromQL, with Grafana's template variables replaced by concrete values."""
    expressions = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            # Whole names only ($agents is not $agent); an unknown one stays for test_dashboard_structure.
            expressions.append(re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA_VARIABLES.get(m.group(1), m.group(0)),
                                      target["expr"]))
    return expressions


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, aggregations,
    keywords, label names, durations or strings; a histogram's _bucket/_sum/_count become its base name."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\boffset\s+\S+", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.:$])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        name, is_call = match.groups()
        if is_call or name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(re.sub(r"_(?:bucket|sum|count)$", "", name))
    return names


def test_metric_names_are_extracted():
    # The extractor is what the next two tests rely on; a name it skipped would never be checked.
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(perfctl_ingest_latency_seconds_bucket'
                        '[1m]))) > 1e3 and on (machine) up{job="x"} offset 5m') == {
        "perfctl_ingest_latency_seconds", "up"}
    assert metric_names("time() - max by (machine) (perfctl_machine_audit_timestamp_seconds) > 2 * 24 * 3600"
                        ) == {"perfctl_machine_audit_timestamp_seconds"}


def test_rule_expressions_found():
    text = RULES.read_text()
    rules = len(re.findall(r"^\s*- (?:alert|record):", text, re.MULTILINE))
    expressions = rule_expressions(text)
    assert rules >= 7 and len(expressions) == rules, (rules, expressions)
    assert all(expressions), expressions


def test_rules_use_known_metrics():
    for expr in rule_expressions(RULES.read_text()):
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        assert names <= KNOWN_METRICS, f"unknown metric {sorted(names - KNOWN_METRICS)} in {expr!r}"


def test_dashboard_uses_known_metrics_and_shows_all():
    used = set()
    for expr in dashboard_expressions():
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        assert names <= KNOWN_METRICS, f"unknown metric {sorted(names - KNOWN_METRICS)} in {expr!r}"
        used |= names
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            metric = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"]["query"]).group(1)
            assert metric in KNOWN_METRICS, f"variable {variable['name']}: unknown metric {metric}"
    assert KNOWN_METRICS - used == set(), "metrics the dashboard does not show"


def test_dashboard_structure():
    board = dashboard()
    assert board["schemaVersion"] >= 36 and board["uid"] and board["title"]
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["machine"]["query"]["query"].startswith("label_values(")
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(ids)}"
    for panel in board["panels"]:
        assert panel.get("targets"), f"panel {panel['id']} ({panel['title']}) has no target"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"]["uid"] == "${datasource}", panel["title"]
    expressions = " ".join(dashboard_expressions())
    assert "$" not in expressions, f"a template variable the check does not substitute: {expressions}"


@needs_promtool
def test_rules_check():
    result = promtool("check", "rules", str(RULES))
    assert_succeeded(result)
    assert "SUCCESS" in result.stdout, result.stdout


@needs_promtool
def test_rules_unit_tests():
    # Run from deploy/prometheus: the test file names its rule file relative to itself.
    result = promtool("test", "rules", RULE_TESTS.name, cwd=PROMETHEUS)
    assert_succeeded(result)
    assert "SUCCESS" in result.stdout, result.stdout


@needs_promtool
def test_dashboard_expressions_parse(tmp_path):
    # promtool has no "check this expression"; a recording rule per panel target gets the same parser.
    expressions = dashboard_expressions()
    rules = ["groups:", "  - name: perfctl-dashboard", "    rules:"]
    for index, expr in enumerate(expressions):
        rules += [f"      - record: perfctl_dashboard:target_{index}", f"        expr: {json.dumps(expr)}"]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text("\n".join(rules) + "\n")
    result = promtool("check", "rules", str(path))
    assert_succeeded(result)
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout, result.stdout
