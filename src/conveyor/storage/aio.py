"""The storage's asyncio face: ``aenqueue`` and ``aget_job``, what an ``async`` client needs
(docs/api.md, "asyncio").

``ThreadedAsync``, a part of every storage, runs the blocking call in a thread
(``asyncio.to_thread``), so the event loop never waits on the storage: the embedded SQLite
and memory stores use it as it is. Redis and PostgreSQL have their own ``aenqueue`` on their
native asyncio clients (redis.asyncio, psycopg's ``AsyncConnection``) for the jobs that make up
nearly every enqueue, and hand the rest (batches on Redis, workflows, debounce, aggregation)
to this part.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from conveyor.core.job import EnqueueResult, JobRecord, JobSpec

__all__ = ["ThreadedAsync", "Waiter", "per_loop"]


@dataclass(frozen=True, slots=True)
class Waiter:
    """What ``afinished`` yields: ``wait(seconds)`` returns True when woken because the job
    may have ended, False after the seconds passed; ``notifies`` says whether the store
    wakes it at all (else a caller keeps its reads frequent)."""

    wait: Callable[[float], Awaitable[bool]]
    notifies: bool = False


async def _sleep(seconds: float) -> bool:
    await asyncio.sleep(seconds)
    return False


class ThreadedAsync:
    """``aenqueue`` / ``aget_job`` / ``afinished`` / ``aclose`` over a storage's blocking
    ``enqueue`` and ``get_job``, each run in a thread."""

    def __init__(self, enqueue: Callable[[Sequence[JobSpec]], list[EnqueueResult]],
                 get_job: Callable[[str], JobRecord | None]) -> None:
        self.enqueue = enqueue
        self.get_job = get_job

    async def aenqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` for asyncio code."""
        return await asyncio.to_thread(self.enqueue, specs)

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code."""
        return await asyncio.to_thread(self.get_job, job_id)

    @asynccontextmanager
    async def afinished(self, job_id: str, queue: str) -> AsyncIterator[Waiter]:
        """Wake-ups when ``job_id`` (of ``queue``) ends, for ``JobRef.aresult``; here none:
        the waiter only sleeps, and the caller reads again."""
        yield Waiter(_sleep)

    async def aclose(self) -> None:
        """Close what the native asyncio clients opened (nothing here)."""


def per_loop(owner: object, attr: str) -> weakref.WeakKeyDictionary[Any, Any]:
    """``owner``'s map of ``attr`` keyed by event loop (made on first use; a loop that is
    gone drops out)."""
    found: weakref.WeakKeyDictionary[Any, Any] | None = getattr(owner, attr, None)
    if found is None:
        found = weakref.WeakKeyDictionary()
        setattr(owner, attr, found)
    return found
