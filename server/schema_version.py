"""Which schema the database holds, against the Alembic revisions this perfctl knows: a replica serves only a
schema it knows.

Replicas of different versions share one database during an upgrade. Before this check, an older replica
kept serving after a newer one migrated the database (issue 29: a job of five /bin/false runs finished
through the old one had failed_runs=None and `jobs --wait` exited 0), and one started on a migrated database
said only "Can't locate revision '0007'". Now, at start (Storage.upgrade) and every SCHEMA_CHECK_S while
serving (SchemaWatch), a revision this perfctl does not know ends the server with one line saying which is
newer; a database older than this perfctl is migrated, or with `--no-migrate` refused with one line."""

from __future__ import annotations

import logging
import os
import signal
import threading
from functools import cache
from pathlib import Path

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from perfctl.server import migrations

log = logging.getLogger("perfctl.server")

SCHEMA_CHECK_S = 10.0  # how soon a serving replica notices that a newer perfctl migrated its database


class SchemaMismatch(Exception):
    """The database's schema is not one this perfctl may serve as it is; one line for the operator."""


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory(str(Path(migrations.__file__).parent))


def known_heads() -> tuple[str, ...]:
    """The newest revisions this perfctl knows (one, unless its history branches)."""
    return tuple(sorted(_scripts().get_heads()))


def _known(revision: str) -> bool:
    return any(script.revision == revision for script in _scripts().walk_revisions())


def database_revisions(connection) -> tuple[str, ...]:
    """The revisions the database is stamped with (alembic_version); () for a database without perfctl's
    schema. Read without the migration scripts, so a revision of a newer perfctl reads as well; and read with
    one plain query, not through alembic's MigrationContext, which logs two INFO lines ("Context impl ...",
    "Will assume ... DDL") each time: every SCHEMA_CHECK_S on every replica, ~17,000 lines a day."""
    if not sa.inspect(connection).has_table("alembic_version"):
        return ()
    return tuple(sorted(connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars()))


def problem(connection, migrate: bool = True) -> str | None:
    """Why this perfctl must not serve the database behind ``connection`` as it is, or None: a revision it
    does not know (a newer perfctl migrated it), or, unless ``migrate``, one older than its own."""
    current, heads = database_revisions(connection), known_heads()
    unknown = [revision for revision in current if not _known(revision)]
    if unknown:
        return (f"the database was migrated by a newer perfctl (revision {', '.join(unknown)}; this one knows up "
                f"to {', '.join(heads)}): upgrade this perfctl, or stop it")
    if not migrate and set(current) != set(heads):
        at = f"at revision {', '.join(current)}" if current else "without perfctl's schema"
        return (f"the database is {at}, older than this perfctl ({', '.join(heads)}), and --no-migrate is given: "
                "start without --no-migrate to migrate it")
    return None


def refuse_unknown(connection, migrate: bool = True) -> None:
    """At start, before any migration runs: SchemaMismatch (one line) for a schema not to be served."""
    found = problem(connection, migrate)
    if found:
        raise SchemaMismatch(found)


class SchemaWatch:
    """While the server runs: every ``every`` seconds, the database's revision (one small query); when a
    newer perfctl has migrated it, the server is stopped as SIGTERM stops it (in-flight calls drain) and
    ``problem`` says why, for `perfctl server` to print and exit non-zero. A database that cannot be reached
    is not a schema problem: the next check tries again."""

    def __init__(self, engine, every: float = SCHEMA_CHECK_S):
        self.engine, self.every = engine, every
        self.problem: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="perfctl-schema-watch", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)  # a check stuck on a hung database must not hold up the exit

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            try:
                with self.engine.connect() as connection:
                    found = problem(connection)
            except Exception as err:  # noqa: BLE001 - an outage or a driver error: not this watch's to judge
                log.debug("schema check: %s", str(err).splitlines()[0] if str(err) else type(err).__name__)
                continue
            if found:
                self.problem = found  # said once, as the server exits (perfctl/cli/server.py)
                os.kill(os.getpid(), signal.SIGTERM)  # the server's own stop: drain, then exit
                return
