"""The Redis ``Inspector``: what the CLI, web UI and metrics read and do."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from conveyor.core.job import ALL_STATES, TERMINAL_STATES, JobRecord, JobState
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.graph import GraphNode, parents_of
from conveyor.storage.job_heads import HEAD_CHARS, JobHead
from conveyor.storage.queue_stats import QueueStats
from conveyor.storage.redis import records
from conveyor.storage.redis.admin import ADMIN_CHUNK, RedisAdmin
from conveyor.storage.redis.batch_pages import RedisBatchPages
from conveyor.storage.redis.batches import RedisBatches, scan_reply
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.flow import PAUSED
from conveyor.storage.retention import Retention
from conveyor.storage.totals import JobTotals, MinuteTotals, history_start, today_start
from conveyor.storage.workers import WorkerInfo

WORKER_COMMANDS = ("quiet", "stop")
TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
# Jobs per operator script call (cancel/requeue/kill/delete): a few milliseconds of Redis
# time each, so that workers and pings are served between the calls of a big operation.


class RedisInspector:
    """Reads and operator actions; every write goes through a Lua script (a job's retry,
    kill and delete: ``admin.py``, pausing a queue: ``flow.py``, schedules:
    ``schedules.py``)."""

    def __init__(self, ctx: RedisContext, batches: RedisBatches, pages: RedisBatchPages,
                 admin: RedisAdmin) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._batches = batches
        self._pages = pages
        self._admin = admin

    def queues(self) -> list[QueueStats]:
        """Every known queue with sizes, latency, paused flag and outcome totals."""
        now = self.ctx.now()
        return [self._queue_stats(name, now) for name in self.ctx.known_queues()]

    def _queue_stats(self, name: str, now: float) -> QueueStats:
        qk = self.keys.queue(name)
        meta: dict[str, str] = self.link.call("HGETALL", qk.meta)
        today = [r for r in self._ring(name) if r.minute >= today_start(now)]
        latency = 0.0
        first = (self.link.call("ZRANGE", qk.parked, 0, 0)
                 or self.link.call("ZRANGE", qk.published, 0, 0))
        oldest = first[0] if first else self.link.call("LINDEX", qk.pending, -1)
        raw = self.link.call("HGET", qk.state, oldest) if oldest else None
        since = records.pending_since(raw) if raw else None
        if since is not None:
            latency = max(0.0, now - since)
        return QueueStats(
            name=name, pending=self._index_size(name, JobState.PENDING),
            scheduled=self.link.call("ZCARD", qk.scheduled),
            active=self.link.call("ZCARD", qk.active),
            retrying=self.link.call("ZCARD", qk.retrying), latency=latency,
            paused=PAUSED in meta, processed=_total(meta, "p:"),
            failed=_total(meta, "f:") + _total(meta, "d:"),
            dead=self.link.call("ZCARD", qk.dead),
            processed_today=sum(r.processed for r in today),
            failed_today=sum(r.failed + r.dead for r in today),
            waiting=self.link.call("ZCARD", qk.waiting),
            aggregating=self.link.call("ZCARD", qk.aggregating),
        )

    def get_job(self, job_id: str) -> JobRecord | None:
        """A job with its full event log, or None."""
        queue = self.ctx.find_queue(job_id)
        if queue is None:
            return None
        records = self.ctx.records(queue, [job_id], with_events=True)
        return records[0] if records else None

    def _index_ids(self, queue: str, state: JobState, start: int, stop: int) -> list[str]:
        """Ids in ``state`` oldest first, positions ``start``..``stop`` (inclusive)."""
        qk = self.keys.queue(queue)
        if state is not JobState.PENDING:
            return list(self.link.call("ZRANGE", qk.by_state(state.value), start, stop))
        # Parked jobs (held back by flow control), then jobs handed to a broker's relay, then
        # the lineup's (lua/_lineup.lua, in its order; a member ends "\0<id>") come before the
        # whole list, whose oldest job is at the tail (LPUSH): position p >= ahead is list
        # index -(p-ahead)-1.
        ids: list[str] = []
        ahead = 0
        for zset in (qk.parked, qk.published, qk.lineup):
            size = int(self.link.call("ZCARD", zset))
            lo, hi = start - ahead, (size - 1 if stop < 0 else min(stop - ahead, size - 1))
            if lo < size and hi >= max(lo, 0):
                found = self.link.call("ZRANGE", zset, max(lo, 0), hi)
                ids += [str(m).rpartition("\0")[2] for m in found] if zset == qk.lineup else found
            ahead += size
        parked = ahead
        if stop < 0 or stop >= parked:
            lo = max(start - parked, 0)
            first = 0 if stop < 0 else -(stop - parked) - 1
            ids += self.link.call("LRANGE", qk.pending, first, -lo - 1)[::-1]
        return ids

    def _index_size(self, queue: str, state: JobState) -> int:
        qk = self.keys.queue(queue)
        if state is JobState.PENDING:
            # The list may still hold entries of jobs cancelled, killed or deleted since
            # (the admin scripts leave them for dequeue to drop); "stale" counts them.
            stale = int(self.link.call("HGET", qk.meta, "stale") or 0)
            return max(0, int(self.link.call("LLEN", qk.pending)) + int(
                self.link.call("ZCARD", qk.parked)) + int(
                self.link.call("ZCARD", qk.published)) + int(
                self.link.call("ZCARD", qk.lineup)) - stale)
        return int(self.link.call("ZCARD", qk.by_state(state.value)))

    def list_jobs(self, *, state: JobState | None = None, queue: str | None = None,
                  batch_id: str | None = None, offset: int = 0, limit: int = 50,
                  with_events: bool = False, newest_first: bool = False) -> list[JobRecord]:
        """Jobs filtered by state/queue/batch, oldest first, paged."""
        if limit <= 0:
            return []
        if newest_first:
            return self._newest(state, queue, batch_id, offset, limit, with_events)
        if batch_id is None and queue is not None and state is not None:
            # dict.fromkeys: a job cancelled and then retried by hand is in the pending list
            # twice until dequeue drops its old entry (admin scripts leave it there, counted
            # as stale); it is listed once, where a worker will take it, at the older entry.
            ids = list(dict.fromkeys(self._index_ids(queue, state, offset, offset + limit - 1)))
            return [r for r in self.ctx.records(queue, ids, with_events)
                    if r.state is state or r.unreadable]
        groups: dict[str, list[str]] = defaultdict(list)
        if batch_id is not None:
            # The batch knows each job's state and queue: page on that by rank (ids are
            # time-ordered) and read only the page's records, so a page of a 1,000,000-job
            # batch does not load the whole batch. Records are checked again below.
            for job_id, q in self._pages.batch_page(batch_id, state, queue, offset, limit):
                groups[q].append(job_id)
            offset = 0
        else:
            for q in [queue] if queue is not None else self.ctx.known_queues():
                for s in [state] if state is not None else ALL_STATES:
                    groups[q] += self._index_ids(q, s, 0, offset + limit - 1)
        records = [r for q, ids in groups.items() for r in self.ctx.records(q, ids, with_events)
                   if state is None or r.state is state or r.unreadable]
        records.sort(key=lambda r: (r.created_at, r.id))  # ids break ties: enqueue order
        return records[offset:offset + limit]

    def _newest(self, state: JobState | None, queue: str | None, batch_id: str | None,
                offset: int, limit: int, with_events: bool) -> list[JobRecord]:
        """``list_jobs`` newest first: the same indexes read from their other end (a page
        counted back from each index's size), then ordered newest first."""
        groups, cut = self._newest_ids(state, queue, batch_id, offset, limit)
        records = [r for q, ids in groups.items()
                   for r in self.ctx.records(q, ids, with_events)
                   if state is None or r.state is state or r.unreadable]
        records.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return records[:limit] if cut else records[offset:offset + limit]

    def job_heads(self, *, state: JobState | None = None, queue: str | None = None,
                  offset: int = 0, limit: int = 50, chars: int = HEAD_CHARS) -> list[JobHead]:
        """See ``Inspector.job_heads``: the jobs of ``list_jobs(newest_first=True)``, cut in
        Redis by ``lua/heads.lua``."""
        if limit <= 0:
            return []
        groups, cut = self._newest_ids(state, queue, None, offset, limit)
        heads = [h for q, ids in groups.items() for h in self.ctx.heads(q, ids, chars)
                 if state is None or h.state is state or h.state is None]
        heads.sort(key=lambda h: (h.created_at, h.id), reverse=True)
        return heads[:limit] if cut else heads[offset:offset + limit]

    def _newest_ids(self, state: JobState | None, queue: str | None, batch_id: str | None,
                    offset: int, limit: int) -> tuple[dict[str, list[str]], bool]:
        """The ids a newest-first page may hold, by queue, and whether they were cut to the
        page already (one index, or a batch) rather than to ``offset + limit`` per index."""
        groups: dict[str, list[str]] = defaultdict(list)
        if batch_id is not None:
            size = self._pages.batch_count(batch_id, state, queue)
            start = max(size - offset - limit, 0)
            for job_id, q in self._pages.batch_page(batch_id, state, queue, start,
                                                    max(size - offset - start, 0)):
                groups[q].append(job_id)
            return {q: list(dict.fromkeys(ids)) for q, ids in groups.items()}, True
        one = queue is not None and state is not None  # one index: cut the page itself
        for q in [queue] if queue is not None else self.ctx.known_queues():
            for s in [state] if state is not None else ALL_STATES:
                size = self._index_size(q, s)
                stop = size - 1 - (offset if one else 0)
                if stop >= 0:
                    groups[q] += self._index_ids(q, s, max(size - offset - limit, 0), stop)
        return {q: list(dict.fromkeys(ids)) for q, ids in groups.items()}, one

    def count_jobs(self, *, state: JobState | None = None, queue: str | None = None,
                   batch_id: str | None = None) -> int:
        """How many jobs ``list_jobs`` would page through."""
        if batch_id is not None:
            return self._pages.batch_count(batch_id, state, queue)
        queues = [queue] if queue is not None else self.ctx.known_queues()
        if state is None:
            # Either half of a damaged job may be missing; count the job once all the same.
            return sum(max(int(self.link.call("HLEN", self.keys.queue(q).jobs)),
                           int(self.link.call("HLEN", self.keys.queue(q).state)))
                       for q in queues)
        return sum(self._index_size(q, state) for q in queues)

    def _each_in(self, act: Callable[[str, list[str]], int], state: JobState,
                 queue: str | None) -> int:
        """Act on every job in ``state``, a chunk per call: what ``act`` moves leaves the
        index; what it leaves (a workflow node whose retry is refused, a job the script
        does not move) stays at the head and is stepped over. A pass that moved something
        past such jobs is followed by another: a move may take one of them out of the index
        meanwhile (a retried parent re-opens its child), shifting the rest under the step."""
        total = 0
        for q in [queue] if queue is not None else self.ctx.known_queues():
            while True:
                moved, skip = 0, 0
                while ids := self._index_ids(q, state, skip, skip + ADMIN_CHUNK - 1):
                    done = act(q, ids)
                    moved += done
                    skip += len(ids) - done
                total += moved
                if not skip or not moved:
                    break
        return total

    def retry_all(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Retry every job in ``state``."""
        return self._each_in(self._admin.retry_in, state, queue)

    def clear(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Delete every job in a terminal ``state``."""
        if not state.terminal:
            raise ValueError(f"clear() deletes terminal jobs only, not {state.value!r} ones")
        return self._each_in(
            lambda q, ids: sum(int(n) for n in self._admin.run_each("delete", {q: ids})),
            state, queue)

    def workers(self) -> list[WorkerInfo]:
        """Workers seen within the registry's time-to-live."""
        since = self.ctx.now() - Retention().worker_ttl
        alive = set(self.link.call("ZRANGEBYSCORE", self.keys.workers, since, "+inf"))
        infos: dict[str, str] = self.link.call("HGETALL", self.keys.worker_info)
        out = [WorkerInfo.from_wire(json.loads(raw)) for wid, raw in infos.items()
               if wid in alive]
        return sorted(out, key=lambda w: w.started_at)

    def command_worker(self, worker_id: str, command: str) -> bool:
        """Queue ``quiet`` or ``stop`` for a live worker; False when it is unknown."""
        if command not in WORKER_COMMANDS:
            raise ValueError(f"unknown worker command {command!r}; expected quiet or stop")
        if self.link.call("ZSCORE", self.keys.workers, worker_id) is None:
            return False
        self.link.call("SET", self.keys.worker_command(worker_id), command)
        return True

    def get_batch(self, batch_id: str) -> BatchStatus | None:
        """Counters and timings of a batch, from one hash."""
        raw: dict[str, str] = self.link.call("HGETALL", self.keys.batch(batch_id).batch)
        return _batch_status(batch_id, raw) if raw else None

    def workflow_graph(self, workflow_id: str, limit: int = 2000) -> list[GraphNode]:
        """Up to ``limit`` nodes of a workflow with their state and parents, in id order
        (which ``limit`` nodes, of a larger workflow, is not defined): the graph hash scanned
        for its "n:" entries, states from the batch's member entries, names from the jobs."""
        bk = self.keys.batch(workflow_id)
        nodes: dict[str, tuple[str, ...]] = {}
        cursor = "0"
        while len(nodes) < limit:
            cursor, pairs = scan_reply(self.link.call("HSCAN", bk.graph, cursor, "MATCH", "n:*",
                                                      "COUNT", 1000))
            for field, text in pairs:
                if len(nodes) < limit:
                    nodes[str(field)[2:]] = parents_of(text)
            if cursor == "0":
                break
        ids = sorted(nodes)
        by_queue: dict[str, list[str]] = defaultdict(list)
        for job_id, value in zip(ids, self.link.call("HMGET", bk.jobs, *ids) if ids else [],
                                 strict=True):
            if value:
                by_queue[str(value).partition(":")[2]].append(job_id)
        found = {rec.id: rec for queue, held in by_queue.items()
                 for rec in self.ctx.records(queue, held, with_events=False)}
        return [GraphNode(i, found[i].name, found[i].state, nodes[i]) for i in ids if i in found]

    def list_batches(self, offset: int = 0, limit: int = 50,
                     kind: str | None = None) -> list[BatchStatus]:
        """Batches (of one ``kind`` when given: "batch" or "workflow"), newest first. With a
        kind, the registry is read newest first, a page at a time, until ``limit`` match
        (at most ``KIND_SCAN`` batches read per call)."""
        if kind is None:
            ids = self.link.call("ZREVRANGE", self.keys.batches, offset, offset + limit - 1)
            found = (self.get_batch(i) for i in ids)
            return [b for b in found if b is not None]
        out: list[BatchStatus] = []
        skip = offset
        for start in range(0, KIND_SCAN, KIND_PAGE):
            ids = self.link.call("ZREVRANGE", self.keys.batches, start, start + KIND_PAGE - 1)
            for status in (self.get_batch(i) for i in ids):
                if status is None or status.kind != kind:
                    continue
                if skip:
                    skip -= 1
                    continue
                out.append(status)
                if len(out) >= limit:
                    return out
            if len(ids) < KIND_PAGE:
                break
        return out

    def cancel_batch(self, batch_id: str) -> int:
        """Cancel every waiting job of a batch, request cancellation of its active ones;
        returns how many jobs were cancelled or asked to stop."""
        if self._batches.batch_call(batch_id, "cancel", []) == "missing":
            return 0
        done = 0
        for step in self._pages.batch_members(batch_id):  # in steps: Redis serves others between
            groups: dict[str, list[str]] = defaultdict(list)
            for job_id, state, queue in step:
                if state not in TERMINAL:
                    groups[queue].append(job_id)
            done += sum(sum(1 for s in states if s in ("cancelled", "active"))
                        for states in self._admin.run_each("cancel", groups))
        return done

    def history(self, since: int = 0, queue: str | None = None) -> list[MinuteTotals]:
        """Outcomes per queue and minute of the last day, oldest first: each queue's ring
        (lua/_counts.lua) read whole, its fields of minutes older than a day left out."""
        start = history_start(self.ctx.now(), since)
        queues = [queue] if queue is not None else self.ctx.known_queues()
        return sorted((r for name in queues for r in self._ring(name) if r.minute >= start),
                      key=lambda r: (r.minute, r.queue))

    def _ring(self, queue: str) -> list[MinuteTotals]:
        """Every minute the queue's ring holds, a day's and older ones not yet overwritten."""
        out = []
        ring: dict[str, str] = self.link.call("HGETALL", self.keys.queue(queue).history)
        for value in ring.values():
            fields = value.split()
            if len(fields) != 5 or not all(f.isdigit() for f in fields):
                continue  # not written by _counts.lua: a damaged field is not history
            minute, *counts = (int(f) for f in fields)
            out.append(MinuteTotals(queue, minute, *counts))
        return out

    def job_totals(self) -> list[JobTotals]:
        """All-time outcome counters per (queue, job name)."""
        out = []
        for queue in self.ctx.known_queues():
            meta: dict[str, str] = self.link.call("HGETALL", self.keys.queue(queue).meta)
            counts: dict[str, dict[str, int]] = defaultdict(dict)
            for field, value in meta.items():
                kind, sep, name = field.partition(":")
                if sep and kind in ("p", "f", "d", "r"):
                    counts[name][kind] = int(value)
            out += [JobTotals(queue, name, c.get("p", 0), c.get("f", 0), c.get("d", 0),
                              c.get("r", 0)) for name, c in sorted(counts.items())]
        return out


KIND_PAGE = 200  # batches read per step of list_batches(kind=...)
KIND_SCAN = 10_000  # ... and at most this many per call


def _total(meta: dict[str, str], prefix: str) -> int:
    return sum(int(v) for k, v in meta.items() if k.startswith(prefix))


def _batch_status(batch_id: str, raw: dict[str, Any]) -> BatchStatus:
    def opt(key: str) -> float | None:
        return float(raw[key]) if raw.get(key) else None

    return BatchStatus(
        id=batch_id, description=raw.get("desc"), meta=json.loads(raw.get("meta") or "{}"),
        created_at=float(raw.get("c", 0.0)), total=int(raw.get("total", 0)),
        counts={k[2:]: int(v) for k, v in raw.items() if k.startswith("n:") and int(v)},
        closed=raw.get("closed") == "1", cancelled=raw.get("cancelled") == "1",
        started_at=opt("sa"), finished_at=opt("fa"),
        callbacks_fired=tuple(sorted(k[2:] for k in raw if k.startswith("f:"))),
        kind=raw.get("kind", "batch"),
    )
