"""Job data by reference kept in the PostgreSQL store itself: the ``blobs`` table of the
schema the URL names (migration 020; docs/job-data.md, "Payloads by reference").

Each call is one statement on this thread's connection (``Database``), so a blob is
committed before ``put`` returns, as the ``BlobStore`` protocol asks; the times are the
server's ``clock_timestamp()``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from conveyor.errors import BlobUnavailable, StorageError
from conveyor.storage.postgres.connection import Connections, Database, parse_postgres_url
from conveyor.storage.postgres.migrate import migrate

__all__ = ["PostgresBlobs", "in_store", "open_blobs"]

_NOW = "extract(epoch from clock_timestamp())"


def in_store(url: str) -> str:
    """The blob store a PostgreSQL store uses when the app names none: its own table."""
    return url


def open_blobs(url: str) -> PostgresBlobs:
    """The ``blobs`` table of the schema ``url`` names (migrating the schema if needed)."""
    settings = parse_postgres_url(url)
    db = Connections(settings)
    with db.outages():
        migrate(db.conn(), settings, create=True)
    return PostgresBlobs(db)


class PostgresBlobs:
    """A ``BlobStore`` over the ``blobs`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.where = f"the blobs table of {db.where}"

    def put(self, key: str, data: bytes) -> None:
        """Insert or replace one blob (committed on return)."""
        with self._unavailable(), self._db.call() as cur:
            cur.execute(f"INSERT INTO blobs (key, created_at, data) VALUES (%s, {_NOW}, %s) "
                        "ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data", (key, data))

    def get(self, key: str) -> bytes | None:
        """The blob's bytes, or None."""
        with self._unavailable(), self._db.outages():
            row = self._db.read().execute("SELECT data FROM blobs WHERE key = %s",
                                          (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def delete(self, keys: Sequence[str]) -> None:
        """Delete these blobs in one statement."""
        if keys:
            with self._unavailable(), self._db.call() as cur:
                cur.execute("DELETE FROM blobs WHERE key = ANY(%s)", (list(keys),))

    def listing(self, before: float) -> Iterator[str]:
        """Keys written before ``before``, oldest first, 1,000 per query."""
        last = ""
        while True:
            with self._unavailable(), self._db.outages():
                rows = self._db.read().execute(
                    "SELECT key FROM blobs WHERE created_at < %s AND key > %s ORDER BY key "
                    "LIMIT 1000", (before, last)).fetchall()
            for (key,) in rows:
                yield key
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def close(self) -> None:
        """Close this process's connections."""
        self._db.close()

    def _unavailable(self) -> _Translate:
        return _Translate(self.where)


class _Translate:
    """Storage errors become ``BlobUnavailable`` (a blob store's failure, one line)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, StorageError):
            raise BlobUnavailable(f"{self.where}: {exc}") from exc
