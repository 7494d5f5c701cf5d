"""The storage's clock on PostgreSQL: the server's ``clock_timestamp()``, or the explicit
clock given at open (a test's ``FakeClock``). One per storage, shared by its parts."""

from __future__ import annotations

from typing import Any

import psycopg

from conveyor.core.clock import Clock
from conveyor.storage.postgres.connection import Database, reads

_SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"


class ServerClock:
    """``now`` as every part of the storage reads it."""

    def __init__(self, db: Database, clock: Clock | None) -> None:
        self._db = db
        #: The explicit clock given at open, or None: the server's.
        self.clock = clock

    @reads
    def now(self) -> float:
        """The storage's clock: the server's ``clock_timestamp()``, or the explicit clock."""
        if self.clock is not None:
            return self.clock.now()
        row = self._db.read().execute(_SERVER_NOW).fetchone()
        return float(row[0]) if row else 0.0

    def arg(self) -> float | None:
        """The ``p_now`` of the server-side functions: the test clock's time, or None (the
        server's ``clock_timestamp()``, read inside the function: no round trip of its own)."""
        return None if self.clock is None else self.clock.now()

    def at(self, cur: psycopg.Cursor[Any]) -> float:
        """``now`` read inside a transaction (on its own connection)."""
        if self.clock is not None:
            return self.clock.now()
        row = cur.execute(_SERVER_NOW).fetchone()
        return float(row[0]) if row else 0.0
