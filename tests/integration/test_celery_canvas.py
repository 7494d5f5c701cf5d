"""Celery's canvas as Celery's users write it, run by a real ``conveyor worker`` on SQLite.

Each test names the expectation of Celery's own test suite it ports (``t/integration/
test_canvas.py``, ``t/unit/tasks/test_canvas.py``; jobs shaped as Celery's
``t/integration/tasks.py`` in ``tests/integration/apps/canvas.py``), or, for the shapes where
conveyor differs on purpose, the rule docs/workflows.md states instead. Issue 50 found the
silent ones: an empty group released the next step at once, shapes lost a level, a failed
chain raised ``JobFailed`` instead of the job's own exception.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from conveyor import Conveyor, JobState, chain, chord, chunks, group
from conveyor.client.registry import JobFunction
from conveyor.core.job import JobRecord
from conveyor.errors import JobFailed
from conveyor.workflow.canvas import Chain, Run
from tests.integration.apps.canvas import ExpectedError, register
from tests.integration.harness import Worker

APP = "tests.integration.apps.canvas:app"
WAIT = 30.0


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conveyor]:
    """The test's app on a SQLite file that one worker process (4 threads) serves for the
    whole module."""
    tmp = tmp_path_factory.mktemp("canvas")
    url = f"sqlite:///{tmp}/jobs.db"
    client = Conveyor(url)
    register(client)
    worker = Worker(url, tmp, "-c", "4", app=APP, name="canvas")
    try:
        worker.wait_ready()
        yield client
    finally:
        worker.kill_group()
        client.close()


@pytest.fixture(scope="module")
def jobs(app: Conveyor) -> Callable[[str], JobFunction]:
    def get(name: str) -> JobFunction:
        fn = app.registry.get(f"c.{name}")
        assert fn is not None
        return fn
    return get


def nodes(app: Conveyor, run: Run | str, name: str) -> list[JobRecord]:
    """The workflow's jobs named ``name`` (waits until the workflow finished)."""
    wf_id = run if isinstance(run, str) else run.id
    app.wait_batch(wf_id, timeout=WAIT)
    return [r for r in app.batch_jobs(wf_id, limit=500) if r.name == name]


# -- chains --------------------------------------------------------------------------------


def test_or_builds_chains_and_a_group_then_a_step_is_a_chord(app: Conveyor, jobs: Any) -> None:
    """Celery unit test_canvas.py::test_signature::test_OR (``|`` makes and splices chains,
    a non-signature is a TypeError), integration test_chain::test_simple_chain (32) and
    unit test_chain::test_groups_in_chain_to_chord (``group | sig`` is a chord)."""
    add, tsum = jobs("add"), jobs("tsum")
    x = add.s(2, 2) | add.s(4)
    z = x | (add.s(4) | add.s(8))
    assert isinstance(z, Chain) and len(z.steps) == 4
    with pytest.raises(TypeError):
        _ = x | 10
    assert (add.s(4, 4) | add.s(8) | add.s(16)).enqueue().result(timeout=WAIT) == 32
    chorded = group(add.s(1, 1), add.s(2, 2)) | tsum.s()
    assert chorded.enqueue().result(timeout=WAIT) == 6


def test_arguments_at_enqueue_go_in_front_unless_immutable(app: Conveyor, jobs: Any) -> None:
    """Celery unit test_canvas.py::test_signature::test_call (``sig(3, 4)`` calls
    ``task(3, 4, *own)``, keywords merged) and ::test_merge_immutable (an immutable signature
    keeps its own arguments), integration test_chain::test_chain_of_task_a_group_and_a_chord
    (``si`` ignores the previous result)."""
    sub, echo, add, tsum = jobs("sub"), jobs("echo"), jobs("add"), jobs("tsum")
    ref = sub.s(2).enqueue(10)
    assert ref is not None and ref.result(timeout=WAIT) == 8  # sub(10, 2), Celery's order
    ref = echo.s(2, k=1).enqueue(4, k=2, j=3)
    assert ref is not None and ref.result(timeout=WAIT) == [[4, 2], {"k": 2, "j": 3}]
    ref = echo.si(2).enqueue(4)
    assert ref is not None and ref.result(timeout=WAIT) == [[2], {}]
    ref = sub.apply_async(args=(10,), kwargs={"y": 4}, countdown=0.1, queue="default")
    assert ref is not None and ref.result(timeout=WAIT) == 6
    c = add.si(1, 0) | group(add.s(1), add.s(1)) | group(tsum.s(), tsum.s()) | tsum.s()
    assert c.enqueue().result(timeout=WAIT) == 8
    assert chain(add.s(3, 4), echo.si("im")).enqueue().result(timeout=WAIT) == [["im"], {}]
    fixed = chain(add.s(3, 4), add.signature((2, 2), immutable=True))
    assert fixed.enqueue().result(timeout=WAIT) == 4


