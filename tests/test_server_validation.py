"""What a running server refuses in what agents and clients send (server/validation.py): a machine info, event
support, inventory or audit report of the wrong shape, JSON documents nested past any reason or holding NaN,
reports beyond their bounds, each refused naming the field; a NUL in any text of a request refused in one line on
every database (it reached PostgreSQL, which answered UNKNOWN with the SQL); a real inventory and a full audit
accepted and rendered. A real `perfctl server` called with grpc stubs (conftest's ``server`` and ``served``)."""

from __future__ import annotations

import base64
import json
import math
import time
import uuid

import grpc
import pytest
from fleet import MEGABYTE, NUL, raised
from sqlalchemy import select

from perfctl.server.schema import jobs
from perfctl.server.storage import Storage
from perfctl.server.storage_errors import refused_value
from perfctl.v1 import fleet_pb2 as pb

BROKEN_MACHINES = [
    ({"machine_id": MEGABYTE}, "machine_id longer than"),
    ({"agent_version": "1.0\x1b[1m"}, "agent_version has control"),
    ({"inventory_json": "[1, 2]"}, "inventory_json is not a JSON object"),
    ({"inventory_json": "{"}, "inventory_json is not JSON"),
    ({"backends": ["perf_event", "x" * 100]}, "backends[1] longer than"),
    ({"backends": ["perf\nevent"]}, "backends[0] has control"),
]


