"""Operator actions on jobs on Redis: the per-queue admin scripts (``requeue.lua``,
``kill.lua``, ``delete.lua``, ``cancel.lua``, ``reseal.lua``), and a retry by hand that leaves
a workflow node to its parents (``storage/graph_retry.py``)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Any

from conveyor.storage import graph_retry
from conveyor.storage.graph import JobView, NodeRow
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.graph import RedisGraph
from conveyor.storage.redis.keys import BatchKeys
from conveyor.storage.stored_data import StoredData

ADMIN_CHUNK = 50  # jobs per admin script call


class RedisAdmin:
    """Admin scripts run per queue, in chunks, their batch moves fed to
    ``graph.sync_batches``: a retry, kill or delete settles the workflows it moves exactly as
    the hot path's moves do."""

    def __init__(self, ctx: RedisContext, graph: RedisGraph) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._graph = graph

    def run_each(self, name: str, by_queue: dict[str, list[str]], *lead: str) -> list[Any]:
        """Run an admin script (cancel/requeue/kill/delete) per queue, with ``lead`` after
        the queue in its arguments; returns each reply's first element and feeds the batch
        moves on."""
        replies = []
        for queue, ids in by_queue.items():
            for start in range(0, len(ids), ADMIN_CHUNK):
                first, moves = self.scripts.run(
                    name, self.keys.queue(queue),
                    [self.ctx.now_arg(), queue, *lead, *ids[start:start + ADMIN_CHUNK]])
                self._graph.sync_batches(moves)
                if name == "requeue" and lead == ("pending",):
                    self.ctx.ring(queue, int(first))
                replies.append(first)
        return replies

    def retry_jobs(self, job_ids: Sequence[str]) -> int:
        """Dead, failed, cancelled or retrying jobs → pending now; a workflow node never
        released → waiting, or left as it is (``storage/graph_retry.py``)."""
        return sum(self.retry_in(queue, ids)
                   for queue, ids in self.ctx.group_by_queue(job_ids).items())

    def retry_refusals(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of ``job_ids``, the workflow nodes a retry by hand leaves as they are, and why."""
        refused: dict[str, str] = {}
        for queue, ids in self.ctx.group_by_queue(job_ids).items():
            refused.update(self.plan_retries(queue, ids).refused)
        return refused

    def retry_in(self, queue: str, ids: list[str]) -> int:
        """Retry jobs of ``queue`` (``retry_jobs``, a queue at a time); returns how many."""
        plan = self.plan_retries(queue, ids)
        moved = 0
        for target, part in (("pending", [i for i in ids if i not in plan.waiting
                                           and i not in plan.refused]),
                             ("waiting", [i for i in ids if i in plan.waiting])):
            if part:
                moved += sum(int(n) for n in self.run_each("requeue", {queue: part}, target))
        return moved

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete jobs that are not active."""
        return sum(int(n) for n in self.run_each("delete", self.ctx.group_by_queue(job_ids)))

    def reseal(self, job_id: str, old: StoredData, new: StoredData) -> bool:
        """``reseal.lua``: the job's static record rewritten with the new payload, its result
        and message replaced, when all three still hold what ``old`` says."""
        queue = self.ctx.find_queue(job_id)
        qk = self.keys.queue(queue) if queue is not None else None
        static = self.link.call("HGET", qk.jobs, job_id) if qk is not None else None
        if qk is None or static is None:
            return False
        record = json.loads(static)
        if record.get("p") != old.payload:
            return False
        record["p"] = new.payload
        fresh = json.dumps(record, separators=(",", ":"))
        return bool(self.scripts.run("reseal", qk, [
            job_id, static, fresh, _held(old.result), _held(new.result), _held(old.message),
            _held(new.message)]))

    def kill_jobs(self, job_ids: Sequence[str]) -> int:
        """Waiting jobs → dead."""
        return sum(int(n) for n in self.run_each("kill", self.ctx.group_by_queue(job_ids)))

    def plan_retries(self, queue: str, ids: Sequence[str]) -> graph_retry.RetryPlan:
        """How retrying ``ids`` (jobs of ``queue``) by hand moves the workflow nodes among
        them (``storage/graph_retry.py``): read just before ``requeue.lua``, which moves a
        job only from a state it is retried from, so a node re-opened meanwhile stays."""
        plan = graph_retry.RetryPlan()
        by_workflow: dict[str, list[str]] = defaultdict(list)
        for rec in self.ctx.records(queue, ids, with_events=False):
            if rec.batch_id and rec.state.terminal:
                by_workflow[rec.batch_id].append(rec.id)
        for workflow_id, held in by_workflow.items():
            part = graph_retry.plan(_Reads(self._graph, self.keys.batch(workflow_id)), held)
            plan.waiting |= part.waiting
            plan.refused.update(part.refused)
        return plan


class _Reads:
    """``graph.GraphReads`` over one workflow's graph hash and its jobs' queues."""

    def __init__(self, graph: RedisGraph, bk: BatchKeys) -> None:
        self._graph = graph
        self._bk = bk

    def nodes(self, ids: Collection[str]) -> dict[str, NodeRow]:
        return self._graph.rows(self._bk, list(ids))

    def jobs(self, ids: Collection[str]) -> dict[str, JobView]:
        return self._graph.views(self._bk, ids)


def _held(value: str | None) -> str:
    """A result or message as ``reseal.lua`` compares it: '-' for none, '+' and the value."""
    return "-" if value is None else f"+{value}"
