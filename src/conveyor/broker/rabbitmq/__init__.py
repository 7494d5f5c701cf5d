"""The RabbitMQ broker (``amqp://``, ``amqps://``; docs/brokers.md).

``broker`` (``RabbitBroker`` and ``open_rabbitmq``), ``packs`` (many job ids in a message)
and ``logs`` (the client library's failures in one line).
"""

from conveyor.broker.rabbitmq.broker import RabbitBroker, open_rabbitmq

__all__ = ["RabbitBroker", "open_rabbitmq"]
