"""Settling a workflow's graph: what a node's parents' outcomes do to it (docs/workflows.md).

A workflow is a batch whose jobs carry a ``Node`` (their parents and children). A node with
parents is stored ``waiting`` with ``unsettled`` = its number of parents. When a job of a
workflow enters a terminal state (or leaves one: a retry by hand), the same atomic step that
moved it leaves a *mark*; ``settle`` turns marks into their effects, inside that same step on
memory, SQLite and PostgreSQL (the transaction of the move), by an idempotent call on Redis:

- a node newly terminal counts down each child's ``unsettled``; a child at zero is *decided*
  by its policy and its parents' outcomes: released to ``pending`` (its parents' results put
  in front of its arguments when it asked for them), ended ``failed`` (policy ``fail``) or
  ended ``cancelled`` as skipped (policy ``skip``, or any parent that was itself skipped);
- a node no longer terminal (retried by hand) counts its children up again and re-opens the
  children the graph had ended because of it, which re-opens theirs in turn; a node retried
  by hand back to ``waiting`` (it never ran: ``storage/graph_retry.py``) is decided again by
  its parents' outcomes.

Each node remembers the state it settled its children with (``settled``), so applying a mark
twice changes nothing: a replay after a crash, or a late duplicate, releases no child twice.
The backends provide the reads and the moves (``GraphTxn``); the decisions are made here once.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from conveyor.core.envelope import INJECTED, is_envelope
from conveyor.core.job import TERMINAL_STATES, JobSpec, JobState, Node
from conveyor.core.serializer import oversize
from conveyor.errors import WorkflowError

__all__ = ["ENDED_BY", "FAILED", "GraphNode", "GraphReads", "GraphTxn", "JobView", "NodeRow",
           "attach", "check_added", "decide", "inject", "judge", "parents_of", "settle"]


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One node of a workflow's graph as the dashboard draws it (``Inspector.workflow_graph``)."""

    id: str
    name: str
    state: JobState
    parents: tuple[str, ...] = ()


#: A parent in one of these states did not succeed: its children's policy applies.
FAILED = frozenset({JobState.FAILED.value, JobState.DEAD.value, JobState.CANCELLED.value})
_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
#: ``NodeRow.ended_by`` values: the graph ended the job (a parent's retry re-opens it).
ENDED_BY = frozenset({"fail", "skip"})
#: How SQL backends store ``NodeRow.released`` in the ``ended_by`` column (the two never meet:
#: a released node was never ended by the graph, and only such a node is re-opened).
RELEASED = "release"
#: ``settle`` stops after this many rounds (a graph is acyclic, so each round goes a level
#: deeper; a chain longer than this settles the rest at the next call).
MAX_ROUNDS = 100_000


@dataclass(slots=True)
class NodeRow:
    """What a backend stores per workflow node besides the job."""

    id: str
    node: Node
    unsettled: int
    settled: str | None = None  # the state its children were settled with; None: not yet
    ended_by: str | None = None  # "fail" / "skip" when the graph ended this job
    # The graph released it: its payload holds its parents' results, and a retry by hand
    # runs it again as it is (a node never released goes back to waiting instead).
    released: bool = False

    @classmethod
    def stored(cls, job_id: str, node: Node, unsettled: int, settled: str | None,
               ended: str | None) -> NodeRow:
        """A row read from a SQL backend, whose ``ended_by`` column holds ``RELEASED`` too."""
        released = ended == RELEASED
        return cls(job_id, node, unsettled, settled, None if released else ended, released)

    @property
    def ended_column(self) -> str | None:
        """``ended_by`` as a SQL backend stores it (``RELEASED`` for a released node)."""
        return RELEASED if self.released else self.ended_by


@dataclass(frozen=True, slots=True)
class JobView:
    """The job fields settling reads: state, name, message, result and payload (JSON text)."""

    state: str
    name: str = ""
    message: str | None = None
    result: str | None = None
    payload: str | None = None
    halted: bool = False  # its workflow was cancelled: nothing of it is released any more
    attempt: int = 0  # attempts started: a node that ran was released


