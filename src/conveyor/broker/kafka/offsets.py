"""Offset windows: how a Kafka consumer runs many messages of one partition at once and
still commits only what is done.

Kafka remembers one number per partition for a consumer group: the offset to resume from. A
consumer that commits each message's offset as it finishes would skip a slow message behind
it if it died; one that runs messages one at a time lets a slow message hold back everything
behind it (head-of-line blocking). A window does neither: it hands out every message of its
partition as the worker has room, and its commit point is the oldest message not yet done
(or, when all are, the one after the last handed out). A consumer that dies leaves every
message from that point on to the next owner; those already done are skipped by the store.
"""

from __future__ import annotations

import heapq

__all__ = ["OffsetWindow"]


class OffsetWindow:
    """The messages of one partition this consumer has handed out and not yet finished."""

    __slots__ = ("_heap", "_next", "_open", "committed")

    def __init__(self) -> None:
        self._open: set[int] = set()  # handed out, not done
        self._heap: list[int] = []  # the same offsets (and done ones not yet popped)
        self._next: int | None = None  # one past the highest offset handed out
        self.committed: int | None = None  # the last commit point sent to the broker

    def take(self, offset: int) -> None:
        """A message at ``offset`` was handed out to run."""
        if offset in self._open:
            return
        self._open.add(offset)
        heapq.heappush(self._heap, offset)
        if self._next is None or offset >= self._next:
            self._next = offset + 1

    def done(self, offset: int) -> bool:
        """The message at ``offset`` is finished with; True if it was open here."""
        if offset not in self._open:
            return False
        self._open.discard(offset)
        while self._heap and self._heap[0] not in self._open:
            heapq.heappop(self._heap)  # done offsets leave the heap once they reach its top
        return True

    def oldest_open(self) -> int | None:
        """The lowest offset handed out and not finished, or None."""
        return self._heap[0] if self._heap else None

    def commit_point(self) -> int | None:
        """The offset to resume from: the oldest unfinished message, else the next one; None
        before anything was handed out."""
        oldest = self.oldest_open()
        return oldest if oldest is not None else self._next

    def span(self) -> int:
        """Messages from the commit point to the last handed out: what the next owner would
        be handed again if this consumer died now. The consumer stops fetching the partition
        while it is at its limit (the oldest open message is very slow)."""
        point = self.commit_point()
        return 0 if point is None or self._next is None else self._next - point

    @property
    def open(self) -> int:
        """How many messages are handed out and not finished."""
        return len(self._open)

    def due(self) -> int | None:
        """The commit point when it moved past the last one committed, else None."""
        point = self.commit_point()
        if point is None or (self.committed is not None and point <= self.committed):
            return None
        return point
