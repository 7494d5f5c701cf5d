"""The PostgreSQL backend's durable records (``storage/durable.py``; migration 021): each
transition one call of a server-side function (``functions/durable_*.sql``), fenced by the
lease where the running job calls it; the reads are plain statements."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.core.steps import DurableHistory, Message, Received, Step, Wait, step_event
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database

__all__ = ["PostgresDurable"]

_SAVE = ("SELECT durable_save(%s::text, %s::text, %s::text[], %s::bool[], %s::text[], "
         "%s::text[], %s::text[])")
_RECEIVE = ("SELECT * FROM durable_receive(%s::float8, %s::text, %s::text, %s::text, %s::text, "
            "%s::text, %s::text, %s::float8, %s::float8)")
_SEND = ("SELECT durable_send(%s::float8, %s::text, %s::text, %s::text, %s::text, %s::text, "
         "%s::text)")
_EVENT = ("SELECT durable_event(%s::float8, %s::text, %s::text, %s::text, %s::text, "
          "%s::float8)")
_READ = (
    "SELECT (SELECT coalesce(json_agg(json_build_array(name, body) ORDER BY seq), '[]') "
    "FROM durable_steps WHERE job_id = %(job)s), "
    "(SELECT json_build_array(kind, step, name, ekey, until, lookback, since) "
    "FROM durable_waits WHERE job_id = %(job)s), "
    "(SELECT count(*) FROM durable_inbox WHERE job_id = %(job)s)"
)


class PostgresDurable:
    """``DurableStore`` over one schema; ``clock.arg()`` is the functions' ``p_now`` (a test
    clock's time, or None for the server's)."""

    def __init__(self, db: Database, clock: ServerClock) -> None:
        self._db = db
        self._clock = clock

    def read(self, job_id: str) -> DurableHistory:
        """The job's steps, wait and inbox size (one statement)."""
        with self._db.outages():
            row = self._db.read().execute(_READ, {"job": job_id}).fetchone()
        assert row is not None
        steps, wait, inbox = row
        return DurableHistory([Step.from_json(body, name) for name, body in steps],
                              None if wait is None else Wait(*wait), int(inbox))

    def save_steps(self, job_id: str, token: str, steps: Sequence[Step]) -> bool:
        """Record steps of the running job, fenced by its lease (``durable_save``)."""
        events = [None if s.status == "cursor" else step_event(s).to_json() + "\n"
                  for s in steps]
        with self._db.call() as cur:
            row = cur.execute(_SAVE, (
                job_id, token, [s.name for s in steps], [s.final for s in steps],
                [s.origin for s in steps], [s.to_json() for s in steps], events)).fetchone()
        return bool(row and row[0])

    def receive(self, job_id: str, token: str, wait: Wait) -> Received | None:
        """Register the wait and take what answers it (``durable_receive``)."""
        with self._db.call() as cur:
            row = cur.execute(_RECEIVE, (
                self._clock.arg(), job_id, token, wait.kind, wait.step, wait.name, wait.key,
                wait.until, wait.window)).fetchone()
        if row is None:
            return None
        return Received(bool(row[0]), row[1], float(row[2]))

    def send(self, job_id: str, message: Message) -> bool | None:
        """Put a message in a job's inbox, waking it if it waits for it (``durable_send``)."""
        with self._db.call() as cur:
            row = cur.execute(_SEND, (self._clock.arg(), job_id, message.id, message.kind,
                                      message.name, message.key, message.data)).fetchone()
        code = int(row[0]) if row else -1
        return None if code < 0 else code > 0

    def send_event(self, message: Message, keep: float) -> int:
        """Deliver an event to every wait listening for it (``durable_event``)."""
        with self._db.call() as cur:
            row = cur.execute(_EVENT, (self._clock.arg(), message.id, message.name, message.key,
                                       message.data, keep)).fetchone()
        return int(row[0]) if row else 0
