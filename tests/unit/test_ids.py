"""Job ids: unique, 24 hex characters, and in creation order within a process."""

from __future__ import annotations

import multiprocessing
import re
import time

import pytest

from conveyor.core import ids
from conveyor.core.ids import new_id, new_ids


def test_ids_are_unique_and_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(20_000)]  # many share a millisecond
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"[0-9a-f]{24}", i) for i in ids)


def _child_ids(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put([new_id() for _ in range(1000)])


def test_a_forked_child_does_not_repeat_its_parents_sequence() -> None:
    ctx = multiprocessing.get_context("fork")
    before = new_id()
    queue = ctx.Queue()
    child = ctx.Process(target=_child_ids, args=(queue,))
    child.start()
    theirs = queue.get(timeout=30)
    child.join(30)
    mine = [new_id() for _ in range(1000)]
    assert before < mine[0]
    assert not set(theirs) & set(mine)


def test_ids_made_in_bulk_continue_the_same_sequence() -> None:
    ids = [new_id(), *new_ids(5000), new_id(), *new_ids(1), *new_ids(0)]
    assert len(ids) == 5003 and len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"[0-9a-f]{24}", i) for i in ids)


def test_ids_made_in_bulk_are_those_new_id_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Past a run of 256 (the last two hex digits wrap) and past the end of the random part
    # (the millisecond moves on): a clock read in the past leaves both to the sequence.
    monkeypatch.setattr(ids._ids, "ms", int(time.time() * 1000) + 60_000)
    monkeypatch.setattr(ids._ids, "rand", ids._RAND_MAX - 700)
    one_by_one = [new_id() for _ in range(1_000)]
    monkeypatch.setattr(ids._ids, "ms", ids._ids.ms - 1)
    monkeypatch.setattr(ids._ids, "rand", ids._RAND_MAX - 700)
    assert new_ids(1_000) == one_by_one
    assert one_by_one[700][:12] != one_by_one[699][:12]  # the millisecond moved on there


def test_generated_tells_the_shape_new_id_makes_from_chosen_ids() -> None:
    """Redis checks across queues only the ids ``generated`` refuses (docs/api.md, "Job
    ids"): every id ``new_id``/``new_ids`` makes must pass, every other shape must not."""
    assert all(map(ids.generated, [new_id(), *new_ids(300)]))
    made = "0196a3f2c4e1b7d90a5c3e8f"  # of new_id's shape, with letters to upper-case
    assert ids.generated(made)
    for chosen in ("invoice-42", made.upper(), made[:-1], made + "0", f"{made[:-1]}g", ""):
        assert not ids.generated(chosen), chosen
