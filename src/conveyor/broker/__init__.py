"""The broker seam: delivery through a message broker, with every job's state in the store.

Only the protocol exists so far (``broker/base.py``); docs/design.md §7 describes the design
that the RabbitMQ (issue 20) and Kafka (issue 21) brokers implement.
"""

from conveyor.broker.base import Broker, Delivery

__all__ = ["Broker", "Delivery"]
