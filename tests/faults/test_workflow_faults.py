"""Scenario 32: a ``kill -9`` storm over a workflow. Every node runs as the graph says, the
fan-in node is released once with every parent's result, and the workflow's callback fires
exactly once, however often the workers die (docs/workflows.md, docs/reliability.md)."""

from __future__ import annotations

import random

import pytest

from conveyor.core.job import EventKind
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


#: Scenario 33: backend -> (nodes the running node adds, their body in ms, storm seconds).
#: The smoke runs: the first kill lands on the expanding node after 50 of 200 additions (1.5 s
#: of adding still to come), then one storm kill (a storm of 1.5 s draws one).
GROWN = {"sqlite": (500, (20, 50), 8.0), "postgres": (200, (40, 80), 1.5),
         "redis": (200, (40, 80), 1.5)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(GROWN), indirect=True)
def test_kill9_storm_over_a_workflow_grown_at_run_time(backend: Backend,
                                                       faults: Faults) -> None:
    """Scenario 33: one node adds N nodes of 20-50 ms (25 at a time, pausing between) and a
    fan-in after them; its worker is SIGKILLed half-way through the additions, then a worker
    is SIGKILLed every ~1.5 s. The run cut short is run again and adds the same nodes: each
    is stored once, the fan-in gets N results, the counters are exact and the callback fires
    once."""
    count, (low, high), storm_seconds = GROWN[backend.name]
    rng = random.Random(33)
    app, jobs = faults.client(backend.url)
    wf = app.workflow(description="grown under kill -9", on_complete="faults.finished")
    root = wf.add(jobs["faults.expand"].s(count, low, high, 0.25))
    wf.enqueue()

    first = faults.worker(backend.url, name="grow0", concurrency=4, lease=STORM_LEASE)

    def half_way() -> bool:
        return any(line["j"] == root.id and line["s"] == "added" and line["n"] >= 50
                   for line in faults.log.lines())

    wait_until(half_way, 60, what="the expanding node to add its first 50 nodes")
    kills = {first.pid: first.kill9()}
    kills.update(storm_while_running(faults, app, wf.id, backend.url, "wf", rng, storm_seconds,
                                     concurrency=4, lease=STORM_LEASE))

    wait_batch(app, wf.id, timeout=STORM_LEASE + SLACK + 60)
    callback = f"{wf.id}-complete"
    wait_until(lambda: states(app, [callback]) == {"succeeded": 1}, 60,
               what="the workflow's callback to run")
    runs = faults.log.executions()[root.id]
    assert len(runs) >= 2, "the expanding node was not run again after its kill"
    assert_batch_exact(app, wf.id, {"succeeded": count + 2})  # none added twice, none lost
    rows = app.batch_jobs(wf.id, limit=count + 10)
    fan_in = [r for r in rows if r.name == "faults.collect"]
    assert len(fan_in) == 1 and fan_in[0].result == str(count)
    assert root.result(timeout=5) == count
    assert app.batch_status(wf.id)["callbacks_fired"] == ["complete"]
    report("33 kill -9 storm over a workflow grown at run time", backend.name,
           nodes=count + 2, kills=len(kills), expander_runs=len(runs), lost=0, doubled=0,
           callbacks=1)
