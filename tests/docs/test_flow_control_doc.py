"""Every ``python`` block of docs/flow-control.md, run top to bottom against a real worker.

The blocks share one namespace, as a reader's module would. What the page leaves to "your
code" (a ledger, a file to read, the application's models and databases) is provided here;
the app, its SQLite storage and the worker are the real ones.
"""

from __future__ import annotations

import asyncio
import re
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from sqlalchemy import create_engine

from conveyor import Conveyor, JobState
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.contrib.helpers import Base, User, configure_django

DOC = Path(__file__).resolve().parents[2] / "docs" / "flow-control.md"


def python_blocks() -> list[str]:
    """The page's ``python`` blocks, dedented (some sit inside list items)."""
    found = re.findall(r"^ *```python\n(.*?)^ *```", DOC.read_text(), re.M | re.S)
    return [textwrap.dedent(block) for block in found]


class Ledger:
    """``ledger`` of the ordered-keys example: what the worker applied, per account."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.applied: dict[int, list[int]] = defaultdict(list)

    def apply(self, account_id: int, amount: int) -> None:
        with self.lock:
            self.applied[account_id].append(amount)

    def count(self) -> int:
        with self.lock:
            return sum(len(amounts) for amounts in self.applied.values())


class _Orders:
    """``Order.objects`` of the Django example: a real INSERT in the current transaction."""

    def create(self, total: int) -> Any:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders (total) VALUES (%s)", [total])
            return type("Order", (), {"pk": cursor.lastrowid})()


class Order:
    """The Django model of the example."""

    objects = _Orders()


async def _noop(site: str) -> None:
    """What the async cancel example awaits."""


def _until(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return check()


@pytest.fixture
def namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """What the page takes as given, in a directory of its own (its ``jobs.db`` lands here)."""
    monkeypatch.chdir(tmp_path)
    configure_django(tmp_path)
    engine = create_engine(f"sqlite:///{tmp_path}/app.db")
    Base.metadata.create_all(engine)
    yield {
        "__name__": "flow_control_doc", "ledger": Ledger(), "engine": engine, "User": User,
        "Order": Order, "read_rows": lambda path: iter(range(3)), "save": lambda row: None,
        "fetch_next_page": _noop, "close_browser": _noop,
    }
    engine.dispose()
    connection.close()


def test_the_examples_run_against_a_real_worker(namespace: dict[str, Any]) -> None:
    setup, *examples = python_blocks()
    exec(compile(setup, f"{DOC}[0]", "exec"), namespace)
    app: Conveyor = namespace["app"]
    config = WorkerConfig(queues=(QueueWeight("default"), QueueWeight("reports")),
                          concurrency=4, heartbeat_interval=0.05, lease=2.0)
    launcher = Launcher(app, config)
    launcher.start()
    try:
        for index, block in enumerate(examples, 1):
            exec(compile(block, f"{DOC}[{index}]", "exec"), namespace)
        assert asyncio.run(namespace["total"]()) == 42
        ledger: Ledger = namespace["ledger"]
        assert _until(lambda: ledger.count() == 4)
    finally:
        launcher.stop(10)
    assert ledger.applied == {42: [100, -30, 25], 43: [7]}  # each account in enqueue order
    waiting = {(r.name, r.queue) for r in app.storage.list_jobs(limit=500)
               if r.state is not JobState.SUCCEEDED}
    # What the worker does not serve is still there: the jobs deferred to each commit.
    assert {("billing.open", "billing"), ("flow_control_doc.send_welcome", "mail")} <= waiting
    # Nothing the page runs breaks (a missing name would end dead, an error retrying).
    assert app.storage.count_jobs(state=JobState.DEAD) == 0
    assert app.storage.count_jobs(state=JobState.RETRYING) == 0
    receipts = app.storage.list_jobs(limit=500)
    assert sum(r.name == "flow_control_doc.send_receipt" for r in receipts) == 3
    app.close()
