"""``Inspector.breakers`` and ``close_breaker`` on Redis.

NOT YET BUILT: R (branch i56-brk-redis) replaces this file with the store's breakers
(/work/notes/i56-breakers-spec.md); until then the store keeps no breaker, so it lists none
and has none to close, and tests/conformance/test_breakers.py skips it (``_NOT_YET``).
"""

from __future__ import annotations

from conveyor.core.breaker import BreakerState
from conveyor.storage.redis.context import RedisContext

__all__ = ["RedisBreakers"]


class RedisBreakers:
    """The operators' view of breakers (a part of ``RedisStorage``)."""

    def __init__(self, ctx: RedisContext) -> None:
        self._ctx = ctx

    def breakers(self) -> list[BreakerState]:
        """Open and half-open breakers first, then closed ones with counted errors."""
        return []

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand; True when it held jobs back."""
        return False
