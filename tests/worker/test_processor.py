"""Every way a job can end, through the real Processor and a real storage (memory, SQLite)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from conveyor import Conveyor, Fail, FakeClock, JobState, Retry, current_job
from conveyor.core.ids import new_id
from conveyor.core.job import Ack, ErrorInfo, JobSpec, Outcome
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executors import ThreadExecutor
from conveyor.worker.frames import ack_from_wire, ack_to_wire
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.processor import Processor, error_info
from tests.worker.helpers import lease_one, run_one


def test_return_value_is_stored_as_json(app: Conveyor) -> None:
    @app.job
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    add.enqueue(2, b=3)
    ack, record = run_one(app)
    assert ack.outcome is Outcome.SUCCEEDED
    assert record.state is JobState.SUCCEEDED
    assert json.loads(record.result or "null") == {"sum": 5}


def test_fail_ends_failed_without_retry(app: Conveyor) -> None:
    @app.job
    def check(seller: str) -> None:
        raise Fail(f"seller {seller} not qualified")

    check.enqueue("acme")
    ack, record = run_one(app)
    assert record.state is JobState.FAILED
    assert record.message == "seller acme not qualified"
    assert ack.retry_in is None


def test_error_is_retried_with_backoff_and_keeps_the_traceback(
    app: Conveyor, clock: FakeClock
) -> None:
    @app.job
    def flaky() -> None:
        raise ConnectionError("upstream down")

    flaky.enqueue()
    ack, record = run_one(app)
    assert record.state is JobState.RETRYING
    assert ack.error is not None and ack.error.type == "ConnectionError"
    assert "upstream down" in ack.error.traceback
    # first retry: 1**4 + 15 + jitter(0..20)
    assert ack.retry_in is not None and 16.0 <= ack.retry_in <= 36.0
    assert record.run_at is not None and record.run_at >= clock.now() + 16.0


def test_custom_retry_in_gets_the_retry_number_and_exception(app: Conveyor) -> None:
    seen: list[tuple[int, str]] = []

    def retry_in(attempt: int, exc: BaseException) -> float:
        seen.append((attempt, type(exc).__name__))
        return 7.0

    @app.job(retry_in=retry_in)
    def flaky() -> None:
        raise KeyError("x")

    flaky.enqueue()
    ack, _ = run_one(app)
    assert ack.retry_in == 7.0
    assert seen == [(1, "KeyError")]


def test_dead_after_the_last_retry(app: Conveyor, clock: FakeClock) -> None:
    @app.job(retry=1)
    def broken() -> None:
        raise ValueError("bad row")

    broken.enqueue()
    _, first = run_one(app)
    assert first.state is JobState.RETRYING
    clock.advance(10_000)
    app.storage.promote_due()
    ack, second = run_one(app)
    assert ack.outcome is Outcome.DEAD
    assert second.state is JobState.DEAD
    assert second.message == "ValueError: bad row"


def test_an_error_keeps_its_exception_class_in_the_message(app: Conveyor) -> None:
    """A job's message is what every list shows; an error's names its class, as Python's own
    last traceback line does (Sidekiq's UI shows "KeyError: key not found", Celery's result
    ``KeyError('x')``): a KeyError's text alone is only the key, in quotes (issue 51)."""
    @app.job(retry=0)
    def convert(invoice: int) -> None:
        raise KeyError(f"currency 'XBT' for invoice {invoice}")

    @app.job(retry=0)
    def silent() -> None:
        raise LookupError

    convert.enqueue(13)
    silent.enqueue()
    _, record = run_one(app)
    assert record.message == "KeyError: \"currency 'XBT' for invoice 13\""
    _, record = run_one(app)
    assert record.message == "LookupError"
    errors = [e for e in record.events or [] if e.kind == "dead"]
    assert errors and errors[-1].data is not None and errors[-1].data["type"] == "LookupError"


def test_retry_exception_asks_for_its_own_delay(app: Conveyor) -> None:
    @app.job
    def later() -> None:
        raise Retry("rate limited", in_seconds=42)

    later.enqueue()
    ack, record = run_one(app)
    assert ack.outcome is Outcome.RETRY and ack.retry_in == 42
    assert record.state is JobState.RETRYING


def test_retry_exception_ends_dead_when_no_retries_are_left(app: Conveyor) -> None:
    @app.job(retry=0)
    def later() -> None:
        raise Retry("rate limited", in_seconds=42)

    later.enqueue()
    ack, record = run_one(app)
    assert ack.outcome is Outcome.DEAD and record.state is JobState.DEAD
    assert "no retries left" in (record.message or "")


