"""Finding jobs (issue 26): by id, job name and text in arguments or messages, newest first,
bounded by the number of jobs read, on every store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState
from conveyor.job import Outcome
from conveyor.search import search_jobs
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
