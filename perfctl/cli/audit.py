"""`perfctl audit`: check this machine's counters against kernels with exact counts (docs/audit.md);
`perfctl audit report`: the fleet's audits from the server, with drift and spread."""

from __future__ import annotations

import json

from perfctl.cli.options import (
    SIGNAL_EXIT,
    connection_of,
    connection_options,
    exit_status,
    loudness,
    positive_int,
    verbosity,
)
from perfctl.output import UsageError, console, say
from perfctl.report import write


def add_parser(sub) -> None:
    audit = sub.add_parser("audit", help="check this machine's counters against kernels with exact counts; "
                                         "'audit report': the fleet's audits from the server",
                           epilog=exit_status("0 trusted or no-PMU (what could not be checked is listed)",
                                              "3 degraded", "4 untrusted", "2 the calibration kernels cannot be "
                                              "built, bad usage, or (audit report) an unreachable server",
                                              f"{SIGNAL_EXIT}: a partial report, never used for corrections "
                                              "(docs/audit.md)"))
    audit.add_argument("action", nargs="?", choices=("report",), help="report: history, drift and spread")
    audit.add_argument("-r", "--repeat", type=positive_int, default=5, metavar="N", help="runs per kernel (5)")
    audit.add_argument("--json", action="store_true")
    connection_options(audit, "the fleet server (audit report)")
    loudness(audit, verbose="also the checks that passed",
             quiet="only a verdict that fails (degraded, untrusted), its reasons and fixes")


def run(args) -> int:
    """Exit 0 trusted or no-PMU (what could not be checked is listed), 3 degraded, 4 untrusted."""
    if args.action == "report":
        return _history(args)
    from perfctl.agent.audit import run_audit
    from perfctl.agent.audit_report import save_latest
    from perfctl.agent.build import BuildError
    from perfctl.report.audit import AuditFailed, AuditReport

    fmt = "json" if args.json else "table"
    try:
        result = run_audit(args.repeat)
    except BuildError as err:
        message = f"perfctl audit: cannot build the calibration kernels: {err}"
        if args.json:  # a script reading stdout gets a document either way
            write(AuditFailed(message), fmt, console())
        raise UsageError(message) from None
    try:
        kept = save_latest(result)
    except OSError as err:
        kept = None
        say(f"perfctl audit: could not keep the report for corrections: {err.strerror}")
    if not result.complete:
        say(f"perfctl audit: interrupted ({result.interrupted_by}): partial report"
            + (f" kept in {kept}" if kept else "") + "; corrections keep using the last complete audit")
    return write(AuditReport(result, verbosity(args)), fmt, console())


def _history(args) -> int:
    return write(audit_history(args), "json" if args.json else "table", console())


def audit_history(args):
    """Per machine its audit history with drift; per kernel the fleet-wide spread (Weaver & McKee, Figure 1):
    `perfctl audit report`'s table and `perfctl report --machines`'s page. The history is read as summaries,
    a page at a time, and only each machine's latest report whole: never every report in one answer."""
    from perfctl.analysis.audits import drift, fleet_spread
    from perfctl.cli.remote import call, pages
    from perfctl.report.fleet import AuditHistoryReport
    from perfctl.v1 import fleet_pb2 as pb

    history: dict[str, list[dict]] = {}  # per machine its audits' small fields (ListAudits), oldest first
    unreadable: dict[str, list[str]] = {}
    latest_ids: dict[str, str] = {}
    server = connection_of(args)
    for summary in pages(server, "ListAudits", pb.ListAuditsRequest(), "audits"):
        digest = _readable(summary.digest_json)
        if isinstance(digest, str):  # stored by a server that checked less: set aside and said, never a traceback
            unreadable.setdefault(summary.machine, []).append(f"audit {summary.audit_id}: {digest}")
        else:
            history.setdefault(summary.machine, []).append(digest)
            latest_ids[summary.machine] = summary.audit_id
    latest = {}  # per machine the whole report of its latest readable audit, one call each: the spread reads it
    for machine, audit_id in latest_ids.items():
        report = _readable(call(server, "GetAuditReport", pb.GetAuditReportRequest(audit_id=audit_id)).report_json)
        if isinstance(report, str):
            unreadable.setdefault(machine, []).append(f"audit {audit_id}: {report}")
        else:
            latest[machine] = {"fit": report.get("fit"), "kernels": report.get("kernels", [])}
    drifts = {machine: drift(reports) for machine, reports in history.items()}
    spread = fleet_spread(latest)
    notes = [f"{len(problems)} audit reports of machine {machine} could not be read and were set aside "
             f"(first: {problems[0]})" for machine, problems in sorted(unreadable.items())]
    return AuditHistoryReport(history, drifts, spread, notes, verbosity(args))


def _readable(document: str) -> dict | str:
    """An audit's report or digest (server/listings.py audit_digest) as analysis/audits.py reads it, or why
    it cannot be read."""
    from perfctl.analysis.audits import audit_problem

    try:
        report = json.loads(document)
    except (ValueError, RecursionError):
        return "not JSON"
    if isinstance(report, dict) and isinstance(report.get("problem"), str):
        return report["problem"]
    return audit_problem(report) or report
