"""Workflow graphs on Redis: the marks batch.lua leaves, settled by ``graph.lua`` and moved
by ``node.lua`` (docs/workflows.md; the other backends run ``storage/graph.py`` whole).

A workflow's graph lives in its batch's hash slot (``BatchKeys.graph``), its jobs in their
queues' slots, so settling is a chain of idempotent steps rather than one transaction:

1. every move of a workflow's job reaches ``batch.lua`` (the batch counters' own call) which,
   when the job enters or leaves a terminal state, bumps the job's mark (``BatchKeys.marks``);
   the workflow is registered in ``Keys.workflows_marked`` before that call;
2. ``settle`` reads the marked jobs' real states and hands them to ``graph.lua``, which counts
   the children down (or up), remembering per node what it settled with, so a replay counts
   nothing twice, and names the children to decide or to take back; a node whose mark moved
   since it was read is left to the mark's holder (its state as read may be stale);
3. the children are decided here with the rules every backend shares (``graph.decide``,
   ``graph.inject``) and moved by ``node.lua``, each move only from the state it expects;
4. the marks are removed if no move bumped them meanwhile.

A crash anywhere leaves the marks, and the workflow registered: the next move of that
workflow settles them, and so does the poller's sweep (``settle_marked``). An
acknowledgement is applied before its marks are settled: the lease's fence refuses a stale
worker's outcome first, so nothing is released on an outcome that did not stand.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from conveyor.core.job import TERMINAL_STATES, JobSpec, Node
from conveyor.core.text import printable
from conveyor.errors import WorkflowError
from conveyor.storage import graph
from conveyor.storage.graph import JobView, NodeRow
from conveyor.storage.redis import codec
from conveyor.storage.redis.batches import RedisBatches, scan_reply
from conveyor.storage.redis.codec import check_text
from conveyor.storage.redis.context import Move, RedisContext
from conveyor.storage.redis.keys import BatchKeys

log = logging.getLogger("conveyor.storage.redis")

MARKS_PER_ROUND = 500  # marks read per HSCAN step
SWEEP_PER_CALL = 20  # registered workflows settled per ``settle_marked`` call
SWEEP_AFTER = 5.0  # seconds before the sweep looks again at a workflow with no mark
# Batch counters read to tell a stuck workflow: waiting first, then every state that may
# still move (a job that runs or is due can still settle its children).
_LIVE = ("waiting", "pending", "active", "scheduled", "retrying", "aggregating")
ENDED = frozenset({*(s.value for s in TERMINAL_STATES), "deleted"})  # member states


class RedisGraph:
    """Settling the workflows a script's moves marked, and writing a workflow's graph.

    ``sync_batches`` is what every part hands a script's moves to (the hot path's dequeue and
    ack, the operator's retry, kill and delete, the outbox, the upkeep): the batches'
    counters first (``RedisBatches.sync_counts``), then the workflows those moves marked."""

    def __init__(self, ctx: RedisContext, batches: RedisBatches) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._batches = batches

    def sync_batches(self, moves: Iterable[Move], *, settle: bool = True,
                     confirm: bool = True) -> None:
        """Feed moves to their batches' counters, then settle the workflows they marked
        (``settle=False``: the caller settles later, after the moves stand).

        ``confirm``: read each job reported in a state it can leave back, and report it
        again if it moved meanwhile (``RedisBatches.confirm``); off only for what a worker
        reports of its own lease (the job cannot move before that report: it has not run)
        and for an ack's plan (the job is still leased to the worker that reports it)."""
        moves = list(moves)
        marked = self._batches.sync_counts(moves)
        if confirm:
            marked |= self._batches.confirm(moves)
        if settle:
            self.settle_graphs(marked)

    def store_nodes(self, specs: Sequence[JobSpec]) -> None:
        """Write the graph entries of a workflow's jobs, before any of them is stored:
        "n:<id>" its node, "u:<id>" its parents not settled yet (``graph.lua``)."""
        by_workflow: dict[str, list[str]] = defaultdict(list)
        for spec in specs:
            if not spec.batch_id or spec.node is None:
                raise WorkflowError(f"workflow node {spec.id} names no workflow (batch id)")
            node = json.dumps(spec.node.to_wire(), separators=(",", ":"))
            by_workflow[spec.batch_id] += [f"n:{spec.id}", node,
                                           f"u:{spec.id}", str(len(spec.node.parents))]
        for workflow_id, flat in by_workflow.items():
            check_text("workflow id", workflow_id)
            key = self.keys.batch(workflow_id).graph
            for start in range(0, len(flat), 2000):
                self.link.call("HSET", key, *flat[start:start + 2000])

    def attach(self, bk: BatchKeys, created: Sequence[str]) -> None:
        """Link nodes a running job added (stored already) into their workflow's graph, and
        move the ones that can run now (``Storage.add_nodes``)."""
        ready = self.scripts.run("graph", bk, ["attach", *created])
        self.sync_batches(self._decide(bk, [str(i) for i in ready]))

    def settle_graphs(self, workflow_ids: Collection[str]) -> None:
        """Settle every mark of these workflows."""
        for workflow_id in sorted(workflow_ids):
            self._settle(workflow_id)

    def settle_marked(self, limit: int = SWEEP_PER_CALL) -> int:
        """The sweep: settle the registered workflows that are due, and heal the stuck ones;
        returns how many it looked at."""
        ids = self.link.call("ZRANGEBYSCORE", self.keys.workflows_marked, "-inf", self.ctx.now(),
                             "LIMIT", 0, limit)
        for workflow_id in sorted(ids):
            self._settle(workflow_id)
            if self._heal(workflow_id):
                self._settle(workflow_id)
        return len(ids)

    def _heal(self, workflow_id: str) -> bool:
        """Mark the ended, unsettled parents of a stuck workflow; True if it marked any.

        Stuck: nodes wait, no other job of it is left to run or due, and no mark is left to
        settle — so nothing would ever release them. A parent's outcome that was never
        counted (its mark lost) leaves exactly this; the sweep's look costs one HMGET while
        anything else runs, and reads the graph only when stuck."""
        bk = self.keys.batch(workflow_id)
        counts = self.link.call("HMGET", bk.batch, *(f"n:{s}" for s in _LIVE))
        if int(counts[0] or 0) <= 0 or any(int(c or 0) for c in counts[1:]) or int(
                self.link.call("HLEN", bk.marks)):
            return False
        waiting: list[str] = []
        cursor = "0"
        while True:
            cursor, pairs = scan_reply(self.link.call("HSCAN", bk.graph, cursor, "MATCH", "u:*",
                                                      "COUNT", 1000))
            waiting += [key[2:] for key, left in pairs if int(left or 0) > 0]
            if cursor == "0":
                break
        rows = self.rows(bk, waiting)
        parents = sorted({p for row in rows.values() for p in row.node.parents})
        settled = self.rows(bk, parents)
        loose = [p for p in parents if p in settled and not settled[p].settled]
        states = self.link.call("HMGET", bk.jobs, *loose) if loose else []
        ended = [p for p, value in zip(loose, states, strict=True)
                 if value and str(value).partition(":")[0] in ENDED]
        for parent in ended:
            self.link.call("HINCRBY", bk.marks, parent, 1)
        if ended:
            log.warning("workflow %s: %d ended parent(s) were never settled; settling them now",
                        printable(workflow_id), len(ended))
        return bool(ended)

    def _settle(self, workflow_id: str) -> None:
        bk = self.keys.batch(workflow_id)
        for _ in range(graph.MAX_ROUNDS):
            _, pairs = scan_reply(self.link.call("HSCAN", bk.marks, 0, "COUNT",
                                                      MARKS_PER_ROUND))
            if not pairs:
                break
            marks = dict(pairs)
            members: dict[str, str] = {}
            views = self.views(bk, marks, members)
            # Only what was read consistently is settled: the job gone, or its record in the
            # state its batch last heard of. An acknowledgement counts its batch (and marks)
            # before it applies, so a record read as active whose batch says it finished is
            # an outcome under way — acting on it could undo the settle of the process that
            # applies it; its mark stays and is settled once the two agree.
            steady = [job_id for job_id in marks
                      if job_id not in views or members.get(job_id) == views[job_id].state]
            flat: list[str] = []
            for job_id in steady:  # with its mark's count: graph.lua acts only if unmoved
                view = views.get(job_id)
                flat += [job_id, view.state if view is not None else "gone", marks[job_id]]
            ready, reopen = self.scripts.run("graph", bk, ["settle", *flat]) if flat else ([],
                                                                                        [])
            moves = self._reopen(bk, [str(i) for i in reopen])
            moves += self._decide(bk, [str(i) for i in ready])
            self.sync_batches(moves, settle=False)  # the next round takes their marks
            done = [v for job_id in steady for v in (job_id, marks[job_id])]
            if not done:
                break
            self.scripts.run("graph", bk, ["done", *done])
        self._reschedule(workflow_id, bk)

    def _reschedule(self, workflow_id: str, bk: BatchKeys) -> None:
        """Leave the sweep's registry once complete with no mark; else look again soon
        (at once while marks wait, in ``SWEEP_AFTER`` seconds otherwise)."""
        left = int(self.link.call("HLEN", bk.marks))
        status = self.link.call("HMGET", bk.batch, "closed", "fa")
        if not left and status[0] == "1" and status[1]:
            self.link.call("ZREM", self.keys.workflows_marked, workflow_id)
            return
        due = self.ctx.now() + (SWEEP_AFTER if not left else 1.0)
        self.link.call("ZADD", self.keys.workflows_marked, "XX", due, workflow_id)

    # -- reads --------------------------------------------------------------------------------

    def views(self, bk: BatchKeys, ids: Iterable[str],
              members: dict[str, str] | None = None) -> dict[str, JobView]:
        """The jobs of ``ids`` that exist, read from their queues (found through the batch's
        member entries, ``"state:queue"``; their states are put in ``members`` if given)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        cancelled, entries = self.link.call_many(("HGET", bk.batch, "cancelled"),
                                                 ("HMGET", bk.jobs, *wanted))
        halted = cancelled == "1"
        queues: dict[str, list[str]] = defaultdict(list)
        for job_id, value in zip(wanted, entries, strict=True):
            if value:
                state, _, queue = str(value).partition(":")
                queues[queue].append(job_id)
                if members is not None:
                    members[job_id] = state
        out: dict[str, JobView] = {}
        for queue, held in queues.items():
            for rec in self.ctx.records(queue, held, with_events=False):
                out[rec.id] = JobView(rec.state.value, rec.name, rec.message, rec.result,
                                      rec.payload, halted, rec.attempt)
        return out

    def rows(self, bk: BatchKeys, ids: Sequence[str]) -> dict[str, NodeRow]:
        """Node rows of ``ids`` from the graph hash (their node, unsettled parents, settled
        state, ended_by, released)."""
        if not ids:
            return {}
        fields = [f"{kind}:{i}" for i in ids for kind in _ROW_FIELDS]
        raw = self.link.call("HMGET", bk.graph, *fields)
        out: dict[str, NodeRow] = {}
        width = len(_ROW_FIELDS)
        for k, job_id in enumerate(ids):
            text, unsettled, settled, ended, released = raw[width * k: width * (k + 1)]
            if text is None:
                continue
            try:
                node = Node.from_wire(json.loads(text))
            except (ValueError, TypeError, AttributeError, RecursionError):
                log.warning("workflow node %s: its graph entry cannot be read", printable(job_id))
                node = Node()
            out[job_id] = NodeRow(job_id, node, _count(unsettled), settled, ended,
                                  released == "1")
        return out

    # -- moves --------------------------------------------------------------------------------

    def _move(self, bk: BatchKeys, quads: list[tuple[str, str, str, str]]) -> list[Move]:
        """Run node.lua per queue over (id, move, text, message); returns the batch moves."""
        queues: dict[str, list[str]] = defaultdict(list)
        members = self.link.call("HMGET", bk.jobs, *[q[0] for q in quads]) if quads else []
        for quad, value in zip(quads, members, strict=True):
            if value:
                queues[str(value).partition(":")[2]] += list(quad)
        moves: list[Move] = []
        for queue, flat in queues.items():
            for start in range(0, len(flat), 2000):
                _, found = self.scripts.run("node", self.keys.queue(queue),
                                            [self.ctx.now_arg(), queue, *flat[start:start + 2000]])
                moves += [(str(b), str(j), str(v)) for b, j, v in found]
            self.ctx.ring(queue, flat[1::4].count("release"))
        return moves

    def _reopen(self, bk: BatchKeys, ids: list[str]) -> list[Move]:
        if not ids:
            return []
        views = self.views(bk, ids)
        quads = [(i, "reopen", "", "a parent was retried: waiting for it again") for i in ids
                 if i in views and views[i].state in graph.FAILED]
        moves = self._move(bk, quads)
        self.link.call("HDEL", bk.graph, *[f"e:{i}" for i in ids])
        return moves

    def _decide(self, bk: BatchKeys, ids: list[str]) -> list[Move]:
        views = self.views(bk, ids)
        waiting = [i for i in dict.fromkeys(ids) if i in views and views[i].state == "waiting"]
        if not waiting:
            return []
        rows = self.rows(bk, waiting)
        parent_ids = sorted({p for i in waiting if i in rows for p in rows[i].node.parents})
        parents = self.rows(bk, parent_ids)
        parent_views = self.views(bk, parent_ids)
        quads: list[tuple[str, str, str, str]] = []
        decided: list[Any] = []
        for job_id in waiting:
            row, view = rows.get(job_id), views[job_id]
            if row is None:
                continue
            if view.halted:
                quads.append((job_id, "skip", "", "cancelled: its workflow was cancelled"))
                continue
            verdict, message, payload = graph.judge(row, view, parents, parent_views)
            if verdict == "release":
                decided += [f"r:{job_id}", "1"]
                quads.append((job_id, "release", self._static(bk, job_id, payload), message))
            else:
                decided += [f"e:{job_id}", verdict]
                quads.append((job_id, verdict, "", message))
        if decided:  # written before the move: a crash between them decides the same again
            self.link.call("HSET", bk.graph, *decided)
        return self._move(bk, quads)

    def _static(self, bk: BatchKeys, job_id: str, payload: str | None) -> str:
        """The job's static JSON with ``payload`` in it ('' to keep it as it is)."""
        if payload is None:
            return ""
        value = self.link.call("HGET", bk.jobs, job_id)
        queue = str(value).partition(":")[2] if value else ""
        text = self.link.call("HGET", self.keys.queue(queue).jobs, job_id) if queue else None
        try:
            static = codec.static_of(text)
        except ValueError:
            return ""  # an unreadable record keeps it: the worker reports it dead
        static["p"] = payload
        return json.dumps(static, separators=(",", ":"))


# The graph hash's fields of one node, in the order ``_rows`` reads them.
_ROW_FIELDS = ("n", "u", "s", "e", "r")


def _count(raw: str | None) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0