def test_a_chain_inside_a_group_receives_the_argument(app: Conveyor, jobs: Any) -> None:
    """Celery integration test_chain::test_chain_inside_group_receives_arguments ([14, 14]),
    ::test_complex_chain ([64, 65, 66, 67]) and ::test_chain_of_chain_with_a_single_task."""
    add, identity = jobs("add"), jobs("identity")
    c = add.s(5, 6) | group((add.s(1) | add.s(2), add.s(3)))
    assert c.enqueue().result(timeout=WAIT) == [14, 14]
    g = group(add.s(i) for i in range(4))
    c2 = add.s(2, 2) | (add.s(4) | add.s(8) | add.s(16) | add.s(32)) | g
    assert c2.enqueue().result(timeout=WAIT) == [64, 65, 66, 67]
    assert chain([chain(identity.s(42))]).enqueue().result(timeout=WAIT) == 42


def test_chords_written_every_way_celery_allows(app: Conveyor, jobs: Any) -> None:
    """Celery integration test_chain::test_chain_of_chords_with_two_tasks (12),
    ::test_chain_of_explicit_chords (178) and ``chord(group(...), body)``, which raised
    ``TypeError: 'Group' object is not iterable`` before issue 50."""
    add, tsum = jobs("add"), jobs("tsum")
    c = add.si(1, 0) | group(add.s(1), add.s(1)) | tsum.s() | add.s(1)
    c = c | chord(group(add.s(1), add.s(1)), tsum.s())
    assert c.enqueue().result(timeout=WAIT) == 12
    c1 = chain(chord(group(add.si(1, 0), add.si(1, 0)), tsum.s()),
               chord(group(add.s(1), add.s(1)), tsum.s()),
               chord(group(add.s(0), add.s(0)), tsum.s()))
    c2 = chain(chord(group(add.s(10), add.s(10)), tsum.s()),
               chord(group(add.s(0), add.s(0)), tsum.s()),
               chord(group(add.s(1), add.s(1)), tsum.s()))
    assert (c1 | c2).enqueue().result(timeout=WAIT) == 178


def test_chunks_on_the_job_and_as_a_function(app: Conveyor, jobs: Any) -> None:
    """Celery unit test_canvas.py::test_chunks: ``task.chunks(items, n)``, a group of
    ``n``-call jobs ([[3, 7], [11]], as Celery 5.7 answers)."""
    add = jobs("add")
    assert add.chunks([(1, 2), (3, 4), (5, 6)], 2).enqueue().result(timeout=WAIT) == [[3, 7],
                                                                                    [11]]
    assert chunks(add, [(1, 1)], 5).enqueue().result(timeout=WAIT) == [[2]]


def test_a_chain_with_an_error_handler_and_an_eta(app: Conveyor, jobs: Any) -> None:
    """Celery integration test_chain::test_chain_error_handler_with_eta: ``chain(group(...),
    tsum.s()).on_error(handler).apply_async(eta=...)`` gives 10, and nothing starts before
    the eta."""
    add, tsum, errback = jobs("add"), jobs("tsum"), jobs("errback")
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    c = chain(group(add.s(1, 2), add.s(3, 4)), tsum.s()).on_error(errback.s())
    run = c.apply_async(eta=eta)
    assert run.result(timeout=WAIT) == 10
    starts = [r.started_at for r in nodes(app, run, "c.add")]
    assert len(starts) == 2 and all(t is not None and t >= eta.timestamp() for t in starts)
    assert [r.result for r in nodes(app, run, "conveyor.errback")] == ["null"] * 3


# -- empty groups and shapes -------------------------------------------------------------------


def test_an_empty_group_gives_an_empty_list_after_everything_before_it(
        app: Conveyor, jobs: Any) -> None:
    """Issue 50: ``chain(slow.s(1), group([]), notify.s())`` released ``notify`` at once,
    beside ``slow`` and without its argument. Celery integration test_chord::
    test_empty_header_chord (the body gets ``[]``) and test_group::test_empty_group_result
    (``[]``); conveyor gives ``[]`` for an empty group inside a chain too (Celery skips it
    there: docs/workflows.md, the migration table)."""
    identity, echo, tsum = jobs("identity"), jobs("echo"), jobs("tsum")
    run = chain(identity.s(1), group([]), echo.s()).enqueue()
    assert run.result(timeout=WAIT) == [[[]], {}]
    [first] = nodes(app, run, "c.identity")
    [last] = nodes(app, run, "c.echo")
    assert first.finished_at is not None and last.started_at is not None
    assert last.started_at >= first.finished_at  # it waited for the step before the group
    assert chord([], tsum.s()).enqueue().result(timeout=WAIT) == 0  # tsum([])
    assert group(identity.s(x) for x in []).enqueue(app=app).result(timeout=WAIT) == []


