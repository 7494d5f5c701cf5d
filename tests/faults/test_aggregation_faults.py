"""Scenario 34: ``kill -9`` while aggregated runs hold their members. Every member ends
exactly once in a final state, by its own outcome; nothing is lost, the batch counters are
exact, and a member ran again only when the process running its group was killed."""

from __future__ import annotations

import random

import pytest

from conveyor.core.job import TERMINAL_STATES
from tests.faults.checks import (
    assert_batch_exact,
    enqueue_batch,
    extra_runs,
    states,
    storm_while_running,
    wait_batch,
)
from tests.faults.conftest import BACKENDS, Backend, Faults
from tests.faults.harness import report

MEMBERS = 600
LEASE = 3.0
#: The full storm on SQLite, the default engine; the other stores, whose every aggregation
#: step is fuzzed beside the memory store (test_fuzz_aggregation.py), get a smoke run: the
#: same 600 members and checks, ~3 s of kills (one or two, each while a group runs).
STORM_SECONDS = {"sqlite": 6.0, "postgres": 3.0, "redis": 3.0, "redis_cluster": 3.0}
TERMINAL = {s.value for s in TERMINAL_STATES}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_kill9_during_aggregated_runs(backend: Backend, faults: Faults) -> None:
    """600 members in 20 groups (max 25 per run, 200 ms per run), 2 workers, one of them
    SIGKILLed every ~1.5 s for ~6 s (~3 s on the smoke runs) and restarted at once."""
    rng = random.Random(34)
    app, jobs = faults.client(backend.url)
    batch_id, ids = enqueue_batch(app, jobs["faults.member"], [(n,) for n in range(MEMBERS)],
                                  "aggregated kill -9")
    kills = storm_while_running(faults, app, batch_id, backend.url, "agg", rng,
                                seconds=STORM_SECONDS[backend.name], concurrency=2, lease=LEASE)
    wait_batch(app, batch_id, timeout=LEASE + 90)
    sevens = sum(1 for n in range(MEMBERS) if n % 7 == 0)
    expected = {"succeeded": MEMBERS - sevens, "failed": sevens}
    assert states(app, ids) == expected
    assert_batch_exact(app, batch_id, expected)
    for job_id in ids:
        rec = app.get_job(job_id)
        assert rec is not None and rec.events is not None
        ends = [e.kind for e in rec.events if e.state in TERMINAL]
        assert len(ends) == 1, (job_id, ends)
    runs = extra_runs(faults.log, ids, set(kills))
    assert runs.unexplained == [], "members ran twice although no worker of theirs was killed"
    assert runs.extra_runs > 0, "no kill hit a running group; the storm proved nothing"
    groups = {line.get("lead") for line in faults.log.lines() if line.get("s") == "start"}
    report("34 kill -9 during aggregated runs", backend.name, members=MEMBERS,
           kills=len(kills), lost=0, runs=len(groups), extra_member_runs=runs.extra_runs)
