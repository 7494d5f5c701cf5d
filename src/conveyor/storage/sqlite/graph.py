"""Workflow graphs on SQLite: node rows, and ``graph.settle`` inside the caller's transaction.

The ``wf_mark_*`` triggers (migrations/006_workflows.sql) mark a node in the statement that
moves it; ``settle`` runs at the end of ``batches.apply``, which every transition calls, so a
parent's outcome reaches its children in the transaction that recorded it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence

from conveyor.core.job import EventKind, JobSpec, JobState, Node
from conveyor.storage import graph, graph_retry
from conveyor.storage.graph import JobView, NodeRow
from conveyor.storage.sqlite.moves import Move, ids_param, move

CountFn = Callable[[Sequence[Move]], None]


def insert(cur: sqlite3.Cursor, specs: Iterable[JobSpec]) -> None:
    """Store the node rows of new workflow jobs."""
    rows = [(s.id, json.dumps(s.node.to_wire()), len(s.node.parents)) for s in specs if s.node]
    if rows:
        cur.executemany(
            "INSERT OR IGNORE INTO wf_nodes (id, node, unsettled) VALUES (?, ?, ?)", rows)


def settle(cur: sqlite3.Cursor, now: float, count: CountFn) -> int:
    """Settle every marked node (``count`` moves the batch counters of the jobs it moves);
    returns the nodes moved."""
    if cur.execute("SELECT 1 FROM wf_marks LIMIT 1").fetchone() is None:
        return 0
    return graph.settle(_Txn(cur, now, count))


def attach(cur: sqlite3.Cursor, now: float, count: CountFn, ids: Collection[str]) -> None:
    """Link nodes added at run time into their graph (``graph.attach``) in this transaction."""
    if ids:
        graph.attach(_Txn(cur, now, count), ids)


def plan_retries(cur: sqlite3.Cursor, ids: Collection[str]) -> graph_retry.RetryPlan:
    """How retrying ``ids`` by hand moves the workflow nodes among them (reads only)."""
    return graph_retry.plan(_Txn(cur, 0.0, _no_moves), ids)


def _no_moves(moves: Sequence[Move]) -> None:
    """Planning moves nothing: no batch counter to apply."""


def known(cur: sqlite3.Cursor, workflow_id: str, ids: Collection[str]) -> list[str]:
    """The ids among ``ids`` that are stored nodes of ``workflow_id``."""
    return [r[0] for r in cur.execute(
        "SELECT wf_nodes.id FROM wf_nodes JOIN jobs ON jobs.id = wf_nodes.id "
        "WHERE wf_nodes.id IN (SELECT value FROM json_each(?)) AND jobs.batch_id = ?",
        (ids_param(ids), workflow_id))]


def taken(cur: sqlite3.Cursor, workflow_id: str, ids: Collection[str]) -> list[str]:
    """The ids among ``ids`` that are stored jobs but not nodes of ``workflow_id``."""
    return [r[0] for r in cur.execute(
        "SELECT jobs.id FROM jobs LEFT JOIN wf_nodes ON wf_nodes.id = jobs.id "
        "WHERE jobs.id IN (SELECT value FROM json_each(?)) "
        "AND (wf_nodes.id IS NULL OR jobs.batch_id IS NOT ?)", (ids_param(ids), workflow_id))]


def trim(cur: sqlite3.Cursor) -> None:
    """Forget the node rows of jobs deleted after they settled."""
    cur.execute("DELETE FROM wf_nodes WHERE settled IS NOT NULL AND NOT EXISTS "
                "(SELECT 1 FROM jobs WHERE jobs.id = wf_nodes.id)")


class _Txn:
    """``graph.GraphTxn`` inside one SQLite transaction."""

    def __init__(self, cur: sqlite3.Cursor, now: float, count: CountFn) -> None:
        self._cur = cur
        self._now = now
        self._count = count

    def take_marks(self) -> list[str]:
        marks = [r[0] for r in self._cur.execute("SELECT id FROM wf_marks")]
        if marks:
            self._cur.execute("DELETE FROM wf_marks")
        return marks

    def nodes(self, ids: Collection[str]) -> dict[str, NodeRow]:
        rows = self._cur.execute(
            "SELECT id, node, unsettled, settled, ended_by FROM wf_nodes "
            "WHERE id IN (SELECT value FROM json_each(?))", (ids_param(ids),))
        return {r[0]: NodeRow.stored(r[0], Node.from_wire(json.loads(r[1])), r[2], r[3], r[4])
                for r in rows}

    def jobs(self, ids: Collection[str]) -> dict[str, JobView]:
        rows = self._cur.execute(
            "SELECT jobs.id, state, CAST(name AS BLOB), message, result, payload, "
            "coalesce(batches.cancelled, 0), attempt FROM jobs LEFT JOIN batches "
            "ON batches.id = jobs.batch_id WHERE jobs.id IN (SELECT value FROM json_each(?))",
            (ids_param(ids),))
        return {r[0]: JobView(r[1], text_of(r[2]) or "", text_of(r[3]), text_of(r[4]),
                              text_of(r[5]), bool(r[6]), int(r[7] or 0)) for r in rows}

    def save(self, rows: Iterable[NodeRow]) -> None:
        self._cur.executemany(
            "UPDATE wf_nodes SET unsettled = ?, settled = ?, ended_by = ? WHERE id = ?",
            [(r.unsettled, r.settled, r.ended_column, r.id) for r in rows])

    def link(self, rows: Iterable[NodeRow]) -> None:
        self._cur.executemany("UPDATE wf_nodes SET node = ? WHERE id = ?",
                              [(json.dumps(r.node.to_wire()), r.id) for r in rows])

    def _move(self, job_id: str, to: JobState, kind: str, message: str, sets: str) -> None:
        row = self._cur.execute("SELECT id, state, batch_id FROM jobs WHERE id = ?",
                                (job_id,)).fetchone()
        if row is not None:
            self._count(move(self._cur, self._now, [row], to, kind, message, sets))

    def release(self, job_id: str, payload: str | None, message: str) -> None:
        if payload is not None:
            self._cur.execute("UPDATE jobs SET payload = ? WHERE id = ?", (payload, job_id))
        self._move(job_id, JobState.PENDING, EventKind.RELEASED, message,
                   "ready_at = :now, publish_at = NULL")

    def end(self, job_id: str, state: JobState, message: str) -> None:
        kind = EventKind.FAILED if state is JobState.FAILED else EventKind.CANCELLED
        self._move(job_id, state, kind, message, "message = :msg, finished_at = :now")

    def reopen(self, job_id: str, message: str) -> None:
        self._move(job_id, JobState.WAITING, EventKind.REOPENED, message,
                   "message = NULL, finished_at = NULL")


def text_of(value: object) -> str | None:
    """Text of a column another program may have written as bytes (not UTF-8)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
