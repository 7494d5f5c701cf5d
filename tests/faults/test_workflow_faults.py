"""Scenario 32: a ``kill -9`` storm over a workflow. Every node runs as the graph says, the
fan-in node is released once with every parent's result, and the workflow's callback fires
exactly once, however often the workers die (docs/workflows.md, docs/reliability.md)."""

from __future__ import annotations

import random

import pytest

from conveyor.job import EventKind
from tests.faults.checks import (
    assert_batch_exact,
    extra_runs,
    states,
    storm_while_running,
    wait_batch,
)
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import report, wait_until

STORM_LEASE = 3.0
SLACK = 6.0
#: The full storm runs on SQLite (the default store); the other stores get a smaller one.
#: backend -> (nodes between root and fan-in, their body in ms (low, high), storm seconds).
#: A smoke run still lasts past two kills: 400 x 40-80 ms on 8 slots is ~3 s of work.
SIZES = {"sqlite": (1000, (20, 50), 10.0), "postgres": (400, (40, 80), 4.0),
         "redis": (400, (40, 80), 4.0), "redis_cluster": (400, (40, 80), 4.0)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(SIZES), indirect=True)
def test_kill9_storm_over_a_fan_out_fan_in_workflow(backend: Backend, faults: Faults) -> None:
    """One root, N nodes of 20-50 ms (40-80 ms on the smoke runs) after it, one fan-in node
    after all of them (with their results) and an ``on_complete`` callback; 2 workers, one
    SIGKILLed every ~1.5 s while it runs a job."""
    fan_out, (low, high), storm_seconds = SIZES[backend.name]
    rng = random.Random(32)
    app, jobs = faults.client(backend.url)
    wf = app.workflow(description="kill -9 storm", on_complete="faults.finished")
    root = wf.add(jobs["faults.work"].s(10))
    middle = wf.add_group([jobs["faults.work"].s(rng.randint(low, high)) for _ in range(fan_out)],
                          after=[root])
    join = wf.add(jobs["faults.collect"].s(20), after=middle, results=True)
    wf.enqueue()
    ids = [root.id, *(m.id for m in middle), join.id]

    kills = storm_while_running(faults, app, wf.id, backend.url, "wf", rng, storm_seconds,
                                concurrency=4, lease=STORM_LEASE)

    try:
        wait_batch(app, wf.id, timeout=STORM_LEASE + SLACK + 60)
    except AssertionError as exc:  # say where the graph stopped
        stuck = {i: app.get_job(i) for i in ids}
        raise AssertionError(f"{exc}; states {states(app, ids)}; not finished: " + "; ".join(
            f"{i} {r.state.value if r else 'missing'} "
            f"{[e.kind for e in (r.events or [])] if r else ''}"
            for i, r in list(stuck.items()) if r is None or not r.state.terminal)[:3000]) from exc
    callback = f"{wf.id}-complete"
    wait_until(lambda: states(app, [callback]) == {"succeeded": 1}, 60,
               what="the workflow's callback to run")
    assert states(app, ids) == {"succeeded": fan_out + 2}
    assert_batch_exact(app, wf.id, {"succeeded": fan_out + 2})
    record = app.get_job(join.id)
    assert record is not None and record.result == str(fan_out)  # every result, none twice
    assert [e.kind for e in record.events or []].count(EventKind.RELEASED) == 1
    runs = extra_runs(faults.log, [*ids, callback], set(kills))
    assert runs.unexplained == [], "a node ran twice although its worker was not killed"
    assert app.batch_status(wf.id)["callbacks_fired"] == ["complete"]
    assert kills, "the storm killed no worker"
    report("32 kill -9 storm over a workflow", backend.name, nodes=fan_out + 2,
           kills=len(kills), lost=0, extra_runs=runs.extra_runs,
           fan_in_released=1, callbacks=1)
