"""PostgreSQL connections: URL parsing, one connection per thread, fork safety, transactions,
and the translation of driver errors into conveyor's storage errors.

A connection must never cross a ``fork``: the child would talk on the parent's socket, and
closing it there would end the parent's session. Connections are therefore keyed by (pid,
thread); a child opens its own and keeps the inherited ones referenced, untouched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import select
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import parse_qsl, quote, urlencode

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from conveyor.errors import StorageError, StorageUnavailable, StorageURLError
from conveyor.storage import redact, without_secrets

CONNECT_TIMEOUT = 10
DEFAULT_SCHEMA = "conveyor"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,50}$")
# SQLSTATE classes that say the server cannot be used now rather than that a statement is
# wrong: connection exceptions, insufficient resources, operator intervention (shutdown,
# terminated backend), system errors; plus deadlocks and serialization failures, which a
# retry of the same call resolves.
_OUTAGE_CLASSES = ("08", "53", "57", "58", "40")

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Settings:
    """What a ``postgresql://`` URL says: the libpq URL, conveyor's schema, LISTEN or not,
    VACUUM by hand or not."""

    url: str
    conninfo: str
    schema: str
    listen: bool
    #: Whether ``Storage.tidy`` may VACUUM the jobs table (``?vacuum=0``: autovacuum alone).
    vacuum: bool = True

    @property
    def channel(self) -> str:
        """The NOTIFY channel the schema's triggers ring (``functions/notify_pending.sql``)."""
        return f"conveyor_{self.schema}"

    @property
    def done_channel(self) -> str:
        """The channel the acks wake result waiters on (``functions/wake_waiters.sql``)."""
        return f"conveyor_d_{self.schema}"

    @property
    def batch_channel(self) -> str:
        """The channel a finishing batch rings with its id (``notify_batch_finished.sql``)."""
        return f"conveyor_b_{self.schema}"


def parse_postgres_url(url: str) -> Settings:
    """Split conveyor's options (``schema``, ``listen``, ``vacuum``) off a ``postgresql://``
    URL; every other query parameter (``sslmode``, ``application_name``, …) goes to libpq."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("postgresql", "postgres"):
        raise StorageURLError(f"not a PostgreSQL URL: {redact(url)!r}; expected "
                              "postgresql://user:password@host:5432/database?schema=conveyor")
    base, _, query = rest.partition("?")
    schema = DEFAULT_SCHEMA
    flags = {"listen": True, "vacuum": True}
    passed: list[tuple[str, str]] = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "schema":
            schema = value
        elif name in flags:
            if value.lower() not in _TRUE + _FALSE:
                raise StorageURLError(f"{name}={value!r} in {redact(url)!r}: expected 1 or 0")
            flags[name] = value.lower() in _TRUE
        else:
            passed.append((name, value))
    if not _IDENTIFIER.fullmatch(schema):  # fullmatch: "$" would let a final newline in
        raise StorageURLError(
            f"schema={schema!r} in {redact(url)!r} is not a plain identifier (letters, digits "
            "and _, not starting with a digit, at most 51 characters)")
    if schema.lower() in _SYSTEM_SCHEMAS or schema.lower().startswith("pg_"):
        raise StorageURLError(f"schema={schema!r} in {redact(url)!r} is one of PostgreSQL's "
                              "own schemas: name one for conveyor (default conveyor)")
    passed.append(("connect_timeout", str(CONNECT_TIMEOUT)))
    passed = list({name: (name, value) for name, value in passed}.values())  # the URL's wins
    # quote, not quote_plus: libpq reads "+" in a URI as a plus sign, not a space
    conninfo = f"postgresql://{base}?{urlencode(passed, quote_via=quote)}"
    try:  # libpq's own parser, before any connection: its message would quote the password
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise StorageURLError(f"PostgreSQL URL {redact(url)!r} is malformed: "
                              f"{driver_line(str(exc), url)}") from None
    return Settings(url=url, conninfo=conninfo, schema=schema.lower(), listen=flags["listen"],
                    vacuum=flags["vacuum"])


# Schemas PostgreSQL keeps for itself: conveyor's tables would sit among the catalog's.
# (and every name starting with pg_, which it refuses to create anyway)
_SYSTEM_SCHEMAS = frozenset({"information_schema"})


def driver_line(text: str, url: str) -> str:
    """A driver's message: its first line, without the URL's credentials nor the URI it may
    quote whole."""
    first = text.strip().splitlines()[0] if text.strip() else text
    return without_secrets(_QUOTED_URI.sub("", first), url)


_QUOTED_URI = re.compile(r'\s*in URI: ".*"$')


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def is_outage(exc: psycopg.Error) -> bool:
    """Whether a driver error means the server cannot be used now (``StorageUnavailable``)
    rather than that it refused a statement (``StorageError``)."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and not exc.sqlstate:
        return True
    return bool(exc.sqlstate) and str(exc.sqlstate)[:2] in _OUTAGE_CLASSES


