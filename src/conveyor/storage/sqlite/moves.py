"""Moving job rows inside the caller's transaction: one ``UPDATE`` with its event per call.

Shared by ``jobs.py`` and ``graph.py`` (which ``batches.py`` calls, so it cannot import
``jobs.py``); the caller applies the returned batch moves.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.core.job import JobState

__all__ = ["FINISH", "REQUEUE", "Move", "event_line", "ids_param", "move"]

# (batch_id, from_state or None for a new job, to_state or None for a deleted job)
Move = tuple[str, "str | None", "str | None"]


def event_line(now: float, kind: str, state: str | None, message: str | None = None) -> str:
    """One NDJSON event line, as ``Event.to_json`` writes it, for rows sharing one event."""
    out: dict[str, Any] = {"t": now, "k": kind}
    if state is not None:
        out["s"] = state
    if message is not None:
        out["m"] = message
    return json.dumps(out, separators=(",", ":")) + "\n"


def ids_param(ids: Iterable[str]) -> str:
    """A JSON array of ids, to be expanded with ``json_each`` (no parameter-count limit)."""
    return json.dumps(list(ids))


def move(
    cur: sqlite3.Cursor,
    now: float,
    rows: Sequence[tuple[str, str, str | None]],
    to: JobState,
    kind: str,
    message: str | None = None,
    sets: str = "",
) -> list[Move]:
    """Move jobs ``(id, state, batch_id)`` to ``to`` with one event; returns the batch moves.

    ``sets`` adds SQL assignments (``"finished_at = :now, token = NULL"``); the caller applies
    the returned moves with ``batches.apply`` once per transaction.
    """
    if not rows:
        return []
    msg = ", 'm', :msg" if message is not None else ""
    cur.execute(
        f"UPDATE jobs SET state = :to, {sets + ', ' if sets else ''}"
        f"events = events || json_object('t', :now, 'k', :kind, 's', :to{msg}, "
        "'a', attempt) || char(10) "
        "WHERE id IN (SELECT value FROM json_each(:ids))",
        {"to": to.value, "now": now, "kind": kind, "msg": message,
         "ids": ids_param(r[0] for r in rows)},
    )
    return [(b, s, to.value) for _, s, b in rows if b]


FINISH = "finished_at = :now, token = NULL, lease_expires_at = NULL, cancel_requested = 0"
# Back to pending (a retry by hand, a recovery): not published since (a job cancelled
# after its publish kept the stamp, and its retry waited ``republish_after``).
REQUEUE = ("ready_at = :now, finished_at = NULL, token = NULL, lease_expires_at = NULL, "
           "publish_at = NULL")


