"""Finding jobs (issue 26): by id, job name and text in arguments or messages, newest first,
bounded by the number of jobs read, on every store."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.core.ids import new_id
from conveyor.core.job import JobSpec, Outcome
from conveyor.views.search import search_jobs
from tests.conformance.backends import backend_url
from tests.web.seed import run_one


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(backend_url(str(request.param), tmp_path, request.getfixturevalue))
    yield app
    app.close()


def test_search_by_id_name_and_text_newest_first(app: Conveyor) -> None:
    refs = [app.enqueue("shop.import_row", [n, {"sku": f"SKU-{n}", "city": "Zürich"}])
            for n in range(6)]
    ids = [r.id for r in refs if r is not None]
    exported = app.enqueue("shop.export", ["Zürich"])
    assert exported is not None
    other = exported.id
    failed = run_one(app.storage, "default", Outcome.FAILED, message="warehouse closed")
    insp = app.storage
    assert [r.id for r in search_jobs(insp, ids[3]).jobs] == [ids[3]]  # an exact id
    named = search_jobs(insp, name="shop.import_row")
    assert [r.id for r in named.jobs] == list(reversed(ids))  # newest first
    assert named.complete and named.scanned == 7
    zurich = search_jobs(insp, "zürich", name="shop.export")  # decoded, case-insensitive
    assert [r.id for r in zurich.jobs] == [other]
    assert [r.id for r in search_jobs(insp, "SKU-4").jobs] == [ids[4]]
    closed = search_jobs(insp, "WAREHOUSE", state=JobState.FAILED)
    assert [r.id for r in closed.jobs] == [failed]
    bounded = search_jobs(insp, "nothing like it", scan=3)
    assert (bounded.jobs, bounded.scanned, bounded.complete) == ([], 3, False)
    assert len(search_jobs(insp, "sku", limit=2).jobs) == 2


class Spy:
    """An Inspector that records which of its reads a search calls (and can stop it)."""

    def __init__(self, inner: Any, after_first_page: threading.Event | None = None) -> None:
        self.inner, self.calls = inner, []  # type: ignore[var-annotated]
        self.after_first_page = after_first_page

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def called(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name == "job_heads" and self.after_first_page is not None:
                self.after_first_page.set()  # the operator went away while this page was read
            return method(*args, **kwargs)

        return called


def _many(app: Conveyor, count: int) -> None:
    app.storage.enqueue([JobSpec(id=new_id(), name="shop.import_row", queue="default",
                                 payload=json.dumps({"a": [n], "k": {}})) for n in range(count)])


@pytest.mark.parametrize("app", ["sqlite", "redis"], indirect=True)
def test_a_search_reads_cut_jobs_and_only_the_matches_whole(app: Conveyor) -> None:
    """Issue 49: a search decoded up to 5,000 whole payloads (2,000 jobs of 100 KB: 6.1 s).
    It now reads ``job_heads`` (a bounded cut of each job) and reads whole only the jobs it
    found; text past the cut is documented as not searched."""
    bulky = "x" * 100_000
    refs = [app.enqueue("shop.import_row", [f'quote"d {n}', bulky + f"-END{n}"])
            for n in range(30)]
    ids = [r.id for r in refs if r is not None]
    spy = Spy(app.storage)
    found = search_jobs(spy, 'quote"d 7')  # type: ignore[arg-type]
    assert [r.id for r in found.jobs] == [ids[7]]
    assert found.complete and found.scanned == 30
    assert set(spy.calls) == {"get_job", "job_heads"}
    assert spy.calls.count("get_job") == 2  # the exact-id lookup, then the one match
    assert search_jobs(app.storage, "-END7").jobs == []  # past HEAD_CHARS: not read


def test_a_search_stops_when_told_and_at_its_time_budget(tmp_path: Path) -> None:
    """A search that the operator abandoned stops at the next page; one out of time stops
    too, saying so (``cut_short``) rather than running on."""
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        _many(app, 1200)
        gone = threading.Event()
        spy = Spy(app.storage, after_first_page=gone)
        found = search_jobs(spy, "nowhere", stop=gone)  # type: ignore[arg-type]
        assert (found.scanned, found.complete, found.cut_short) == (500, False, True)
        assert spy.calls.count("job_heads") == 1
        spent = search_jobs(app.storage, "nowhere", budget=0)
        assert (spent.scanned, spent.complete, spent.cut_short) == (0, False, True)
        whole = search_jobs(app.storage, "nowhere")
        assert (whole.scanned, whole.complete, whole.cut_short) == (1200, True, False)
    finally:
        app.close()
