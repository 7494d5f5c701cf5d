"""Debounce and throttle on PostgreSQL: a call joins the scheduled job of its fold key.

Calls with a fold key are stored one by one in the enqueue's transaction, each under the
transaction advisory lock of its key (the one unique keys take, so two callers of a key
queue up): the key's job is read ``FOR UPDATE`` and, while it is ``scheduled``, updated (the
newest arguments, and under debounce the later run time); otherwise the call is stored as a
new job (``jobs.insert``) that the key then points to. The other jobs of the chunk go through
the one ``enqueue`` call as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from conveyor.core.job import EnqueueResult, JobSpec
from conveyor.storage.postgres import jobs
from conveyor.storage.rules import FOLD_PREFIX

Cursor = psycopg.Cursor[Any]


def enqueue(cur: Cursor, clock: float | None, specs: Sequence[JobSpec],
            schema: str | None) -> list[EnqueueResult]:
    """Store ``specs`` (some with fold keys) in the cursor's transaction, in order."""
    out: list[EnqueueResult | None] = [None] * len(specs)
    rest: list[int] = []
    for i, spec in enumerate(specs):
        flow = spec.flow
        if flow is None or not flow.fold_key:
            rest.append(i)
            continue
        key = FOLD_PREFIX + flow.fold_key
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('conveyor-unique:' || %s))", (key,))
        row = cur.execute(
            "SELECT j.id FROM unique_locks u JOIN jobs j ON j.id = u.job_id "
            "WHERE u.key = %s AND j.state = 'scheduled' FOR UPDATE OF j", (key,)).fetchone()
        if row is not None:
            cur.execute(
                "UPDATE jobs SET payload = CASE WHEN %s THEN %s ELSE payload END, "
                "run_at = CASE WHEN %s THEN coalesce(%s, run_at) ELSE run_at END "
                "WHERE id = %s",
                (flow.fold_replaces, spec.payload, flow.fold_moves, spec.run_at, row[0]))
            out[i] = EnqueueResult(str(row[0]), created=False)
            continue
        [stored] = jobs.insert(cur, clock, [spec], schema)
        if stored.created:
            cur.execute(
                "INSERT INTO unique_locks (key, job_id, until) VALUES (%s, %s, 0) "
                "ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, until = 0",
                (key, spec.id))
        out[i] = stored
    if rest:
        for i, stored in zip(rest, jobs.insert(cur, clock, [specs[i] for i in rest], schema),
                             strict=True):
            out[i] = stored
    return [r for r in out if r is not None]
