"""Where the dashboard's storage calls run, and how a request learns its client went away.

Storage calls block, so they run on threads, never on the event loop. Two pools, so that no
read holds every page: **pages** (``PAGE_THREADS``: the overview, lists, a job, the charts'
polls; each call reads a bounded page) and **long reads** (``LONG_THREADS``: a search, an
export), which may take seconds. Long reads beyond ``LONG_THREADS`` wait for one another,
never for a page, and a page never waits for them. Every storage serves several threads at
once (SQLite and PostgreSQL with a connection per thread, Redis with a pool, memory under its
lock).

A long read is also told when its client goes away: ``watch`` listens on the ASGI
``receive`` channel once the request is read, and sets the request's ``gone`` event on
``http.disconnect``; a search checks it between pages, an export between chunks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from conveyor.http.asgi import Receive
from conveyor.storage.base import Inspector

__all__ = ["CHUNK", "LONG_THREADS", "PAGE_THREADS", "Lanes", "watch"]

PAGE_THREADS = 4
LONG_THREADS = 2
CHUNK = 64 * 1024  # characters of an export sent per body message, about
T = TypeVar("T")


class Lanes:
    """The two thread pools, over the inspector ``source()`` returns."""

    def __init__(self, source: Callable[[], Inspector]) -> None:
        self._source = source
        self._pages = ThreadPoolExecutor(PAGE_THREADS, thread_name_prefix="conveyor-web-db")
        self._long = ThreadPoolExecutor(LONG_THREADS, thread_name_prefix="conveyor-web-long")

    async def call(self, func: Callable[[Inspector], T]) -> T:
        """Run a page's blocking storage call on a page thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pages, lambda: func(self._source()))

    async def call_long(self, func: Callable[[Inspector], T]) -> T:
        """Run a long read (a search) on a long-read thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._long, lambda: func(self._source()))

    async def stream(self, make: Callable[[Inspector], Iterator[str]],
                     gone: threading.Event) -> AsyncIterator[bytes]:
        """The text ``make(inspector)`` yields, in chunks of about ``CHUNK`` characters, each
        produced on a long-read thread when the previous one was sent; it stops when the
        text ends or the client goes away (``gone``)."""
        parts: list[Iterator[str]] = []

        def step(insp: Inspector) -> str:
            if not parts:
                parts.append(make(insp))
            taken, size = [], 0
            for part in parts[0]:
                taken.append(part)
                size += len(part)
                if size >= CHUNK:
                    break
            return "".join(taken)

        while not gone.is_set():
            chunk = await self.call_long(step)
            if not chunk:
                return
            yield chunk.encode("utf-8", "backslashreplace")


async def watch(receive: Receive, gone: threading.Event) -> None:
    """Set ``gone`` when the client disconnects (run as a task once the request was read;
    cancelled when the response is sent)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return
