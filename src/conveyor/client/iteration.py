"""Resumable loops: ``current_job().iterate(...)`` (docs/durable.md, "Resumable loops").

Sidekiq 7.3's iterable jobs and Rails 8.1's continuations give a long loop a cursor saved as
it goes, so a deploy, a stop or a crash resumes the loop there rather than at its start. Here
the cursor is one record among the job's steps (status ``cursor``), replaced at each
checkpoint under the lease, and made final when the loop ends, so a replay of the job skips
a finished loop whole. Items after the last checkpoint run again: at least once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from conveyor.core.serializer import dumps
from conveyor.core.steps import Step, StepStatus
from conveyor.errors import Handback

__all__ = ["Iteration"]


class Host(Protocol):
    """What a loop needs of its job's context (``DurableCalls``)."""

    attempt: int

    @property
    def cancelled(self) -> bool:
        """True once the job's cancellation was requested."""
        ...

    @property
    def stopping(self) -> bool:
        """True once the worker is stopping."""
        ...

    def progress(self, done: int, total: int | None = None) -> None:
        """Report progress."""
        ...

    def _known(self, name: str) -> Step | None: ...

    def _save(self, step: Step) -> None: ...

    def _now(self) -> float: ...

    def _stored(self, key: str, text: str) -> str: ...

    def _opened(self, key: str, text: str | None) -> Any: ...


class Iteration:
    """One ``iterate`` call of one attempt."""

    def __init__(self, host: Host, name: str,
                 source: Sequence[Any] | Callable[[Any], Iterable[Any]],
                 cursor_key: str | Callable[[Any], Any] | None, every: int, seconds: float,
                 total: int | None) -> None:
        if every < 1 or not seconds > 0:
            raise ValueError(f"iterate needs every >= 1 and seconds > 0, not {every!r}, "
                             f"{seconds!r}")
        self.host, self.name, self.source = host, name, source
        self.cursor_key, self.every, self.seconds = cursor_key, every, seconds
        self.total = len(source) if total is None and isinstance(source, Sequence) else total

    def run(self) -> Iterator[Any]:
        """The items left, checkpointing as they are done (a generator)."""
        rec = self.host._known(self.name)
        if rec is not None and rec.status == StepStatus.OK:
            return  # finished by an earlier attempt: a replay skips the loop
        cursor, done = (None, 0)
        if rec is not None and rec.status == StepStatus.CURSOR and rec.result is not None:
            cursor, done = self.host._opened(self.name, rec.result)
        saved, saved_at = done, time.monotonic()
        for item, item_cursor in self._items(cursor):
            if self.host.cancelled or self.host.stopping:
                self._save(StepStatus.CURSOR, cursor, done)
                raise Handback(f"{self.name} stopped at item {done}: "
                               + ("cancelled" if self.host.cancelled else "worker stopping"))
            yield item
            cursor, done = item_cursor, done + 1
            if done - saved >= self.every or time.monotonic() - saved_at >= self.seconds:
                self._save(StepStatus.CURSOR, cursor, done)
                saved, saved_at = done, time.monotonic()
        self._save(StepStatus.OK, cursor, done)

    def _items(self, cursor: Any) -> Iterator[tuple[Any, Any]]:
        source = self.source
        if isinstance(source, Sequence):
            start = 0 if cursor is None else int(cursor) + 1
            for index in range(start, len(source)):
                yield source[index], index
            return
        key = self.cursor_key
        for found in source(cursor):
            if key is None:
                item, item_cursor = found
            elif callable(key):
                item, item_cursor = found, key(found)
            else:
                item = found
                item_cursor = found[key] if isinstance(found, Mapping) else getattr(found, key)
            yield item, item_cursor

    def _save(self, status: str, cursor: Any, done: int) -> None:
        now = self.host._now()
        # the cursor is the job's data: sealed and stored as a step's result is
        text = self.host._stored(self.name, dumps([cursor, done]))
        self.host._save(Step(self.name, status, result=text, started=now, ended=now,
                             attempt=self.host.attempt, tries=done))
        self.host.progress(done, self.total)
