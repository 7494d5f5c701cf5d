"""The offset windows of one Kafka consumer: per partition it owns, what it handed out and
what is done (``OffsetWindow``), which partitions it paused, and how far it has read.

Acks come from the acker's thread, deliveries from the fetcher's: everything here is under
one lock, and nothing here talks to the broker (the consumer commits what this says is due).
"""

from __future__ import annotations

import threading

from confluent_kafka import TopicPartition

from conveyor.broker.kafka.offsets import OffsetWindow

__all__ = ["Place", "Windows"]

Place = tuple[str, int]  # (topic, partition)


class Windows:
    """One consumer's windows, paused partitions and read positions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[Place, OffsetWindow] = {}
        self._paused: set[Place] = set()
        self._read: dict[Place, int] = {}  # one past the last message read
        self._unsent_read = False

    def take(self, place: Place, offset: int) -> OffsetWindow:
        """A message at ``offset`` of ``place`` handed out; the window that holds it."""
        with self._lock:
            window = self._windows.get(place)
            if window is None:
                window = self._windows[place] = OffsetWindow()
            window.take(offset)
            self._read[place] = max(self._read.get(place, 0), offset + 1)
            self._unsent_read = True
            return window

    def done(self, place: Place, window: OffsetWindow, offset: int) -> None:
        """The message is finished with; void when ``window`` is no longer the partition's
        (it was revoked since: the next owner was handed the message again)."""
        with self._lock:
            if self._windows.get(place) is window:
                window.done(offset)

    def due_commits(self, only: set[Place] | None = None) -> list[TopicPartition]:
        """Commit points that moved since the last call, marked as committed."""
        out: list[TopicPartition] = []
        with self._lock:
            for place, window in self._windows.items():
                if only is not None and place not in only:
                    continue
                point = window.due()
                if point is not None:
                    window.committed = point
                    out.append(TopicPartition(place[0], place[1], point))
        return out

    def revoke(self, places: list[Place]) -> list[TopicPartition]:
        """Partitions taken away: their due commit points, and they are forgotten — their
        read positions too: committed again by this consumer, a position it no longer
        advances overwrote the new owner's, and the relay saw as waiting what had been read
        (and, when nothing more came, stopped publishing for good)."""
        offsets = self.due_commits(only=set(places))
        with self._lock:
            for place in places:
                self._windows.pop(place, None)
                self._paused.discard(place)
                self._read.pop(place, None)
        return offsets

    def flow(self, limit: int) -> tuple[list[Place], list[Place]]:
        """Partitions to pause (``limit`` messages past their commit point: the oldest is
        slow) and to resume (back under half of it), each reported once."""
        with self._lock:
            stop = [p for p, w in self._windows.items()
                    if p not in self._paused and w.span() >= limit]
            go = [p for p in self._paused
                  if (w := self._windows.get(p)) is None or w.span() < limit // 2]
            self._paused.update(stop)
            self._paused.difference_update(go)
        return stop, go

    def read_positions(self) -> list[TopicPartition]:
        """Every read position, if any moved since the last call (else none)."""
        with self._lock:
            if not self._unsent_read:
                return []
            self._unsent_read = False
            return [TopicPartition(t, p, o) for (t, p), o in self._read.items()]
