"""`perfctl agent`: the agent daemon of a test machine (agent/daemon.py, docs/operations.md)."""

from __future__ import annotations

import os

from perfctl.cli.options import connection_of, connection_options, exit_status, loudness, verbosity
from perfctl.output import EXIT_OK, UsageError


def add_parser(sub) -> None:
    agent = sub.add_parser("agent", help="run the agent daemon on a test machine",
                           epilog=exit_status("0 stopped by SIGTERM, SIGINT or SIGHUP", "1 a stop that did not end "
                                              "within 12 s: every thread's stack is in the log", "2 bad usage or "
                                              "configuration, or a spool that is locked by another agent or "
                                              "damaged (docs/operations.md)"))
    connection_options(agent, "the server to stream to")
    agent.add_argument("--name", help="this machine's name (its token must be for this name; default: the host "
                                      "name)")
    agent.add_argument("--spool", metavar="DIR", help="durable local spool directory (default: spool in the state "
                                                      "directory, /var/lib/perfctl for root)")
    agent.add_argument("--allow", action="append", default=[], metavar="PATTERN",
                       help="executables this agent may run: a glob on the real path (* stays within a directory, "
                            "** crosses /); repeatable")
    agent.add_argument("--user", metavar="USER", help="run benchmarks as USER (required when the agent is root)")
    agent.add_argument("--workdir", default="/", metavar="DIR", help="benchmarks' working directory (/)")
    agent.add_argument("--audit-every", type=float, default=24.0, metavar="HOURS",
                       help="re-audit the counters this often (and at once when kernel or microcode changed); 0: never")
    agent.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here (plain HTTP: off "
                                                                "loopback only with --insecure)")
    loudness(agent, verbose="debug lines in the log", quiet="only warnings and errors in the log")


def run(args) -> int:
    import pwd

    from perfctl import client, security, state
    from perfctl.agent.daemon import AgentConfig, run_agent
    from perfctl.agent.spool import Spool, SpoolError, SpoolFull
    from perfctl.cli.remote import serve_metrics, start_logging

    try:
        settings = client.settings(connection_of(args), role="agent")
        for server in security.split_servers(settings.server):  # each refuses plaintext off loopback now
            security.channel(server, settings.tls, settings.insecure)
    except (client.ClientError, security.SecurityError) as err:
        raise UsageError(f"perfctl agent: {err}") from None
    args.name = args.name or state.host_name()
    if not args.spool:
        try:
            args.spool = os.path.join(state.ensure_dir(), "spool")
        except OSError as err:
            raise UsageError(f"perfctl agent: no --spool, and the state directory cannot hold one: {err}") from None
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
        serve_metrics(args.metrics, settings.insecure)
    except (security.SecurityError, OSError) as err:
        spool.close()
        raise UsageError(f"perfctl agent: {err}") from None
    start_logging(verbosity(args))
    import asyncio  # here, not at import: every command builds this one's parser, and asyncio costs ~70 ms

    try:
        asyncio.run(run_agent(config, spool))
    except SpoolError as err:  # the spool turned out damaged while running: said once, nothing more is run
        raise UsageError(f"perfctl agent: {err}") from None
    return EXIT_OK
