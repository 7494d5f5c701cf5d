"""Workflow graphs on PostgreSQL: node rows, waiting nodes at enqueue, and ``graph.settle``.

The ``wf_mark`` trigger (functions/wf_mark.sql) marks a node in the statement that
moves it, whichever server-side function made the move. ``settle`` takes the marks in a
transaction of its own (rows locked, ``SKIP LOCKED`` between settlers) right after: after an
ack whose round trip reported marks (``wf_pending()``), after recovery and operator actions,
and at every promotion round, which sweeps marks a crash left behind. A mark is deleted in the
transaction that applies it, and each node remembers what it settled with, so a parent's
outcome reaches its children exactly once; the ack itself stays one round trip.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import psycopg

from conveyor.core.job import EnqueueResult, EventKind, JobSpec, JobState, Node
from conveyor.errors import WorkflowError
from conveyor.storage import graph, graph_retry
from conveyor.storage.graph import JobView, NodeRow
from conveyor.storage.postgres import batches, jobs
from conveyor.storage.postgres.text import dec

Cursor = psycopg.Cursor[Any]
MARKS_PER_ROUND = 500


def store(cur: Cursor, now: float, specs: Sequence[JobSpec],
          results: Sequence[EnqueueResult]) -> None:
    """In the enqueue's transaction: node rows of the created workflow jobs, their jobs
    flagged as nodes (``wf``: the mark triggers fire for them alone, migration 15), and the
    nodes with parents moved from pending (where ``enqueue`` put them) to waiting."""
    created = [s for s, r in zip(specs, results, strict=True) if r.created and s.node]
    if not created:
        return
    cur.executemany(
        "INSERT INTO wf_nodes (id, node, unsettled) VALUES (%s, %s, %s) "
        "ON CONFLICT (id) DO NOTHING",
        [(s.id, json.dumps(s.node.to_wire()), len(s.node.parents)) for s in created if s.node])
    waiting = [s.id for s in created if s.waits]
    # every node but those the next statement moves to waiting (and flags) in its write
    cur.execute("UPDATE jobs SET wf = true WHERE id = ANY(%s) "
                "AND NOT (id = ANY(%s) AND state = 'pending')", ([s.id for s in created], waiting))
    if waiting:
        rows = cur.execute(
            "UPDATE jobs SET wf = true, state = 'waiting', ready_at = NULL, "
            "events = event_line(%s::float8, 'enqueued', 'waiting') "
            "WHERE id = ANY(%s) AND state = 'pending' RETURNING batch_id", (now, waiting),
        ).fetchall()
        batches.apply(cur, now, [(r[0], "pending", "waiting") for r in rows if r[0]])


def adder(cur: Cursor, job_id: str, token: str) -> str | None:
    """The workflow of the running job ``job_id`` if ``token`` holds its lease (its row
    locked until the transaction ends, so its own outcome waits for the nodes it adds);
    ``WorkflowError`` if it is not a workflow's node."""
    row = cur.execute(
        "SELECT jobs.batch_id, wf_nodes.id FROM jobs LEFT JOIN wf_nodes ON wf_nodes.id = jobs.id "
        "WHERE jobs.id = %s AND token = %s AND state = 'active' FOR SHARE OF jobs",
        (job_id, token)).fetchone()
    if row is None:
        return None
    if row[0] is None or row[1] is None:
        raise WorkflowError(f"job {job_id} is not a node of a workflow")
    return str(row[0])


def known(cur: Cursor, workflow_id: str, ids: Collection[str]) -> list[str]:
    """The ids among ``ids`` that are stored nodes of ``workflow_id``."""
    rows = cur.execute(
        "SELECT wf_nodes.id FROM wf_nodes JOIN jobs ON jobs.id = wf_nodes.id "
        "WHERE wf_nodes.id = ANY(%s) AND jobs.batch_id = %s", (list(ids), workflow_id))
    return [r[0] for r in rows.fetchall()]


def taken(cur: Cursor, workflow_id: str, ids: Collection[str]) -> list[str]:
    """The ids among ``ids`` that are stored jobs but not nodes of ``workflow_id``."""
    rows = cur.execute(
        "SELECT jobs.id FROM jobs LEFT JOIN wf_nodes ON wf_nodes.id = jobs.id "
        "WHERE jobs.id = ANY(%s) "
        "AND (wf_nodes.id IS NULL OR jobs.batch_id IS DISTINCT FROM %s)", (list(ids), workflow_id))
    return [r[0] for r in rows.fetchall()]


