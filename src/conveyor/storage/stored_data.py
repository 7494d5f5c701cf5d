"""A job's data as the store holds it, for ``Inspector.reseal``. Plain data (no I/O, no
backend types)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoredData:
    """A job's data as stored (``Inspector.reseal``): its payload, result and last message,
    each compared and replaced as the store holds it."""

    payload: str
    result: str | None
    message: str | None
