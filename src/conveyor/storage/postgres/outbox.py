"""PostgreSQL as a broker's outbox (``conveyor.storage.outbox.Outbox``, docs/internals/outbox.md).

One column, ``jobs.publish_at`` (migration 006), read and written by server-side functions,
one round trip per call: ``publish_due`` (``FOR UPDATE SKIP LOCKED`` in dequeue's order, so
concurrent relays never take the same job), ``start`` (dequeue's lease, the lease expiry's
``recover`` for a redelivered job, ``flow_admits`` for flow control under dequeue's gate
lock) and ``bury``. An enqueue in the application's transaction is published only once that
transaction commits: until then no relay can see the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.core.job import LeasedJob
from conveyor.storage.outbox import Delivered, StartKind, StartReply, arrivals
from conveyor.storage.postgres import arrays
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database
from conveyor.storage.postgres.text import enc, enc_opt
from conveyor.storage.rules import REDELIVERED, cancelled_message

__all__ = ["PostgresOutbox"]

_PUBLISH_DUE = "SELECT publish_due(%s::float8, %s::text, %s::int4, %s::float8)"
_PUBLISH_FAILED = ("UPDATE jobs SET publish_at = NULL WHERE id = ANY(%s::text[]) "
                   "AND state = 'pending' AND publish_at >= 0")
_START = ("SELECT * FROM start(%s::float8, %s::text, %s::text[], %s::bool[], %s::text[], "
          "%s::text, %s::float8, %s::int4, %s::text, %s::text)")
_ORDER_KEYS = ("SELECT id, order_key FROM jobs WHERE queue = %s AND id = ANY(%s::text[]) "
               "AND order_key IS NOT NULL")
_BURY = "SELECT bury(%s::float8, %s::text[], %s::text)"


class PostgresOutbox:
    """``publish_due``, ``publish_failed``, ``start`` and ``bury``; one call each."""

    def __init__(self, db: Database, clock: ServerClock) -> None:
        self._db = db
        self._clock = clock

    def publish_due(self, queue: str, count: int, republish_after: float) -> list[str]:
        """Pending jobs of ``queue`` due to be published, stamped; see ``Outbox``."""
        if count <= 0:
            return []
        with self._db.call() as cur:
            row = cur.execute(_PUBLISH_DUE, (self._clock.arg(), enc(queue), count,
                                             republish_after)).fetchone()
        return list(row[0]) if row and row[0] else []

    def publish_failed(self, job_ids: Sequence[str]) -> None:
        """Unconfirmed publishes: due again at once."""
        if job_ids:
            with self._db.call() as cur:
                cur.execute(_PUBLISH_FAILED, (arrays.texts(job_ids),))

    def start(self, queue: str, deliveries: Sequence[Delivered], worker_id: str,
              lease_seconds: float, max_recoveries: int = 5) -> list[StartReply]:
        """Lease delivered jobs; see ``Outbox.start``."""
        given = arrivals(deliveries)
        if not given:
            return []
        with self._db.call() as cur:
            rows = cur.execute(_START, (
                self._clock.arg(), enc(queue), arrays.texts(d.job_id for d in given),
                arrays.bools(d.redelivered for d in given),
                arrays.texts(enc_opt(d.message) for d in given),
                enc(worker_id), lease_seconds, max_recoveries, REDELIVERED,
                cancelled_message(REDELIVERED))).fetchall()
        return [_reply(d.job_id, row) for d, row in zip(given, rows, strict=True)]

    def order_keys(self, queue: str, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's order key; see ``Outbox.order_keys``."""
        if not job_ids:
            return []
        with self._db.call() as cur:
            keys = dict(cur.execute(_ORDER_KEYS, (enc(queue), arrays.texts(job_ids)))
                        .fetchall())
        return [keys.get(job_id) for job_id in job_ids]

    def bury(self, job_ids: Sequence[str], reason: str) -> int:
        """Pending or active jobs the broker gave up on → dead; see ``Outbox.bury``."""
        if not job_ids:
            return 0
        with self._db.call() as cur:
            row = cur.execute(_BURY, (self._clock.arg(), arrays.texts(job_ids),
                                      enc(reason))).fetchone()
        return int(row[0]) if row else 0


def _reply(job_id: str, row: Sequence[Any]) -> StartReply:
    kind = StartKind(row[0])
    if kind is not StartKind.STARTED:
        return StartReply(job_id, kind)
    return StartReply(job_id, kind, LeasedJob(
        id=row[1], name=row[2], queue=row[3], payload=row[4], token=row[5], attempt=row[6],
        errors=row[7], max_retries=row[8], timeout=row[9], batch_id=row[10],
        recoveries=row[11]))