def _enqueue_raw(app: Conveyor, name: str, payload: str) -> str:
    job_id = new_id()
    app.storage.enqueue([JobSpec(id=job_id, name=name, queue="default", payload=payload)])
    return job_id


def test_unknown_job_name_is_retried_with_backoff_then_dead(app: Conveyor,
                                                            clock: FakeClock) -> None:
    """A rolling deploy: an old worker meets a job of the new code. It is an error retried
    with backoff (a new worker may take it meanwhile), dead only after its retry budget."""
    job_id = new_id()
    app.storage.enqueue([JobSpec(id=job_id, name="nobody.registered.this", queue="default",
                                 payload='{"a":[],"k":{}}', max_retries=2)])
    for attempt in (1, 2):
        ack, record = run_one(app)
        assert record.id == job_id and record.state is JobState.RETRYING
        assert record.errors == attempt and ack.retry_in is not None and ack.retry_in > 0
        assert record.message == ("no job named 'nobody.registered.this' in this worker; "
                                  "retrying — is the worker running the new code?")
        assert ack.error is not None and ack.error.type.endswith("UnknownJobError")
        clock.advance(ack.retry_in + 1)
        assert app.storage.promote_due() == 1
    ack, record = run_one(app)
    assert record.state is JobState.DEAD and record.errors == 3
    assert "no job named 'nobody.registered.this'" in (record.message or "")


def test_undecodable_payload_goes_dead_with_the_reason(app: Conveyor) -> None:
    @app.job(name="known")
    def known() -> None:
        raise AssertionError("must not run")

    _enqueue_raw(app, "known", "{not json")
    _, record = run_one(app)
    assert record.state is JobState.DEAD
    assert "not valid JSON" in (record.message or "")


def test_non_json_result_is_an_error_with_a_clear_message(app: Conveyor) -> None:
    @app.job
    def leaky() -> object:
        return object()

    leaky.enqueue()
    ack, record = run_one(app)
    assert record.state is JobState.RETRYING
    assert "not JSON" in (ack.message or "")
    assert "leaky" in (ack.message or "")


def test_messages_and_progress_travel_with_the_ack(app: Conveyor) -> None:
    @app.job
    def chatty() -> None:
        ctx = current_job()
        ctx.log("row 17: bad phone number", row=17)
        ctx.progress(40, 100)

    chatty.enqueue()
    ack, record = run_one(app)
    assert [e.message for e in ack.events if e.kind == "message"] == ["row 17: bad phone number"]
    assert ack.progress == (40, 100)
    assert record.progress == (40, 100)
    assert any(e.message == "row 17: bad phone number" for e in record.events or [])


def test_async_job_runs_and_sees_its_context(app: Conveyor) -> None:
    @app.job
    async def hello(name: str) -> str:
        await asyncio.sleep(0)
        return f"{current_job().name}:{name}"

    hello.enqueue("ada")
    _, record = run_one(app)
    assert record.state is JobState.SUCCEEDED
    assert json.loads(record.result or "null").endswith(":ada")


def test_async_job_is_cancelled_at_its_timeout(app: Conveyor) -> None:
    @app.job(timeout=0.05)
    async def slow() -> None:
        await asyncio.sleep(30)

    slow.enqueue()
    ack, record = run_one(app)
    assert record.state is JobState.RETRYING
    assert ack.error is not None and ack.error.type.endswith("JobTimeout")


def test_timeout_error_raised_by_async_code_is_an_ordinary_error(app: Conveyor) -> None:
    @app.job(timeout=30)
    async def own_timeout() -> None:
        raise asyncio.TimeoutError("the API timed out")

    own_timeout.enqueue()
    ack, _ = run_one(app)
    assert ack.error is not None and ack.error.type == "TimeoutError"


def test_cancellation_seen_by_the_job_ends_cancelled(app: Conveyor) -> None:
    @app.job
    def long_loop() -> str:
        ctx = current_job()
        ctx.request_cancel()  # as the heartbeater does when the storage reports a request
        return "stopped early" if ctx.cancelled else "done"

    long_loop.enqueue()
    _, record = run_one(app)
    assert record.state is JobState.CANCELLED


def test_server_middleware_wraps_sync_and_async_jobs(app: Conveyor) -> None:
    calls: list[str] = []

    class Recorder:
        def __call__(self, ctx: Any, call_next: Any) -> Any:
            calls.append(f"sync:{ctx.name}")
            return call_next()

        async def run_async(self, ctx: Any, call_next: Any) -> Any:
            calls.append(f"async:{ctx.name}")
            return await call_next()

    app.server_middleware.add(Recorder())

    @app.job(name="s")
    def s() -> int:
        return 1

    @app.job(name="a")
    async def a() -> int:
        return 2

    s.enqueue()
    a.enqueue()
    run_one(app)
    run_one(app)
    assert calls == ["sync:s", "async:a"]


