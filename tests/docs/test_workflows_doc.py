"""docs/workflows.md pasted as one file, run as its reader would: ``conveyor worker
wfdemo:app`` imports it for its jobs (and must start), and ``python wfdemo.py`` runs every
example against that worker on SQLite, their asserts included: the fan-in gets both results,
the child after it the summary, the canvas, a workflow grown by its running job and a
sub-workflow give the results the page states. Then, read from the store: the first
workflow completed and its callback ran once."""

from __future__ import annotations

from pathlib import Path

from conveyor import JobState
from tests.docs.pasted import PastedPage, blocks
from tests.support.waiting import wait_until


def test_the_workflow_page_runs_as_pasted(tmp_path: Path) -> None:
    assert len(blocks("workflows.md")) == 5  # a new block on the page is run here too
    page = PastedPage("workflows.md", tmp_path, "wfdemo")
    store = page.store()
    try:
        with page.worker("default"):
            page.script()
            [nightly] = [b for b in store.storage.list_batches(kind="workflow")
                         if b.description == "nightly export"]

            def called_back() -> bool:
                record = store.get_job(f"{nightly.id}-complete")
                return record is not None and record.state is JobState.SUCCEEDED

            wait_until(called_back, 30, 0.05, what="the workflow's on_complete callback")
        status = store.storage.get_batch(nightly.id)
        assert status is not None and status.complete and status.counts["succeeded"] == 4
        assert status.callbacks_fired == ("complete",)
        assert store.storage.count_jobs(state=JobState.DEAD) == 0
    finally:
        store.close()
