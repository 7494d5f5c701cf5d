"""OpenTelemetry tracing for jobs (extra ``otel``: ``pip install 'conveyor[otel]'``).

::

    from conveyor.otel import instrument
    instrument(app)          # enqueue spans (producer) + job spans (consumer), linked

The client side injects the current trace context into the job's ``meta`` (it travels in
the payload), and the worker side starts the job's span as a child of it, so a trace shows
the request that enqueued a job and the job run together, across processes and machines.
Business failures (``Fail``) mark the span with ``conveyor.outcome=failed`` and an error
status, like any other exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, Protocol

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Tracer, TracerProvider

from conveyor.errors import Fail

META_KEY = "otel"  # the job meta entry that carries the W3C trace context


class DraftLike(Protocol):
    """The part of ``conveyor.client.draft.EnqueueDraft`` the client middleware uses."""

    name: str
    id: str
    meta: dict[str, Any]


class ContextLike(Protocol):
    """The part of ``conveyor.client.context.JobContext`` the server middleware uses."""

    name: str
    queue: str
    job_id: str
    attempt: int
    batch_id: str | None
    meta: dict[str, Any]


class TracingClientMiddleware:
    """Client middleware: a producer span per enqueue, its context stored in ``meta``."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def __call__(self, draft: DraftLike, call_next: Callable[[], Any]) -> Any:
        """Trace one enqueue and carry the trace context with the job."""
        with self.tracer.start_as_current_span(
            f"enqueue {draft.name}", kind=SpanKind.PRODUCER,
            attributes={"conveyor.job.name": draft.name, "conveyor.job.id": draft.id},
        ):
            carrier: MutableMapping[str, str] = {}
            propagate.inject(carrier)
            draft.meta[META_KEY] = dict(carrier)
            return call_next()


class TracingMiddleware:
    """Server middleware: a consumer span per job run, child of the enqueue's span."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    @contextmanager
    def _span(self, ctx: ContextLike) -> Iterator[Span]:
        parent = propagate.extract(ctx.meta.get(META_KEY) or {})
        attributes: dict[str, str | int] = {
            "conveyor.job.name": ctx.name, "conveyor.job.id": ctx.job_id,
            "conveyor.queue": ctx.queue, "conveyor.attempt": ctx.attempt,
        }
        if ctx.batch_id:
            attributes["conveyor.batch.id"] = ctx.batch_id
        with self.tracer.start_as_current_span(
            f"run {ctx.name}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes,
        ) as span:
            try:
                yield span
            except Fail:
                span.set_attribute("conveyor.outcome", "failed")
                raise
            except BaseException:
                span.set_attribute("conveyor.outcome", "error")
                raise
            span.set_attribute("conveyor.outcome", "succeeded")

    def __call__(self, ctx: ContextLike, call_next: Callable[[], Any]) -> Any:
        """Trace a synchronous job."""
        with self._span(ctx):
            return call_next()

    async def run_async(self, ctx: ContextLike, call_next: Callable[[], Awaitable[Any]]) -> Any:
        """Trace an async job."""
        with self._span(ctx):
            return await call_next()


class Instrumentable(Protocol):
    """An app with middleware chains (``conveyor.Conveyor``)."""

    @property
    def client_middleware(self) -> Any:
        """Enqueue-side chain."""
        ...

    @property
    def server_middleware(self) -> Any:
        """Run-side chain."""
        ...


def instrument(app: Instrumentable, tracer_provider: TracerProvider | None = None) -> None:
    """Add tracing to both of an app's middleware chains (outermost, to time everything)."""
    tracer = trace.get_tracer("conveyor", tracer_provider=tracer_provider)
    app.client_middleware.prepend(TracingClientMiddleware(tracer))
    app.server_middleware.prepend(TracingMiddleware(tracer))
