"""SQLite's one-statement insert of a block (``jobs.insert_block``): ids and payloads travel
as one JSON object ``{id: payload}`` read back with ``json_each``; every id and payload must
come back exactly, in the block's order, and the results must be ordinary ``EnqueueResult``s.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import EnqueueResult
from conveyor.storage.blocks import JobBlock
from conveyor.storage.sqlite import jobs
from conveyor.storage.sqlite.storage import SqliteStorage, open_sqlite
from tests.conformance.helpers import take

ODD = ['q"uote', "back\\slash", "tab\there", "line\nfeed", "caf\u00e9", "emoji \U0001f600",
       "ctl\x01", "sep\u2028", "/slash", "{}", "[1]"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStorage]:
    """A SQLite store on a fresh file."""
    opened = open_sqlite(f"sqlite:///{tmp_path / 'block.db'}", FakeClock())
    yield opened
    opened.close()


def test_ids_and_payloads_with_json_escapes_are_stored_exactly(store: SqliteStorage) -> None:
    payloads = [json.dumps({"a": [text], "k": {"t": text}}, ensure_ascii=False) for text in ODD]
    block = JobBlock(name="tests.block", queue="odd", ids=[f"id-{t}" for t in ODD],
                     payloads=payloads)
    results = store.enqueue_block(block)
    assert results == [EnqueueResult(i, True) for i in block.ids]
    for job_id, payload in zip(block.ids, payloads, strict=True):
        record = store.get_job(job_id)
        assert record is not None and record.id == job_id and record.args == json.loads(
            payload)["a"]
    leased = take(store, ["odd"], count=len(ODD))
    assert [(j.id, j.payload) for j in leased] == list(zip(block.ids, payloads, strict=True))


def test_a_block_keeps_its_order_whatever_its_ids(store: SqliteStorage) -> None:
    """Rowids follow the block's order (the statement has no ORDER BY: json_each's scan
    order is the one relied on), so jobs that became pending together leave in that order."""
    ids = [f"{(n * 7919) % 4999:05d}" for n in range(4999)]  # neither sorted nor reversed
    block = JobBlock(name="tests.block", queue="order", ids=ids,
                     payloads=[f'{{"a":[{n}],"k":{{}}}}' for n in range(len(ids))])
    store.enqueue_block(block)
    rows = store._db.read().execute("SELECT id FROM jobs WHERE queue = 'order' ORDER BY rowid")
    assert [r[0] for r in rows] == ids
    assert [j.id for j in take(store, ["order"], count=50)] == ids[:50]


def test_a_repeated_id_takes_the_row_by_row_path(store: SqliteStorage) -> None:
    block = JobBlock(name="tests.block", queue="rep", ids=["r1", "r2", "r1"],
                     payloads=['{"a":[1],"k":{}}', '{"a":[2],"k":{}}', '{"a":[3],"k":{}}'])
    results = store.enqueue_block(block)
    assert [(r.id, r.created) for r in results] == [("r1", True), ("r2", True), ("r1", False)]
    record = store.get_job("r1")
    assert record is not None and record.args == [1]


def test_results_made_in_bulk_are_ordinary_results() -> None:
    ids = [f"j{n}" for n in range(5)]
    made = jobs._created(ids)
    expected = [EnqueueResult(i, True) for i in ids]
    assert made == expected and [hash(r) for r in made] == [hash(r) for r in expected]
    assert all(type(r) is EnqueueResult for r in made) and jobs._created([]) == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].created = False  # type: ignore[misc]
