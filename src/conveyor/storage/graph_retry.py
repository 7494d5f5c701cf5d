"""A retry by hand of a workflow node (docs/workflows.md, "Retry a node by hand").

A job retried by hand goes back to ``pending`` and runs again with the payload it has. A
workflow node the graph never released has no parents' results in that payload, and its
parents may not have succeeded: run as it is, it would get no inputs (``results=True``), or
run after a failed parent (a ``fail`` policy). Such a node (ended by the graph, ``fail`` or
``skip``, or cancelled or killed while it waited) is instead decided again by its parents,
as Airflow's "clear" does with a task whose upstream failed:

- some parent has not settled yet: it goes back to ``waiting`` and waits for it;
- its parents' outcomes now release it: it goes back to ``waiting`` and the settle of that
  same move releases it, its parents' results put in its arguments;
- they would end it again: the retry is **refused**, with one line naming the job to retry
  instead (the ancestor whose own outcome ended it); retrying that one re-opens this node.

A node the graph released (its payload holds its parents' results), or that ran (so was
released, maybe before releases were marked), is retried as any job.
Every backend calls ``plan`` inside the step that retries (memory's lock, SQLite's and
PostgreSQL's transaction); Redis plans just before its ``requeue.lua`` call, which moves a
job only from the state it was planned in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from conveyor.storage.graph import ENDED_BY, FAILED, GraphReads, JobView, NodeRow, judge

__all__ = ["RetryPlan", "plan"]

#: Ancestors looked at above a node to find the one to retry (a graph is acyclic; this only
#: bounds a damaged one).
MAX_DEPTH = 10_000


@dataclass(slots=True)
class RetryPlan:
    """How a retry by hand moves some jobs: ``waiting`` holds the nodes that go back to
    waiting, ``refused`` the nodes left as they are with the reason; every other job goes
    to pending as any retried job."""

    waiting: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)


def plan(reads: GraphReads, ids: Collection[str]) -> RetryPlan:
    """The plan for retrying ``ids`` by hand (those that are not nodes, or were released,
    are in neither part)."""
    out = RetryPlan()
    rows = reads.nodes(ids)
    held = [i for i in ids if (r := rows.get(i)) is not None and r.node.parents
            and not r.released]
    if not held:
        return out
    views = reads.jobs(held)
    parent_ids = sorted({p for i in held for p in rows[i].node.parents})
    parents, parent_jobs = reads.nodes(parent_ids), reads.jobs(parent_ids)
    for job_id in held:
        row, view = rows[job_id], views.get(job_id)
        if view is None or view.attempt > 0:
            continue  # a node that ran was released (stored before releases were marked)
        if view.halted:
            out.refused[job_id] = (f"job {job_id} not retried: its workflow was cancelled, "
                                   "so none of its waiting nodes runs")
        elif row.unsettled > 0:
            out.waiting.add(job_id)
        else:
            verdict, message, _ = judge(row, view, parents, parent_jobs)
            if verdict == "release":
                out.waiting.add(job_id)
            else:
                out.refused[job_id] = _reason(reads, row, parents, parent_jobs, message)
    return out


def _reason(reads: GraphReads, row: NodeRow, parents: Mapping[str, NodeRow],
            parent_jobs: Mapping[str, JobView], message: str) -> str:
    """One line: which job to retry so that this node is decided again."""
    found = _culprit(reads, row, parents)
    if found is None:  # its parents all succeeded: the size rule ended it (``judge``)
        return f"job {row.id} not retried: {message}"
    culprit, direct = found
    view = parent_jobs.get(culprit) if direct else reads.jobs([culprit]).get(culprit)
    if view is None:
        return (f"job {row.id} not retried: {culprit}, which it waits on, was deleted "
                "before it finished, so this job cannot run")
    who = f"{view.name} {culprit}" if view.name else culprit
    where = f"its parent {who}" if direct else f"{who}, which it waits on,"
    return (f"job {row.id} not retried: {where} ended {view.state}; retry {culprit} and "
            "this job waits for it again")


def _culprit(reads: GraphReads, row: NodeRow,
             parents: Mapping[str, NodeRow]) -> tuple[str, bool] | None:
    """The ancestor whose own outcome ended ``row`` (going up while the parent that ended it
    was itself ended by the graph), and whether it is a direct parent."""
    current, above = row, parents
    for depth in range(MAX_DEPTH):
        culprit = _blocking_parent(current, above)
        if culprit is None:
            return None
        parent = above.get(culprit)
        if parent is None or parent.ended_by not in ENDED_BY:
            return culprit, depth == 0
        current, above = parent, reads.nodes(parent.node.parents)
    return None


def _blocking_parent(row: NodeRow, parents: Mapping[str, NodeRow]) -> str | None:
    """The parent ``graph.decide`` names: a skipped one first, else the first that did not
    succeed (a parent deleted unfinished counts as cancelled)."""
    failed: list[str] = []
    for parent_id in row.node.parents:
        parent = parents.get(parent_id)
        state = parent.settled if parent is not None and parent.settled else "cancelled"
        if state in FAILED:
            if parent is not None and parent.ended_by == "skip":
                return parent_id
            failed.append(parent_id)
    return failed[0] if failed else None