class GraphReads(Protocol):
    """What deciding a node reads: node rows and jobs."""

    def nodes(self, ids: Collection[str]) -> dict[str, NodeRow]:
        """The node rows of ``ids`` that exist (locked for this step where that matters)."""

    def jobs(self, ids: Collection[str]) -> dict[str, JobView]:
        """The jobs of ``ids`` that exist."""


class GraphTxn(GraphReads, Protocol):
    """One backend's reads and moves inside the step that settles (a transaction, a lock)."""

    def take_marks(self) -> list[str]:
        """The marked node ids (removing the marks); nodes moved by this step mark again."""

    def save(self, rows: Iterable[NodeRow]) -> None:
        """Write back ``unsettled``, ``settled`` and ``ended_by``."""

    def link(self, rows: Iterable[NodeRow]) -> None:
        """Write back ``node`` (its children grew: a node was added at run time)."""

    def release(self, job_id: str, payload: str | None, message: str) -> None:
        """``waiting`` -> ``pending`` (with a new payload when not None), event ``released``."""

    def end(self, job_id: str, state: JobState, message: str) -> None:
        """``waiting`` -> ``state`` (failed or cancelled), terminal, with ``message``."""

    def reopen(self, job_id: str, message: str) -> None:
        """A job the graph ended -> ``waiting`` again, event ``reopened``."""


def settle(txn: GraphTxn) -> int:
    """Apply every mark, and the marks the moves it makes leave; returns the nodes moved."""
    moved = 0
    for _ in range(MAX_ROUNDS):
        marks = txn.take_marks()
        if not marks:
            break
        moved += _round(txn, sorted(set(marks)))
    return moved


def check_added(workflow_id: str, specs: Sequence[JobSpec], known: Collection[str],
                taken: Collection[str] = ()) -> None:
    """Raise ``WorkflowError`` unless every spec is a node of ``workflow_id`` whose parents
    are nodes of it: stored already (``known``, the parent ids found in its graph) or added
    in the same call before it; and whose id no stored job has but a node of this workflow
    (``taken``: the spec ids stored as other jobs, which the store would leave as they are,
    so the node would never exist and its children would wait for it for good)."""
    seen = set(known)
    for spec in specs:
        if spec.node is None or spec.batch_id != workflow_id:
            raise WorkflowError(f"job {spec.id} is not a node of workflow {workflow_id}")
        if spec.id in taken:
            raise WorkflowError(f"node id {spec.id!r} is the id of a stored job that is not a "
                                f"node of workflow {workflow_id}: a node id must be new")
        for parent in spec.node.parents:
            if parent not in seen:
                raise WorkflowError(f"{parent} is not a node of workflow {workflow_id}: a "
                                    "node added at run time waits only for nodes of its own "
                                    "workflow")
        seen.add(spec.id)


def attach(txn: GraphTxn, ids: Collection[str]) -> int:
    """Nodes just stored in a running workflow (added by one of its running jobs): link each
    into its parents' children and count only the parents not settled yet, all under the
    locks ``settle`` takes, so a parent settling meanwhile is counted exactly once (here or
    by its mark). A node whose parents have all settled is decided at once. Returns the nodes
    moved."""
    new = txn.nodes(ids)
    parent_ids = sorted({p for r in new.values() for p in r.node.parents} - set(new))
    parents = {**txn.nodes(parent_ids), **new}
    linked: dict[str, NodeRow] = {}
    ready: list[str] = []
    for node_id in ids:
        row = new.get(node_id)
        if row is None:
            continue
        unsettled = 0
        for parent_id in row.node.parents:
            parent = parents.get(parent_id)
            if parent is None:
                continue  # a parent deleted after it settled: nothing left to wait for
            if node_id not in parent.node.children:
                parent.node = replace(parent.node,
                                      children=(*parent.node.children, node_id))
                linked[parent_id] = parent
            if parent.settled is None:
                unsettled += 1
        row.unsettled = unsettled
        if row.node.parents and unsettled == 0:
            ready.append(node_id)
    txn.link(linked.values())
    txn.save(new.values())
    return _decide_all(txn, ready, new) + settle(txn)


