"""Reading a Redis batch: pages, counts and walks over its jobs (``batch.lua`` keeps them).

batch.lua keeps two sorted sets beside the batch's ``jobs`` hash (see ``keys.BatchKeys``):
``order`` ranks every job by id (enqueue order) and ``states`` ranks them by state, then id.
A page is one ``ZRANGE`` by rank, and a count one ``ZCARD``/``ZCOUNT``: a render of a
200,000-job batch page costs the page, not four whole-hash reads (issue #14, item 12).
Whatever must see every job (cancel, or a filter by queue) walks in steps of ``STEP``.
A batch written by a version without these sets is read with ``HSCAN`` steps instead.

The ids of a bulk enqueue join as runs (``lua/_runs.lua``): one entry per run of ids that
count up, not three per job. The sets hold every job below the oldest run left; a page that
reaches past it is counted through the runs when none of them has started (their ids are
arithmetic), and otherwise indexes ``STEP`` jobs of runs and is read again (docs/internals/
redis-batches.md).
"""

from __future__ import annotations

from collections.abc import Iterator

from conveyor.core.job import JobState
from conveyor.storage.redis.batches import (
    JOIN_STATES,
    LOWER_HEX,
    RUN_DIGITS,
    STEP,
    RedisBatches,
    run_ids,
    scan_reply,
    state_code,
)
from conveyor.storage.redis.context import RedisContext