def attach(cur: Cursor, now: float, ids: Collection[str]) -> int:
    """Link nodes added at run time into their graph (``graph.attach``) in this transaction."""
    return graph.attach(_Txn(cur, now), ids) if ids else 0


def plan_retries(cur: Cursor, ids: Collection[str]) -> graph_retry.RetryPlan:
    """How retrying ``ids`` by hand moves the workflow nodes among them (reads only, the
    node rows locked for the caller's transaction)."""
    return graph_retry.plan(_Txn(cur, 0.0), ids)


def settle(cur: Cursor, now: float) -> int:
    """Apply the marks waiting (inside the caller's transaction); returns nodes moved."""
    return graph.settle(_Txn(cur, now))


class _Txn:
    """``graph.GraphTxn`` inside one PostgreSQL transaction."""

    def __init__(self, cur: Cursor, now: float) -> None:
        self._cur = cur
        self._now = now

    def take_marks(self) -> list[str]:
        rows = self._cur.execute(
            "DELETE FROM wf_marks WHERE id IN (SELECT id FROM wf_marks ORDER BY id "
            "LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id", (MARKS_PER_ROUND,)).fetchall()
        return [r[0] for r in rows]

    def nodes(self, ids: Collection[str]) -> dict[str, NodeRow]:
        # Locked in id order: two settlers meeting on a child wait, never in a circle.
        rows = self._cur.execute(
            "SELECT id, node, unsettled, settled, ended_by FROM wf_nodes WHERE id = ANY(%s) "
            "ORDER BY id FOR UPDATE", (sorted(ids),)).fetchall()
        return {r[0]: NodeRow.stored(r[0], Node.from_wire(json.loads(r[1])), r[2], r[3], r[4])
                for r in rows}

    def jobs(self, ids: Collection[str]) -> dict[str, JobView]:
        rows = self._cur.execute(
            "SELECT jobs.id, state, name, message, result, payload, "
            "coalesce(batches.cancelled, false), attempt FROM jobs LEFT JOIN batches "
            "ON batches.id = jobs.batch_id WHERE jobs.id = ANY(%s)", (list(ids),)).fetchall()
        return {r[0]: JobView(r[1], dec(r[2]) or "", dec(r[3]), r[4], r[5], bool(r[6]), r[7])
                for r in rows}

    def save(self, rows: Iterable[NodeRow]) -> None:
        self._cur.executemany(
            "UPDATE wf_nodes SET unsettled = %s, settled = %s, ended_by = %s WHERE id = %s",
            [(r.unsettled, r.settled, r.ended_column, r.id) for r in rows])

    def link(self, rows: Iterable[NodeRow]) -> None:
        self._cur.executemany("UPDATE wf_nodes SET node = %s WHERE id = %s",
                              [(json.dumps(r.node.to_wire()), r.id) for r in rows])

    def _move(self, job_id: str, to: JobState, kind: str, message: str, sets: str) -> None:
        row = self._cur.execute("SELECT id, state, batch_id FROM jobs WHERE id = %s",
                                (job_id,)).fetchone()
        if row is not None:
            moves = jobs.move(self._cur, self._now, [row], to, kind, message, sets)
            batches.apply(self._cur, self._now, moves)

    def release(self, job_id: str, payload: str | None, message: str) -> None:
        if payload is not None:
            self._cur.execute("UPDATE jobs SET payload = %s WHERE id = %s", (payload, job_id))
        self._move(job_id, JobState.PENDING, EventKind.RELEASED, message,
                   "ready_at = %(now)s, publish_at = NULL")

    def end(self, job_id: str, state: JobState, message: str) -> None:
        kind = EventKind.FAILED if state is JobState.FAILED else EventKind.CANCELLED
        self._move(job_id, state, kind, message, "message = %(msg)s, finished_at = %(now)s")

    def reopen(self, job_id: str, message: str) -> None:
        self._move(job_id, JobState.WAITING, EventKind.REOPENED, message,
                   "message = NULL, finished_at = NULL")
