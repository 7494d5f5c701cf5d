"""The breakers as the CLI (``conveyor breakers``), the dashboard and its API show them, and
closing one by hand (docs/operations.md, "Breakers")."""

from __future__ import annotations

from typing import Any

from conveyor.core.text import shown
from conveyor.storage.base import Inspector

__all__ = ["breakers_view", "close_breaker"]


def breakers_view(insp: Inspector) -> list[dict[str, Any]]:
    """Every breaker the store lists (open and half-open first), JSON-ready."""
    return [{"key": b.key, "state": b.state, "failures": b.failures, "opened_at": b.opened_at,
             "probe_at": b.probe_at, "probe_id": b.probe_id, "reason": b.reason,
             "trips": b.trips, "queue": b.queue} for b in insp.breakers()]


def close_breaker(insp: Inspector, key: str) -> tuple[bool, str]:
    """Close breaker ``key``: whether it was open (or half-open), and the operator's line."""
    if not insp.close_breaker(key):
        return False, f"breaker {shown(key)} is not open: nothing to close"
    return True, f"closed breaker {shown(key)}: its jobs start at the next fetch"
