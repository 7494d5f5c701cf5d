"""Prometheus metrics: scrape-time figures from the ``Inspector``, and a job-duration histogram.

Everything the storage knows (queue sizes, latency, outcome totals per queue and job name,
worker slots, active batches) is read at scrape time through the ``Inspector``, so any process
that can open the storage can serve it (``conveyor metrics``, or ``/metrics`` on the web app),
and the figures are the same whichever worker processed the jobs.

Job durations only exist inside the process that ran the job, so ``MetricsMiddleware`` keeps an
in-process histogram; each worker serves its own (``MetricsMiddleware.serve(port)``) and
Prometheus sums them.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from conveyor.errors import Fail
from conveyor.http import asgi
from conveyor.http.server import RunningServer, check_exposure
from conveyor.storage.base import Inspector
from conveyor.views.scaling import scale_hints

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   300.0)
_MAX_BATCH_PAGES = 20  # active batches are counted over at most 20 x 500 newest batches

Labels = dict[str, str]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) and not value.is_integer() else (
        str(int(value)))


class Family:
    """One metric family: a name, a type, help text and its samples."""

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name, self.kind, self.help = name, kind, help_text
        self.samples: list[tuple[str, Labels, float]] = []

    def add(self, value: float, suffix: str = "", **labels: str) -> None:
        """Add a sample (``suffix`` such as ``_bucket`` for histogram series)."""
        self.samples.append((suffix, labels, value))

    def render(self) -> str:
        """Exposition text of the family."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for suffix, labels, value in self.samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{self.name}{suffix}{{{label_text}}} {_fmt(value)}" if label_text
                         else f"{self.name}{suffix} {_fmt(value)}")
        return "\n".join(lines) + "\n"


def render(families: Iterable[Family]) -> str:
    """Concatenate families into one exposition document."""
    return "".join(f.render() for f in families)


def collect(inspector: Inspector) -> list[Family]:
    """Read every storage-wide metric through the ``Inspector``."""
    return [*_queue_families(inspector), *_total_families(inspector),
            *_worker_families(inspector), _batch_family(inspector), _scale_family(inspector),
            *_breaker_families(inspector)]


def render_inspector(inspector: Inspector) -> str:
    """Exposition text of ``collect(inspector)``."""
    return render(collect(inspector))


def _queue_families(inspector: Inspector) -> list[Family]:
    size = Family("conveyor_queue_jobs", "gauge", "Jobs in a queue by state.")
    latency = Family("conveyor_queue_latency_seconds", "gauge",
                     "Age of the oldest pending job of a queue.")
    paused = Family("conveyor_queue_paused", "gauge", "1 when the queue is paused.")
    for q in inspector.queues():
        for state in ("waiting", "aggregating", "pending", "scheduled", "active", "retrying",
                      "dead"):
            size.add(getattr(q, state), queue=q.name, state=state)
        latency.add(q.latency, queue=q.name)
        paused.add(1 if q.paused else 0, queue=q.name)
    return [size, latency, paused]


def _total_families(inspector: Inspector) -> list[Family]:
    names = {"processed": "Jobs that succeeded.", "failed": "Jobs that ended failed or dead.",
             "dead": "Jobs moved to the dead set.", "retried": "Retries scheduled or made."}
    families = {k: Family(f"conveyor_jobs_{k}_total", "counter", text)
                for k, text in names.items()}
    for row in inspector.job_totals():
        for key, family in families.items():
            family.add(getattr(row, key), queue=row.queue, name=row.name)
    return list(families.values())


def _worker_families(inspector: Inspector) -> list[Family]:
    workers = inspector.workers()
    count = Family("conveyor_workers", "gauge", "Live worker processes.")
    count.add(len(workers))
    slots = Family("conveyor_worker_slots", "gauge", "Processor slots of live workers.")
    slots.add(sum(w.concurrency for w in workers), state="total")
    slots.add(sum(len(w.busy) for w in workers), state="busy")
    return [count, slots]


def _batch_family(inspector: Inspector) -> Family:
    family = Family("conveyor_batches_active", "gauge", "Batches not yet complete.")
    active = 0
    for page in range(_MAX_BATCH_PAGES):
        batches = inspector.list_batches(offset=page * 500, limit=500)
        active += sum(1 for b in batches if not b.complete and not b.cancelled)
        if len(batches) < 500:
            break
    family.add(active)
    return family


def _breaker_families(inspector: Inspector) -> list[Family]:
    """Per breaker key: open (1: open or half-open, 0: closed with errors in its window) and
    the times it opened. A store keeping one breaker per queue (Redis) is summed by key."""
    opened = Family("conveyor_breaker_open", "gauge",
                    "1 when the key's breaker is open or half-open (its jobs wait).")
    trips = Family("conveyor_breaker_trips_total", "counter",
                   "Times the key's breaker opened (reset when it is forgotten or closed "
                   "by hand).")
    by_key: dict[str, tuple[int, int]] = {}
    for b in inspector.breakers():
        was_open, was_trips = by_key.get(b.key, (0, 0))
        by_key[b.key] = (max(was_open, int(b.holding)), was_trips + b.trips)
    for key, (is_open, count) in sorted(by_key.items()):
        opened.add(is_open, key=key)
        trips.add(count, key=key)
    return [opened, trips]


def _scale_family(inspector: Inspector) -> Family:
    family = Family("conveyor_desired_workers", "gauge",
                    "Workers a queue can use now: its backlog within the latency target, "
                    "capped by flow-control limits (docs/operations.md).")
    for hint in scale_hints(inspector):
        family.add(hint.workers, queue=hint.queue)
    return family


