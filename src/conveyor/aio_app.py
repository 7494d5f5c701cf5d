"""The ``Conveyor`` methods for asyncio code: the same names with an ``a`` in front, as
Django's tasks API and Python's own ``aclose``/``anext`` spell them (docs/api.md, "asyncio").

Enqueues use the storage's asyncio I/O (native on Redis and PostgreSQL, a thread on SQLite
and memory); the reads and operator actions run the blocking call in a thread, so an event
loop never waits on the storage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from conveyor.client.refs import JobRef
from conveyor.core.job import JobRecord, JobState
from conveyor.errors import ResultTimeout
from conveyor.storage.aio import Waiter

if TYPE_CHECKING:
    from conveyor.client.client import Client
    from conveyor.storage import Backend

__all__ = ["AsyncApp"]

#: Seconds of one blocking wait in a thread for ``await_batch``: a task cancelled meanwhile
#: leaves its thread waiting this long at most.
WAIT_SLICE = 5.0


class AsyncApp:
    """``aenqueue``, ``aget_job``, ``acancel``, ``abatch_status``, ``await_batch``,
    ``aclose``; a mixin of
    ``Conveyor``."""

    client: Client

    @property
    def storage(self) -> Backend:
        raise NotImplementedError  # Conveyor's

    def batch_status(self, batch_id: str) -> dict[str, Any]:
        raise NotImplementedError  # Conveyor's

    def wait_batch(self, batch_id: str, timeout: float | None = None) -> dict[str, Any]:
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

    async def await_batch(self, batch_id: str, timeout: float | None = None) -> dict[str, Any]:
        """``wait_batch`` for asyncio code: the blocking wait in a thread, in slices of
        ``WAIT_SLICE`` seconds, so that a cancelled task leaves no thread waiting long."""
        limit = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if limit is None else max(limit - time.monotonic(), 0.0)
            part = WAIT_SLICE if left is None else min(left, WAIT_SLICE)
            try:
                return await asyncio.to_thread(self.wait_batch, batch_id, part)
            except ResultTimeout:
                if left is not None and left <= WAIT_SLICE:
                    raise ResultTimeout(f"batch {batch_id} did not complete within "
                                        f"{timeout} s") from None

    async def aclose(self) -> None:
        """Close the asyncio clients this event loop opened (``close`` closes the rest)."""
        await self.storage.aclose()
