"""The ``Conveyor`` methods for asyncio code: the same names with an ``a`` in front, as
Django's tasks API and Python's own ``aclose``/``anext`` spell them (docs/api.md, "asyncio").

Enqueues use the storage's asyncio I/O (native on Redis and PostgreSQL, a thread on SQLite
and memory); the reads and operator actions run the blocking call in a thread, so an event
loop never waits on the storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from conveyor.job import JobRecord, JobState
from conveyor.refs import JobRef
from conveyor.storage.aio import Waiter

if TYPE_CHECKING:
    from conveyor.client import Client
    from conveyor.storage import Backend

__all__ = ["AsyncApp"]


class AsyncApp:
    """``aenqueue``, ``aget_job``, ``acancel``, ``abatch_status``, ``aclose``; a mixin of
    ``Conveyor``."""

    client: Client

    @property
    def storage(self) -> Backend:
        raise NotImplementedError  # Conveyor's

    def batch_status(self, batch_id: str) -> dict[str, Any]:
        raise NotImplementedError  # Conveyor's

    async def aenqueue(
        self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
        meta: Mapping[str, Any] | None = None, delay: float | timedelta | None = None,
        at: datetime | float | None = None, **options: Any,
    ) -> JobRef | None:
        """``enqueue`` (by name) for asyncio code."""
        return await self.client.aenqueue(name, args, kwargs, meta=meta, delay=delay, at=at,
                                          **options)

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code."""
        return await self.client.aget_job(job_id)

    def afinished(self, job_id: str, queue: str) -> AbstractAsyncContextManager[Waiter]:
        """The storage's wake-ups when a job ends (what ``JobRef.aresult`` waits on)."""
        return self.client.afinished(job_id, queue)

    async def acancel(self, job_id: str) -> JobState | None:
        """``cancel`` for asyncio code."""
        return await asyncio.to_thread(self.storage.cancel, job_id)

    async def abatch_status(self, batch_id: str) -> dict[str, Any]:
        """``batch_status`` for asyncio code."""
        return await asyncio.to_thread(self.batch_status, batch_id)

    async def aclose(self) -> None:
        """Close the asyncio clients this event loop opened (``close`` closes the rest)."""
        await self.storage.aclose()
