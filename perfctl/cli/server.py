"""`perfctl server`: the fleet server (gRPC, storage, metrics; server/, docs/operations.md)."""

from __future__ import annotations

import contextlib
import logging
import os

from perfctl.cli.options import duration, exit_status, loudness, non_negative_int, positive_int, seconds, verbosity
from perfctl.output import EXIT_OK, UsageError, say


def default_decode_workers() -> int:
    """One decode worker per CPU the server may run on (its affinity, not the machine's count), at most 4.
    The server process itself needs no core of its own: its event loop waits on the workers and on the
    database, and SQLite inserts outside the GIL. Fewer workers than CPUs left a core idle while the one
    worker was the bottleneck (bench/ingest_rate.py on 2 CPUs: ~14,000 samples/s with one worker, ~21,000
    with two); beyond 4, decoding (~30,000 samples/s a worker) outruns any database's inserts."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def add_parser(sub) -> None:
    server = sub.add_parser("server", help="run the fleet server (gRPC, storage, metrics)",
                            epilog=exit_status("0 stopped by SIGTERM, SIGINT or SIGHUP after draining in-flight "
                                               "batches", "2 bad usage or configuration (tokens file, TLS, "
                                               "database, an address in use) (docs/operations.md)"))
    server.add_argument("--listen", default="127.0.0.1:7433", metavar="HOST:PORT")
    server.add_argument("--data-dir", metavar="DIR", help="SQLite database in DIR (the embedded default; default "
                                                          "DIR: the state directory, /var/lib/perfctl for root)")
    server.add_argument("--db", metavar="URL", help="a PostgreSQL URL instead, postgresql://user@host/db")
    server.add_argument("--tokens", metavar="FILE", help="tokens file (perfctl token add; default: tokens in the "
                                                         "state directory, made at the first start with a client "
                                                         "and an agent token for this host)")
    server.add_argument("--tls-cert", metavar="FILE")
    server.add_argument("--tls-key", metavar="FILE")
    server.add_argument("--tls-client-ca", metavar="FILE", help="require client certificates signed by this CA")
    server.add_argument("--insecure", action="store_true", help="allow plaintext on a non-loopback address "
                                                                "(--listen without TLS, --metrics)")
    server.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here (plain HTTP: off "
                                                                 "loopback only with --insecure)")
    server.add_argument("--grace", type=seconds, default=10.0, help="seconds to drain in-flight batches on stop")
    server.add_argument("--decode-workers", type=non_negative_int, default=default_decode_workers(), metavar="N",
                        help="processes that decode and validate incoming batches (0: in the server; default: the "
                             "CPUs this server may run on, at most 4)")
    server.add_argument("--max-compare-runs", type=positive_int, default=None, metavar="N",
                        help="the most runs one side of a comparison may select; a larger request is refused "
                             "(RESOURCE_EXHAUSTED) rather than answered out of memory (default 2,000,000: about "
                             "100 bytes each while compared; docs/operations.md)")
    server.add_argument("--retain", type=duration, default=None, metavar="DURATION",
                        help="delete runs older than this (received by the server and started longer ago), at start "
                             "and hourly (180d; m is minutes: 6m keeps runs six "
                             "minutes; months and years are refused, give days); audits, jobs and machines are "
                             "kept (default: keep everything; perfctl prune deletes on demand)")
    server.add_argument("--no-migrate", action="store_true",
                        help="refuse to start on a database older than this perfctl instead of migrating it (a "
                             "database a newer perfctl migrated is always refused: docs/operations.md)")
    server.add_argument("--job-lease", type=duration, default=None, metavar="DURATION",
                        help="a dispatched job whose agent is not heard from for this long becomes lost (perfctl "
                             "jobs --retry queues it again); every heartbeat renews it, and agents heartbeat at "
                             "least three times per lease (default 5m, at least 3s)")
    server.add_argument("--history-line", type=history_line, default=("branch",), metavar="LABEL[,LABEL]",
                        help="the labels whose values name a line of development in the performance history: each "
                             "value a series of its own (default branch; none: one series per benchmark and "
                             "metric; every replica must be given the same; docs/history.md)")
    loudness(server, verbose="debug lines in the log", quiet="only warnings and errors in the log")


def history_line(text: str) -> tuple[str, ...]:
    """--history-line: label keys, comma-separated, or ``none``."""
    import argparse

    from perfctl.model import label_problem

    if text == "none":
        return ()
    keys = tuple(dict.fromkeys(key.strip() for key in text.split(",")))
    for key in keys:
        if label_problem(key, "x"):
            raise argparse.ArgumentTypeError(f"{key!r} is not a label key ({label_problem(key, 'x')})")
    return keys


def run(args) -> int:
    from perfctl import security, state
    from perfctl.cli.remote import serve_metrics, start_logging
    from perfctl.server.auth import TokenFileError, Tokens
    from perfctl.server.jobs import DEFAULT_LEASE_S, MIN_LEASE_S
    from perfctl.server.schema_version import SchemaWatch
    from perfctl.server.selection import MAX_COMPARE_RUNS
    from perfctl.server.service import serve
    from perfctl.server.storage import Storage, StorageError, database_url

    if args.job_lease is not None and args.job_lease < MIN_LEASE_S:
        raise UsageError(f"perfctl server: --job-lease must be at least {MIN_LEASE_S:g}s (agents heartbeat at most "
                         "once a second, three times per lease)")
    try:
        credentials = security.server_credentials(
            security.TlsFiles(ca=args.tls_client_ca, cert=args.tls_cert, key=args.tls_key), args.listen, args.insecure)
        if args.tokens is None or (args.data_dir is None and args.db is None):
            directory = state.ensure_dir()
            args.data_dir = args.data_dir or (None if args.db else directory)
            if args.tokens is None:
                args.tokens = os.path.join(directory, state.TOKENS)
                if not os.path.exists(args.tokens):
                    _first_start(args.tokens, args.listen)
        tokens = Tokens.load(args.tokens)
        serve_metrics(args.metrics, args.insecure)  # refused before the database is touched (or migrated)
        storage = Storage(database_url(args.data_dir, args.db), migrate=not args.no_migrate)
    except (security.SecurityError, TokenFileError, StorageError, OSError) as err:
        raise UsageError(f"perfctl server: {err}") from None
    start_logging(verbosity(args))
    if args.retain is not None:  # what the duration was read as, said once (6m is minutes, not months)
        from perfctl.units import span

        logging.getLogger("perfctl.server").info("retention: keeping runs for %s (older ones are deleted at start "
                                                 "and then hourly)", span(args.retain))
    import asyncio  # here, not at import: every command builds this one's parser, and asyncio costs ~70 ms

    try:
        with SchemaWatch(storage.engine) as schema:  # a newer perfctl migrating the database stops this one
            asyncio.run(serve(storage, tokens, args.listen, credentials, args.grace,
                              decode_workers=args.decode_workers, compare_limit=args.max_compare_runs or
                              MAX_COMPARE_RUNS, lease_s=args.job_lease or DEFAULT_LEASE_S, retain_s=args.retain,
                              history_line=args.history_line))
    except OSError as err:
        raise UsageError(f"perfctl server: {err}") from None
    finally:
        storage.close()
    if schema.problem:
        raise UsageError(f"perfctl server: {schema.problem}")
    return EXIT_OK


def _first_start(tokens: str, listen: str) -> None:
    """A zero-config server's first start: its tokens file, with a client token and an agent token for this
    host, each also in a file of its own (mode 600) where the agent and the commands on this host look
    (perfctl/state.py); and how to use them, said once."""
    from perfctl import state
    from perfctl.server.auth import add_token

    directory = os.path.dirname(tokens)
    host = state.host_name()
    # the tokens file is made under another name and renamed last: a first start that fails on the way (a
    # token file that cannot be written) leaves no tokens file, so the next start makes all three again
    pending = tokens + ".new"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pending)
    for role, name, where in (("client", "local", state.CLIENT_TOKEN), ("agent", host, state.AGENT_TOKEN)):
        value = add_token(pending, role, name)
        fd = os.open(os.path.join(directory, where), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
    os.replace(pending, tokens)
    say(f"perfctl server: first start: {tokens} made with a client token ({directory}/{state.CLIENT_TOKEN}) and an "
        f"agent token for this host, {host!r} ({directory}/{state.AGENT_TOKEN}). On this host, `perfctl agent "
        f"--allow PATTERN` and `perfctl machines` find them; for other hosts add tokens with `perfctl token add "
        f"--file {tokens}` and serve on a routable address with TLS (docs/operations.md). Listening on {listen}.")