def test_stuck_thread_job_times_out_and_its_slot_is_replaced(
    app: Conveyor, clock: FakeClock
) -> None:
    gate, running = threading.Event(), threading.Event()

    @app.job(timeout=5)
    def stuck() -> None:
        running.set()
        gate.wait(10)

    stuck.enqueue()
    processor = Processor(app, "test-worker", clock)
    finished: list[tuple[Entry, Any]] = []
    inflight = InFlight(1)

    def finish(entry: Entry, ack: Any) -> None:
        if inflight.claim(entry):
            finished.append((entry, ack))

    pool = ThreadExecutor(1, processor, finish)
    pool.start()
    entry = lease_one(app, processor)
    assert isinstance(entry, Entry)
    inflight.add(entry)
    pool.submit(entry)
    assert running.wait(5)
    assert pool.reap(clock.now()) == []  # not overdue yet
    clock.advance(5.0)
    overdue = pool.reap(clock.now())
    assert overdue == [entry] and pool.abandoned == 1
    finish(entry, processor.timed_out(entry))
    [(_, ack)] = finished
    assert ack.error.type.endswith("JobTimeout")
    assert app.storage.ack([ack]) == [True]
    record = app.get_job(entry.job.id)
    assert record is not None and record.state is JobState.RETRYING

    # the replacement thread runs the next job while the stuck one still hangs
    @app.job(name="quick")
    def quick() -> str:
        return "ok"

    quick.enqueue()
    nxt = lease_one(app, processor)
    assert isinstance(nxt, Entry)
    inflight.add(nxt)
    pool.submit(nxt)
    deadline = time.monotonic() + 5
    while len(finished) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()  # the abandoned thread's late result is dropped: its entry was claimed
    assert finished[1][1].outcome is Outcome.SUCCEEDED
    pool.stop()


def test_error_info_names_non_builtin_exceptions_with_their_module() -> None:
    class Boom(Exception):
        pass

    info = error_info(Boom("x"))
    assert info.type.endswith("Boom") and "." in info.type


def test_worker_config_checks_lease_against_heartbeat() -> None:
    try:
        WorkerConfig(lease=1.0, heartbeat_interval=2.0)
    except ValueError as exc:
        assert "lease" in str(exc)
    else:
        raise AssertionError("a lease shorter than the heartbeat must be refused")


def test_a_job_raising_a_base_exception_is_an_error_not_a_dead_thread(app: Conveyor) -> None:
    class Escape(BaseException):
        pass

    @app.job
    def escapes() -> None:
        raise KeyboardInterrupt("not from the keyboard")

    @app.job
    async def escapes_async() -> None:
        raise Escape("custom")

    escapes.enqueue()
    escapes_async.enqueue()
    first, _ = run_one(app)
    second, _ = run_one(app)
    assert first.outcome is Outcome.RETRY and first.error is not None
    assert first.error.type == "KeyboardInterrupt"
    assert second.outcome is Outcome.RETRY and second.error is not None
    assert second.error.type.endswith("Escape")


def test_a_job_that_could_not_be_prepared_is_acked_as_not_run(app: Conveyor) -> None:
    """An unknown name or an unreadable payload is no error of the downstream: its ack says
    the job never ran, so a breaker does not count it (storage/breakers.py); a job that ran
    and raised is acked as run (resilience4j counts only the calls made)."""
    @app.job(name="known")
    def known() -> None:
        raise ConnectionError("downstream down")

    _enqueue_raw(app, "known", "{not json")
    unreadable, _ = run_one(app)
    _enqueue_raw(app, "nobody.registered.this", '{"a":[],"k":{}}')
    unknown, _ = run_one(app)
    known.enqueue()
    ran, _ = run_one(app)
    assert (unreadable.outcome, unreadable.ran) == (Outcome.DEAD, False)
    assert (unknown.outcome, unknown.ran) == (Outcome.RETRY, False)
    assert (ran.outcome, ran.ran) == (Outcome.RETRY, True)


def test_an_ack_crosses_the_job_process_pipe_whole() -> None:
    """A job process hands its ack to the worker as JSON (worker/frames.py): whether the job
    ran survives the trip, as every other field does."""
    for ran in (True, False):
        ack = Ack("j1", "t1", Outcome.DEAD, message="m", error=ErrorInfo("E", "m", "tb"),
                  retry_in=None, resume_at=None, ran=ran)
        assert ack_from_wire(json.loads(json.dumps(ack_to_wire(ack)))) == ack