class Histogram:
    """A thread-safe Prometheus histogram keyed by label values."""

    def __init__(self, name: str, help_text: str, label_names: Sequence[str],
                 buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.buckets = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], list[float]] = {}  # per-bucket counts, +Inf, sum, count
        self._lock = threading.Lock()

    def observe(self, value: float, *label_values: str) -> None:
        """Record one observation."""
        with self._lock:
            series = self._series.setdefault(label_values, [0.0] * (len(self.buckets) + 3))
            series[bisect.bisect_left(self.buckets, value)] += 1
            series[-2] += value
            series[-1] += 1

    def family(self) -> Family:
        """The histogram as a metric family (cumulative buckets, ``_sum``, ``_count``)."""
        fam = Family(self.name, "histogram", self.help)
        with self._lock:
            items = [(k, list(v)) for k, v in self._series.items()]
        for key, series in items:
            labels = dict(zip(self.label_names, key, strict=True))
            running = 0.0
            for bound, count in zip((*self.buckets, float("inf")), series[:-2], strict=True):
                running += count
                fam.add(running, "_bucket", **labels, le=_fmt(bound))
            fam.add(series[-2], "_sum", **labels)
            fam.add(series[-1], "_count", **labels)
        return fam


class JobLike(Protocol):
    """The part of a ``JobContext`` the middleware reads."""

    name: str
    queue: str


class MetricsMiddleware:
    """Server middleware timing every job run in this process, by queue, name and outcome.

    Outcomes: ``succeeded`` (returned), ``failed`` (raised ``Fail``), ``error`` (any other
    exception, re-raised unchanged). Add it with ``app.server_middleware.add(mw)``; serve it
    with ``mw.serve(9100)`` or include ``mw.histogram.family()`` in your own endpoint.
    """

    def __init__(self, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.histogram = Histogram("conveyor_job_duration_seconds",
                                   "Run time of jobs executed by this process.",
                                   ("queue", "name", "outcome"), buckets)

    @contextmanager
    def _timed(self, ctx: JobLike) -> Iterator[list[str]]:
        """Observe the block's duration; the caller sets ``outcome[0]`` when it returns."""
        start = time.perf_counter()
        outcome = ["error"]
        try:
            yield outcome
        except Fail:
            outcome[0] = "failed"
            raise
        finally:
            self.histogram.observe(time.perf_counter() - start, ctx.queue, ctx.name, outcome[0])

    def __call__(self, ctx: JobLike, call_next: Callable[[], Any]) -> Any:
        """Time a synchronous job."""
        with self._timed(ctx) as outcome:
            result = call_next()
            outcome[0] = "succeeded"
            return result

    async def run_async(self, ctx: JobLike, call_next: Callable[[], Awaitable[Any]]) -> Any:
        """Time an async job."""
        with self._timed(ctx) as outcome:
            result = await call_next()
            outcome[0] = "succeeded"
            return result

    def render(self) -> str:
        """Exposition text of this process's histogram."""
        return render([self.histogram.family()])

    def serve(self, port: int, host: str = "127.0.0.1", *, token: str | None = None,
              allowed_hosts: Iterable[str] = ()) -> RunningServer:
        """Serve ``/metrics`` from a background thread; call ``stop()`` on the result to end it.

        See ``serve_metrics`` for ``token`` and ``allowed_hosts``.
        """
        return serve_metrics(self.render, host, port, token=token, allowed_hosts=allowed_hosts)


def metrics_app(produce: Callable[[], str], token: str | None = None,
                allowed_hosts: Iterable[str] = ()) -> asgi.ASGIApp:
    """``produce()`` at ``/metrics`` (and ``/``) as an ASGI app, behind ``asgi.guard``.

    With a ``token``, a scrape must send ``Authorization: Bearer <token>`` (Prometheus's
    ``authorization`` / ``bearer_token_file``) or basic auth with the token as password.
    ``produce`` runs on a worker thread, so a slow storage never stalls the server's loop.
    """

    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] not in ("/metrics", "/"):
            await asgi.plain(send, 404, "only /metrics is served here")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await asgi.plain(send, 405, "only GET is served here", extra=[(b"allow", b"GET")])
            return
        if token and not asgi.bearer_or_basic(asgi.header(scope, b"authorization") or "",
                                              token):
            await asgi.plain(send, 401, "authentication required",
                             extra=[(b"www-authenticate", b'Bearer realm="conveyor"')])
            return
        try:
            body = (await asyncio.get_running_loop().run_in_executor(None, produce)).encode()
            status = 200
        except Exception as exc:  # a scrape must report, not kill the server
            body, status = f"# metrics unavailable: {exc}\n".encode("utf-8", "replace"), 503
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", CONTENT_TYPE.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return asgi.guard(app, asgi.allowed_hosts(allowed_hosts))


def serve_metrics(produce: Callable[[], str], host: str, port: int, *,
                  token: str | None = None, allowed_hosts: Iterable[str] = ()) -> RunningServer:
    """Serve ``metrics_app(produce, token, …)`` on ``host:port`` and return the started server.

    ``allowed_hosts``: names besides loopback and IP addresses that scrapes may use in
    ``Host`` (``host`` itself is always one of them). Beyond loopback a ``token`` of at least
    16 characters is required (``ConveyorError`` otherwise).
    """
    check_exposure(host, token, "metrics")
    app = metrics_app(produce, token, [host, *allowed_hosts])
    return RunningServer(app, host, port).start()
