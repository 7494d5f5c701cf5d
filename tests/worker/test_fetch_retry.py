"""The fetcher's retry after a failed fetch: quick enough that a storage back from an outage is
used again within about two seconds (issue #18: PostgreSQL restarted, target 2 s), and one
log line per outage retry rather than a traceback each time (tracebacks are kept for bugs)."""

from __future__ import annotations

import logging

import pytest

from conveyor.errors import BrokerUnavailable, StorageUnavailable
from conveyor.worker.fetcher import log_fetch_failure, retry_delay


def test_retries_back_off_but_never_wait_more_than_two_seconds() -> None:
    delays = [retry_delay(n) for n in range(50)]
    assert delays == sorted(delays)  # backs off
    assert delays[0] < 1.0
    assert max(delays) == 2.0


@pytest.mark.parametrize("exc", [
    StorageUnavailable("Redis at 127.0.0.1:1 is unreachable"),
    # A broker-fed worker's fetch subscribing while RabbitMQ is frozen (scenario 26 printed
    # this one with a traceback, which the scenario refuses).
    BrokerUnavailable("RabbitMQ at amqp://guest:***@127.0.0.1:1/: unreachable (INTERNAL_ERROR)"),
], ids=["storage", "broker"])
def test_an_outage_is_one_line_without_a_traceback(caplog: pytest.LogCaptureFixture,
                                                   exc: Exception) -> None:
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        log_fetch_failure(exc, 2.0)
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "unreachable" in record.getMessage() and "2.0" in record.getMessage()
    assert "\n" not in record.getMessage()


def test_any_other_failure_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        try:
            raise KeyError("a bug")
        except KeyError as exc:
            log_fetch_failure(exc, 0.5)
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
