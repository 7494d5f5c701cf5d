"""A downstream service goes down: with a breaker the jobs that call it wait instead of
spending their attempts, and drain once it is back (docs/operations.md, "Breakers").

A stub HTTP server in this process answers 503 for a span, then 200; real ``conveyor
worker`` processes run jobs that call it, 2,000 of them on SQLite (200 as a smoke on the
other stores), with and without ``Breaker``. The figures: the errors the outage cost (each a
503 the stub answered, each an attempt spent) and the time to drain after the recovery.

The facts asserted: every job ends succeeded, exactly one successful call each (none lost,
none doubled), one error per 503; with the breaker, no job was leased while it was open but
a probe (pybreaker/resilience4j: an open breaker lets no call through but the half-open
trial), so the errors are the jobs already running when it opened plus the failed probes.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from conveyor.app import Conveyor
from conveyor.core.job import JobRecord, JobState
from tests.faults.apps import downstream
from tests.faults.checks import assert_batch_exact, wait_batch
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import report, wait_until

APP_REF = "tests.faults.apps.downstream:app"
CONCURRENCY = 8
#: Seconds the stub answers 503 from its first request (with the breaker: and until one
#: probe has failed, so the scenario exercises a reopening).
OUTAGE = 3.0


class Stub:
    """The downstream: 503 while ``down``, else 200; remembers (job, status) of each call."""

    def __init__(self) -> None:
        self.down = True
        self.first: float | None = None
        self.calls: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                job = parse_qs(urlparse(self.path).query).get("job", [""])[0]
                with stub._lock:
                    status = 503 if stub.down else 200
                    stub.first = stub.first or time.time()
                    stub.calls.append((job, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """Where the jobs call it."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/charge"

    def count(self, status: int) -> int:
        """Calls answered with ``status``."""
        with self._lock:
            return sum(1 for _, s in self.calls if s == status)

    def ok_per_job(self) -> Counter[str]:
        """Successful calls per job id."""
        with self._lock:
            return Counter(job for job, s in self.calls if s == 200)

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Stub]:
    """A running stub, down at first."""
    server = Stub()
    try:
        yield server
    finally:
        server.close()


def _trips(app: Conveyor) -> int:
    return sum(b.trips for b in app.storage.breakers() if b.key == "downstream")


def _outage(backend: Backend, faults: Faults, stub: Stub, jobs: int,
            guarded: bool) -> tuple[Conveyor, list[str], dict[str, Any]]:
    """Enqueue ``jobs`` calls as one batch, run a worker through the outage and the
    recovery; returns the client, the job ids and the figures."""
    app = Conveyor(backend.url)
    faults.apps.append(app)
    job = downstream.register(app)["faults.call_guarded" if guarded else "faults.call"]
    with app.batch(description="downstream") as batch:
        ids = [ref.id for ref in job.enqueue_many([(stub.url,)] * jobs)]
    faults.worker(backend.url, app_ref=APP_REF, concurrency=CONCURRENCY)
    wait_until(lambda: stub.first is not None and time.time() >= stub.first + OUTAGE, 90,
               what="the outage span")
    if guarded:  # opened, and a probe failed: reopened
        wait_until(lambda: _trips(app) >= 2, 90, what="a failed probe")
    trips = _trips(app)
    stub.down = False
    back = time.time()
    wait_batch(app, batch.id, timeout=180)
    figures = {"jobs": jobs, "errors": stub.count(503), "trips": trips,
               "outage_s": back - (stub.first or back), "drain_after_recovery_s":
               time.time() - back}
    assert_batch_exact(app, batch.id, {"succeeded": jobs})
    assert stub.ok_per_job() == Counter(dict.fromkeys(ids, 1)), "a job lost or doubled"
    records = [app.storage.get_job(i) for i in ids]
    assert sum(r.errors for r in records if r is not None) == stub.count(503)
    return app, ids, figures


def _leased_only_as_probes_while_open(records: list[JobRecord]) -> int:
    """Check that no job was leased while the breaker was open or half-open except as its
    probe; returns how many probes were leased."""
    changes = sorted((e.ts, "closed" not in (e.message or "")) for r in records
                     for e in r.events or () if e.kind == "breaker"
                     and "probe of" not in (e.message or ""))
    probes = 0
    for r in records:
        events = r.events or []
        for i, event in enumerate(events):
            if event.kind != "started":
                continue
            if i and events[i - 1].kind == "breaker" and "probe of" in (
                    events[i - 1].message or ""):
                probes += 1
                continue
            before = [held for ts, held in changes if ts < event.ts]
            assert not (before and before[-1]), (
                f"job {r.id} was leased at {event.ts} while the breaker was open")
    return probes


@pytest.mark.slow
@pytest.mark.parametrize("guarded", [True, False], ids=["breaker", "no-breaker"])
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_outage_with_and_without_a_breaker(backend: Backend, faults: Faults, stub: Stub,
                                               guarded: bool) -> None:
    """2,000 calls through a 3 s outage: the same jobs all succeed either way; with the
    breaker the outage costs the jobs in flight when it opened plus one per probe, without
    it every attempt made during the outage."""
    app, ids, figures = _outage(backend, faults, stub, 2000, guarded)
    if guarded:
        records = [r for r in (app.storage.get_job(i) for i in ids) if r is not None]
        figures["probes"] = _leased_only_as_probes_while_open(records)
        assert figures["probes"] >= figures["trips"]  # each reopening is a failed probe
        assert app.storage.breakers() == []  # closed by the probe, then forgotten
    report("breaker outage" if guarded else "no breaker outage", backend.name, **figures)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgres", "redis"], indirect=True)
def test_an_outage_with_a_breaker_smoke(backend: Backend, faults: Faults, stub: Stub) -> None:
    """The same on the server stores, 200 jobs, with the breaker."""
    app, ids, figures = _outage(backend, faults, stub, 200, True)
    records = [r for r in (app.storage.get_job(i) for i in ids) if r is not None]
    figures["probes"] = _leased_only_as_probes_while_open(records)
    assert app.storage.breakers() == []
    report("breaker outage (smoke)", backend.name, **figures)
    assert all(r.state is JobState.SUCCEEDED for r in records)