def test_nested_shapes(app: Conveyor, jobs: Any) -> None:
    """Celery integration test_group::test_nested_group ([11, 101, 1001, 2001]: groups in
    groups are unrolled), ::test_nested_group_group, test_chain::
    test_group_result_not_has_cache ([1, 2, [3, 4]]: a chain ending in a group is one value)
    and issue 50's chord header holding such a chain (``[[42, 42]]``, as Celery 5.7 gives;
    it was flattened to ``[42, 42]``)."""
    add, identity, echo = jobs("add"), jobs("identity"), jobs("echo")
    header = [chain(identity.s(42), group(identity.s(), identity.s()))]
    assert chord(header, echo.s()).enqueue().result(timeout=WAIT) == [[[[42, 42]]], {}]
    c = group(add.si(1, 10), group(add.si(1, 100), group(add.si(1, 1000), add.si(1, 2000))))
    assert c.enqueue().result(timeout=WAIT) == [11, 101, 1001, 2001]
    assert group(group(identity.s(42), identity.s(42))).enqueue().result(timeout=WAIT) == [
        42, 42]
    ct = chain(identity.si(5), group([identity.si(3), identity.si(4)]))
    assert group(identity.si(1), identity.si(2), ct).enqueue().result(timeout=WAIT) == [
        1, 2, [3, 4]]


def test_a_group_is_a_list_whatever_its_size(app: Conveyor, jobs: Any) -> None:
    """Issue 50: a step after a nested chain ending in a one-member group got a bare value,
    but a list after the same group written directly. conveyor's rule (docs/workflows.md):
    a group's value is a list of any size, in every position; Celery unrolls a one-member
    group inside a chain instead (its test_canvas.py::test_chain_single_child_group_result)."""
    identity, echo = jobs("identity"), jobs("echo")
    nested = chain(identity.s(1), chain(identity.s(), group(identity.s())), echo.s())
    direct = chain(identity.s(1), group(identity.s()), echo.s())
    assert nested.enqueue().result(timeout=WAIT) == [[[1]], {}]
    assert direct.enqueue().result(timeout=WAIT) == [[[1]], {}]
    assert chain(identity.s(1), group(identity.s())).enqueue().result(timeout=WAIT) == [1]


# -- failures ------------------------------------------------------------------------------


def test_a_failed_chain_raises_the_jobs_own_exception(app: Conveyor, jobs: Any) -> None:
    """Celery integration test_chain::test_chain_on_error (``res.get()`` raises
    ``ExpectedException``, and so does the failed step's own result); before issue 50
    conveyor raised ``JobFailed``. It is still a ``JobFailed`` too, with the job's context.
    (Celery's last step is ``add.s(3, 4)``, which could never run after a step's result:
    conveyor refuses that canvas at enqueue.)"""
    add, fail, identity = jobs("add"), jobs("fail"), jobs("identity")
    run = chain(add.s(1, 2), fail.s(), identity.s()).enqueue()
    with pytest.raises(ExpectedError, match="Task expected to fail") as raised:
        run.result(timeout=WAIT)
    assert isinstance(raised.value, JobFailed) and raised.value.state == "dead"
    [failed] = nodes(app, run, "c.fail")
    assert raised.value.job_id == failed.id
    assert raised.value.job_traceback is not None and "ExpectedError" in raised.value.job_traceback
    with pytest.raises(ExpectedError):
        asyncio.run(run.aresult(timeout=WAIT))
    with pytest.raises(TypeError, match="after the 1 value it receives"):
        chain(add.s(1, 2), fail.s(), add.s(3, 4)).enqueue()


def test_errors_that_cannot_be_rebuilt_raise_job_failed(app: Conveyor, jobs: Any) -> None:
    """The job's class is rebuilt only from a module this process imported, and only when
    its message alone builds it: else ``JobFailed``, and nothing is imported for it."""
    needs_two, foreign, refuse = jobs("needs_two"), jobs("foreign"), jobs("refuse")
    for fn, text in ((needs_two, "7: two arguments"), (foreign, "raised from a module"),
                     (refuse, "refused")):
        ref = fn.enqueue()
        assert ref is not None
        with pytest.raises(JobFailed, match=text) as raised:
            ref.result(timeout=WAIT)
        assert type(raised.value) is JobFailed
    assert "tests.integration.apps.canvas_errors" not in sys.modules


