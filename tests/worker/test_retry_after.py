"""``raise RetryAfter(s)`` from a job, and ``raise_for_retry_after`` on an HTTP response.

Expectations: Oban's ``{:snooze, seconds}`` (scheduled again, not counted against the
attempts budget) and Sidekiq Enterprise's rate limiter (``OverLimit`` reschedules the job
instead of failing it); the header's two forms are RFC 9110 §10.2.3's (delay-seconds or an
HTTP-date), which both httpx and requests hand over unparsed.
"""

from __future__ import annotations

import logging
from email.utils import formatdate
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState, RetryAfter, raise_for_retry_after
from conveyor.core.job import Outcome
from conveyor.core.retry_after import retry_after_seconds
from conveyor.testing import drain
from tests.worker.helpers import run_one


class _Response:
    """What httpx's and requests' responses share: ``status_code`` and case-insensitive
    ``headers`` (here a dict holding the casing a server sent)."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


def test_a_job_raising_retry_after_is_scheduled_again_with_its_budget_whole(
        app: Conveyor, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Oban snooze: the job waits ``seconds`` and runs again; ``retry=0`` still lets it
    run, since the snooze spent no error attempt. Logged at INFO, no error hook called."""
    calls: list[int] = []
    reports: list[Any] = []
    app.on_error(reports.append)

    @app.job(retry=0)
    def call_api() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise_for_retry_after(_Response(429, {"Retry-After": "120"}))
        return "done"

    ref = call_api.enqueue()
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        ack, record = run_one(app)
    assert ack.outcome is Outcome.SNOOZE and ack.retry_in == 120.0
    assert (record.state, record.errors, record.run_at) == (
        JobState.SCHEDULED, 0, clock.now() + 120.0)
    snoozed = [e for e in record.events or [] if e.kind == "snoozed"]
    assert [(e.message, dict(e.data or {})) for e in snoozed] == [
        ("HTTP 429, Retry-After: 120", {"retry_after": 120.0})]
    assert any("snoozed for 120.0s" in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records)
    assert reports == []
    assert drain(app) == 0  # not due yet
    clock.advance(120.0)
    assert drain(app) == 1
    done = app.get_job(ref.id)
    assert done is not None and (done.state, done.errors, done.attempt) == (
        JobState.SUCCEEDED, 0, 2)


def test_retry_after_refuses_a_delay_that_is_not_a_finite_number_of_seconds() -> None:
    for bad in (-1, float("nan"), float("inf"), "30", True):
        with pytest.raises(ValueError, match="seconds must be"):
            RetryAfter(bad)  # type: ignore[arg-type]
    assert RetryAfter(0).seconds == 0.0


def test_the_header_in_seconds_or_as_an_http_date() -> None:
    """RFC 9110: ``Retry-After: 120`` or ``Retry-After: Fri, 31 Dec 1999 23:59:59 GMT``."""
    now = 1_800_000_000.0
    assert retry_after_seconds("120", now) == 120.0
    assert retry_after_seconds(" 1.5 ", now) == 1.5
    assert retry_after_seconds(formatdate(now + 90, usegmt=True), now) == 90.0
    assert retry_after_seconds(formatdate(now - 90, usegmt=True), now) == 0.0  # past: now
    for unreadable in (None, "", "soon", "-5", "nan", "inf"):
        assert retry_after_seconds(unreadable, now) is None


@pytest.mark.parametrize("status", [429, 503])
def test_a_throttled_response_raises_retry_after(status: int) -> None:
    with pytest.raises(RetryAfter) as raised:
        raise_for_retry_after(_Response(status, {"retry-after": "7"}))
    assert raised.value.seconds == 7.0
    assert raised.value.message == f"HTTP {status}, Retry-After: 7"


def test_other_responses_and_a_missing_header_raise_nothing_unless_a_default_is_given() -> None:
    """The helper only speaks for 429/503: a 500 is left to ``raise_for_status``."""
    assert raise_for_retry_after(_Response(200, {"Retry-After": "5"})) is None
    assert raise_for_retry_after(_Response(500, {"Retry-After": "5"})) is None
    assert raise_for_retry_after(_Response(503, {})) is None
    assert raise_for_retry_after(_Response(503, {"Retry-After": "later"})) is None
    with pytest.raises(RetryAfter) as raised:
        raise_for_retry_after(_Response(503, {}), default=30)
    assert (raised.value.seconds, raised.value.message) == (
        30.0, "HTTP 503, Retry-After: missing")


def test_a_response_with_status_instead_of_status_code() -> None:
    """aiohttp and urllib3 name it ``status``."""

    class Aio:
        status = 429
        headers = {"Retry-After": "3"}

    with pytest.raises(RetryAfter):
        raise_for_retry_after(Aio())


def test_real_httpx_and_requests_responses() -> None:
    """The duck typing holds for the libraries' own responses (both are test dependencies:
    httpx directly, requests through moto)."""
    import httpx
    import requests

    with pytest.raises(RetryAfter):
        raise_for_retry_after(httpx.Response(429, headers={"retry-after": "2"}))
    response = requests.Response()
    response.status_code = 503
    response.headers["Retry-After"] = "2"
    with pytest.raises(RetryAfter):
        raise_for_retry_after(response)
