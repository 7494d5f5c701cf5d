"""Enqueue inside the application's own transaction (``Storage.bind``, ``app.transaction``).

The application hands over its connection: a psycopg 3 ``Connection``, a SQLAlchemy
``Connection`` or ``Session`` (on the ``postgresql+psycopg`` driver), or a Django connection
(``django.db.connection``, ``connections["alias"]``; PostgreSQL through psycopg 3). The jobs
are written by the same statements as every enqueue, on that connection, in its open
transaction: they exist if and only if it commits, and the NOTIFY that wakes the workers is
delivered at that commit (PostgreSQL holds back the notifications of a transaction until it
commits and drops them when it rolls back).

The connection's ``search_path`` is the application's. An enqueue is one statement naming
conveyor's schema (``SELECT * FROM "conveyor".enqueue(…)``; the function sets its own path),
so it costs one round trip. The rarer batch writes (create, close) set the path to conveyor's
schema for their own statements only (``set_config(…, is_local => true)``) and put the
previous value back, pipelined with them. No savepoint is
taken: a savepoint per enqueue would give a transaction that enqueues hundreds of jobs as many
subtransactions (past 64, every snapshot on the server gets slower). A statement of conveyor's
that fails therefore fails the application's transaction, as any of its own statements would.

A connection is checked once (it is remembered weakly): it must reach the same server
(``pg_control_system().system_identifier``) and the same database as conveyor's own, and the
schema must be migrated there.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from conveyor.errors import StorageError, TransactionUnsupported
from conveyor.storage.postgres.connection import Database, Settings, translate

_IDENTITY = (
    "SELECT (SELECT system_identifier FROM pg_control_system()), current_database(), "
    "to_regclass(%s) IS NOT NULL"
)
# The old value is read in a subquery so that it is taken before set_config changes it.
_ENTER = ("SELECT s.old, set_config('search_path', %s, true) "
          "FROM (SELECT current_setting('search_path') AS old OFFSET 0) s")
_LEAVE = "SELECT set_config('search_path', %s, true)"

Identity = tuple[int, str]


def unwrap(connection: object) -> psycopg.Connection[Any]:
    """The psycopg 3 connection behind what the application passed, or
    ``TransactionUnsupported`` naming what it got."""
    if isinstance(connection, psycopg.Connection):
        return connection
    module = type(connection).__module__.partition(".")[0]
    raw: object = None
    if module == "sqlalchemy":
        # A Session (or scoped_session) begins its transaction and hands out its Connection;
        # a Connection's pooled DB-API connection holds the driver's own.
        if callable(getattr(connection, "get_bind", None)):
            connection = connection.connection()  # type: ignore[attr-defined]
        fairy = getattr(connection, "connection", None)
        raw = getattr(fairy, "driver_connection", None)
    elif module == "django":
        # django.db.connection (a proxy) or connections[alias]: connected on first use.
        ensure = getattr(connection, "ensure_connection", None)
        if callable(ensure):
            ensure()
        raw = getattr(connection, "connection", None)
    if isinstance(raw, psycopg.Connection):
        return raw
    what = type(raw if raw is not None else connection)
    raise TransactionUnsupported(
        f"cannot enqueue in the transaction of a {what.__module__}.{what.__qualname__}: give a "
        "psycopg 3 connection, a SQLAlchemy Connection or Session on postgresql+psycopg://, "
        "or a Django connection to PostgreSQL (psycopg 3)")


def usable(conn: psycopg.Connection[Any], where: str) -> pq.TransactionStatus:
    """The connection's transaction status; ``StorageError`` when its transaction failed."""
    status = conn.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise StorageError(f"PostgreSQL {where}: your transaction has failed already; roll "
                           "it back before enqueueing")
    return status


def _previous(enter: psycopg.Cursor[Any]) -> str:
    row = enter.fetchone()
    return str(row[0]) if row else ""


