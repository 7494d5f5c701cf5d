"""``release.lua`` walks a queue's active jobs a page at a time, by lease expiry: every job of
the dead worker is found whatever the page size, however the expiries tie, and whatever other
workers' jobs sit between them."""

from __future__ import annotations

import pytest

from conveyor.core.job import JobSpec, JobState
from conveyor.storage.redis import upkeep
from conveyor.storage.redis.storage import RedisStorage


@pytest.mark.parametrize("page", [1, 3, 4, 200])
def test_every_job_of_the_dead_worker_is_found_across_pages(
    faked: RedisStorage, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(upkeep, "RELEASE_PAGE", page)
    faked.enqueue([JobSpec(id=f"j{n:03d}", name="t", queue="q", payload="{}")
                   for n in range(40)])
    dead: set[str] = set()
    alive: set[str] = set()
    # Each dequeue call leases its jobs with one expiry: groups of equal scores, interleaved.
    for lease, worker, count in [(10, "other", 5), (20, "dead", 4), (20, "other", 3),
                                 (30, "dead", 1), (40, "other", 7), (50, "dead", 6)]:
        got = {j.id for j in faked.dequeue(["q"], worker, count, lease)}
        assert len(got) == count
        (dead if worker == "dead" else alive).update(got)
    assert faked.release_worker("dead") == len(dead) == 11
    states = {r.id: r.state for r in faked.list_jobs(queue="q", limit=100)}
    assert {j for j in dead if states[j] is JobState.PENDING} == dead
    assert {j for j in alive if states[j] is JobState.ACTIVE} == alive
