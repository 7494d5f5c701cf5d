"""Flow control on PostgreSQL: pausing queues, and where the limits are enforced.

The limits themselves run on the server, inside the transitions (functions/<name>.sql):
``enqueue`` takes a transaction advisory lock per unique key and resolves its holder;
``dequeue`` walks a queue holding "gated" jobs (a concurrency, order or rate key) with
``flow_pick``, under a transaction advisory lock per schema, so counting a limit and
admitting against it never interleave between transactions. Jobs over a limit stay pending
(no attempt is spent). What the client checks first (settings that could never admit a job)
is ``storage/rules.py``'s, shared with SQLite.
"""

from __future__ import annotations

from conveyor.storage.postgres.connection import Database


class PostgresFlow:
    """Pause and resume queues (a paused queue is skipped by ``dequeue``; resuming one
    notifies its idle workers through the ``queues_resumed`` trigger)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def pause_queue(self, queue: str) -> None:
        """Stop every worker from taking jobs from ``queue``."""
        self._set_paused(queue, True)

    def resume_queue(self, queue: str) -> None:
        """Undo ``pause_queue``."""
        self._set_paused(queue, False)

    def _set_paused(self, queue: str, paused: bool) -> None:
        with self._db.call() as cur:
            cur.execute(
                "INSERT INTO queues (name, paused) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
                (queue, paused),
            )
