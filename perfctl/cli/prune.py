"""`perfctl prune`: delete old runs from the server's database (server/storage.py ``prune``; the server's own
--retain does the same on a schedule). Run on the server's host, against its database, while it serves:
each batch is a short transaction of its own, so ingest goes on. Old is by the server's clock too: a run
goes once both its start (its agent's clock) and its receipt (the server's) are before the cutoff."""

from __future__ import annotations

import os
import time

from perfctl.cli.options import duration, exit_status, loudness
from perfctl.output import EXIT_OK, UsageError
from perfctl.text import visible


def add_parser(sub) -> None:
    prune = sub.add_parser("prune", help="delete runs older than a duration from the server's database",
                           description="Delete the runs that started AND that the server received longer ago than "
                                       "--older-than: the receipt is the server's clock, so an agent whose clock is "
                                       "slow cannot make the runs it just measured old enough to delete. Audits, jobs "
                                       "and the performance history (each job's points, each series' changes) are "
                                       "kept.",
                           epilog=exit_status("0 pruned (or, with --dry-run, counted)", "2 bad usage, an unknown "
                                              "machine, or a database that cannot be opened"))
    prune.add_argument("--older-than", type=duration, required=True, metavar="DURATION",
                       help="runs received by the server and started longer ago than this (90d, 12h)")
    prune.add_argument("--machine", metavar="NAME", help="only this machine's runs")
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    prune.add_argument("--data-dir", metavar="DIR", help="the server's SQLite directory (default: the state "
                                                         "directory, as `perfctl server` with no options)")
    prune.add_argument("--db", metavar="URL", help="the server's PostgreSQL URL instead")
    loudness(prune, verbose="accepted (each machine's count is always shown)", quiet="only errors")


def run(args) -> int:
    from perfctl import state
    from perfctl.server.storage import DatabaseUnavailable, Storage, StorageError, database_url

    before_ns = time.time_ns() - int(args.older_than * 1e9)
    if not args.db:  # a database to prune, not one made empty here (and a state directory made with it)
        data_dir = args.data_dir or state.state_dir()
        if not os.path.isfile(os.path.join(data_dir, "perfctl.db")):
            raise UsageError(f"perfctl prune: no server database in {data_dir} (give the server's --data-dir or --db)")
        args.data_dir = data_dir
    try:
        storage = Storage(database_url(args.data_dir, args.db))
    except StorageError as err:
        raise UsageError(f"perfctl prune: {err}") from None
    try:
        removed = storage.prune(before_ns, args.machine, dry_run=args.dry_run)
    except (StorageError, DatabaseUnavailable) as err:  # the latter: the database went away meanwhile
        raise UsageError(f"perfctl prune: {err}") from None
    finally:
        storage.close()
    if not args.quiet:
        cutoff = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(before_ns / 1e9))
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{verb} {sum(removed.values())} runs received and started before {cutoff}"
              + ("; audits, jobs and machines are kept" if not args.dry_run else ""))
        for name, count in sorted(removed.items()):  # one line per machine: machine<TAB>runs
            print(f"{visible(name)}\t{count}")
    return EXIT_OK
