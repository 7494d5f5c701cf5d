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

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from conveyor.batch import Callback, batch_status, callback_spec
from conveyor.client import CHUNK_SIZE, Client
from conveyor.context import JobContext, set_workflow_scope
from conveyor.errors import LeaseLost, WorkflowError
from conveyor.ids import new_id
from conveyor.job import BatchSpec, JobSpec, Node
from conveyor.node import PARENT_FAILURE_POLICIES, RESULT_MODES
from conveyor.refs import JobRef
from conveyor.registry import JobFunction, Signature

__all__ = ["After", "RunningWorkflow", "Workflow"]

_HEX = re.compile(r"[0-9a-f]{24}")

After = JobRef | str | Iterable["After"]
"""Parents given to ``Workflow.add``: node refs (or node ids), or lists of them (a group
added at once)."""


class _Step:
    __slots__ = ("parents", "policy", "ref", "results", "sig")

    def __init__(self, sig: Signature, ref: JobRef, parents: tuple[str, ...], policy: str,
                 results: str) -> None:
        self.sig, self.ref, self.parents, self.policy, self.results = (
            sig, ref, parents, policy, results)


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
        self._id = workflow_id or new_id()
        self.description = description
        self.meta: dict[str, Any] = dict(meta or {})
        self._callbacks = {"complete": on_complete, "success": on_success, "death": on_death}
        self._steps: dict[str, _Step] = {}
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
        sig = step if isinstance(step, Signature) else step.s()
        _check_policy(on_parent_failure)
        parents = tuple(dict.fromkeys(_flatten(after)))
        for parent in parents:
            if parent not in self._steps:
                raise WorkflowError(f"{parent} is not a node of workflow {self._id}: add a "
                                    "node's parents to the same workflow first")
        ref = JobRef(node_id or new_id(), True, self._client)
        if ref.id in self._steps:
            raise WorkflowError(f"node id {ref.id!r} is used twice")
        mode = _result_mode(results, parents)
        self._steps[ref.id] = _Step(sig, ref, parents, on_parent_failure, mode)
        return ref

    def add_group(self, steps: Iterable[Signature | JobFunction], *, after: After = (),
                  on_parent_failure: str = "fail",
                  results: bool | str = False) -> list[JobRef]:
        """Add several nodes with the same parents and policy (a fan-out); the list can be
        given as ``after`` of a later node (a fan-in)."""
        return [self.add(step, after=after, on_parent_failure=on_parent_failure,
                         results=results) for step in steps]

    def enqueue(self) -> Workflow:
        """Store the workflow and every node; the nodes without parents start at once."""
        if self._enqueued:
            raise WorkflowError(f"workflow {self._id} is enqueued already")
        if not self._steps:
            raise WorkflowError("a workflow needs at least one node")
        client = self._client_of()
        specs = self._specs(client)
        writer = client.writer
        writer.create_batch(self._batch_spec(client))
        for start in range(0, len(specs), CHUNK_SIZE):
            writer.enqueue(specs[start:start + CHUNK_SIZE])
        writer.close_batch(self._id)
        self._enqueued = True
        for step in self._steps.values():
            step.ref.bind(client)  # refs made before the client was known
        return self

    def status(self) -> dict[str, Any]:
        """The workflow's counters and progress, as ``app.batch_status``."""
        return batch_status(self._client_of().storage, self._id)

    # -- building ---------------------------------------------------------------------------

    def _client_of(self) -> Client:
        if self._client is None:
            first = next(iter(self._steps.values()), None)
            enqueuer = first.sig.fn.enqueuer if first is not None else None
            if not isinstance(enqueuer, Client):
                raise WorkflowError("this workflow has no app: use app.workflow(...)")
            self._client = enqueuer
        return self._client

    def _batch_spec(self, client: Client) -> BatchSpec:
        callbacks = {event: callback_spec(client, self._id, event, target)
                     for event, target in self._callbacks.items() if target is not None}
        return BatchSpec(self._id, self.description, self.meta, callbacks, kind="workflow")

    def _specs(self, client: Client) -> list[JobSpec]:
        children: dict[str, list[str]] = {node_id: [] for node_id in self._steps}
        for node_id, step in self._steps.items():
            for parent in step.parents:
                children[parent].append(node_id)
        waiting: list[JobSpec] = []
        roots: list[JobSpec] = []
        for node_id, step in self._steps.items():
            spec = self._spec(client, step)
            node = Node(step.parents, tuple(children[node_id]), step.policy, step.results)
            (waiting if step.parents else roots).append(replace(spec, node=node))
        return waiting + roots

    def _spec(self, client: Client, step: _Step) -> JobSpec:
        return _node_spec(client, step.sig, step.ref.id, self._id)