def translate(exc: psycopg.Error, where: str, url: str | None = None) -> StorageError:
    """The conveyor error for a driver error, one line naming the server (no password: with
    ``url``, none of its credentials either, should the driver quote one)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if url is not None:
        first = driver_line(first, url)
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction):
        first += " (is the database migrated? run: conveyor migrate URL)"
    elif isinstance(exc, pg_errors.InsufficientPrivilege):
        first += (" (run conveyor migrate as a role that may create the schema, and grant the "
                  "workers' role its use: docs/postgres.md, Roles)")
    elif isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        first += " (this role or server only reads: migrate and run workers with one that writes)"
    cls = StorageUnavailable if is_outage(exc) else StorageError
    return cls(f"PostgreSQL {where}: {first}")


def after_fork_in_child(method: Callable[[], None]) -> None:
    """Call a bound method in every forked child, without keeping its object alive."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        target = ref()
        if target is not None:
            target()

    os.register_at_fork(after_in_child=call)


def connect(settings: Settings, where: str) -> psycopg.Connection[Any]:
    """A new autocommit connection whose ``search_path`` is conveyor's schema."""
    try:
        # Server-side prepared statements speed up the hot path; a pooler in transaction
        # mode (``listen=0``, docs/postgres.md) may not keep them, so they are off there.
        conn = psycopg.connect(settings.conninfo, autocommit=True, application_name="conveyor",
                               prepare_threshold=5 if settings.listen else None)
        conn.execute(f'SET search_path TO "{settings.schema}"')
    except psycopg.Error as exc:
        raise translate(exc, where, settings.url) from None  # the driver's text may hold it
    return conn


