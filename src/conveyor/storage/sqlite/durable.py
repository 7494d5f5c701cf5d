"""The SQLite backend's durable records (``storage/durable.py``; migration 010): each method
one ``BEGIN IMMEDIATE`` transaction, fenced by the lease where the running job calls it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from conveyor.core.clock import Clock
from conveyor.core.job import EventKind, JobState
from conveyor.core.steps import EVENT, DurableHistory, Message, Received, Step, Wait
from conveyor.storage.durable import (
    WOKEN_MESSAGE,
    kept_pick,
    outcome_of,
    received,
    step_lines,
)
from conveyor.storage.sqlite import batches, jobs
from conveyor.storage.sqlite.connection import Database
from conveyor.storage.sqlite.wakeup import Wakeup

__all__ = ["SqliteDurable", "wake_answered"]

_HOLDER = "SELECT attempt FROM jobs WHERE id = ? AND token = ? AND state = 'active'"
_WAIT = ("SELECT kind, step, name, ekey, until, lookback, since FROM durable_waits "
         "WHERE job_id = ?")
_MESSAGE = "SELECT seq, id, kind, name, ekey, data, sent_at FROM durable_inbox "
_SAVE = (
    "INSERT INTO durable_steps (job_id, name, seq, final, origin, body) VALUES "
    "(:job, :name, (SELECT coalesce(max(seq), 0) + 1 FROM durable_steps WHERE job_id = :job), "
    ":final, :origin, :body) ON CONFLICT (job_id, name) DO UPDATE SET final = excluded.final, "
    "origin = excluded.origin, body = excluded.body WHERE durable_steps.final = 0 "
    "RETURNING name"
)
# Suspended jobs whose wait has its answer in the inbox (the ack's wake-up, a delivery's).
_ANSWERED = (
    "SELECT j.id, j.state, j.batch_id FROM jobs j JOIN durable_waits w ON w.job_id = j.id "
    "WHERE j.id IN (SELECT value FROM json_each(?)) AND j.state = 'scheduled' AND EXISTS "
    "(SELECT 1 FROM durable_inbox i WHERE i.job_id = j.id AND i.kind = w.kind "
    "AND i.name = w.name AND i.ekey = w.ekey)"
)


def _message(row: Sequence[Any]) -> Message:
    return Message(id=row[1], kind=row[2], name=row[3], key=row[4], data=row[5],
                   sent_at=row[6])


def wake_answered(cur: sqlite3.Cursor, now: float,
                  ids: Sequence[str]) -> tuple[int, list[batches.Move]]:
    """Make pending the suspended jobs of ``ids`` whose wait is answered: how many, and
    the batch moves to apply."""
    rows = cur.execute(_ANSWERED, (jobs.ids_param(ids),)).fetchall()
    return len(rows), jobs.move(cur, now, rows, JobState.PENDING, EventKind.WOKEN,
                                WOKEN_MESSAGE, "message = :msg, ready_at = :now")


class SqliteDurable:
    """``DurableStore`` over one SQLite database."""

    def __init__(self, db: Database, clock: Clock, wakeup: Wakeup) -> None:
        self._db = db
        self._clock = clock
        self._wakeup = wakeup

    def read(self, job_id: str) -> DurableHistory:
        """The job's steps, wait and inbox size."""
        with self._db.outages():
            conn = self._db.read()
            steps = [Step.from_json(body, name) for name, body in conn.execute(
                "SELECT name, body FROM durable_steps WHERE job_id = ? ORDER BY seq",
                (job_id,))]
            wait = conn.execute(_WAIT, (job_id,)).fetchone()
            inbox = conn.execute("SELECT count(*) FROM durable_inbox WHERE job_id = ?",
                                 (job_id,)).fetchone()[0]
        return DurableHistory(steps, None if wait is None else Wait(*wait), int(inbox))

    def save_steps(self, job_id: str, token: str, steps: Sequence[Step]) -> bool:
        """Record steps of the running job, fenced by its lease."""
        with self._db.write() as cur:
            if cur.execute(_HOLDER, (job_id, token)).fetchone() is None:
                return False
            saved = [s for s in steps if self._save(cur, job_id, s)]
            self._log(cur, job_id, saved)
            return True

    @staticmethod
    def _save(cur: sqlite3.Cursor, job_id: str, step: Step) -> bool:
        return cur.execute(_SAVE, {"job": job_id, "name": step.name, "final": int(step.final),
                                   "origin": step.origin, "body": step.to_json()}
                           ).fetchone() is not None

    @staticmethod
    def _log(cur: sqlite3.Cursor, job_id: str, steps: Sequence[Step]) -> None:
        lines = step_lines(steps)
        if lines:
            cur.execute("UPDATE jobs SET events = events || ? WHERE id = ?", (lines, job_id))

    def receive(self, job_id: str, token: str, wait: Wait) -> Received | None:
        """Register the wait and take what answers it; see ``DurableStore.receive``."""
        with self._db.write() as cur:
            holder = cur.execute(_HOLDER, (job_id, token)).fetchone()
            if holder is None:
                return None
            now = self._clock.now()
            done = cur.execute("SELECT body FROM durable_steps WHERE job_id = ? AND name = ? "
                               "AND final = 1", (job_id, wait.step)).fetchone()
            if done is not None:
                return received(Step.from_json(done[0], wait.step))
            row = cur.execute(_WAIT, (job_id,)).fetchone()
            stored = None if row is None else Wait(*row)
            if stored is None or stored.step != wait.step:
                stored = Wait(wait.kind, wait.step, wait.name, wait.key, wait.until,
                              wait.window, since=now)
                cur.execute("INSERT OR REPLACE INTO durable_waits VALUES (?, ?, ?, ?, ?, ?, ?, "
                            "?, 1)", (job_id, stored.kind, stored.step, stored.name, stored.key,
                                      stored.until, stored.window, stored.since))
            found = cur.execute(_MESSAGE + "WHERE job_id = ? AND kind = ? AND name = ? AND "
                                "ekey = ? ORDER BY seq LIMIT 1",
                                (job_id, stored.kind, stored.name, stored.key)).fetchone()
            message = None if found is None else _message(found)
            if found is not None:
                cur.execute("DELETE FROM durable_inbox WHERE seq = ?", (found[0],))
            elif stored.kind == EVENT and stored.window > 0:
                message = kept_pick(self._kept(cur, stored), stored, self._taken(cur, job_id))
            if message is None and now < stored.until:
                return Received(False, until=stored.until)
            step = outcome_of(stored, message, now, int(holder[0]))
            self._save(cur, job_id, step)
            cur.execute("DELETE FROM durable_waits WHERE job_id = ?", (job_id,))
            self._log(cur, job_id, [step])
            return received(step)

    @staticmethod
    def _kept(cur: sqlite3.Cursor, wait: Wait) -> list[Message]:
        return [Message(*row) for row in cur.execute(
            "SELECT id, 'event', name, ekey, data, sent_at FROM durable_kept WHERE name = ? "
            "AND ekey = ? AND sent_at >= ? ORDER BY sent_at, id",
            (wait.name, wait.key, wait.since - wait.window))]

    @staticmethod
    def _taken(cur: sqlite3.Cursor, job_id: str) -> set[str]:
        return {r[0] for r in cur.execute("SELECT origin FROM durable_steps WHERE job_id = ? "
                                          "AND origin IS NOT NULL", (job_id,))}

    def send(self, job_id: str, message: Message) -> bool | None:
        """Put a message in a job's inbox, waking the job if it waits for it."""
        with self._db.write() as cur:
            row = cur.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            if JobState(row[0]).terminal:
                return False
            woken = self._deliver(cur, self._clock.now(), [job_id], message)
        if woken:
            self._wakeup.notify()
        return True

    def send_event(self, message: Message, keep: float) -> int:
        """Deliver an event to every wait listening for it; keep it ``keep`` seconds."""
        with self._db.write() as cur:
            now = self._clock.now()
            cur.execute("DELETE FROM durable_kept WHERE until <= ?", (now,))
            if keep > 0:
                cur.execute("INSERT INTO durable_kept (id, name, ekey, data, sent_at, until) "
                            "VALUES (?, ?, ?, ?, ?, ?)", (message.id, message.name,
                                                          message.key, message.data, now,
                                                          now + keep))
            ids = [r[0] for r in cur.execute(
                "SELECT w.job_id FROM durable_waits w JOIN jobs j ON j.id = w.job_id "
                "WHERE w.name = ? AND w.ekey = ? AND w.kind = 'event' AND w.listening = 1 "
                "AND j.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled')",
                (message.name, message.key))]
            cur.execute("UPDATE durable_waits SET listening = 0 WHERE job_id IN "
                        "(SELECT value FROM json_each(?))", (jobs.ids_param(ids),))
            woken = self._deliver(cur, now, ids, message)
        if woken:
            self._wakeup.notify()
        return len(ids)

    def _deliver(self, cur: sqlite3.Cursor, now: float, ids: Sequence[str],
                 message: Message) -> int:
        """Into each job's inbox (a message id it holds or took already is not stored
        again); the suspended ones it answers woken. Returns how many were woken."""
        if not ids:
            return 0
        cur.executemany(
            "INSERT OR IGNORE INTO durable_inbox (job_id, id, kind, name, ekey, data, sent_at) "
            "SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM durable_steps WHERE "
            "job_id = ? AND origin = ?)",
            [(job_id, message.id, message.kind, message.name, message.key, message.data, now,
              job_id, message.id) for job_id in ids])
        woken, moves = wake_answered(cur, now, ids)
        batches.apply(cur, now, moves, jobs.insert)
        return woken
