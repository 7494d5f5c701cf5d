"""Storing jobs on Redis: ``enqueue.lua`` per queue and chunk, a job of a batch joining it
first (so a batch never completes without it), and a workflow's graph entries written before
any of its jobs can move (``RedisGraph.store_nodes``). A bulk block's calls are made ready
ahead (``pipeline.py``); nodes a running job adds are linked by ``graph.lua``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from conveyor.core.ids import generated
from conveyor.core.job import EnqueueResult, JobSpec
from conveyor.errors import WorkflowError
from conveyor.storage import graph
from conveyor.storage.blocks import JobBlock
from conveyor.storage.redis import codec
from conveyor.storage.redis.batches import RedisBatches
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.graph import RedisGraph
from conveyor.storage.redis.pipeline import Ready

__all__ = ["ENQUEUE_CHUNK", "RedisEnqueue", "result_of", "taken"]

ENQUEUE_CHUNK = 2000  # jobs per enqueue.lua call; scripts unpack at most 2,000 values


class RedisEnqueue:
    """``enqueue``, ``enqueue_block``, ``prepare_block`` and ``add_nodes`` on one deployment."""

    def __init__(self, ctx: RedisContext, batches: RedisBatches, graph: RedisGraph) -> None:
        self.ctx = ctx
        self._batches = batches
        self._graph = graph

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs: a caller-chosen id another queue holds is left out (``taken``), then
        batch membership first (so a batch never completes without them), then one
        enqueue.lua call per queue and chunk."""
        # On one server the scripts read the other queues themselves (``_layout``); on
        # Cluster those live in other slots, so they are read first.
        left_out = taken(self.ctx, specs) if self.ctx.settings.cluster else set()
        if not left_out:
            return self._store(specs)
        stored = iter(self._store([s for i, s in enumerate(specs) if i not in left_out]))
        return [EnqueueResult(s.id, created=False) if i in left_out else next(stored)
                for i, s in enumerate(specs)]

    def _store(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` of specs whose ids no other queue holds."""
        if not specs:
            return []
        ctx = self.ctx
        nodes = [s for s in specs if s.node is not None]
        if nodes:  # a workflow's graph is stored before any of its jobs can move
            self._graph.store_nodes(nodes)
        if len(specs) == 1 and not specs[0].batch_id:  # the one-by-one fast path
            spec = specs[0]
            qk = ctx.register_queue(spec.queue)
            if codec.plain(spec):
                code = ctx.scripts.run("enqueue_one", qk,
                                       [ctx.now_arg(), *codec.enqueue_one_args(spec),
                                        *self._others(spec.queue, specs)])
            else:
                code = ctx.scripts.run("enqueue", qk, [ctx.now_arg(), spec.queue,
                                                       *self._layout(spec.queue, specs),
                                                       *codec.enqueue_args(spec)])[0]
            ctx.ring(spec.queue, int(code == "1"))
            return [result_of(spec.id, code)]
        batched = [s for s in specs if s.batch_id]
        if batched:
            self._batches.join_batches(batched)
        results: list[EnqueueResult | None] = [None] * len(specs)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, spec in enumerate(specs):
            groups[spec.queue].append(i)
        for queue, idxs in groups.items():
            qk = ctx.register_queue(queue)
            for start in range(0, len(idxs), ENQUEUE_CHUNK):
                chunk = idxs[start:start + ENQUEUE_CHUNK]
                args: list[str] = [ctx.now_arg(), queue,
                                    *self._layout(queue, [specs[i] for i in chunk])]
                for i in chunk:
                    args.extend(codec.enqueue_args(specs[i]))
                reply = ctx.scripts.run("enqueue", qk, args)
                for i, code in zip(chunk, reply, strict=True):
                    results[i] = result_of(specs[i].id, code)
                ctx.ring(queue, reply.count("1"))
                # Members stored aggregating joined their batch as pending: move them there.
                self._graph.sync_batches(
                    [(str(specs[i].batch_id), specs[i].id, f"aggregating:{queue}")
                     for i, code in zip(chunk, reply, strict=True)
                     if code == "a" and specs[i].batch_id])
        done = [r for r in results if r is not None]
        # A unique job that was not created (its lock is held) does not join the batch.
        self._graph.sync_batches([(str(s.batch_id), s.id, f"deleted:{s.queue}")
                                  for s, r in zip(specs, done, strict=True)
                                  if s.batch_id and r.id != s.id])
        return done

    def _others(self, queue: str, specs: Sequence[JobSpec]) -> list[str]:
        """The other queues' jobs hashes a script reads when ``specs`` hold a caller-chosen
        id, on a single server (Redis, Sentinel): there a script may read any key, so the
        check across queues is one atomic step with the write. None for generated ids (the
        hot paths) or on Cluster (``taken``)."""
        ctx = self.ctx
        if ctx.settings.cluster or all(generated(s.id) for s in specs):
            return []
        return [ctx.keys.queue(q).jobs for q in ctx.known_queues() if q != queue]

    def _layout(self, queue: str, specs: Sequence[JobSpec]) -> list[str]:
        """enqueue.lua's layout arguments for these specs: "each", or "others" with the
        other queues' jobs hashes (``_others``)."""
        others = self._others(queue, specs)
        return ["others", str(len(others)), *others] if others else ["each"]

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block: per chunk, batch membership first, then one enqueue.lua call in
        its "block" layout (the ids, then the static JSONs); see ``pipeline.Ready``."""
        return list(self.prepare_block(block).send().result())

    def prepare_block(self, block: JobBlock) -> Ready:
        """A block made ready to store (``SendsBlocks``): its call built, nothing written."""
        return Ready(self.ctx, self._batches, self.enqueue, block, ENQUEUE_CHUNK)

    def add_nodes(self, adder: str, token: str,
                  specs: Sequence[JobSpec]) -> list[EnqueueResult] | None:
        """Store nodes a running job adds to its workflow; see ``Storage.add_nodes``.

        The lease is checked first, then the nodes are stored as any workflow's (graph
        entries, batch, queues: ``enqueue``) and linked by one ``graph.lua`` call in the
        workflow's slot. The check and the write are not one step (the job and its
        workflow live in different slots): a worker that loses its lease in between adds
        what its job's next run adds again, under the same ids, so nothing is doubled."""
        ctx = self.ctx
        queue = ctx.find_queue(adder, token)
        if queue is None or not ctx.scripts.run(
                "log", ctx.keys.queue(queue), [ctx.now_arg(), queue, adder, token, "", ""]):
            return None
        found = ctx.records(queue, [adder], with_events=False)
        workflow_id = found[0].batch_id if found else None
        bk = ctx.keys.batch(workflow_id) if workflow_id else None
        if bk is None or workflow_id is None or not ctx.link.call("HEXISTS", bk.graph,
                                                                  f"n:{adder}"):
            raise WorkflowError(f"job {adder} is not a node of a workflow")
        ids = list(dict.fromkeys([s.id for s in specs]
                                 + [p for s in specs if s.node for p in s.node.parents]))
        present = ctx.link.call("HMGET", bk.graph, *[f"n:{i}" for i in ids])
        stored = {i for i, raw in zip(ids, present, strict=True) if raw is not None}
        # An id of another job (any queue's: each queue is its own slot) is no node of it.
        others = ctx.group_by_queue([s.id for s in specs if s.id not in stored])
        graph.check_added(workflow_id, specs, stored,
                          {job_id for found in others.values() for job_id in found})
        new = [s for s in specs if s.id not in stored]  # a node stored already keeps its links
        results = {r.id: r for r in self.enqueue(new)} if new else {}
        created = [s.id for s in new if results[s.id].created]
        if created:
            self._graph.attach(bk, created)
        return [results.get(s.id, EnqueueResult(s.id, created=False)) for s in specs]


def taken(ctx: RedisContext, specs: Sequence[JobSpec]) -> set[int]:
    """On Cluster, the positions of the specs whose caller-chosen id another queue holds,
    or an earlier spec of the call names for another queue: such a spec is not stored
    (``created=False``), as every store keeps one job per id (docs/api.md, "Job ids").

    Each queue's jobs live in its own slot, so a queue's script cannot read the others;
    they are read here, before the scripts run (one HMGET per queue), and only for ids not
    of the generated shape (``ids.generated``): a generated id is new, and the one-by-one
    and bulk paths pay nothing. Read first and written after, this is not one atomic step
    (docs/internals/redis-lua.md, "Ids across queues")."""
    chosen = [(i, s) for i, s in enumerate(specs) if not generated(s.id)]
    if not chosen:
        return set()
    held = {job_id: queue for queue, found in ctx.group_by_queue(s.id for _, s in chosen)
            .items() for job_id in found}
    out: set[int] = set()
    for i, s in chosen:
        if held.setdefault(s.id, s.queue) != s.queue:
            out.add(i)
    return out


def result_of(job_id: str, code: str) -> EnqueueResult:
    """The ``EnqueueResult`` of one job from enqueue.lua's code for it."""
    if code in ("1", "a"):
        return EnqueueResult(job_id, True)
    if code.startswith("="):
        return EnqueueResult(code[1:], False)
    return EnqueueResult(job_id, False)
