"""``Inspector.breakers`` and ``close_breaker`` on PostgreSQL, over the ``breakers`` table
(migration 023) that the server-side lease and ack keep (``functions/breaker.sql``: the rules
of ``storage/breakers.py``, spelled in PL/pgSQL). A key without a row is closed; a breaker
spans queues, as every limit of this store does."""

from __future__ import annotations

from typing import Any

from conveyor.core.breaker import CLOSED, BreakerState
from conveyor.storage.breakers import BreakerRow, listed
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database, reads

__all__ = ["COLUMNS", "PostgresBreakers"]

#: A ``breakers`` row as ``BreakerRow`` takes it (and ``gate_reads.GateSql.breaker``).
COLUMNS = "key, state, failures, within, opened_at, probe_at, probe_id, reason, trips"

# Closing by hand forgets the row (closed, log cleared) and rings the queues holding the
# key's pending jobs, as resuming a queue does (functions/notify_resumed.sql): their idle
# workers lease them at once.
_CLOSE = ("WITH gone AS (DELETE FROM breakers WHERE key = %s RETURNING state), "
          "rung AS (SELECT pg_notify('conveyor_' || current_schema(), q.queue) FROM "
          "(SELECT DISTINCT queue FROM jobs WHERE state = 'pending' AND gated "
          "AND breaker_key = %s) AS q WHERE EXISTS (SELECT 1 FROM gone)) "
          "SELECT (SELECT state FROM gone), (SELECT count(*) FROM rung)")


def _row(row: tuple[Any, ...]) -> BreakerRow:
    """A ``BreakerRow`` of one ``breakers`` row read as ``COLUMNS`` lists them."""
    key, state, failures, within, opened_at, probe_at, probe_id, reason, trips = row
    return BreakerRow(key, state, list(failures), within, opened_at, probe_at, probe_id,
                      reason, trips)


class PostgresBreakers:
    """The operators' view of breakers (a part of ``PostgresStorage``)."""

    def __init__(self, db: Database, clock: ServerClock) -> None:
        self._db = db
        self._clock = clock

    @reads
    def breakers(self) -> list[BreakerState]:
        """Open and half-open breakers first, then closed ones with counted errors."""
        now = self._clock.now()
        rows = self._db.read().execute(f"SELECT {COLUMNS} FROM breakers").fetchall()
        return listed([_row(r).view(now) for r in rows])

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand, its log cleared; True when it held jobs back."""
        with self._db.call() as cur:
            row = cur.execute(_CLOSE, (key, key)).fetchone()
        return row is not None and row[0] is not None and row[0] != CLOSED
