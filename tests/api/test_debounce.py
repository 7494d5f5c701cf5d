"""Debounce and throttle through the public API on every kind of store: a burst of calls with
one key becomes one run (with the newest, or the first, arguments), also when the calls come
from several processes at once. The apps run on a ``FakeClock`` (every process starts it at
the same instant), so a window ends when the test moves the clock, not when a loaded machine
happens to pause between two calls."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, Debounce, FakeClock, JobState, Throttle
from conveyor.testing import drain
from tests.conformance.backends import backend_url

RUNS: list[tuple[str, int]] = []


WINDOW = 5.0


def _app(url: str, clock: FakeClock) -> Conveyor:
    app = Conveyor(url, clock=clock)

    @app.job(name="t.reindex", debounce=Debounce(lambda doc_id, **_: f"doc:{doc_id}",
                                                   wait=WINDOW))
    def reindex(doc_id: int, version: int) -> None:
        RUNS.append(("reindex", version))

    @app.job(name="t.digest", throttle=Throttle("digest", every=WINDOW))
    def digest(first: int) -> None:
        RUNS.append(("digest", first))

    return app


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path, request.getfixturevalue)


def _run_all(app: Conveyor, clock: FakeClock) -> int:
    """Move past the window, then run everything due."""
    clock.advance(WINDOW + 1)
    return drain(app)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(url: str, clock: FakeClock) -> Iterator[Conveyor]:
    RUNS.clear()
    app = _app(url, clock)
    yield app
    app.close()


def test_a_thousand_calls_of_one_key_run_once_with_the_last_arguments(
        app: Conveyor, clock: FakeClock) -> None:
    reindex = app.registry.get("t.reindex")
    assert reindex is not None
    refs = [reindex.enqueue(7, version) for version in range(1000)]
    other = reindex.enqueue(8, 0)  # another key: its own run
    assert len({r.id for r in refs if r is not None}) == 1
    assert sum(1 for r in refs if r is not None and r.created) == 1
    assert other is not None and other.created
    assert drain(app) == 0  # nothing is due inside the window
    assert _run_all(app, clock) == 2
    assert sorted(RUNS) == [("reindex", 0), ("reindex", 999)]
    record = app.get_job(refs[0].id if refs[0] else "")
    assert record is not None and record.state is JobState.SUCCEEDED
    assert record.args == [7, 999]
    again = reindex.enqueue(7, 1000)  # after the run: a new window, a new job
    assert again is not None and again.created and again.id != refs[0].id  # type: ignore[union-attr]


def test_throttle_keeps_the_first_call_of_its_window(app: Conveyor, clock: FakeClock) -> None:
    digest = app.registry.get("t.digest")
    assert digest is not None
    for n in range(50):
        digest.enqueue(n)
        clock.advance(0.05)  # throttle: later calls do not move the run
    assert _run_all(app, clock) == 1
    assert RUNS == [("digest", 0)]


def test_bulk_enqueue_folds_too(app: Conveyor, clock: FakeClock) -> None:
    reindex = app.registry.get("t.reindex")
    assert reindex is not None
    refs = reindex.enqueue_many([(1, v) for v in range(300)])
    assert len({r.id for r in refs}) == 1
    assert _run_all(app, clock) == 1
    assert RUNS == [("reindex", 299)]


def _burst(url: str, start: int) -> None:
    app = _app(url, FakeClock())  # the same instant as the test's clock
    reindex = app.registry.get("t.reindex")
    assert reindex is not None
    for version in range(start, start + 200):
        reindex.enqueue(3, version)
    app.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres", "redis"])  # memory: one process
def test_calls_from_several_processes_make_one_job(store: str, request: pytest.FixtureRequest,
                                                   tmp_path: Path) -> None:
    url = backend_url(store, tmp_path, request.getfixturevalue)
    RUNS.clear()
    clock = FakeClock()
    app = _app(url, clock)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_burst, args=(url, n * 1000)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert _run_all(app, clock) == 1
    [(name, version)] = RUNS
    assert name == "reindex" and version % 1000 == 199  # the last call of one of them
    app.close()
