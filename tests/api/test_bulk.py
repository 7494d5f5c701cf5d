"""``enqueue_many`` without client middleware takes the vectorised path (``conveyor.client.bulk``):
it must store exactly what the per-draft path stores, and be taken only when equivalent.

Each comparison runs the same calls on two apps over two fresh stores of the same kind and
clock: ``app`` (no middleware: the bulk path) and a twin with a pass-through client middleware
(every job through a draft). Records are compared with their ids taken out.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.client.client import Client, EnqueueDraft, JobRef
from conveyor.client.registry import JobFunction
from conveyor.core.job import EnqueueResult, JobSpec
from conveyor.errors import PayloadError, StorageUnavailable
from conveyor.storage import Backend
from conveyor.storage.base import SendsBlocks
from conveyor.storage.blocks import JobBlock


def _pass(draft: EnqueueDraft, call_next: Callable[[], JobRef | None]) -> JobRef | None:
    return call_next()


@pytest.fixture
def twin(app: Conveyor, tmp_path: Path, clock: FakeClock) -> Iterator[Conveyor]:
    """A second app of the same kind on a store of its own, every enqueue through a draft."""
    if app.url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/twin.db"
    elif app.url.startswith("memory"):
        url = "memory://"
    else:
        url = app.url.split("?")[0] + f"?prefix=w{uuid.uuid4().hex[:8]}"
    other = Conveyor(url, clock=clock)
    other.client_middleware.add(_pass)
    try:
        yield other
    finally:
        other.close()


def _jobs(app: Conveyor, **options: Any) -> JobFunction:
    def work(*args: Any, **kwargs: Any) -> None: ...
    return app.job(name="tests.bulk.work", **options)(work)


def _normal(app: Conveyor, refs: Sequence[JobRef]) -> list[dict[str, Any]]:
    out = []
    for ref in refs:
        record = app.get_job(ref.id)
        assert record is not None
        row = dataclasses.asdict(record)
        row["id"] = "created" if ref.created else "existing"
        row["batch_id"] = bool(row["batch_id"])
        out.append(row)
    return out


ITEMS: list[Any] = [[1], (2, 3), {"a": 4}, ([5], {"b": 6}), ["caf\u00e9"], [{"k": [1]}], []]


@pytest.mark.parametrize("options", [
    {}, {"retry": 3, "timeout": 9.5, "expires_in": 60, "queue": "other"},
    {"unique_for": 60}, {"concurrency": 2}, {"unique_for": 60, "unique_key": "one"},
])
def test_bulk_stores_what_drafts_store(app: Conveyor, twin: Conveyor,
                                       options: dict[str, Any]) -> None:
    fast, slow = _jobs(app, **options), _jobs(twin, **options)
    items = ITEMS + ITEMS  # a unique job's repeats find the first one's lock
    fast_refs, slow_refs = fast.enqueue_many(items), slow.enqueue_many(items)
    assert [r.created for r in fast_refs] == [r.created for r in slow_refs]
    assert [fast_refs.index(r) for r in fast_refs] == [slow_refs.index(r) for r in slow_refs]
    assert _normal(app, fast_refs) == _normal(twin, slow_refs)
    assert fast.enqueue_many(iter(items), return_refs=False) == len(items)


def test_a_bad_item_stops_both_paths_after_the_items_before_it(
    app: Conveyor, twin: Conveyor
) -> None:
    fast, slow = _jobs(app), _jobs(twin)
    for bad, error in (([object()], PayloadError), ("oops", TypeError)):
        items = [[n] for n in range(2_500)] + [bad] + [[-1]]  # the bad one in the 2nd block
        with pytest.raises(error) as fast_error:
            fast.enqueue_many(items)
        with pytest.raises(error) as slow_error:
            slow.enqueue_many(items)
        assert str(fast_error.value) == str(slow_error.value)
    for store in (app, twin):
        stored = sorted(r.args[0] for r in store.storage.list_jobs(limit=10_000))
        assert stored == sorted(list(range(2_500)) * 2)


def test_in_a_batch_both_paths_count_and_order_alike(app: Conveyor, twin: Conveyor) -> None:
    statuses = []
    for store in (app, twin):
        fn = _jobs(store)
        with store.batch() as batch:
            fn.enqueue("first")
            refs = fn.enqueue_many([[n] for n in range(2_100)])
            fn.enqueue("last")
            assert batch.enqueue_count == 2_102
        assert [r.created for r in refs] == [True] * 2_100
        leased = store.storage.dequeue(["default"], "w", 3, 30.0)
        assert [store.get_job(j.id).args for j in leased] == [["first"], [0], [1]]  # type: ignore[union-attr]
        status = store.batch_status(batch.id)
        statuses.append((status["total"], status["closed"], status["counts"]))
    assert statuses[0] == statuses[1] == (2_102, True, statuses[0][2])


class Spy:
    """The real storage, with a note of which enqueue method each call used."""

    def __init__(self, storage: Backend) -> None:
        self.storage = storage
        self.calls: list[str] = []

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        self.calls.append("enqueue")
        return self.storage.enqueue(specs)

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        self.calls.append("enqueue_block")
        return self.storage.enqueue_block(block)


def test_the_bulk_path_is_taken_only_without_client_middleware(app: Conveyor,
                                                               clock: FakeClock) -> None:
    spy = Spy(app.storage)
    client = Client(lambda: spy, app.registry, clock=clock)  # type: ignore[arg-type,return-value]
    fn = JobFunction(client, lambda n: None, "tests.bulk.spied", _jobs(app).opts)
    assert fn.enqueue_many([[n] for n in range(3_000)], return_refs=False) == 3_000
    assert spy.calls == ["enqueue_block", "enqueue_block"]

    seen: list[Any] = []

    def note(draft: EnqueueDraft, call_next: Callable[[], JobRef | None]) -> JobRef | None:
        seen.append(draft.args)
        return call_next()

    client.middleware.add(note)
    spy.calls.clear()
    assert fn.enqueue_many([[n] for n in range(3_000)], return_refs=False) == 3_000
    assert seen == [[n] for n in range(3_000)]  # the middleware saw every job
    assert set(spy.calls) == {"enqueue"}


def test_an_iterator_that_raises_stops_both_paths_after_the_items_before_it(
    app: Conveyor, twin: Conveyor
) -> None:
    def items() -> Iterator[list[int]]:
        yield from ([n] for n in range(2_500))
        raise LookupError("source gone")

    for store in (app, twin):
        with pytest.raises(LookupError, match="source gone"):
            _jobs(store).enqueue_many(items())
        assert sorted(r.args[0] for r in store.storage.list_jobs(limit=10_000)) == list(
            range(2_500))


class Failing(Spy):
    """The real storage, failing its second block as a lost connection would."""

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        if self.calls.count("enqueue_block") == 1:
            self.calls.append("failed")
            raise StorageUnavailable("connection lost")
        return super().enqueue_block(block)


def test_a_block_the_storage_refuses_stops_the_call_there(app: Conveyor,
                                                         clock: FakeClock) -> None:
    failing = Failing(app.storage)
    client = Client(lambda: failing, app.registry, clock=clock)  # type: ignore[arg-type,return-value]
    fn = JobFunction(client, lambda n: None, "tests.bulk.failing", _jobs(app).opts)
    with pytest.raises(StorageUnavailable, match="connection lost"):
        fn.enqueue_many([n] for n in range(9_000))
    assert failing.calls == ["enqueue_block", "failed"]  # nothing after the refused block
    assert sorted(r.args[0] for r in app.storage.list_jobs(limit=10_000)) == list(range(2_000))


def test_closing_the_app_stops_its_bulk_threads(app: Conveyor) -> None:
    def bulk_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("conveyor-bulk")}

    before = bulk_threads()  # other clients' threads, if any (they may end meanwhile)
    fn = _jobs(app)
    assert fn.enqueue_many([[n] for n in range(5_000)], return_refs=False) == 5_000
    # A storage that sends blocks itself (Redis: on its connection) needs no thread at all.
    assert bool(bulk_threads() - before) is not isinstance(app.storage, SendsBlocks)
    app.close()
    assert not bulk_threads() - before
    assert fn.enqueue_many([[n] for n in range(5_000)], return_refs=False) == 5_000  # again
