"""A workflow that grows while it runs: ``current_job().workflow`` (docs/workflows.md).

::

    @app.job()
    def crawl(url: str) -> None:
        wf = current_job().workflow
        pages = wf.add_group([fetch.s(u) for u in links(url)], after=[wf.node])
        wf.add(index.s(), after=pages, results=True)

Each call is stored at once, in one atomic step fenced by the job's lease
(``Storage.add_nodes``; a job whose lease is lost gets ``LeaseLost``): the new nodes join the
workflow (its counters, pages, callbacks) and wait only for the parents that have not settled
yet; a node whose parents all settled runs (or fails, or is skipped) at once. A node added
after the running job itself is released when the job ends, as any child is.

Node ids are derived from the running job's id and the order of its additions, so a job
retried after an error adds the same nodes again and each is stored once: keep what a job
adds, and its order, a function of its arguments (or pass ``node_id``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from conveyor.client.builtin_jobs import ERRBACK_JOB
from conveyor.client.client import Client
from conveyor.client.context import JobContext
from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction
from conveyor.client.signature import Signature
from conveyor.core.job import JobSpec
from conveyor.errors import LeaseLost, WorkflowError
from conveyor.workflow.graph import (
    After,
    Attachable,
    Workflow,
    check_id,
    check_policy,
    flatten,
    node_of,
    node_signature,
    node_spec,
    result_mode,
    tails,
)

__all__ = ["RunningWorkflow"]

_HEX = re.compile(r"[0-9a-f]{24}")


class RunningWorkflow:
    """The workflow of a running job; see the module docstring."""

    def __init__(self, ctx: JobContext, client: Client) -> None:
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
        return self._build([step], after, on_parent_failure, results, node_id)[0]

    def add_group(self, steps: Iterable[Signature | JobFunction], *, after: After = (),
                  on_parent_failure: str = "fail",
                  results: bool | str = False) -> list[JobRef]:
        """Add several nodes with the same parents, in one atomic step; returns their refs."""
        return self._build(list(steps), after, on_parent_failure, results, None)

    def add_workflow(self, sub: Workflow | Attachable, *, after: After = (),
                     on_parent_failure: str = "fail", results: bool | str = False) -> list[JobRef]:
        """Add a whole sub-workflow (a ``Workflow`` not enqueued, or a canvas) in one atomic
        step, as ``Workflow.add_workflow``; returns the refs of its last nodes. Its nodes are
        stored under ids derived as every addition's (``sub``'s own refs are not used)."""
        parents = tuple(dict.fromkeys(flatten(after)))
        check_policy(on_parent_failure)
        mode = result_mode(results, parents)
        if not isinstance(sub, Workflow):
            holder = Workflow(self._client)
            sub.attach(holder, [], "", on_parent_failure)
            sub = holder
        steps = sub.take_steps(self.id)
        ids = {step.ref.id: self._next_id() for step in steps}
        specs: list[JobSpec] = []
        for step in steps:
            own = tuple(ids[p] for p in step.parents)
            node = (node_of(self._client, own, (), step.policy, step.results) if own
                    else node_of(self._client, parents, (), on_parent_failure, mode))
            sig = errback_for(step.sig, ids) if step.sig.name == ERRBACK_JOB else step.sig
            specs.append(replace(node_spec(self._client, sig, ids[step.ref.id], self.id),
                                 node=node))
        self._store(specs)
        last = {ref.id for ref in tails(steps)}
        return [JobRef(ids[step.ref.id], True, self._client) for step in steps
                if step.ref.id in last]

    def _build(self, steps: Sequence[Signature | JobFunction], after: After, policy: str,
               results: bool | str, node_id: str | None) -> list[JobRef]:
        check_policy(policy)
        parents = tuple(dict.fromkeys(flatten(after)))
        mode = result_mode(results, parents)
        if node_id is not None:
            check_id("node id", node_id, self.id)
        specs: list[JobSpec] = []
        for step in steps:
            sig = node_signature(step).checked(leading=1 if mode else 0)
            spec = node_spec(self._client, sig, node_id or self._next_id(), self.id)
            specs.append(replace(spec, node=node_of(self._client, parents, (), policy, mode)))
        return self._store(specs)

    def _store(self, specs: list[JobSpec]) -> list[JobRef]:
        if not specs:
            return []
        ctx = self._ctx
        stored = self._client.storage.add_nodes(ctx.job_id, ctx.token, specs)
        if stored is None:
            raise LeaseLost(f"job {ctx.job_id} no longer holds its lease: nodes not added")
        return [JobRef(r.id, r.created, self._client) for r in stored]

    def _next_id(self) -> str:
        """The id of the next node this run adds: the same in every run of the job."""
        self._added += 1
        job_id = self._ctx.job_id
        digest = hashlib.sha256(f"{job_id}/{self._added}".encode()).hexdigest()
        head = job_id[:12] if _HEX.fullmatch(job_id) else digest[12:24]
        return head + digest[:12]


def errback_for(sig: Signature, ids: dict[str, str]) -> Signature:
    """An errback step (``conveyor.client.builtin_jobs.run_errback``) naming the job it watches by
    the id that job is stored under here (an added node's id is derived, not its own)."""
    args = list(sig.args)
    args[3] = ids.get(args[3], args[3])
    return Signature(sig.fn, args, sig.kwargs)
