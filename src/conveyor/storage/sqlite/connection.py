"""SQLite connections: URL parsing, one connection per thread, fork safety, transactions.

A ``sqlite3.Connection`` must never cross a ``fork``: the child would share the parent's file
locks and WAL index. Connections are therefore keyed by (pid, thread); a child opens its own and
leaves the inherited ones untouched (closing them could release the parent's locks).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import parse_qsl

from conveyor.errors import StorageUnavailable, StorageURLError
from conveyor.storage.sqlite.checkpoint import SAFETY_PAGES, WAL_BYTES, Checkpointer

BUSY_TIMEOUT_MS = 10_000
DEFAULT_FILE_MODE = 0o600  # owner only; ``?file_mode=0640`` in the URL to share
MIN_SQLITE = (3, 35, 0)  # UPDATE … RETURNING

P = ParamSpec("P")
R = TypeVar("R")


def check_sqlite_version() -> None:
    """Raise ``StorageUnavailable`` when the linked SQLite library is too old."""
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StorageUnavailable(
            f"the SQLite library is {sqlite3.sqlite_version}; conveyor needs "
            f"{'.'.join(map(str, MIN_SQLITE))} or newer (UPDATE ... RETURNING)"
        )


def parse_sqlite_url(url: str) -> Path:
    """The database path a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL names."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "sqlite":
        raise StorageURLError(f"not a SQLite URL: {url!r}; expected sqlite:///path/to.db")
    if not rest.startswith("/"):
        raise StorageURLError(
            f"SQLite URL {url!r} has a host part; write sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    path = rest[1:].split("?", 1)[0]
    if not path:
        raise StorageURLError(f"SQLite URL {url!r} names no file; e.g. sqlite:///conveyor.db")
    if path == ":memory:":
        raise StorageURLError(
            "sqlite:///:memory: cannot be shared between threads and processes; use memory://"
        )
    return Path(path)


def absolute_url(url: str) -> str | None:
    """``sqlite:////abs/dir/x.db`` for ``sqlite:///x.db`` (relative to the working directory),
    keeping the query; None when the path is absolute already or the URL is not one."""
    try:
        path = parse_sqlite_url(url)
    except StorageURLError:
        return None
    if path.is_absolute():
        return None
    _, sep, query = url.partition("?")
    return f"sqlite:///{Path.cwd() / path}{sep}{query}"


def blob_directory(url: str) -> str | None:
    """``file:///abs/dir/x.db.blobs``: where job data by reference is kept beside the
    database file when the app names no blob store (docs/job-data.md); None for an
    in-memory database."""
    try:
        path = parse_sqlite_url(url)
    except StorageURLError:
        return None
    if str(path) in (":memory:", ""):
        return None
    return f"file://{(Path.cwd() / path).resolve()}.blobs"


def parse_file_mode(url: str) -> int:
    """The permissions a new database file gets: ``?file_mode=0640`` in the URL, else 0600.

    Job data (arguments, results, messages) is often personal data: nobody but the owner
    reads it unless the URL says so. SQLite creates the ``-wal`` and ``-shm`` files with the
    main file's permissions. An existing file keeps the permissions it has.
    """
    for name, value in parse_qsl(url.partition("?")[2]):
        if name != "file_mode":
            continue
        try:
            mode = int(value, 8)
        except ValueError:
            mode = -1
        if not 0 <= mode <= 0o777 or mode & 0o600 != 0o600:
            raise StorageURLError(
                f"file_mode={value!r} in {url!r} is not an octal mode that lets its owner "
                "read and write, e.g. file_mode=0640"
            )
        return mode
    return DEFAULT_FILE_MODE


def create_file(path: Path, mode: int) -> None:
    """Create an empty database file with exactly ``mode`` unless it exists (any process
    may race to create it; the first one wins, the others open it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return
    except OSError as exc:
        raise StorageUnavailable(f"cannot create SQLite database {str(path)!r}: {exc}") from exc
    try:
        os.fchmod(fd, mode)  # the umask may have narrowed it; an explicit mode is the rule
    finally:
        os.close(fd)


def check_path(path: Path) -> None:
    """Raise ``StorageUnavailable`` with the reason when ``path`` cannot hold a database."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise StorageUnavailable(
            f"cannot open SQLite database {str(path)!r}: directory {str(parent)!r} does not exist"
        )
    if not parent.is_dir():
        raise StorageUnavailable(
            f"cannot open SQLite database {str(path)!r}: {str(parent)!r} is not a directory"
        )
    if path.is_dir():
        raise StorageUnavailable(f"cannot open SQLite database {str(path)!r}: it is a directory")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StorageUnavailable(
            f"cannot open SQLite database {str(path)!r}: the file is not readable and writable"
        )
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise StorageUnavailable(
            f"cannot create SQLite database {str(path)!r}: directory {str(parent)!r} "
            "is not writable"
        )


class _Connection(sqlite3.Connection):
    """A connection that can be weakly referenced: it closes when its thread ends."""


