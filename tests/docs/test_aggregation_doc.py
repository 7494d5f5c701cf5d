"""docs/aggregation.md pasted as one file, run as its reader would: ``conveyor worker
aggdemo:app`` imports it (and must start: the page once enqueued and waited at import, so
the worker blocked in its own import and exited after 30 s), and ``python aggdemo.py`` runs
its calls and asserts against that worker on SQLite: the four calls are one run of the
aggregator, three members succeed with its return value and the fourth fails with the reason
the aggregator gave it."""

from __future__ import annotations

from pathlib import Path

from conveyor import JobState
from tests.docs.pasted import PastedPage


def test_the_aggregation_page_runs_as_pasted(tmp_path: Path) -> None:
    page = PastedPage("aggregation.md", tmp_path, "aggdemo")
    with page.worker("default"):
        page.script()
    store = page.store()
    try:
        records = store.storage.list_jobs(limit=10, with_events=True)
        assert [r.state for r in records] == [JobState.SUCCEEDED] * 3 + [JobState.FAILED]
        leads = {e.data["lead"] for r in records[1:] for e in r.events or []
                 if e.kind == "started" and e.data}
        assert leads == {records[0].id}  # one run took all four
    finally:
        store.close()