def dropped(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server ended this idle session (a restart, a failover,
    ``pg_terminate_backend``): used as is, the next call would fail with the server's last
    words, and a job's durable step with it. An idle session's socket is readable only when
    the server sent something; its first byte, peeked and left for libpq, tells: an
    ErrorResponse (``E``: the FATAL an idle session gets) or the end of the stream. Anything
    else (a notice) keeps it. No round trip, unlike a ping before each use. (Over TLS only
    the end of the stream can be told apart: the FATAL is encrypted.)"""
    pgconn = conn.pgconn
    if pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
        return False  # a call in flight on this thread owns what is on the socket
    try:
        fd = pgconn.socket
        if not select.select([fd], [], [], 0)[0]:
            return False
        sock = socket.socket(fileno=fd)  # borrowed: detached below, never closed here
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    try:
        first = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.detach()
    return first in (b"", b"E")


class Database(Protocol):
    """What every part of the storage reads and writes through: this process's own
    connections (``Connections``), or one application connection in its open transaction
    (``bound.BoundDatabase``, ``Storage.bind``)."""

    settings: Settings
    where: str

    def conn(self) -> psycopg.Connection[Any]:
        """The connection to use now."""
        ...

    def outages(self) -> AbstractContextManager[None]:
        """Turn a driver error into ``StorageUnavailable`` or ``StorageError``."""
        ...

    def write(self) -> AbstractContextManager[psycopg.Cursor[Any]]:
        """A cursor in one transaction."""
        ...

    def call(self) -> AbstractContextManager[psycopg.Cursor[Any]]:
        """A cursor for one statement that is its own transaction."""
        ...

    def read(self) -> psycopg.Connection[Any]:
        """The connection for plain reads."""
        ...

    def close(self) -> None:
        """Release the connections. Idempotent."""
        ...


class Connections:
    """Per-thread, per-process connections to one PostgreSQL schema (a ``Database``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.where = redact(settings.url)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # Weak: a thread's connection closes when the thread ends (a web server may start a
        # thread per request); ``close`` closes the ones still alive.
        self._mine: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        # Inherited through fork: kept referenced so they are never finalised in the child
        # (finalising sends the parent's session a Terminate).
        self._inherited: list[psycopg.Connection[Any]] = []
        self._closed = False
        after_fork_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._inherited.extend(self._mine)
        self._mine = weakref.WeakSet()
        self._pid = os.getpid()

    def conn(self) -> psycopg.Connection[Any]:
        """This thread's connection in this process, opened on first use (and again after
        the server dropped it)."""
        pid = os.getpid()
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == pid and not conn.closed:
            if not dropped(conn):
                return conn
            self._forget()  # the server ended it while it sat idle: a restart, a failover
        if self._closed:
            raise StorageUnavailable(f"PostgreSQL storage {self.where} is closed")
        with self._lock:
            if pid != self._pid:
                self._after_fork()
        conn = connect(self.settings, self.where)
        with self._lock:
            self._mine.add(conn)
        self._local.conn = conn
        self._local.pid = pid
        return conn

    def _forget(self) -> None:
        """Drop this thread's connection after an outage, so the next call reconnects."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            with contextlib.suppress(psycopg.Error):
                conn.close()

    @contextmanager
    def outages(self) -> Iterator[None]:
        """Turn a driver error into ``StorageUnavailable`` or ``StorageError``."""
        try:
            yield
        except psycopg.Error as exc:
            error = translate(exc, self.where)
            if isinstance(error, StorageUnavailable) and self._broken():
                self._forget()
            raise error from exc

    def _broken(self) -> bool:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        return conn is None or conn.closed or conn.broken

    @contextmanager
    def write(self) -> Iterator[psycopg.Cursor[Any]]:
        """One transaction: committed on success, rolled back on error."""
        with self.outages():
            conn = self.conn()
            with conn.transaction(), conn.cursor() as cur:
                yield cur

    @contextmanager
    def call(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor for one statement that is its own transaction (a server-side function
        call): no BEGIN and COMMIT around it, so the whole transition is one round trip."""
        with self.outages(), self.conn().cursor() as cur:
            yield cur

    def read(self) -> psycopg.Connection[Any]:
        """The connection for plain reads (autocommit: each statement its own snapshot)."""
        with self.outages():
            return self.conn()

    def close(self) -> None:
        """Close this process's connections. Idempotent."""
        with self._lock:
            self._closed = True
            if os.getpid() == self._pid:
                for conn in list(self._mine):
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
            self._mine = weakref.WeakSet()
        self._local = threading.local()


class HasDatabase(Protocol):
    """A part of the PostgreSQL backend: it reads through ``_db``."""

    _db: Database


S = TypeVar("S", bound=HasDatabase)


def reads(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Turn a driver error met by a read into ``StorageUnavailable`` / ``StorageError``, as
    ``Database.write`` does for writes: callers never see a ``psycopg`` error."""

    @functools.wraps(method)
    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._db.outages():
            return method(self, *args, **kwargs)

    return wrapper
