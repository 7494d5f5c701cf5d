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

``ClientMiddleware`` and ``ServerMiddleware`` (plus ``AsyncServerMiddleware``) spell these
shapes as protocols; a plain function with the right parameters is a middleware too.

The first middleware added is the outermost. ``add`` appends, ``prepend`` puts first, and
``insert_before`` / ``insert_after`` / ``remove`` find an entry by identity or, given a class,
by the first entry that is an instance of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Generic, Protocol, TypeVar, cast

from conveyor.client.context import JobContext
from conveyor.client.draft import EnqueueDraft
from conveyor.client.refs import JobRef

__all__ = [
    "AsyncServerMiddleware", "Chain", "ClientCall", "ClientChain", "ClientMiddleware",
    "MiddlewareChain", "ServerChain", "ServerMiddleware",
]

log = logging.getLogger("conveyor.middleware")

ClientCall = Callable[[], "JobRef | None"]
"""The next step of the client chain: calling it stores the draft (or the next middleware runs)."""


class ClientMiddleware(Protocol):
    """Runs around each enqueue: may change ``draft``, return ``call_next()``, or stop it."""

    def __call__(self, draft: EnqueueDraft, call_next: ClientCall, /) -> JobRef | None:
        """Return ``call_next()`` to store the job, or None to drop it."""
        ...


class ServerMiddleware(Protocol):
    """Runs around each execution of a sync job in the worker."""

    def __call__(self, ctx: JobContext, call_next: Callable[[], Any], /) -> Any:
        """Return what ``call_next()`` returned (or raise)."""
        ...


class AsyncServerMiddleware(ServerMiddleware, Protocol):
    """A server middleware that also wraps ``async def`` jobs."""

    async def run_async(self, ctx: JobContext, call_next: Callable[[], Awaitable[Any]], /) -> Any:
        """Return what ``await call_next()`` returned (or raise)."""
        ...


M = TypeVar("M")


class Chain(Generic[M]):
    """An ordered list of middleware, outermost first."""

    def __init__(self, entries: Iterable[M] = ()) -> None:
        self._entries: list[M] = list(entries)

    def __iter__(self) -> Iterator[M]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return self._find(item) is not None

    def add(self, middleware: M) -> None:
        """Append ``middleware`` (innermost so far)."""
        self._entries.append(middleware)

    def prepend(self, middleware: M) -> None:
        """Put ``middleware`` first (outermost)."""
        self._entries.insert(0, middleware)

    def insert_before(self, existing: object, middleware: M) -> None:
        """Put ``middleware`` just outside ``existing``; ``ValueError`` if it is absent."""
        self._entries.insert(self._index(existing), middleware)

    def insert_after(self, existing: object, middleware: M) -> None:
        """Put ``middleware`` just inside ``existing``; ``ValueError`` if it is absent."""
        self._entries.insert(self._index(existing) + 1, middleware)

    def remove(self, middleware: object) -> None:
        """Take ``middleware`` (or the first instance of a class) out of the chain."""
        del self._entries[self._index(middleware)]

    def clear(self) -> None:
        """Remove every middleware."""
        self._entries.clear()

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


class ServerChain(Chain[ServerMiddleware]):
    """The server chain (``app.server_middleware``): the worker runs every job through it."""

    def __init__(self, entries: Iterable[ServerMiddleware] = ()) -> None:
        super().__init__(entries)
        self._warned: set[int] = set()
        self._lock = threading.Lock()

    def run(self, ctx: JobContext, call: Callable[[], Any]) -> Any:
        """Run a sync job's ``call`` through the server chain (the worker calls this)."""
        for mw in reversed(list(self._entries)):
            call = _bind(mw, ctx, call)
        return call()

    async def run_async(self, ctx: JobContext, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run an async job's ``call`` through the middleware that define ``run_async``."""
        entries = [mw for mw in self._entries if self._async_capable(mw)]
        for mw in reversed(entries):
            call = _bind_async(cast(AsyncServerMiddleware, mw), ctx, call)
        return await call()

    def _async_capable(self, mw: ServerMiddleware) -> bool:
        if callable(getattr(mw, "run_async", None)):
            return True
        with self._lock:
            first = id(mw) not in self._warned
            self._warned.add(id(mw))
        if first:
            log.warning("middleware %r has no run_async; async jobs skip it", mw)
        return False


MiddlewareChain = ServerChain
"""The server chain's name from before the client chain got a type of its own."""


class ClientChain(Chain[ClientMiddleware]):
    """The client chain (``app.client_middleware``): every enqueue passes through it."""

    def run_client(self, draft: EnqueueDraft, call: ClientCall) -> JobRef | None:
        """Run an enqueue through the client chain; ``call`` stores the (final) draft."""
        for mw in reversed(list(self._entries)):
            call = _bind_client(mw, draft, call)
        return call()


# Closures are built in helpers so each one captures its own middleware and next step.
def _bind(mw: ServerMiddleware, ctx: JobContext, call_next: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: mw(ctx, call_next)


def _bind_async(
    mw: AsyncServerMiddleware, ctx: JobContext, call_next: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    async def step() -> Any:
        return await mw.run_async(ctx, call_next)

    return step


def _bind_client(mw: ClientMiddleware, draft: EnqueueDraft, call_next: ClientCall) -> ClientCall:
    return lambda: mw(draft, call_next)