def _node_spec(client: Client, sig: Signature, node_id: str, workflow_id: str) -> JobSpec:
    """A node's job, built as ``enqueue`` builds a job (client middleware included)."""
    draft = client.draft(sig.name, sig.fn.opts, sig.args, sig.kwargs)
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


class RunningWorkflow:
    """The workflow of a running job (``current_job().workflow``): nodes added while it runs.

    ::

        @app.job()
        def crawl(url: str) -> None:
            wf = current_job().workflow
            pages = wf.add_group([fetch.s(u) for u in links(url)], after=[wf.node])
            wf.add(index.s(), after=pages, results=True)

    Each call is stored at once, in one atomic step fenced by the job's lease (a job whose
    lease is lost gets ``LeaseLost``): the new nodes join the workflow (its counters, pages,
    callbacks) and wait only for the parents that have not settled yet; a node whose parents
    all settled runs (or fails, or is skipped) at once. A node added after the running job
    itself is released when the job ends, as any child is.

    Node ids are derived from the running job's id and the order of the additions, so a job
    retried after an error adds the same nodes again and each is stored once: keep what a
    job adds, and its order, a function of its arguments (or pass ``node_id``).
    """

    def __init__(self, ctx: JobContext) -> None:
        app = ctx.app
        client = getattr(app, "client", None)
        if not isinstance(client, Client):
            raise RuntimeError("current_job().workflow needs the job to run in a conveyor app")
        if not ctx.batch_id:
            raise WorkflowError(f"job {ctx.job_id} ({ctx.name}) is not part of a workflow")
        self._ctx = ctx
        self._client = client
        self._added = 0

    def __repr__(self) -> str:
        return f"<RunningWorkflow {self.id} node={self._ctx.job_id}>"

    @property
    def id(self) -> str:
        """The workflow's id."""
        return str(self._ctx.batch_id)

    @property
    def node(self) -> JobRef:
        """The running job's own node."""
        return JobRef(self._ctx.job_id, True, self._client)

    def add(self, step: Signature | JobFunction, *, after: After = (),
            on_parent_failure: str = "fail", results: bool | str = False,
            node_id: str | None = None) -> JobRef:
        """Add one node now (arguments as ``Workflow.add``); returns its ref."""
        return self._store([step], after, on_parent_failure, results, node_id)[0]

    def add_group(self, steps: Iterable[Signature | JobFunction], *, after: After = (),
                  on_parent_failure: str = "fail",
                  results: bool | str = False) -> list[JobRef]:
        """Add several nodes with the same parents, in one atomic step; returns their refs."""
        return self._store(list(steps), after, on_parent_failure, results, None)

    def _store(self, steps: Sequence[Signature | JobFunction], after: After, policy: str,
               results: bool | str, node_id: str | None) -> list[JobRef]:
        _check_policy(policy)
        parents = tuple(dict.fromkeys(_flatten(after)))
        mode = _result_mode(results, parents)
        specs: list[JobSpec] = []
        for step in steps:
            sig = step if isinstance(step, Signature) else step.s()
            self._added += 1
            spec = _node_spec(self._client, sig, node_id or self._next_id(), self.id)
            specs.append(replace(spec, node=Node(parents, (), policy, mode)))
        if not specs:
            return []
        ctx = self._ctx
        stored = self._client.storage.add_nodes(ctx.job_id, ctx.token, specs)
        if stored is None:
            raise LeaseLost(f"job {ctx.job_id} no longer holds its lease: nodes not added")
        return [JobRef(r.id, r.created, self._client) for r in stored]

    def _next_id(self) -> str:
        """The id of the ``_added``-th node this run adds: the same in every run of the job."""
        digest = hashlib.sha256(f"{self._ctx.job_id}/{self._added}".encode()).hexdigest()
        job_id = self._ctx.job_id
        head = job_id[:12] if len(job_id) == 24 and _HEX.fullmatch(job_id) else digest[12:24]
        return head + digest[:12]


set_workflow_scope(RunningWorkflow)


def _check_policy(policy: str) -> None:
    if policy not in PARENT_FAILURE_POLICIES:
        raise WorkflowError(f"on_parent_failure must be one of "
                            f"{', '.join(PARENT_FAILURE_POLICIES)}, not {policy!r}")


def _result_mode(results: bool | str, parents: Sequence[str]) -> str:
    mode = "list" if results is True else "" if results is False else results
    if mode not in RESULT_MODES or (mode == "one" and len(parents) != 1):
        raise WorkflowError(f"results must be True, False or 'one' (with one parent), "
                            f"not {results!r}")
    return mode


def _flatten(after: After) -> Sequence[str]:
    if isinstance(after, JobRef):
        return [after.id]
    if isinstance(after, str):
        return [after]
    out: list[str] = []
    for item in after:
        out += _flatten(item)
    return out

