"""The storage's errors, and the one place where the database driver's errors become them.

Every method of ``Storage`` (server/storage.py, decorated with ``database_errors``) raises, when the database
cannot be reached or dropped the connection (PostgreSQL stopped or restarting, a network cut, SQLite locked
past its busy timeout), ``DatabaseUnavailable``, whatever layer saw it first: SQLAlchemy (OperationalError,
InterfaceError, an invalidated connection) or the driver's own cursor (the raw inserts and reads of
storage.py). Its callers handle one type: the gRPC layer answers UNAVAILABLE "database unavailable; try
again" (server/outage.py), the background tasks restart under perfctl/supervise.py.
"""

from __future__ import annotations

import functools
import inspect

from sqlalchemy import exc


class StorageError(Exception):
    """The database cannot be used as asked; one line for the user."""


class NoSuchJob(StorageError):
    """A job id the database does not hold; one line."""


class JobReportError(ValueError):
    """A job report the job's state cannot take (a state back, more runs than the job has); one line."""


class DatabaseUnavailable(Exception):
    """The database cannot be reached now; asking again later may work. Not a StorageError: that is a refusal
    of the request (FAILED_PRECONDITION), this is the server's state (UNAVAILABLE). Its text names the
    driver's first line, for the server's log, which may hold paths and addresses: clients never see it."""


def _unavailable(err: BaseException) -> bool:
    if isinstance(err, (exc.OperationalError, exc.InterfaceError)):
        return True
    if isinstance(err, exc.DBAPIError) and err.connection_invalidated:
        return True
    # the driver's own cursors (storage.py's raw inserts and reads) raise the driver's classes, which DB-API 2
    # (PEP 249) names alike in every driver (sqlite3, psycopg): found by name, no driver imported here
    return any(cls.__name__ in ("OperationalError", "InterfaceError") for cls in type(err).__mro__)


def unavailable(err: BaseException) -> DatabaseUnavailable | None:
    """``err`` as DatabaseUnavailable when it says the database cannot be reached, else None. The one test,
    used by Storage's methods (database_errors) and by the gRPC layer for any module that reaches the database
    through Storage.write() or its engine (server/outage.py)."""
    if isinstance(err, DatabaseUnavailable):
        return err
    if not _unavailable(err):
        return None
    original = getattr(err, "orig", None) or err
    first = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
    return DatabaseUnavailable(f"database unavailable: {first}")


def refused_value(err: BaseException) -> str | None:
    """The driver's first line when ``err`` says the database refuses a value of the query (DB-API 2's
    DataError, from SQLAlchemy or the driver's own cursor: a NUL in PostgreSQL's text, a number out of a
    column's range), else None. The SQL and its parameters are left out: they may hold the whole request."""
    if not any(cls.__name__ == "DataError" for cls in type(err).__mro__):
        return None
    original = getattr(err, "orig", None) or err
    text = str(original).strip()
    return text.splitlines()[0][:200] if text else type(original).__name__


def _wrap(function):
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(self, *args, **kwargs):
            try:
                yield from function(self, *args, **kwargs)
            except Exception as err:
                translated = unavailable(err)
                if translated is None:
                    raise
                raise translated from err
        return generator

    @functools.wraps(function)
    def method(self, *args, **kwargs):
        try:
            return function(self, *args, **kwargs)
        except Exception as err:
            translated = unavailable(err)
            if translated is None:
                raise
            raise translated from err
    return method


def database_errors(cls):
    """Class decorator: every public method of ``cls`` raises DatabaseUnavailable for the driver's errors
    of an unreachable database (generators too, while they are iterated)."""
    wrapped = set()
    for klass in cls.__mro__[:-1]:  # its mixins' methods too (server/machine_records.py), each once
        for name, member in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(member) and name not in wrapped:
                wrapped.add(name)
                setattr(cls, name, _wrap(member))
    return cls
