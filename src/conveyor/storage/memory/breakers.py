"""``Inspector.breakers`` and ``close_breaker`` on the memory backend, over the rows its
dequeue and acks keep (``FlowGate.breakers``; the rules are ``storage/breakers.py``)."""

from __future__ import annotations

from conveyor.core.breaker import CLOSED, BreakerState
from conveyor.storage.breakers import listed
from conveyor.storage.memory.state import MemoryState

__all__ = ["MemoryBreakers"]


class MemoryBreakers:
    """The operators' view of breakers (a part of ``MemoryStorage``)."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def breakers(self) -> list[BreakerState]:
        """Open and half-open breakers first, then closed ones with counted errors."""
        state = self.state
        with state.lock:
            now = state.now()
            return listed([row.view(now) for row in state.flow.breakers.values()])

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand, its log cleared; True when it held jobs back."""
        state = self.state
        with state.lock:
            row = state.flow.breakers.pop(key, None)
            if row is None:
                return False
            state.wake()
            return row.state != CLOSED