def _round(txn: GraphTxn, marks: list[str]) -> int:
    rows = txn.nodes(marks)
    states = txn.jobs(marks)
    child_ids = sorted({c for r in rows.values() for c in r.node.children} - set(rows))
    # One row object per node: a node marked in this round may be a child of another one.
    known = {**txn.nodes(child_ids), **rows}
    ready: list[str] = []
    reopen: list[str] = []
    for node_id in marks:
        row = rows.get(node_id)
        if row is None:
            continue
        view = states.get(node_id)
        if view is None and row.settled is not None:
            continue  # a finished job deleted: its children were settled with its outcome
        # A job deleted unfinished settles as cancelled: its children must not wait forever.
        state = view.state if view is not None else JobState.CANCELLED.value
        terminal = state in _TERMINAL
        if not terminal:
            row.ended_by = None  # running again (a retry by hand): no longer the graph's
        if row.settled is not None and (not terminal or _succeeded(row.settled)
                                        != _succeeded(state)):
            row.settled = None  # retried by hand (perhaps finished again since): count up
            for child_id in row.node.children:
                child = known.get(child_id)
                if child is not None:
                    child.unsettled += 1
                    if child.ended_by in ENDED_BY:
                        reopen.append(child_id)
        if terminal and row.settled is None:
            row.settled = state
            for child_id in row.node.children:
                child = known.get(child_id)
                if child is not None:
                    child.unsettled -= 1
                    if child.unsettled <= 0:
                        ready.append(child_id)
        if state == JobState.WAITING.value and row.node.parents and row.unsettled <= 0:
            ready.append(node_id)  # retried by hand to waiting, its parents all settled
    txn.save(known.values())
    moved = _reopen(txn, reopen, known)
    return moved + _decide_all(txn, ready, known)


def _succeeded(state: str) -> bool:
    return state == JobState.SUCCEEDED.value


def _reopen(txn: GraphTxn, ids: list[str], children: Mapping[str, NodeRow]) -> int:
    if not ids:
        return 0
    jobs = txn.jobs(ids)
    moved = 0
    for job_id in ids:
        view = jobs.get(job_id)
        if view is None or view.state not in _TERMINAL:
            continue
        children[job_id].ended_by = None
        txn.reopen(job_id, "a parent was retried: waiting for it again")
        moved += 1
    txn.save([children[i] for i in ids])
    return moved


def _decide_all(txn: GraphTxn, ids: list[str], children: Mapping[str, NodeRow]) -> int:
    if not ids:
        return 0
    jobs = txn.jobs(ids)
    waiting = [i for i in dict.fromkeys(ids) if (v := jobs.get(i)) is not None
               and v.state == JobState.WAITING.value]
    parent_ids = sorted({p for i in waiting for p in children[i].node.parents})
    parents = txn.nodes(parent_ids)
    parent_jobs = txn.jobs(parent_ids)
    decided: list[NodeRow] = []
    for job_id in waiting:
        row = children[job_id]
        if jobs[job_id].halted:
            txn.end(job_id, JobState.CANCELLED, "cancelled: its workflow was cancelled")
            continue
        verdict, message, payload = judge(row, jobs[job_id], parents, parent_jobs)
        if verdict == "release":
            row.released = True
            decided.append(row)
            txn.release(job_id, payload, message)
            continue
        row.ended_by = verdict
        decided.append(row)
        txn.end(job_id, JobState.FAILED if verdict == "fail" else JobState.CANCELLED, message)
    txn.save(decided)
    return len(waiting)