class BoundDatabase:
    """A ``Database`` whose every write runs on one application connection, inside whatever
    transaction it has open. Never closes or resets that connection: it is not conveyor's.

    Reads are not made through it (conveyor reads through its own connections), so ``read``
    refuses rather than query the application's ``search_path``.
    """

    def __init__(self, settings: Settings, where: str, conn: psycopg.Connection[Any]) -> None:
        # Unlike ``Connections``: no fork hook and no per-thread connections, which a
        # borrowed connection does not need.
        self.settings = settings
        self.where = where
        self._conn = conn
        self._path = f'"{settings.schema}"'

    def conn(self) -> psycopg.Connection[Any]:
        """The application's connection."""
        return self._conn

    @contextmanager
    def outages(self) -> Iterator[None]:
        """Translate driver errors; the connection stays the application's to handle."""
        try:
            yield
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc

    @contextmanager
    def write(self) -> Iterator[psycopg.Cursor[Any]]:
        """Statements in the application's transaction (or, on an autocommit connection with
        none open, in one of their own, committed at once like any statement there)."""
        conn = self._conn
        with self.outages():
            status = usable(conn, self.where)
            if conn.autocommit and status == pq.TransactionStatus.IDLE:
                with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(_LEAVE, (self._path,))
                    yield cur
                return
            # Pipelined: setting the path travels with conveyor's first statement that waits
            # for an answer, and putting it back with the last, so the pair costs no round
            # trip of its own.
            enter, cur = conn.cursor(row_factory=tuple_row), conn.cursor(row_factory=tuple_row)
            restored = False
            try:
                with conn.pipeline():
                    enter.execute(_ENTER, (self._path,))
                    yield cur
                    cur.execute(_LEAVE, (_previous(enter),))
                    restored = True
            finally:
                # An error of conveyor's own (a closed batch) leaves the transaction usable:
                # its path is put back; after a failed statement the transaction is lost anyway.
                if not restored and conn.info.transaction_status == pq.TransactionStatus.INTRANS:
                    cur.execute(_LEAVE, (_previous(enter),))
                enter.close()
                cur.close()

    @contextmanager
    def call(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor on the application's connection for one call of a server-side function
        named with its schema (``"conveyor".enqueue(…)``): one statement of the application's
        transaction, one round trip, its ``search_path`` left alone (the function sets its
        own). On an autocommit connection outside a transaction block the statement is its
        own transaction."""
        conn = self._conn
        with self.outages():
            usable(conn, self.where)
            with conn.cursor(row_factory=tuple_row) as cur:
                yield cur

    def read(self) -> psycopg.Connection[Any]:
        """Refused: conveyor reads through its own connections."""
        raise StorageError("a storage bound to your transaction only writes")

    def close(self) -> None:
        """Nothing to do: the connection is the application's."""


class Binder:
    """Checks application connections against conveyor's own database, once each."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._own: Identity | None = None
        self._seen: weakref.WeakKeyDictionary[psycopg.Connection[Any], Identity] = (
            weakref.WeakKeyDictionary())

    def database(self, connection: object) -> BoundDatabase:
        """A ``BoundDatabase`` on the application's connection, if it reaches the same
        database and schema; ``TransactionUnsupported`` otherwise."""
        conn = unwrap(connection)
        settings = self._db.settings
        theirs = self._seen.get(conn)
        if theirs is None:
            usable(conn, self._db.where)
            theirs = self._identify(conn, BoundDatabase(settings, self._db.where, conn))
            self._seen[conn] = theirs
        if self._own is None:
            with self._db.outages():
                self._own = self._identify(self._db.conn(), self._db)
        if theirs != self._own:
            raise TransactionUnsupported(
                f"your connection reaches database {theirs[1]!r} on another server or database "
                f"than conveyor's storage {self._db.where} ({self._own[1]!r}); a job can only "
                "join a transaction on the database it is stored in")
        return BoundDatabase(settings, self._db.where, conn)

    def _identify(self, conn: psycopg.Connection[Any], db: Database) -> Identity:
        table = f'"{self._db.settings.schema}".jobs'
        with db.outages(), conn.cursor(row_factory=tuple_row) as cur:
            row = cur.execute(_IDENTITY, (table,)).fetchone()
        assert row is not None
        if not row[2]:
            raise TransactionUnsupported(
                f"conveyor's schema {self._db.settings.schema!r} is not in database {row[1]!r} "
                "your connection reaches (is it migrated? run: conveyor migrate URL)")
        return int(row[0]), str(row[1])