def _connect(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, cached_statements=256,
            factory=_Connection,
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        # Checkpoints are the checkpointer thread's (checkpoint.py); these are its signal
        # and the safety net that bounds the WAL without it.
        conn.execute(f"PRAGMA wal_autocheckpoint = {SAFETY_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_BYTES}")
        conn.execute("PRAGMA foreign_keys = OFF")
    except sqlite3.Error as exc:
        raise StorageUnavailable(f"cannot open SQLite database {str(path)!r}: {exc}") from exc
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL, waiting out other processes doing the same.

    Switching the journal mode needs an exclusive lock, and SQLite answers "database is
    locked" at once instead of calling the busy handler when another process holds the file
    (several workers opening a fresh file together), so wait here as busy_timeout would.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def after_fork_in_child(method: Callable[[], None]) -> None:
    """Call a bound method in every forked child, without keeping its object alive."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        target = ref()
        if target is not None:
            target()

    os.register_at_fork(after_in_child=call)


def unusable(exc: sqlite3.Error) -> bool:
    """Whether an error says the database cannot be used now (locked past the busy timeout,
    I/O, disk full, read-only, not a database, damaged) rather than that a statement or a
    value is wrong; only the former is an outage (``StorageUnavailable``)."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.rollback()


class Database:
    """Per-thread, per-process connections to one database file."""

    def __init__(self, path: Path, file_mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self.file_mode = file_mode
        self._local = threading.local()
        self._lock = threading.Lock()
        # SQLite admits one writer at a time, and two threads of one process contending in
        # its busy handler sleep for milliseconds: a Python lock hands over in microseconds
        # (a worker's fetcher and acker write at the same time all day).
        self._writer = threading.Lock()
        self._pid = os.getpid()
        # Weak: a thread's connection closes when the thread ends (a web server may start a
        # thread per request); ``close`` closes the ones still alive.
        self._mine: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()
        # Connections inherited through fork: kept referenced so they are never finalised
        # (and their locks never touched) in the child.
        self._inherited: list[sqlite3.Connection | Checkpointer] = []
        self._closed = False
        self._checkpointer: Checkpointer | None = None  # this process's, from its first commit
        # A lock held by another thread at fork time would stay held forever in the child.
        after_fork_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._local = threading.local()
        self._inherited.extend(self._mine)
        self._mine = weakref.WeakSet()
        if self._checkpointer is not None:  # its thread is not here; its connection stays
            self._inherited.append(self._checkpointer)
            self._checkpointer = None
        self._pid = os.getpid()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection in this process, opened on first use."""
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == pid:
            return conn
        if self._closed:
            raise StorageUnavailable(f"SQLite storage {str(self.path)!r} is closed")
        with self._lock:
            if pid != self._pid:
                self._inherited.extend(self._mine)
                self._mine = weakref.WeakSet()
                self._pid = pid
            create_file(self.path, self.file_mode)
            conn = _connect(self.path)
            self._mine.add(conn)
        self._local.conn = conn
        self._local.pid = pid
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Cursor]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.

        One thread of this process writes at a time; a thread that waits longer than the
        busy timeout gets ``StorageUnavailable``, as it would from SQLite itself.
        """
        conn = self.conn()
        if not self._writer.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
            raise StorageUnavailable(f"SQLite database {str(self.path)!r}: database is locked "
                                     "(by another thread of this process)")
        try:
            with self.outages():
                conn.execute("BEGIN IMMEDIATE")
            cur = conn.cursor()
            try:
                with self.outages():  # locked past busy_timeout, disk full, I/O
                    yield cur
                    conn.commit()
            except BaseException:
                _rollback(conn)
                raise
            finally:
                cur.close()
        finally:
            self._writer.release()
        self._committed()

    def _committed(self) -> None:
        checkpointer = self._checkpointer
        if checkpointer is None or checkpointer.pid != os.getpid():
            with self._lock:
                if self._closed:
                    return
                checkpointer = self._checkpointer
                if checkpointer is None or checkpointer.pid != os.getpid():
                    if checkpointer is not None:  # a parent's: its connection must stay
                        self._inherited.append(checkpointer)
                    checkpointer = Checkpointer(self.path, functools.partial(_connect, self.path))
                    self._checkpointer = checkpointer
                    # A storage dropped without close must not leave its thread behind.
                    weakref.finalize(self, checkpointer.stop)
        checkpointer.committed()

    @contextmanager
    def outages(self) -> Iterator[None]:
        """Raise ``StorageUnavailable`` naming the file for an error that is an outage
        (``unusable``); any other error passes unchanged."""
        try:
            yield
        except sqlite3.Error as exc:
            if not unusable(exc):
                raise
            raise StorageUnavailable(f"SQLite database {str(self.path)!r}: {exc}") from exc

    def read(self) -> sqlite3.Connection:
        """The connection for plain reads (each statement sees a consistent snapshot)."""
        return self.conn()

    def close(self) -> None:
        """Close this process's connections. Idempotent."""
        with self._lock:
            self._closed = True
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:  # outside the lock: its thread may be opening a conn
            checkpointer.close()
        with self._lock:
            if os.getpid() == self._pid:
                for conn in list(self._mine):
                    conn.close()
            self._mine = weakref.WeakSet()
        self._local = threading.local()


class HasDatabase(Protocol):
    """A part of the SQLite backend: it reads through ``_db``."""

    _db: Database


S = TypeVar("S", bound=HasDatabase)


def reads(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Turn an outage met by a read (``unusable``) into ``StorageUnavailable``, as
    ``Database.write`` does for writes: callers never see a ``sqlite3`` error."""

    @functools.wraps(method)
    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._db.outages():
            return method(self, *args, **kwargs)

    return wrapper