def test_link_and_link_error(app: Conveyor, jobs: Any) -> None:
    """Celery integration test_link_error::test_link_error_using_signature (the errback
    runs, the job's result still raises its error), test_chain::
    test_chain_children_with_errbacks (only the child that ran and failed calls it),
    ::test_chain_children_with_callbacks (every child's callback runs) and test_group::
    test_errback_called_by_group_fail_multiple (once per failing member). The errback gets
    ``(job id, error, traceback, *own)`` as Celery's new-style errbacks do; an immutable one
    its own arguments."""
    fail, errback, identity, echo = jobs("fail"), jobs("errback"), jobs("identity"), jobs("echo")
    sig = fail.s()
    sig.link_error(errback.s("own"))
    ref = sig.enqueue()
    assert ref is not None
    with pytest.raises(ExpectedError):
        ref.result(timeout=WAIT)
    record = app.get_job(ref.id)
    assert record is not None and record.batch_id is not None
    [called] = nodes(app, record.batch_id, "conveyor.errback")
    assert called.state is JobState.SUCCEEDED
    seen = app_result(called)
    assert seen[:4] == [ref.id, "ExpectedError", True, "Task expected to fail"]
    assert seen[4].startswith("tests.integration.apps.canvas.ExpectedError") and seen[5] == [
        "own"]

    child = fail.si()
    child.link_error(errback.si("chained"))
    run = chain(child for _ in range(3)).enqueue()
    with pytest.raises(ExpectedError):
        run.result(timeout=WAIT)
    outcomes = [app_result(r) for r in nodes(app, run, "conveyor.errback")]
    called = [o for o in outcomes if o is not None]
    assert len(outcomes) == 3 and len(called) == 1
    assert called[0][:2] == ["immutable", ["chained"]]

    ok = identity.si(1337)
    ok.link(echo.s("cb"))
    run = chain(ok for _ in range(3)).enqueue()
    assert run.result(timeout=WAIT) == 1337
    assert [app_result(r) for r in nodes(app, run, "c.echo")] == [[[1337, "cb"], {}]] * 3

    g = group(*(identity.si(42) for _ in range(2)), *(fail.s() for _ in range(3)))
    g.link_error(errback.si("grouped"))
    run = g.enqueue()
    with pytest.raises(ExpectedError):
        run.result(timeout=WAIT)
    called_for = [app_result(r) for r in nodes(app, run, "conveyor.errback")]
    assert sum(o is not None for o in called_for) == 3


def test_a_canvas_link_gets_its_value_and_not_after_a_failure(app: Conveyor,
                                                              jobs: Any) -> None:
    """Celery integration test_group::test_callback_called_by_group (the callback runs
    after the group): conveyor's canvas link runs once the whole canvas succeeded, given
    its value (Celery links a group's callback to its first task, docs/workflows.md)."""
    identity, echo, fail = jobs("identity"), jobs("echo"), jobs("fail")
    g = group(identity.si(42), identity.si(1337))
    g.link(echo.s("after"))
    run = g.enqueue()
    assert run.result(timeout=WAIT) == [42, 1337]
    assert [app_result(r) for r in nodes(app, run, "c.echo")] == [[[[42, 1337], "after"], {}]]
    broken = chain(identity.s(1), fail.s())
    broken.link(echo.s("never"))
    run = broken.enqueue()
    with pytest.raises(ExpectedError):
        run.result(timeout=WAIT)
    [skipped] = nodes(app, run, "c.echo")
    assert skipped.state is JobState.CANCELLED and skipped.attempt == 0


def test_every_canvas_enqueues_and_waits_from_asyncio(app: Conveyor, jobs: Any) -> None:
    """Issue 50: ``await chain(...).aenqueue()`` and ``await run.aresult()`` did not exist,
    so an asyncio endpoint could not start a canvas without blocking its loop."""
    add, tsum = jobs("add"), jobs("tsum")

    async def main() -> list[Any]:
        run = await chain(add.s(1, 2), add.s(3)).aenqueue()
        chorded = await chord([add.s(1, 1), add.s(2, 2)], tsum.s()).aenqueue()
        ref = await add.s(2).aenqueue(40)
        assert ref is not None
        return [await run.aresult(timeout=WAIT), await chorded.aresult(timeout=WAIT),
                await ref.aresult(timeout=WAIT)]

    assert asyncio.run(main()) == [6, 6, 42]


def app_result(record: JobRecord) -> Any:
    """A stored job's decoded result."""
    return None if record.result is None else json.loads(record.result)

