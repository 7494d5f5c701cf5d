"""The Kafka broker (``kafka://``, ``kafkas://``; docs/brokers.md, "Kafka").

``broker`` (``KafkaBroker`` and ``open_kafka``), ``url`` (the URL), ``offsets`` (a partition's
offset window), ``windows`` (every partition's windows) and ``positions`` (the group's
committed positions).
"""

from conveyor.broker.kafka.broker import KafkaBroker, open_kafka

__all__ = ["KafkaBroker", "open_kafka"]
