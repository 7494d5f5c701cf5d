"""The broker seam: delivery through a message broker, with every job's state in the store.

``open_broker(url)`` picks the broker by the URL's scheme, importing it on first use so a
broker's client library stays an optional dependency. docs/internals/broker.md has the design.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from conveyor.broker.base import Broker, Delivery
from conveyor.errors import BrokerURLError
from conveyor.storage import redact

__all__ = ["Broker", "Delivery", "open_broker"]

# scheme -> "module:function"; the function takes the URL and returns a Broker.
_OPENERS = {
    "memory": "conveyor.broker.memory:open_memory_broker",
    "amqp": "conveyor.broker.rabbitmq.broker:open_rabbitmq",
    "amqps": "conveyor.broker.rabbitmq.broker:open_rabbitmq",
    "kafka": "conveyor.broker.kafka.broker:open_kafka",
    "kafkas": "conveyor.broker.kafka.broker:open_kafka",
}
# scheme -> the extra that installs its client library
_EXTRAS = {"amqp": "rabbitmq", "amqps": "rabbitmq", "kafka": "kafka", "kafkas": "kafka"}


class _Opener(Protocol):
    def __call__(self, url: str) -> Broker: ...


def open_broker(url: str) -> Broker:
    """Open the broker a URL names. Raises ``BrokerURLError`` with the reason when it can't."""
    scheme, sep, _ = url.partition("://")
    target = _OPENERS.get(scheme.lower()) if sep else None
    if target is None:
        raise BrokerURLError(
            f"broker URL {redact(url)!r}: expected one of "
            + ", ".join(f"{s}://" for s in sorted(_OPENERS)))
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # the optional client library is missing
        extra = _EXTRAS.get(scheme.lower(), scheme)
        raise BrokerURLError(f"{scheme}:// needs an optional dependency: "
                             f"pip install 'conveyor[{extra}]' ({exc})") from exc
    opener: _Opener = getattr(module, func_name)
    return opener(url)
