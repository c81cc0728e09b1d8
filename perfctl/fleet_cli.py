"""The fleet commands of the CLI: server, agent, token, submit, machines, jobs, compare of machines.
Wiring only: the work is in server/, agent/daemon.py and perfctl/client.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time

import grpc
from rich.table import Table

from perfctl import client, security
from perfctl.output import EXIT_OK, UsageError, _console
from perfctl.text import cell, visible, visible_lines


def _metrics(address: str | None) -> None:
    if address:
        from prometheus_client import start_http_server

        host, port = security.split_address(address)
        start_http_server(port, addr=host)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)


def server(args) -> int:
    from perfctl.server.auth import TokenFileError, Tokens
    from perfctl.server.service import serve
    from perfctl.server.storage import Storage, StorageError, database_url

    try:
        credentials = security.server_credentials(
            security.TlsFiles(ca=args.tls_client_ca, cert=args.tls_cert, key=args.tls_key), args.listen, args.insecure)
        tokens = Tokens.load(args.tokens)
        storage = Storage(database_url(args.data_dir, args.db))
        _metrics(args.metrics)
    except (security.SecurityError, TokenFileError, StorageError, OSError) as err:
        raise UsageError(f"perfctl server: {err}") from None
    _logging()
    try:
        asyncio.run(serve(storage, tokens, args.listen, credentials, args.grace, decode_workers=args.decode_workers))
    except OSError as err:
        raise UsageError(f"perfctl server: {err}") from None
    finally:
        storage.close()
    return EXIT_OK


def agent(args) -> int:
    import pwd

    from perfctl.agent.daemon import AgentConfig, run_agent
    from perfctl.agent.spool import Spool, SpoolError, SpoolFull

    try:
        settings = client.settings(args)
        security.channel(settings.server, settings.tls, settings.insecure)  # refuses plaintext off loopback now
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"perfctl agent: {err}") from None
    if not args.allow:
        raise UsageError("perfctl agent: give at least one --allow PATTERN (the executables jobs may run)")
    if os.geteuid() == 0 and not args.user:
        raise UsageError("perfctl agent: running as root, give --user USER so benchmarks run unprivileged")
    relative = [pattern for pattern in args.allow if not pattern.startswith("/")]
    if relative:
        raise UsageError(f"perfctl agent: --allow {relative[0]!r}: a pattern must be an absolute path")
    if args.user:
        try:
            pwd.getpwnam(args.user)
        except KeyError:
            raise UsageError(f"perfctl agent: --user {args.user}: no such user") from None
        if os.geteuid() != 0:
            raise UsageError("perfctl agent: --user needs root (the agent opens the counters, the benchmark runs "
                             "as the user)")
    if not os.path.isdir(args.workdir):
        raise UsageError(f"perfctl agent: --workdir {args.workdir}: not a directory")
    config = AgentConfig(server=settings.server, name=args.name, spool_dir=args.spool, token=settings.token,
                         allow=args.allow, user=args.user, tls=settings.tls, insecure=settings.insecure,
                         workdir=args.workdir, audit_every_hours=args.audit_every)
    try:
        spool = Spool(args.spool)
    except (SpoolError, SpoolFull) as err:
        raise UsageError(f"perfctl agent: {err}") from None
    try:
        _metrics(args.metrics)
    except (security.SecurityError, OSError) as err:
        spool.close()
        raise UsageError(f"perfctl agent: {err}") from None
    _logging()
    try:
        asyncio.run(run_agent(config, spool))
    except SpoolError as err:  # the spool turned out damaged while running: said once, nothing more is run
        raise UsageError(f"perfctl agent: {err}") from None
    return EXIT_OK


def token(args) -> int:
    from perfctl.server.auth import TokenFileError, add_token

    try:
        value = add_token(args.file, "agent" if args.agent else "client", args.agent or args.client)
    except (TokenFileError, OSError) as err:
        raise UsageError(f"perfctl token: {err}") from None
    print(value)
    return EXIT_OK


def _call(args, method: str, request):
    """One QueryService call; connection and server errors become one-line usage errors."""
    try:
        stub, metadata, channel = client.query(args)
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"perfctl {args.command}: {err}") from None
    try:
        return getattr(stub, method)(request, metadata=metadata, timeout=60)
    except grpc.RpcError as err:
        raise UsageError(f"perfctl {args.command}: {err.code().name}: {err.details()}") from None
    finally:
        channel.close()


def submit(args) -> int:
    from perfctl.agent.events import UnknownEvent, parse_events
    from perfctl.v1 import fleet_pb2 as pb

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    groups, current = [], []
    for word in cmd:
        if word == ":::":
            groups.append(current)
            current = []
        else:
            current.append(word)
    groups.append(current)
    if not all(groups):
        raise UsageError("perfctl submit: no command given (usage: perfctl submit --machines A,B -- CMD ARGS)")
    if args.name and len(groups) > 1:
        raise UsageError("perfctl submit: --name names one command; several commands are named after their programs")
    try:
        events = [spec.label for spec in parse_events(args.events)] if args.events else []
    except UnknownEvent as err:
        raise UsageError(f"perfctl submit: {err}") from None
    job = pb.Job(commands=[pb.Command(name=args.name or os.path.basename(g[0]), argv=g) for g in groups],
                 repetitions=args.repeat, warmups=args.warmup, events=events, backend=",".join(args.backend),
                 timeout_seconds=args.timeout or 0)
    machines = [m.strip() for m in args.machines.split(",") if m.strip()]
    response = _call(args, "SubmitJob", pb.SubmitJobRequest(machines=machines, job=job))
    for machine, job_id in zip(machines, response.job_ids):
        print(f"{visible(machine)}\t{visible(job_id)}")
    return EXIT_OK


def _ago(ns: int) -> str:
    if not ns:
        return "never"
    seconds = max(0.0, time.time() - ns / 1e9)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def machines(args) -> int:
    from perfctl.v1 import fleet_pb2 as pb

    response = _call(args, "ListMachines", pb.ListMachinesRequest())
    if args.json:
        print(json.dumps([{"name": m.name, "machine_id": m.machine_id, "connected": m.connected,
                           "audit_verdict": m.audit_verdict or None, "audit_time_ns": m.audit_time_ns or None,
                           "last_heard_ns": m.last_heard_ns, "samples": m.samples, "backends": list(m.backends),
                           "inventory": _inventory(m.inventory_json),
                           "events": [{"event": e.event, "supported": e.supported, "reason": e.reason}
                                      for e in m.events]} for m in response.machines], indent=2))
        return EXIT_OK
    table = Table(title="machines", title_justify="left")
    for column in ("name", "connected", "last heard", "samples", "CPU", "kernel", "PMU", "audit", "backends",
                   "counters available", "unsupported"):
        table.add_column(column, overflow="fold")
    for m in response.machines:
        inv = _inventory(m.inventory_json)
        # every string here is the agent's (names, inventory, events): shown literally, see perfctl/text.py
        table.add_row(*map(cell, (
            m.name, "yes" if m.connected else "no", _ago(m.last_heard_ns), str(m.samples),
            f"{_item(inv, 'cpu', 'vendor')} {_item(inv, 'cpu', 'family')}/{_item(inv, 'cpu', 'model')}",
            _item(inv, "kernel", "release"),
            {True: "present", False: "absent"}.get(_item(inv, "pmu", "present"), "?"),
            f"{m.audit_verdict} ({_ago(m.audit_time_ns)})" if m.audit_verdict else "never",
            ", ".join(m.backends),
            ", ".join(e.event for e in m.events if e.supported),
            ", ".join(e.event for e in m.events if not e.supported))))
    _console().print(table)
    return EXIT_OK


def _inventory(text: str) -> dict:
    """An agent's inventory as the server stored it; anything but a JSON object (an older server checked
    less) reads as empty, so the listing shows '?' rather than failing for every machine."""
    try:
        inventory = json.loads(text or "{}", parse_constant=_not_json)
    except (ValueError, RecursionError):
        return {}
    return inventory if isinstance(inventory, dict) else {}


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def _item(inventory: dict, section: str, key: str):
    """inventory[section][key] when it is a plain value, else '?'."""
    value = inventory.get(section)
    value = value.get(key, "?") if isinstance(value, dict) else "?"
    return value if isinstance(value, (str, int, float, bool)) else "?"


def jobs(args) -> int:
    from perfctl.v1 import fleet_pb2 as pb

    response = _call(args, "GetJobs", pb.GetJobsRequest())
    if args.json:
        print(json.dumps([{"job_id": j.job_id, "machine": j.machine, "state": j.state, "message": j.message,
                           "samples": j.samples, "submitted_ns": j.submitted_ns, "updated_ns": j.updated_ns,
                           "commands": [list(c.argv) for c in j.job.commands], "repetitions": j.job.repetitions}
                          for j in response.jobs], indent=2))
        return EXIT_OK
    table = Table(title="jobs", title_justify="left")
    for column in ("job", "machine", "state", "runs done", "commands", "updated", "message"):
        table.add_column(column, overflow="fold")
    for j in response.jobs:
        # argv is the submitting client's, machine and message the agent's: shown literally (perfctl/text.py)
        table.add_row(*map(cell, (j.job_id[:8], j.machine, j.state, str(j.samples),
                                  " ::: ".join(" ".join(c.argv) for c in j.job.commands), _ago(j.updated_ns),
                                  j.message)))
    _console().print(table)
    return EXIT_OK


def compare_machines(args, metrics, parameters) -> int:
    from perfctl.v1 import fleet_pb2 as pb

    request = pb.CompareRequest(machine_a=args.a, machine_b=args.b, benchmarks=args.benchmark or [],
                                metrics=metrics or [], alpha=parameters.alpha, confidence=parameters.confidence,
                                proportion=parameters.proportion, margin=parameters.margin, paired=parameters.paired,
                                correction=parameters.correction, precision=parameters.precision,
                                seed=parameters.seed, format=args.format,
                                interference_limit=args.interference_limit,
                                exclude_interfered=args.exclude_interfered)
    response = _call(args, "Compare", request)
    if response.exit_code == 2:
        raise UsageError(response.output.strip().replace("\n", " "))
    sys.stdout.write(response.output if args.format == "json" else visible_lines(response.output))
    return response.exit_code


def audit_report(args) -> int:
    """Per machine its audit history with drift; per kernel the fleet-wide spread (Weaver & McKee, Figure 1)."""
    from perfctl.analysis.audits import audit_problem, drift, fleet_spread
    from perfctl.v1 import fleet_pb2 as pb

    response = _call(args, "GetAudits", pb.GetAuditsRequest())
    history: dict[str, list[dict]] = {}
    unreadable: dict[str, list[str]] = {}
    for record in response.audits:
        try:
            report = json.loads(record.report_json)
        except (ValueError, RecursionError):
            report = None
        problem = "not JSON" if report is None else audit_problem(report)
        if problem:  # stored by a server that checked less: set aside and said, never a traceback
            unreadable.setdefault(record.machine, []).append(f"audit {record.audit_id}: {problem}")
        else:
            history.setdefault(record.machine, []).append(report)
    drifts = {machine: drift(reports) for machine, reports in history.items()}
    spread = fleet_spread({machine: reports[-1] for machine, reports in history.items()})
    notes = [f"{len(problems)} audit reports of machine {machine} could not be read and were set aside "
             f"(first: {problems[0]})" for machine, problems in sorted(unreadable.items())]
    if args.json:
        print(json.dumps({"machines": {m: {"audits": len(r), "latest": r[-1]["verdict"], "drift": drifts[m]}
                                       for m, r in history.items()}, "spread": spread, "notes": notes}, indent=2))
        return EXIT_OK
    console = _console()
    table = Table(title="audits", title_justify="left")
    for column in ("machine", "audits", "latest", "when", "drift"):
        table.add_column(column, overflow="fold")
    for machine, reports in sorted(history.items()):
        table.add_row(*map(cell, (machine, str(len(reports)), reports[-1]["verdict"], _ago(reports[-1]["time_ns"]),
                                  "; ".join(drifts[machine]) or "none")))
    console.print(table)
    table = Table(title="fleet-wide spread of instruction counts per kernel (latest audits)", title_justify="left")
    for column in ("kernel", "machines", "source", "median", "CV"):
        table.add_column(column)
    for row in spread:
        table.add_row(*map(cell, (row["kernel"], str(row["machines"]), row["source"], f"{row['median']:,.0f}",
                                  "-" if row["cv"] is None else f"{row['cv']:.3e}")))
    console.print(table)
    for note in notes:
        console.print(cell(f"note: {note}"))
    return EXIT_OK