def judge(row: NodeRow, job: JobView, parents: Mapping[str, NodeRow],
          parent_jobs: Mapping[str, JobView]) -> tuple[str, str, str | None]:
    """``decide``, and the payload a released node gets (None: unchanged): its parents'
    results in its arguments when it asked for them. Arguments over the node's ``limit``
    (the client's ``max_payload``) end it ``fail``: the size rule every enqueue obeys, with
    a message naming the node and the size (docs/workflows.md)."""
    verdict, message = decide(row, parents, parent_jobs)
    if verdict != "release" or not row.node.results:
        return verdict, message, None
    payload = inject(job, row.node, parent_jobs)
    size = oversize(payload, row.node.limit) if payload is not None and row.node.limit else 0
    if size:
        return "fail", (f"{_named(job.name, row.id)}: its parents' results make its arguments "
                        f"{size:,} bytes, over max_payload ({row.node.limit:,} bytes)"), None
    return verdict, message, payload


def decide(row: NodeRow, parents: Mapping[str, NodeRow],
           jobs: Mapping[str, JobView]) -> tuple[str, str]:
    """``("release" | "fail" | "skip", message)`` for a node whose parents all settled."""
    failed: list[tuple[str, str]] = []
    for parent_id in row.node.parents:
        parent = parents.get(parent_id)
        state = parent.settled if parent is not None and parent.settled else "cancelled"
        if state in FAILED:
            if parent is not None and parent.ended_by == "skip":
                return "skip", f"skipped: parent {_who(parent_id, jobs)} was skipped"
            failed.append((parent_id, state))
    if not failed or row.node.policy in ("continue", "ignore"):
        how = f" ({len(failed)} did not succeed: {row.node.policy})" if failed else ""
        return "release", f"parents settled{how}"
    parent_id, state = failed[0]
    view = jobs.get(parent_id)
    why = f": {view.message}" if view is not None and view.message else ""
    if row.node.policy == "skip":
        return "skip", f"skipped: parent {_who(parent_id, jobs)} ended {state}"
    return "fail", f"parent {_who(parent_id, jobs)} ended {state}{why}"


def _who(job_id: str, jobs: Mapping[str, JobView]) -> str:
    view = jobs.get(job_id)
    return _named(view.name if view is not None else "", job_id)


def _named(name: str, job_id: str) -> str:
    return f"{name} {job_id}" if name else job_id


def inject(job: JobView, node: Node, parents: Mapping[str, JobView]) -> str | None:
    """The payload with the parents' results as the first positional argument: a list in the
    order of ``node.parents``, ``None`` for a parent that did not succeed (``continue``), left
    out for one that did not succeed under ``ignore``. None when the payload is not a stored
    payload (the worker reports that job as unreadable)."""
    payload = _loads(job.payload)
    if not isinstance(payload, dict):
        return None
    if node.results == "one":  # the one parent's result itself (None if it did not succeed)
        view = parents.get(node.parents[0]) if node.parents else None
        one = _loads(view.result) if view is not None and view.state == "succeeded" else None
        args = payload.get("a", [])
        payload["a"] = [one, *(args if isinstance(args, list) else [])]
        if is_envelope(one):  # sealed or by reference: the worker opens it (envelope.py)
            payload[INJECTED] = "one"
        return json.dumps(payload, separators=(",", ":"))
    results: list[Any] = []
    for parent_id in node.parents:
        view = parents.get(parent_id)
        if view is not None and view.state == JobState.SUCCEEDED.value:
            results.append(_loads(view.result))
        elif node.policy != "ignore":
            results.append(None)
    args = payload.get("a", [])
    payload["a"] = [results, *(args if isinstance(args, list) else [])]
    if any(map(is_envelope, results)):  # a parent's result sealed or by reference
        payload[INJECTED] = "list"
    return json.dumps(payload, separators=(",", ":"))


def parents_of(text: str | None) -> tuple[str, ...]:
    """The parents in a stored node's JSON (none when it cannot be read: a damaged row is
    still drawn, without its edges)."""
    raw = _loads(text)
    found = raw.get("p") if isinstance(raw, dict) else None
    return tuple(str(p) for p in found) if isinstance(found, list) else ()


def _loads(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
