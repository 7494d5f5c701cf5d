"""``BlockResults``: a block's results as one string of codes, read as ``EnqueueResult``s."""

from __future__ import annotations

import pytest

from conveyor.client.bulk import refs_of
from conveyor.core.job import EnqueueResult
from conveyor.storage.blocks import BlockResults


def test_block_results_read_as_the_results_they_stand_for() -> None:
    results = BlockResults(["a", "b", "c"], "101")
    assert list(results) == [EnqueueResult("a", True), EnqueueResult("b", False),
                             EnqueueResult("c", True)]
    assert results[1] == EnqueueResult("b", False) and results[-1] == EnqueueResult("c", True)
    assert results[1:] == [EnqueueResult("b", False), EnqueueResult("c", True)]
    assert len(results) == 3 and not results.all_created
    assert BlockResults(["a", "b"], "11").all_created and BlockResults([], "").all_created


def test_block_results_refuse_codes_that_do_not_match_the_jobs() -> None:
    with pytest.raises(ValueError, match="2 result codes for 3 jobs"):
        BlockResults(["a", "b", "c"], "11")


def test_refs_of_block_results_are_the_refs_of_their_results() -> None:
    for codes in ("111", "101"):
        results = BlockResults(["a", "b", "c"], codes)
        refs = refs_of(results, None)  # type: ignore[arg-type]
        assert [(r.id, r.created) for r in refs] == [(r.id, r.created) for r in results]