@pytest.mark.parametrize("fields, message", BROKEN_MACHINES, ids=[m for _, m in BROKEN_MACHINES])
def test_register_refuses_a_broken_machine_info(server, fields, message):
    info = pb.MachineInfo(**{"name": "box-c", "machine_id": "m" * 32, "inventory_json": "{}", **fields})
    error = raised(lambda: server.agent.Register(pb.RegisterRequest(machine=info), metadata=server.agent_md("box-c")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


def test_register_refuses_broken_event_support(server):
    for entry, message in ((pb.EventSupport(event="x" * 300), "events[0].event longer than 256"),
                           (pb.EventSupport(event="cycles\n"), "events[0].event has control"),
                           (pb.EventSupport(event="cycles", reason="no\x1b[2J"), "events[0].reason has control")):
        info = pb.MachineInfo(name="box-c", events=[entry])
        error = raised(lambda info=info: server.agent.Register(pb.RegisterRequest(machine=info),
                                                               metadata=server.agent_md("box-c")))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


def test_heartbeat_job_reports_and_audits_are_bounded(server):
    md = server.agent_md("box-a")
    for request, message in ((pb.HeartbeatRequest(state=MEGABYTE), "state"),
                             (pb.HeartbeatRequest(state="idle", job_id="x"), "job_id is not a UUID")):
        error = raised(lambda request=request: server.agent.Heartbeat(request, metadata=md))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()
    server.agent.Heartbeat(pb.HeartbeatRequest(state="running", job_id=str(uuid.uuid4())), metadata=md)
    error = raised(lambda: server.agent.ReportJob(pb.JobReport(job_id="x" * 36, state="done"), metadata=md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "job_id is not a UUID" in error.details()
    audit_id = str(uuid.uuid4())
    report = f'{{"verdict": "trusted", "time_ns": {1 << 64}, "audit_id": "{audit_id}"}}'
    error = raised(lambda: server.agent.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report),
                                                    metadata=md))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "time_ns" in error.details()


def _audit(**changes) -> str:
    """An audit report shaped as agent/audit.py run_audit writes it (json.dumps: a kernel without runs has
    the CV NaN), with ``changes`` applied."""
    report = {
        "audit_id": str(uuid.uuid4()), "machine_id": "0035969ec53f6e7f", "hostname": "box-a", "time_ns": time.time_ns(),
        "seconds": 12.5, "kernel": "6.1.0-13-amd64", "microcode": "0x1000065",
        "aslr": "system randomize_va_space=2; perfctl turns it off for every run (personality)",
        "verdict": "trusted", "reasons": [], "complete": True, "not_checked": [], "backends": ["perf_event", "dbi"],
        "fit": {"a": 1.02, "b": 7.5, "intercept": 0.1, "a_interval": [0.9, 1.1], "b_interval": [6.0, 9.0],
                "intercept_interval": [-0.3, 0.4], "residual_scale": 0.2, "n": 10, "confidence": 0.95,
                "set_aside": 0, "method": "least squares"},
        "erratum": {"vendor": "AuthenticAMD", "family": 25, "models": None, "k_fldcw": 0.0, "note": "none known",
                    "source": "-"},
        "kernels": [{"kernel": "loop N=1000000", "backend": "perf_event", "expected": 2000004, "runs": 5,
                     "cv": 1e-6, "median_excess": 40, "page_faults": 1, "interrupts": 0},
                    {"kernel": "loop N=1000000", "backend": "dbi", "expected": 2000004, "runs": 1, "cv": math.nan,
                     "exact": True}],
        "checks": [{"item": "governor", "value": "performance", "meaning": "steady clock", "fix": None, "ok": True}],
        "runs": 5,
    }
    report.update(changes)
    return json.dumps(report)


def _report_audit(server, name: str, report_json: str):
    audit_id = report_json.split('"audit_id": "', 1)[1][:36]  # not parsed: some of these break json.loads
    return server.agent.ReportAudit(pb.AuditReport(audit_id=audit_id, report_json=report_json),
                                    metadata=server.agent_md(name))


def _register_inventory(server, name: str, inventory_json: str):
    return server.agent.Register(pb.RegisterRequest(machine=pb.MachineInfo(name=name, machine_id="m" * 32,
                                                                           inventory_json=inventory_json)),
                                 metadata=server.agent_md(name))


DEEP = 30_000  # json.loads raises RecursionError, not ValueError, long before this


def test_deeply_nested_json_documents_are_invalid_argument_not_unknown(server):
    for nested in ('{"cpu": ' + "[" * DEEP + "]" * DEEP + "}", '{"x": ' + "[" * 40 + "]" * 40 + "}"):
        error = raised(lambda nested=nested: _register_inventory(server, "box-c", nested))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "inventory_json is nested deeper than 32 levels"
    report = json.loads(_audit())
    report["kernels"] = "KERNELS"
    for depth in (DEEP, 40):
        text = json.dumps(report).replace('"KERNELS"', "[" * depth + "]" * depth)
        error = raised(lambda text=text: _report_audit(server, "box-a", text))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == "audit report is nested deeper than 32 levels"


def test_nan_and_infinity_in_json_documents_are_refused(server):
    for inventory, where in (('{"cpu": {"family": NaN}}', "NaN at cpu.family"), ('{"x": [1, -Infinity]}',
                                                                                  "-Infinity at x[1]")):
        error = raised(lambda inventory=inventory: _register_inventory(server, "box-c", inventory))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == f"inventory_json: {where} is not JSON"
    error = raised(lambda: _report_audit(server, "box-a", _audit(seconds=math.inf)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "audit report: Infinity at seconds is not JSON"
    # numbers JSON can write but floats cannot hold: 1e400 parses as inf, a 400-digit integer overflows
    error = raised(lambda: _register_inventory(server, "box-c", '{"x": 1, "cpu": {"flags": [1e400]}}'))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "inventory_json: a number at cpu.flags[0] is beyond +-2^64")
    huge = _audit().replace('"seconds": 12.5', '"seconds": ' + "9" * 400)
    error = raised(lambda: _report_audit(server, "box-a", huge))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "audit report: a number at seconds is beyond +-2^64")
    # the one NaN agent/audit.py writes (the CV of a kernel without 2 runs) is kept, as null
    report = _audit()
    _report_audit(server, "box-a", report)
    audit_id = json.loads(report, parse_constant=lambda c: None)["audit_id"]
    stored = next(a for a in server.query.GetAudits(pb.GetAuditsRequest(machine="box-a"),
                                                    metadata=server.client_md).audits if a.audit_id == audit_id)
    assert json.loads(stored.report_json, parse_constant=lambda c: pytest.fail(f"{c} stored"))["kernels"][1]["cv"] \
        is None


BROKEN_INVENTORIES = [
    ({"cpu": 5, "kernel": "x", "pmu": [1]}, "cpu is not an object"),
    ({"kernel": "x"}, "kernel is not an object"),
    ({"pmu": [1]}, "pmu is not an object"),
    ({"pmu": {"present": "yes"}}, "pmu.present is not true or false"),
    ({"pmu": {"present": False, "reason": 3}}, "pmu.reason is not a string"),
    ({"cpu": {"vendor": ["x"]}}, "cpu.vendor is not a string"),
    ({"cpu": {"family": "6"}}, "cpu.family is not an integer"),
    ({"cpu": {"family": True}}, "cpu.family is not an integer"),
    ({"kernel": {"release": "6.1\x1b[2J"}}, "kernel.release has control"),
    ({"governors": "performance"}, "governors is not a list"),
    ({"hostname": "a\u202eb"}, "hostname has control or non-printable"),
]


@pytest.mark.parametrize("inventory, message", BROKEN_INVENTORIES, ids=[m for _, m in BROKEN_INVENTORIES])
def test_an_inventory_of_the_wrong_shape_is_refused_at_register(server, inventory, message):
    error = raised(lambda: _register_inventory(server, "box-c", json.dumps(inventory)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("inventory_json: ") and message in error.details()


BROKEN_AUDITS = [
    ({"kernels": 5}, "kernels is not a list"),
    ({"kernels": [5]}, "kernels[0] is not an object"),
    ({"kernels": [{"kernel": "k\x1b[31m", "backend": "dbi", "expected": 1}]}, "kernels[0].kernel has control"),
    ({"kernels": [{"kernel": "k", "backend": "dbi"}]}, "kernels[0] lacks a kernel name, a backend or an expected"),
    ({"kernels": [{"kernel": "k", "backend": "dbi", "expected": "many"}]}, "kernels[0].expected is not a finite"),
    ({"fit": {"a": 1}}, "fit.a or fit.a_interval"),
    ({"fit": 5}, "fit is not an object"),
    ({"fit": {"a": 1, "b": 1, "a_interval": [1], "b_interval": [1, 2]}}, "fit.a_interval is not a pair"),
    ({"fit": {"a": 1, "b": 1, "a_interval": [1, "2"], "b_interval": [1, 2]}}, "fit.a_interval[1] is not a finite"),
    ({"checks": 5}, "checks is not a list"),
    ({"checks": [{"item": "governor", "ok": "no"}]}, "checks[0].ok is not true or false"),
    ({"reasons": ["fine\x1b]0;owned\x07"]}, "reasons[0] has control"),
    ({"kernel": 6}, "kernel is not a string"),
]


@pytest.mark.parametrize("changes, message", BROKEN_AUDITS, ids=[m for _, m in BROKEN_AUDITS])
def test_an_audit_report_of_the_wrong_shape_is_refused(server, changes, message):
    error = raised(lambda: _report_audit(server, "box-b", _audit(**changes)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("audit report: ") and message in error.details()


def test_a_real_inventory_and_a_full_audit_are_accepted_and_render(server):
    from perfctl.agent import inventory

    _register_inventory(server, "box-a", json.dumps(inventory.collect().to_dict()))
    _report_audit(server, "box-a", _audit())
    for command in (("machines",), ("machines", "--json"), ("audit", "report"), ("audit", "report", "--json")):
        result = server.fleet.client(*command, server=server.address)
        assert result.returncode == 0, (command, result.stderr)
        assert "NaN" not in result.stdout and "Traceback" not in result.stderr


def _token(*key) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


NUL_CALLS = [
    ("GetJobs", pb.GetJobsRequest(machine=NUL), "machine: holds a NUL character"),
    ("GetJobs", pb.GetJobsRequest(id_prefixes=["ab", "ab\x00"]), "id_prefixes[1]: holds a NUL character"),
    ("ListBenchmarks", pb.ListBenchmarksRequest(machine=NUL), "machine: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(machine=NUL), "machine: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(machine="box", benchmark=NUL), "benchmark: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(selection=pb.Selection(machine="box", labels={"k": NUL})),
     "selection.labels['k']: holds a NUL character"),
    ("GetSamples", pb.GetSamplesRequest(selection=pb.Selection(machine="box", labels={NUL: "v"})),
     "selection.labels (a key): holds a NUL character"),
    ("GetAudits", pb.GetAuditsRequest(machine=NUL), "machine: holds a NUL character"),
    ("ListAudits", pb.ListAuditsRequest(machine=NUL), "machine: holds a NUL character"),
    ("RetireMachine", pb.RetireMachineRequest(name=NUL), "name: holds a NUL character"),
    ("SubmitJob", pb.SubmitJobRequest(machines=["box"], job=pb.Job(commands=[pb.Command(name="t", argv=[
        "/bin/true", NUL])], repetitions=1)), "job.commands[0].argv[1]: holds a NUL character"),
    ("GetJobs", pb.GetJobsRequest(page_token=_token(0, "\x00")), "page_token: not one this server gave"),
    ("ListMachines", pb.ListMachinesRequest(page_token=_token("\x00")), "page_token: not one this server gave"),
]


def test_a_nul_in_any_text_of_a_request_is_refused_in_one_line(served):
    """Before: PostgreSQL answered UNKNOWN "Unexpected <class 'sqlalchemy.exc.DataError'> ... [SQL: SELECT"
    and logged a traceback per call; SQLite took the value."""
    fleet, _, query, md = served
    for name, request, details in NUL_CALLS:
        with pytest.raises(grpc.RpcError) as refused:
            answer = getattr(query, name)(request, metadata=md, timeout=30)
            if name == "GetSamples":
                list(answer)
        assert (refused.value.code(), refused.value.details().split(" (")[0] if "page_token" in details
                else refused.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, details), name
    log = fleet.log("server")
    assert "Traceback" not in log and "SELECT" not in log and "DataError" not in log, log[-3000:]


def test_a_value_the_database_refuses_is_one_line_without_the_sql(postgres):
    """The net under the checks (server/outage.py): the driver's DataError told apart, its first line kept."""
    storage = Storage(postgres.new_database())
    try:
        with pytest.raises(Exception) as raised, storage.engine.connect() as conn:
            conn.execute(select(jobs).where(jobs.c.machine == NUL)).all()
        line = refused_value(raised.value)
        assert line is not None and "\n" not in line and "SELECT" not in line and "NUL" in line, line
        assert refused_value(ValueError("x")) is None
    finally:
        storage.engine.dispose()
