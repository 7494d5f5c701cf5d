"""Reading a batch's jobs page by page, in bounded steps, however big the batch.

batch.lua keeps two sorted sets beside the batch's ``jobs`` hash (see ``keys.BatchKeys``):
``order`` ranks every job by id (enqueue order) and ``states`` ranks them by state, then id.
A page is one ``ZRANGE`` by rank, and a count one ``ZCARD``/``ZCOUNT``: a render of a
200,000-job batch page costs the page, not four whole-hash reads (issue #14, item 12).
Whatever must see every job (cancel, or a filter by queue) walks in steps of ``STEP``.
A batch written by a version without these sets is read with ``HSCAN`` steps instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conveyor.job import ALL_STATES, JobState
from conveyor.storage.redis.base import RedisBase

STEP = 500  # jobs read per command when walking a batch


def state_code(state: JobState) -> int:
    """The score of ``state`` in a batch's ``states`` set (batch.lua's STATE_CODE)."""
    return ALL_STATES.index(state) + 1


def scan_reply(reply: Any) -> tuple[str, list[tuple[str, str]]]:
    """``HSCAN``'s (cursor, pairs) from a raw reply (flat list) or a Cluster client's parsed
    one (a dict)."""
    cursor, found = reply
    pairs = list(found.items()) if isinstance(found, dict) else list(
        zip(found[::2], found[1::2], strict=True))
    return str(cursor), pairs


class RedisBatchPages(RedisBase):
    """Pages, counts and walks over one batch's jobs."""

    def batch_members(self, batch_id: str) -> Iterator[list[tuple[str, str, str]]]:
        """Every job of a batch as (job id, state, queue), in steps of about ``STEP``
        (``HSCAN``: each job that stays in the batch is seen at least once)."""
        key = self.keys.batch(batch_id).jobs
        cursor = "0"
        while True:
            cursor, found = scan_reply(self.link.call("HSCAN", key, cursor, "COUNT", STEP))
            step = []
            for job_id, value in found:
                state, _, queue = value.partition(":")
                step.append((job_id, state, queue))
            yield step
            if cursor == "0":
                return

    def _indexed(self, batch_id: str) -> bool:
        bk = self.keys.batch(batch_id)
        return bool(self.link.call("ZCARD", bk.order)) or not self.link.call("HLEN", bk.jobs)

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
        as the batch knows their state and queue."""
        if not self._indexed(batch_id):
            return self._scanned_page(batch_id, state, queue, offset, limit)
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
                q = (value or "").partition(":")[2]
                if queue is not None and q != queue:
                    continue
                if skip:
                    skip -= 1
                elif len(out) < limit:
                    out.append((job_id, q))
        return out

    def batch_count(self, batch_id: str, state: JobState | None, queue: str | None) -> int:
        """How many jobs of a batch are in ``state`` (and ``queue``), as the batch knows."""
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