class RedisBatchPages:
    """Pages, counts and walks over one batch's jobs, runs included (indexing runs through
    ``batches``' ``batch.lua`` calls)."""

    def __init__(self, ctx: RedisContext, batches: RedisBatches) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._batches = batches

    def batch_members(self, batch_id: str) -> Iterator[list[tuple[str, str, str]]]:
        """Every job of a batch as (job id, state, queue), in steps of about ``STEP``: the
        jobs of its runs that have no entry of their own, run by run, then every entry
        (``HSCAN``). Each job that stays in the batch is seen at least once (a run cut by a
        reader meanwhile is found again past where the walk is), and nothing is written."""
        bk = self.keys.batch(batch_id)
        after = "-"
        while heads := self.link.call("ZRANGEBYLEX", bk.heads, after, "+", "LIMIT", 0, 1):
            after = f"({heads[0]}"
            run = _run_entry(heads[0], self.link.call("HGET", bk.runs, heads[0]))
            if run is None:
                continue  # gone meanwhile, or unreadable (batch.lua says so when it meets it)
            prefix, start, count, state, queue = run
            for at in range(0, count, STEP):
                ids = run_ids(prefix, start + at, min(STEP, count - at))
                values = self.link.call("HMGET", bk.jobs, *ids)
                yield [(job_id, state, queue)
                       for job_id, value in zip(ids, values, strict=True) if value is None]
        cursor = "0"
        while True:
            cursor, found = scan_reply(self.link.call("HSCAN", bk.jobs, cursor, "COUNT", STEP))
            step = []
            for job_id, value in found:
                state, _, queue = value.partition(":")
                if state != "deleted":  # a deleted job of a run: its mark
                    step.append((job_id, state, queue))
            yield step
            if cursor == "0":
                return

    def index_step(self, batch_id: str) -> bool:
        """Index up to ``STEP`` jobs of the batch's oldest run into its sets; False when no
        run was left."""
        return self._batches.batch_call(batch_id, "index", [str(STEP)]) == "ok"

    def _indexed(self, batch_id: str) -> bool:
        bk = self.keys.batch(batch_id)
        return (bool(self.link.call("ZCARD", bk.order)) or not self.link.call("HLEN", bk.jobs)
                or bool(self.link.call("EXISTS", bk.heads)))

    def _band(self, batch_id: str, state: JobState | None) -> tuple[str, int, int]:
        """The set to read, and the first rank and size of the jobs in ``state`` there."""
        bk = self.keys.batch(batch_id)
        if state is None:
            return bk.order, 0, int(self.link.call("ZCARD", bk.order))
        code = state_code(state)
        start = int(self.link.call("ZCOUNT", bk.states, "-inf", f"({code}"))
        return bk.states, start, int(self.link.call("ZCOUNT", bk.states, code, code))

    def batch_page(self, batch_id: str, state: JobState | None, queue: str | None,
                   offset: int, limit: int) -> list[tuple[str, str]]:
        """(job id, queue) of the jobs ``offset``..``offset+limit`` of a batch in id order,
        as the batch knows their state and queue.

        The sets hold every job below the oldest run left (runs never overlap), so a page
        that ends below it is exact; one that reaches it is counted through the runs when
        none has started, or else indexes one step of runs and is read again. A state no
        run holds needs neither: a run's job in any other state has its own entry."""
        if not self._indexed(batch_id):
            return self._scanned_page(batch_id, state, queue, offset, limit)
        while True:
            heads = self.link.call("ZRANGE", self.keys.batch(batch_id).heads, 0, 0)
            below = heads[0] if heads and (state is None or state in JOIN_STATES) else None
            page = self._ranked_page(batch_id, state, queue, offset, limit, below)
            if page is None and queue is None:
                page = self._counted_page(batch_id, state, offset, limit, below)
            if page is not None:
                return page
            self.index_step(batch_id)

    def _ranked_page(self, batch_id: str, state: JobState | None, queue: str | None,
                     offset: int, limit: int, below: str | None) -> list[tuple[str, str]] | None:
        """The page read by rank from the sets; None if it may miss jobs of a run (it does
        not end below ``below``, the first id no set may hold yet)."""
        key, start, size = self._band(batch_id, state)
        jobs_key = self.keys.batch(batch_id).jobs
        out: list[tuple[str, str]] = []
        skip = offset if queue is not None else 0
        rank = start if queue is not None else start + offset
        while len(out) < limit and rank < start + size:
            want = limit - len(out) if queue is None else STEP
            ids = self.link.call("ZRANGE", key, rank, min(rank + want, start + size) - 1)
            if not ids:
                break
            rank += len(ids)
            values = self.link.call("HMGET", jobs_key, *ids)
            for job_id, value in zip(ids, values, strict=True):
                if below is not None and job_id >= below and len(out) < limit:
                    return None
                q = (value or "").partition(":")[2]
                if queue is not None and q != queue:
                    continue
                if skip:
                    skip -= 1
                elif len(out) < limit:
                    out.append((job_id, q))
        if below is not None and len(out) < limit:
            return None  # the sets ran out below the runs: the page goes on in them
        return out

    def _counted_page(self, batch_id: str, state: JobState | None, offset: int, limit: int,
                      below: str | None) -> list[tuple[str, str]] | None:
        """The page counted through the runs, when no job at or past ``below`` has an entry
        of its own and no run has had a job move (a batch not yet started, or the part of it
        no worker reached): the sets' jobs, then the runs' ids made from their counts. None
        otherwise (the caller indexes a step). Costs a read of the runs, one field per run."""
        bk = self.keys.batch(batch_id)
        last = self.link.call("ZRANGE", bk.order, -1, -1)
        if below is None or (last and last[0] >= below):
            return None
        entries: dict[str, str] = self.link.call("HGETALL", bk.runs)
        if any(key.startswith("m:") for key in entries):
            return None
        key, start, size = self._band(batch_id, state)
        ids = self.link.call("ZRANGE", key, start + offset,
                             start + min(offset + limit, size) - 1) if offset < size else []
        values = self.link.call("HMGET", bk.jobs, *ids) if ids else []
        out = [(job_id, (value or "").partition(":")[2])
               for job_id, value in zip(ids, values, strict=True)]
        skip = max(0, offset - size)  # jobs of the runs before the page
        for head in sorted(entries):  # runs never overlap: in id order
            run = _run_entry(head, entries[head])
            if run is None:
                return None  # unreadable: indexing drops it, with its note
            prefix, first, count, run_state, queue = run
            if len(out) == limit or (state is not None and run_state != state.value):
                continue
            take = min(count - skip, limit - len(out))
            if take > 0:
                out += [(job_id, queue) for job_id in run_ids(prefix, first + skip, take)]
            skip = max(0, skip - count)
        return out

    def batch_count(self, batch_id: str, state: JobState | None, queue: str | None) -> int:
        """How many jobs of a batch are in ``state`` (and ``queue``), as the batch knows."""
        bk = self.keys.batch(batch_id)
        if queue is None and self.link.call("EXISTS", bk.heads):
            # Runs are not in the sets yet; the counters count every job, runs included.
            field = "total" if state is None else f"n:{state.value}"
            return int(self.link.call("HGET", bk.batch, field) or 0)
        if queue is None and self._indexed(batch_id):
            return self._band(batch_id, state)[2]
        return sum(1 for step in self.batch_members(batch_id) for _, s, q in step
                   if (state is None or s == state.value) and (queue is None or q == queue))

    def _scanned_page(self, batch_id: str, state: JobState | None, queue: str | None,
                      offset: int, limit: int) -> list[tuple[str, str]]:
        wanted = sorted((job_id, q) for step in self.batch_members(batch_id)
                        for job_id, s, q in step
                        if (queue is None or q == queue) and (state is None or s == state.value))
        return wanted[offset:offset + limit]


def _run_entry(head: str, raw: str | None) -> tuple[str, int, int, str, str] | None:
    """A run's (prefix, first number, count, state, queue) from its ``runs`` entry; None if
    there is none or it does not parse (``lua/_runs.lua`` writes them)."""
    count, _, value = (raw or "").partition(" ")
    state, colon, queue = value.partition(":")
    if not count.isdigit() or not colon or len(head) <= RUN_DIGITS or not LOWER_HEX.fullmatch(
            head):
        return None
    return head[:-RUN_DIGITS], int(head[-RUN_DIGITS:], 16), int(count), state, queue
