"""``Inspector.breakers`` and ``close_breaker`` on Postgres.

NOT YET BUILT: P (branch i56-brk-pg) replaces this file with the store's breakers
(/work/notes/i56-breakers-spec.md); until then the store keeps no breaker, so it lists none
and has none to close, and tests/conformance/test_breakers.py skips it (``_NOT_YET``).
"""

from __future__ import annotations

from conveyor.core.breaker import BreakerState
from conveyor.storage.postgres.connection import Database

__all__ = ["PostgresBreakers"]


class PostgresBreakers:
    """The operators' view of breakers (a part of ``PostgresStorage``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def breakers(self) -> list[BreakerState]:
        """Open and half-open breakers first, then closed ones with counted errors."""
        return []

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand; True when it held jobs back."""
        return False
