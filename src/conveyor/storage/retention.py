"""The retention policy ``Storage.trim`` applies: how long finished work is kept."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished work is kept before ``Storage.trim`` removes it."""

    succeeded_seconds: float = 7 * 24 * 3600.0
    failed_seconds: float = 180 * 24 * 3600.0
    dead_seconds: float = 180 * 24 * 3600.0
    dead_max: int = 10_000
    batch_seconds: float = 7 * 24 * 3600.0
    worker_ttl: float = 60.0
