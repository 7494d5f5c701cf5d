"""Operators see failures: one log line per error, failure and death, and the error hooks.

Driven through a real ``Launcher`` (fetcher, thread pool, watchdog, acker) on every backend.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sentry_sdk

from conveyor import Conveyor, Fail, JobState
from conveyor.hooks import ErrorReport
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.logs import JsonFormatter


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.02)


def _run_until(app: Conveyor, job_ids: list[str], states: set[JobState]) -> None:
    launcher = Launcher(app, WorkerConfig(concurrency=2, poll_interval=(0.02, 0.05)))
    launcher.start()
    try:
        _until(lambda: all((r := app.get_job(i)) is not None and r.state in states
                           for i in job_ids))
    finally:
        launcher.stop(5)


def test_errors_failures_and_deaths_are_logged_and_reported(
    live_app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    reports: list[ErrorReport] = []
    lock = threading.Lock()

    @live_app.on_error
    def broken_hook(report: ErrorReport) -> None:
        raise RuntimeError("the hook itself is broken")

    def collect(report: ErrorReport) -> None:
        with lock:
            reports.append(report)

    live_app.on_error(collect)  # runs although the hook before it raised

    @live_app.job(retry=1, retry_in=lambda attempt, exc: 0)
    def flaky(row: int) -> None:
        raise ValueError(f"row {row}\nFORGED LINE \x1b[31m")

    @live_app.job
    def refuse(row: int) -> None:
        raise Fail(f"row {row}: seller not qualified")

    caplog.set_level(logging.INFO, logger="conveyor")
    dead = flaky.enqueue(17)
    failed = refuse.enqueue(3)
    assert dead is not None and failed is not None
    _run_until(live_app, [dead.id, failed.id], {JobState.DEAD, JobState.FAILED})

    record = live_app.get_job(dead.id)
    assert record is not None and record.state is JobState.DEAD  # the broken hook changed nothing
    assert [(r.job_id, r.attempt, r.will_retry) for r in reports] == [
        (dead.id, 1, True), (dead.id, 2, False)]
    first = reports[0]
    assert first.name == flaky.name and first.queue == "default" and list(first.args) == [17]
    assert isinstance(first.exception, ValueError) and first.retry_in == 0

    lines = {(r.levelno, r.getMessage()) for r in caplog.records if r.name == "conveyor.worker"}
    reason = "ValueError: row 17\\nFORGED LINE \\x1b[31m"
    assert (logging.WARNING, f"job {dead.id} {flaky.name} attempt 1 error, retrying in 0.0s: "
            f"{reason}") in lines
    assert (logging.ERROR, f"job {dead.id} {flaky.name} attempt 2 dead: {reason}") in lines
    assert (logging.INFO, f"job {failed.id} {refuse.name} attempt 1 failed: "
            "row 3: seller not qualified") in lines
    assert not any("FORGED" in msg and "\n" in msg for _, msg in lines)
    hook_failures = [r for r in caplog.records if "error hook" in r.getMessage()]
    assert len(hook_failures) == 2 and all(r.exc_info for r in hook_failures)


def test_json_log_lines_carry_the_job_fields(caplog: pytest.LogCaptureFixture) -> None:
    app = Conveyor("memory://")

    @app.job(retry=0)
    def boom() -> None:
        raise KeyError("sku")

    ref = boom.enqueue()
    assert ref is not None
    caplog.set_level(logging.INFO, logger="conveyor")
    _run_until(app, [ref.id], {JobState.DEAD})
    [record] = [r for r in caplog.records if getattr(r, "job_id", None) == ref.id]
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "ERROR" and line["job_name"] == boom.name
    assert (line["job_id"], line["attempt"], line["outcome"]) == (ref.id, 1, "dead")
    assert line["reason"] == "KeyError: 'sku'"
    app.close()


def test_the_sentry_example_of_the_docs_sends_one_event_per_error() -> None:
    """docs/worker.md's hook, against the real sentry-sdk with an in-memory transport."""
    events: list[dict[str, Any]] = []

    class Capture(sentry_sdk.transport.Transport):
        def capture_envelope(self, envelope: Any) -> None:
            for item in envelope.items:
                if item.type == "event":
                    events.append(item.payload.json)

    app = Conveyor("memory://")
    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=Capture,
                    default_integrations=False)
    try:
        # -- the example, as in docs/worker.md --
        @app.on_error
        def report_to_sentry(report: ErrorReport) -> None:
            with sentry_sdk.new_scope() as scope:
                scope.set_tag("conveyor.job", report.name)
                scope.set_tag("conveyor.queue", report.queue)
                scope.set_tag("conveyor.will_retry", str(report.will_retry))
                scope.set_context("conveyor", {
                    "job_id": report.job_id, "attempt": report.attempt,
                    "args": list(report.args), "kwargs": dict(report.kwargs),
                })
                sentry_sdk.capture_exception(report.exception)
        # -- end of the example --

        @app.job(retry=0)
        def charge(order: int) -> None:
            raise ConnectionError(f"payment gateway down for order {order}")

        ref = charge.enqueue(42)
        assert ref is not None
        _run_until(app, [ref.id], {JobState.DEAD})
        sentry_sdk.flush(5)
    finally:
        sentry_sdk.get_client().close()
        app.close()
    [event] = events
    assert event["tags"]["conveyor.job"] == charge.name
    assert event["tags"]["conveyor.will_retry"] == "False"
    assert event["contexts"]["conveyor"]["job_id"] == ref.id
    assert event["contexts"]["conveyor"]["args"] == [42]
    [exc] = event["exception"]["values"]
    assert exc["type"] == "ConnectionError" and "order 42" in exc["value"]
