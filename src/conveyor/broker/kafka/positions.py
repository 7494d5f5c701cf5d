"""Where a Kafka consumer group stands, read with clients of their own: the relay's backlog
(what no worker has read yet) and the workers' commit points.

Both use clients that never join a group: the group member's consumer may be blocked in
``consume`` on another thread, and a metadata call on it then hangs past its timeout.
"""

from __future__ import annotations

from typing import Any

import confluent_kafka
from confluent_kafka import TopicPartition

__all__ = ["GroupPositions"]


class GroupPositions:
    """Reads the committed offsets of one group, and the ends of partitions."""

    def __init__(self, config: dict[str, Any], group: str, timeout: float) -> None:
        self._config = {**config, "group.id": group}
        self._timeout = timeout
        self._client: Any = None

    def _query(self) -> Any:
        if self._client is None:
            self._client = confluent_kafka.Consumer(self._config)
        return self._client

    def committed(self, topic: str) -> list[TopicPartition]:
        """The group's committed offset of every partition of ``topic`` (-1001: none)."""
        client = self._query()
        meta = client.list_topics(topic, timeout=self._timeout)
        parts = [TopicPartition(topic, p) for p in sorted(meta.topics[topic].partitions)]
        return list(client.committed(parts, timeout=self._timeout))

    def unread(self, topic: str) -> int:
        """Messages of ``topic`` past the group's positions (a partition without one counts
        from its start). Tansu reports a partition's end as one past the first message of its
        last record batch, so there this counts low by up to a batch per partition: the relay
        may publish that much past its window, a soft bound. (Counting what this process
        produced instead outlived a broker that lost its data: the relay saw a full window in
        an empty topic and never published again.)"""
        total = 0
        for part in self.committed(topic):
            low, high = self._query().get_watermark_offsets(
                TopicPartition(topic, part.partition), timeout=self._timeout, cached=False)
            start = part.offset if part.offset >= 0 else low
            total += max(0, high - max(start, low))
        return total

    def close(self) -> None:
        """Close the client, if one was made."""
        if self._client is not None:
            self._client.close()
            self._client = None
