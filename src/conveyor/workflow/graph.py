"""Workflows on the client side: jobs that wait for other jobs (docs/workflows.md).

::

    wf = Workflow(description="nightly export")
    a = wf.add(extract.s("orders"))
    b = wf.add(extract.s("refunds"))
    c = wf.add(reconcile.s(), after=[a, b], results=True)    # reconcile([orders, refunds])
    d = wf.add(notify.s(), after=[c], on_parent_failure="continue")
    wf.enqueue()
    c.result(timeout=60)

A workflow is a batch (kind ``"workflow"``) whose jobs carry their place in the graph: its
counters, callbacks (``on_complete`` / ``on_success`` / ``on_death``), cancel and pages are a
batch's. Every node is stored at ``enqueue``; a node with parents is ``waiting`` until each
parent has settled (reached a terminal state), then runs, fails or is skipped as its
``on_parent_failure`` policy says; the storage settles it in the same atomic step as the
parent's own move (``storage/graph.py``).

Nodes waiting for parents are stored before the nodes without any, so no parent can finish
before its children are stored. A crash in the middle of ``enqueue`` leaves the nodes stored
so far, and the workflow never completes: enqueue a workflow in ``app.transaction(conn)`` on
PostgreSQL to make it all or nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from conveyor.client.batch import Callback, batch_status, callback_spec, wait_batch
from conveyor.client.client import CHUNK_SIZE, Client
from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction
from conveyor.client.signature import Signature
from conveyor.core.ids import new_id
from conveyor.core.job import BatchSpec, EnqueueResult, JobSpec, Node
from conveyor.core.node import PARENT_FAILURE_POLICIES, RESULT_MODES
from conveyor.core.text import id_fault, shown
from conveyor.errors import WorkflowError

__all__ = ["After", "Attachable", "Workflow", "node_signature"]

After = JobRef | str | Iterable["After"]
"""Parents given to ``Workflow.add``: node refs (or node ids), or lists of them (a group
added at once)."""


class Attachable(Protocol):
    """Steps that can be placed in a workflow after some of its nodes (a canvas: ``chain``,
    ``group``, ``chord``)."""

    def attach(self, wf: Workflow, after: Sequence[JobRef], results: str,
               policy: str) -> list[JobRef]:
        """Add the steps to ``wf`` after ``after``; returns the nodes a next step waits for."""
        ...


class Step:
    """One node of a workflow as built: its signature, ref, parents, policy, results mode."""

    __slots__ = ("given", "parents", "policy", "ref", "results", "sig")

    def __init__(self, sig: Signature, ref: JobRef, parents: tuple[str, ...], policy: str,
                 results: str, given: bool = False) -> None:
        self.sig, self.ref, self.parents, self.policy, self.results = (
            sig, ref, parents, policy, results)
        self.given = given  # its id was the caller's (node_id=), not made by new_id


class Workflow:
    """A graph of jobs to enqueue together; see the module docstring.

    ``client`` is the app's client (``app.workflow(...)`` passes it); without one, the client
    of the first step's job function is used.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        description: str | None = None,
        meta: Mapping[str, Any] | None = None,
        on_complete: Callback = None,
        on_success: Callback = None,
        on_death: Callback = None,
        workflow_id: str | None = None,
    ) -> None:
        self._client = client
        if workflow_id is not None:
            check_id("workflow id", workflow_id)
        self._id = workflow_id or new_id()
        self.description = description
        self.meta: dict[str, Any] = dict(meta or {})
        self._callbacks = {"complete": on_complete, "success": on_success, "death": on_death}
        self._steps: dict[str, Step] = {}
        self._enqueued = False

    def __repr__(self) -> str:
        return f"<Workflow {self._id} nodes={len(self._steps)}>"

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def id(self) -> str:
        """The workflow's id (its batch's id: ``app.batch_status(wf.id)`` reads it too)."""
        return self._id

    def add(
        self,
        step: Signature | JobFunction,
        *,
        after: After = (),
        on_parent_failure: str = "fail",
        results: bool | str = False,
        node_id: str | None = None,
    ) -> JobRef:
        """Add a node; returns its ref (``ref.result()`` works once enqueued).

        ``after``: the nodes it waits for. ``on_parent_failure`` (a parent ended failed, dead
        or cancelled): ``"fail"`` ends it failed, ``"skip"`` ends it cancelled and skips every
        node after it, ``"continue"`` runs it anyway, ``"ignore"`` runs it as if that parent
        were not there. ``results=True`` passes the parents' results as its first argument: a
        list in the order of ``after`` (``None`` for a parent that did not succeed, left out
        under ``"ignore"``); ``results="one"``, for a node of one parent, passes that
        parent's result itself (a chain's step).
        """
        if self._enqueued:
            raise WorkflowError(f"workflow {self._id} is enqueued; it takes no more nodes")
        sig = node_signature(step)
        check_policy(on_parent_failure)
        parents = tuple(dict.fromkeys(flatten(after)))
        for parent in parents:
            if parent not in self._steps:
                raise WorkflowError(f"{parent} is not a node of workflow {self._id}: add a "
                                    "node's parents to the same workflow first")
        if node_id is not None:
            check_id("node id", node_id, self._id)
        ref = JobRef(node_id or new_id(), True, self._client)
        if ref.id in self._steps:
            raise WorkflowError(f"node id {ref.id!r} is used twice")
        mode = result_mode(results, parents)
        sig = sig.checked(leading=1 if mode else 0)
        self._steps[ref.id] = Step(sig, ref, parents, on_parent_failure, mode, node_id is not None)
        return ref

    def parents_of(self, node_id: str) -> tuple[str, ...]:
        """The nodes ``node_id`` waits for (none for a node not in this workflow)."""
        step = self._steps.get(node_id)
        return step.parents if step is not None else ()

    def add_group(self, steps: Iterable[Signature | JobFunction], *, after: After = (),
                  on_parent_failure: str = "fail",
                  results: bool | str = False) -> list[JobRef]:
        """Add several nodes with the same parents and policy (a fan-out); the list can be
        given as ``after`` of a later node (a fan-in)."""
        return [self.add(step, after=after, on_parent_failure=on_parent_failure,
                         results=results) for step in steps]

    def add_workflow(self, sub: Workflow | Attachable, *, after: After = (),
                     on_parent_failure: str = "fail", results: bool | str = False) -> list[JobRef]:
        """Add a whole sub-workflow (a ``Workflow`` not enqueued, or a canvas) as one node:
        its nodes without parents wait for ``after`` (``on_parent_failure`` and ``results``
        apply to them), and the refs returned, its last nodes, are the node to wait for:
        ``after=`` those settles when the sub-workflow has. The sub-workflow's nodes join
        this one (its counters, pages and callbacks); its refs stay valid."""
        parents = tuple(dict.fromkeys(flatten(after)))
        check_policy(on_parent_failure)
        mode = result_mode(results, parents)
        if not isinstance(sub, Workflow):
            return sub.attach(self, [JobRef(p, True, self._client) for p in parents], mode,
                              on_parent_failure)
        for parent in parents:
            if parent not in self._steps:
                raise WorkflowError(f"{parent} is not a node of workflow {self._id}")
        steps = sub.take_steps(self._id)
        for step in steps:
            if step.ref.id in self._steps:
                raise WorkflowError(f"node id {step.ref.id!r} is used twice")
            if not step.parents:
                step.parents, step.policy, step.results = parents, on_parent_failure, mode
            self._steps[step.ref.id] = step
        return tails(steps)

    def take_steps(self, into: str) -> list[Step]:
        """This workflow's steps, in the order added, for embedding in workflow ``into``
        (which it becomes part of: it can no longer be enqueued on its own)."""
        if self._enqueued:
            raise WorkflowError(f"workflow {self._id} is enqueued already: it cannot become "
                                f"part of workflow {into}")
        if not self._steps:
            raise WorkflowError("a sub-workflow needs at least one node")
        if any(self._callbacks.values()):
            raise WorkflowError(f"workflow {self._id} has callbacks: a sub-workflow has none "
                                "(add a node after its last nodes instead)")
        self._enqueued = True
        return [Step(s.sig, s.ref, s.parents, s.policy, s.results, s.given)
                for s in self._steps.values()]

    async def aenqueue(self, *, delay: float | timedelta | None = None,
                       at: datetime | float | None = None) -> Workflow:
        """``enqueue`` for asyncio code (its storage calls in a thread)."""
        return await asyncio.to_thread(self.enqueue, delay=delay, at=at)

    def enqueue(self, *, delay: float | timedelta | None = None,
                at: datetime | float | None = None) -> Workflow:
        """Store the workflow and every node; the nodes without parents start at once, or
        ``delay`` seconds from now, or at ``at`` (an aware datetime).

        A node id given by the caller that a stored job already has is refused
        (``WorkflowError``) before anything is stored: the store would keep that job and the
        node's children would wait for a node that never exists. Should another client store
        a job of that id meanwhile, the workflow is cancelled as it stands, then refused."""
        if self._enqueued:
            raise WorkflowError(f"workflow {self._id} is enqueued already")
        if not self._steps:
            raise WorkflowError("a workflow needs at least one node")
        client = self._client_of()
        specs = self._specs(client, delay, at)
        for step in self._steps.values():
            if step.given and client.storage.get_job(step.ref.id) is not None:
                raise WorkflowError(_taken(step.ref.id, self._id))
        writer = client.writer
        writer.create_batch(self._batch_spec(client))
        for start in range(0, len(specs), CHUNK_SIZE):
            chunk = specs[start:start + CHUNK_SIZE]
            left = [(spec, r) for spec, r in zip(chunk, writer.enqueue(chunk), strict=True)
                    if not r.created]
            if left:
                self._refuse(client, *left[0])
        writer.close_batch(self._id)
        self._enqueued = True
        for step in self._steps.values():
            step.ref.bind(client)  # refs made before the client was known
        return self

    def status(self) -> dict[str, Any]:
        """The workflow's counters and progress, as ``app.batch_status``."""
        return batch_status(self._client_of().storage, self._id)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until every node has settled (nodes added while it ran included) and return
        ``status()``; ``ResultTimeout`` after ``timeout`` seconds (None: no limit). Woken as
        the workflow finishes where the store can tell (``conveyor.client.batch.wait_batch``)."""
        return wait_batch(self._client_of().storage, self._id, timeout, what="workflow")

    def _refuse(self, client: Client, spec: JobSpec, result: EnqueueResult) -> None:
        """A node the store did not create (its id taken meanwhile, or its unique key held):
        close and cancel what is stored of the workflow, so it ends rather than waits for
        that node for good, and raise. Inside the caller's own transaction the rollback
        the error leads to undoes it instead."""
        writer = client.writer
        writer.close_batch(self._id)
        if writer is client.storage:
            client.storage.cancel_batch(self._id)
        self._enqueued = True
        if result.id != spec.id:
            raise WorkflowError(f"node {spec.id} of workflow {self._id} was not stored: job "
                                f"{result.id} holds its unique key (the workflow was cancelled)")
        raise WorkflowError(_taken(spec.id, self._id) + " (the workflow was cancelled)")

    # -- building ---------------------------------------------------------------------------

    @property
    def client(self) -> Client | None:
        """The client it is stored with, once known (given, or its first step's)."""
        if self._client is None:
            first = next(iter(self._steps.values()), None)
            enqueuer = first.sig.fn.enqueuer if first is not None else None
            self._client = enqueuer if isinstance(enqueuer, Client) else None
        return self._client

    def _client_of(self) -> Client:
        client = self.client
        if client is None:
            raise WorkflowError("this workflow has no app: use app.workflow(...)")
        return client

    def _batch_spec(self, client: Client) -> BatchSpec:
        callbacks = {event: callback_spec(client, self._id, event, target)
                     for event, target in self._callbacks.items() if target is not None}
        return BatchSpec(self._id, self.description, self.meta, callbacks, kind="workflow")

    def _specs(self, client: Client, delay: float | timedelta | None = None,
               at: datetime | float | None = None) -> list[JobSpec]:
        children: dict[str, list[str]] = {node_id: [] for node_id in self._steps}
        for node_id, step in self._steps.items():
            for parent in step.parents:
                children[parent].append(node_id)
        waiting: list[JobSpec] = []
        roots: list[JobSpec] = []
        for node_id, step in self._steps.items():
            root = not step.parents  # a node with parents starts when they settle
            spec = node_spec(client, step.sig, step.ref.id, self._id,
                             delay if root else None, at if root else None)
            node = node_of(client, step.parents, tuple(children[node_id]), step.policy,
                           step.results)
            (waiting if step.parents else roots).append(replace(spec, node=node))
        return waiting + roots



def node_of(client: Client, parents: tuple[str, ...], children: tuple[str, ...], policy: str,
            results: str) -> Node:
    """A node's place in its graph; one that receives its parents' results is held to the
    client's ``max_payload`` once they are in its arguments (``Node.limit``)."""
    return Node(parents, children, policy, results, client.max_payload if results else 0)


def node_spec(client: Client, sig: Signature, node_id: str, workflow_id: str,
              delay: float | timedelta | None = None,
              at: datetime | float | None = None) -> JobSpec:
    """A node's job, built as ``enqueue`` builds a job (client middleware included)."""
    draft = client.draft(sig.name, sig.fn.opts, sig.args, sig.kwargs, delay, at)
    draft.id, draft.batch_id = node_id, workflow_id
    built: list[JobSpec] = []

    def capture() -> JobRef:
        built.append(client.build_spec(draft))
        return JobRef(node_id, True, client)

    client.middleware.run_client(draft, capture)
    if not built:
        raise WorkflowError(f"a client middleware stopped node {node_id} "
                            f"({sig.name}); a workflow's nodes are stored whole")
    spec = built[0]
    if spec.id != node_id or spec.batch_id != workflow_id:
        raise WorkflowError(f"a client middleware changed the id or batch of node "
                            f"{node_id} ({sig.name}); a workflow's nodes keep theirs")
    return spec


def check_id(what: str, value: object, workflow_id: str | None = None) -> None:
    """Raise ``WorkflowError`` (one line) unless ``value`` is an id a caller may choose
    (``text.id_fault``: 1 to 128 ASCII letters, digits, ``-_.:``)."""
    fault = id_fault(value)
    if fault is not None:
        of = f" of workflow {workflow_id}" if workflow_id else ""
        raise WorkflowError(f"{what} {shown(value)}{of} {fault}")


def _taken(node_id: str, workflow_id: str) -> str:
    return (f"node id {node_id!r} of workflow {workflow_id} is the id of a stored job: a node "
            "id must be new")


def node_signature(step: Signature | JobFunction) -> Signature:
    """The signature a node runs; ``WorkflowError`` for one with callbacks, which a node
    added alone would drop (a canvas places them: ``add_workflow(sig)``)."""
    sig = step if isinstance(step, Signature) else step.s()
    if sig.links or sig.errbacks:
        raise WorkflowError(f"{sig.name} has callbacks (link / link_error): add it with "
                            "add_workflow(chain(sig)), which places them too")
    return sig


def tails(steps: Sequence[Step]) -> list[JobRef]:
    """The refs of the steps no other step waits for (a sub-workflow's last nodes)."""
    waited = {p for step in steps for p in step.parents}
    return [step.ref for step in steps if step.ref.id not in waited]


def check_policy(policy: str) -> None:
    if policy not in PARENT_FAILURE_POLICIES:
        raise WorkflowError(f"on_parent_failure must be one of "
                            f"{', '.join(PARENT_FAILURE_POLICIES)}, not {policy!r}")


def result_mode(results: bool | str, parents: Sequence[str]) -> str:
    mode = "list" if results is True else "" if results is False else results
    if mode not in RESULT_MODES or (mode == "one" and len(parents) != 1):
        raise WorkflowError(f"results must be True, False or 'one' (with one parent), "
                            f"not {results!r}")
    return mode


def flatten(after: After) -> Sequence[str]:
    if isinstance(after, JobRef):
        return [after.id]
    if isinstance(after, str):
        return [after]
    out: list[str] = []
    for item in after:
        out += flatten(item)
    return out

