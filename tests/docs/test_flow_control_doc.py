"""docs/flow-control.md pasted as one file, run as its reader would, against a real worker.

The page's blocks, in order, after the stand-ins of what it leaves to "your code"
(``tests/docs/your_code.py``: a ledger, rows to read, the application's SQLAlchemy and Django
models), are one module: ``conveyor worker flowdemo:app -q default -q reports`` imports it
(and must start: enqueueing and waiting at import would block the worker in its own import),
and ``python flowdemo.py`` runs every example's ``__main__`` part and its asserts against
that worker on SQLite. Then, read from the store and the ledger: each account's entries ran
in enqueue order, nothing died or waits for a retry, and what the worker does not serve
(the ``mail`` and ``billing`` queues) was stored by the commit hooks.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from conveyor import JobState
from tests.docs.pasted import PastedPage
from tests.support.waiting import wait_until

PRELUDE = ("from tests.docs.your_code import (Order, User, close_browser, engine, "
           "fetch_next_page,\n    ledger, read_rows, save)\n\n")


def test_the_flow_control_page_runs_as_pasted(tmp_path: Path) -> None:
    page = PastedPage("flow-control.md", tmp_path, "flowdemo", PRELUDE)
    ledger = tmp_path / "ledger.txt"

    def applied() -> dict[int, list[int]]:
        out: dict[int, list[int]] = defaultdict(list)
        for line in ledger.read_text().splitlines() if ledger.exists() else []:
            account, amount = line.split()
            out[int(account)].append(int(amount))
        return dict(out)

    with page.worker("default", "reports"):
        page.script()
        wait_until(lambda: sum(map(len, applied().values())) == 4, 30, 0.05,
                   what="the ledger's four entries")
    assert applied() == {42: [100, -30, 25], 43: [7]}  # each account in enqueue order
    store = page.store()
    try:
        jobs = store.storage.list_jobs(limit=500)
        waiting = {(r.name, r.queue) for r in jobs if r.state is not JobState.SUCCEEDED}
        # What the worker does not serve is still there: the jobs deferred to each commit.
        assert {("billing.open", "billing"), ("flowdemo.send_welcome", "mail")} <= waiting
        # Nothing the page runs breaks (a missing name would end dead, an error retrying).
        assert store.storage.count_jobs(state=JobState.DEAD) == 0
        assert store.storage.count_jobs(state=JobState.RETRYING) == 0
        assert sum(r.name == "flowdemo.send_receipt" for r in jobs) == 3
    finally:
        store.close()
