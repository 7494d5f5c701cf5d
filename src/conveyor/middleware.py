"""Middleware chains around enqueueing (client) and running (server) a job, Sidekiq style.

Client middleware is a callable ``mw(draft, call_next) -> JobRef | None``. It may change the
``EnqueueDraft`` (name, args, kwargs, meta, options, run_at) before calling ``call_next()``,
or stop the enqueue by returning ``None`` without calling it: ``enqueue`` then returns
``None`` (and ``enqueue_many`` leaves that item out).

Server middleware is an object with ``__call__(ctx, call_next)`` that returns what
``call_next()`` returned (or raises). An ``async def`` job only passes through middleware
that also defines ``async def run_async(ctx, call_next)``: a sync middleware cannot wait for a
coroutine without blocking the event loop, so it is skipped for async jobs, with a warning
logged once per middleware.

The first middleware added is the outermost. ``add`` appends, ``prepend`` puts first, and
``insert_before`` / ``insert_after`` / ``remove`` find an entry by identity or, given a class,
by the first entry that is an instance of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from conveyor.client import EnqueueDraft, JobRef
from conveyor.context import JobContext

__all__ = ["ClientCall", "MiddlewareChain"]

log = logging.getLogger("conveyor.middleware")

ClientCall = Callable[[], "JobRef | None"]


class MiddlewareChain:
    """An ordered list of middleware, outermost first."""

    def __init__(self, entries: Iterator[Any] | list[Any] | tuple[Any, ...] = ()) -> None:
        self._entries: list[Any] = list(entries)
        self._warned: set[int] = set()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return self._find(item) is not None

    def add(self, middleware: Any) -> None:
        """Append ``middleware`` (innermost so far)."""
        self._entries.append(middleware)

    def prepend(self, middleware: Any) -> None:
        """Put ``middleware`` first (outermost)."""
        self._entries.insert(0, middleware)

    def insert_before(self, existing: Any, middleware: Any) -> None:
        """Put ``middleware`` just outside ``existing``; ``ValueError`` if it is absent."""
        self._entries.insert(self._index(existing), middleware)

    def insert_after(self, existing: Any, middleware: Any) -> None:
        """Put ``middleware`` just inside ``existing``; ``ValueError`` if it is absent."""
        self._entries.insert(self._index(existing) + 1, middleware)

    def remove(self, middleware: Any) -> None:
        """Take ``middleware`` (or the first instance of a class) out of the chain."""
        del self._entries[self._index(middleware)]

    def clear(self) -> None:
        """Remove every middleware."""
        self._entries.clear()

    def run(self, ctx: JobContext, call: Callable[[], Any]) -> Any:
        """Run a sync job's ``call`` through the server chain (the worker calls this)."""
        return self._wrap(list(self._entries), ctx, call)()

    async def run_async(self, ctx: JobContext, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run an async job's ``call`` through the middleware that define ``run_async``."""
        entries = [mw for mw in self._entries if self._async_capable(mw)]
        return await self._wrap_async(entries, ctx, call)()

    def run_client(self, draft: EnqueueDraft, call: ClientCall) -> JobRef | None:
        """Run an enqueue through the client chain; ``call`` stores the (final) draft."""
        return self._wrap_client(list(self._entries), draft, call)()

    def _wrap(
        self, entries: list[Any], ctx: JobContext, call: Callable[[], Any]
    ) -> Callable[[], Any]:
        for mw in reversed(entries):
            call = _bind(mw, ctx, call)
        return call

    def _wrap_async(
        self, entries: list[Any], ctx: JobContext, call: Callable[[], Awaitable[Any]]
    ) -> Callable[[], Awaitable[Any]]:
        for mw in reversed(entries):
            call = _bind_async(mw, ctx, call)
        return call

    def _wrap_client(self, entries: list[Any], draft: EnqueueDraft, call: ClientCall) -> ClientCall:
        for mw in reversed(entries):
            call = _bind_client(mw, draft, call)
        return call

    def _async_capable(self, mw: Any) -> bool:
        if callable(getattr(mw, "run_async", None)):
            return True
        with self._lock:
            first = id(mw) not in self._warned
            self._warned.add(id(mw))
        if first:
            log.warning("middleware %r has no run_async; async jobs skip it", mw)
        return False

    def _find(self, item: object) -> int | None:
        for i, mw in enumerate(self._entries):
            if mw is item or (isinstance(item, type) and isinstance(mw, item)):
                return i
        return None

    def _index(self, item: object) -> int:
        index = self._find(item)
        if index is None:
            raise ValueError(f"{item!r} is not in this middleware chain")
        return index


# Closures are built in helpers so each one captures its own middleware and next step.
def _bind(mw: Any, ctx: JobContext, call_next: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: mw(ctx, call_next)


def _bind_async(
    mw: Any, ctx: JobContext, call_next: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    async def step() -> Any:
        return await mw.run_async(ctx, call_next)

    return step


def _bind_client(mw: Any, draft: EnqueueDraft, call_next: ClientCall) -> ClientCall:
    def step() -> JobRef | None:
        result: JobRef | None = mw(draft, call_next)
        return result

    return step
