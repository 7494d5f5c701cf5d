"""Opening a backend: the protocols it implements, its clock, and memory:// naming."""

from __future__ import annotations

import pytest

from conveyor.core.clock import FakeClock
from conveyor.errors import StorageURLError
from conveyor.storage import Backend, Inspector, Storage, open_storage
from tests.conformance.helpers import put, take_one


def test_backend_implements_both_protocols(backend: Backend) -> None:
    assert isinstance(backend, Storage) and isinstance(backend, Inspector)
    assert isinstance(backend.url, str) and "://" in backend.url


def test_backend_time_is_the_clock_it_was_opened_with(backend: Backend, clock: FakeClock) -> None:
    assert backend.now() == clock.now()
    clock.advance(123.5)
    assert backend.now() == clock.now()


def test_close_is_idempotent(backend: Backend) -> None:
    backend.close()
    backend.close()


def test_plain_memory_url_is_a_fresh_store_each_time() -> None:
    first, second = open_storage("memory://"), open_storage("memory://")
    put(first)
    assert first.count_jobs() == 1 and second.count_jobs() == 0


def test_named_memory_store_is_shared_in_process() -> None:
    clock = FakeClock()
    app_side = open_storage("memory://shared-by-name-test", clock)
    worker_side = open_storage("memory://shared-by-name-test", clock)
    job_id = put(app_side)
    assert take_one(worker_side).id == job_id
    assert open_storage("memory://another-name-test").get_job(job_id) is None


@pytest.mark.parametrize("url", ["memory://a/b", "memory://a?x=1", "nowhere", "bogus://x"])
def test_bad_urls_are_refused_with_a_reason(url: str) -> None:
    with pytest.raises(StorageURLError):
        open_storage(url)
