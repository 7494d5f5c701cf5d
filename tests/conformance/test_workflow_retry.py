"""A retry by hand of a workflow node never runs it without its parents' outcome.

The expectation is the one of DAG engines whose tasks are re-run by hand: Airflow's "clear"
puts a task back to be scheduled by its trigger rule (a task whose upstream failed becomes
``upstream_failed`` again), ecFlow's "rerun" puts a task back to queued where "it honours any
dependencies that would hold the job". conveyor does the same inside each store's retry step:
a node the graph never released goes back to ``waiting`` and is decided again by its parents,
or, when their outcomes would end it again, the retry is refused with a line naming the job
to retry instead (docs/workflows.md, "Retry a node by hand").
"""

from __future__ import annotations

import json

from conveyor.core.job import EventKind, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import boom, kinds_of
from tests.conformance.test_workflows import Graph


def _result(value: object) -> dict[str, object]:
    return {"result": json.dumps(value)}


def test_a_node_the_graph_failed_is_refused_naming_its_parent(backend: Backend) -> None:
    """The issue's case: ``b`` (results of ``a``) ended failed because ``a`` died; retrying
    ``b`` alone must not run it with no arguments."""
    g = Graph(backend, {"a": [], "b": ["a"]}, results=["b"])
    g.run("a", Outcome.DEAD, error=boom("disk full"))
    assert g.states() == {"a": "dead", "b": "failed"}
    assert backend.retry_jobs([g.ids["b"]]) == 0
    assert g.states() == {"a": "dead", "b": "failed"}  # nothing moved, nothing will run
    assert EventKind.RETRIED not in kinds_of(backend, g.ids["b"])
    assert backend.retry_refusals([g.ids["b"]]) == {
        g.ids["b"]: f"job {g.ids['b']} not retried: its parent step.a {g.ids['a']} ended dead; "
                    f"retry {g.ids['a']} and this job waits for it again"}
    # Retrying the parent it names re-runs the parent, then the child with its result.
    assert backend.retry_jobs([g.ids["a"]]) == 1
    assert g.states() == {"a": "pending", "b": "waiting"}
    g.run("a", **_result(21))
    assert g.state("b") is JobState.PENDING
    record = backend.get_job(g.ids["b"])
    assert record is not None and record.args == [[21], "b"]


def test_skipped_and_deeper_nodes_name_the_ancestor_to_retry(backend: Backend) -> None:
    """A node skipped because its parent was skipped names the job whose own failure started
    it, and so does a ``fail`` node below a node the graph failed; the job that ran and
    failed on its own is retried as any job."""
    g = Graph(backend, {"root": [], "s": ["root"], "s2": ["s"], "f": ["root"], "f2": ["f"]},
              policy={"s": "skip", "s2": "continue"})
    g.run("root", Outcome.FAILED, message="bad row")
    assert g.states() == {"root": "failed", "s": "cancelled", "s2": "cancelled",
                          "f": "failed", "f2": "failed"}
    held = [g.ids[n] for n in ("s", "s2", "f", "f2")]
    assert backend.retry_jobs(held) == 0
    refusals = backend.retry_refusals([*held, g.ids["root"]])
    assert sorted(refusals) == sorted(held)  # the root is not refused
    root = g.ids["root"]
    assert refusals[g.ids["s"]].endswith(
        f"its parent step.root {root} ended failed; retry {root} and this job waits for it "
        "again")
    for deeper in ("s2", "f2"):
        assert f"step.root {root}, which it waits on, ended failed; retry {root}" in \
            refusals[g.ids[deeper]]
    assert backend.retry_jobs([root]) == 1
    assert g.states() == {"root": "pending", "s": "waiting", "s2": "waiting", "f": "waiting",
                          "f2": "waiting"}


def test_a_workflows_failures_retried_together_rerun_from_their_roots(backend: Backend) -> None:
    """Retrying every failure of a workflow (``conveyor batch retry``, the dashboard's button)
    in one call retries the roots; the nodes the graph ended wait for them again, whichever
    order the ids come in."""
    g = Graph(backend, {"a": [], "b": ["a"], "c": ["b"]}, results=["b", "c"])
    g.run("a", Outcome.DEAD, error=boom())
    failures = [g.ids["c"], g.ids["b"], g.ids["a"]]
    assert backend.retry_jobs(failures) == 1
    assert g.states() == {"a": "pending", "b": "waiting", "c": "waiting"}
    g.run("a", **_result(1))
    g.run("b", **_result(2))
    record = backend.get_job(g.ids["c"])
    assert record is not None and record.state is JobState.PENDING
    assert record.args == [[2], "c"]


def test_a_node_cancelled_while_it_waited_waits_or_is_released_by_its_parents(
        backend: Backend) -> None:
    """A node cancelled by hand before its parents settled goes back to waiting (not to
    pending with no inputs); once they have succeeded, its retry releases it with their
    results in the same step."""
    g = Graph(backend, {"a": [], "b": ["a"], "c": ["a"]}, results=["b", "c"])
    assert backend.cancel(g.ids["b"]) is JobState.CANCELLED
    assert backend.retry_jobs([g.ids["b"]]) == 1
    assert g.state("b") is JobState.WAITING
    assert backend.cancel(g.ids["c"]) is JobState.CANCELLED
    g.run("a", **_result("A"))
    assert g.states() == {"a": "succeeded", "b": "pending", "c": "cancelled"}
    assert backend.retry_jobs([g.ids["c"]]) == 1
    record = backend.get_job(g.ids["c"])
    assert record is not None and record.state is JobState.PENDING
    assert record.args == [["A"], "c"]  # the parent's result, once
    assert kinds_of(backend, g.ids["c"])[-2:] == [EventKind.RETRIED, EventKind.RELEASED]


def test_a_released_node_is_retried_with_the_arguments_it_was_given(backend: Backend) -> None:
    """A node that was released and then failed on its own runs again as it was released:
    its parents' results are not put in front of its arguments a second time."""
    g = Graph(backend, {"a": [], "b": ["a"]}, results=["b"])
    g.run("a", **_result(7))
    g.run("b", Outcome.FAILED, message="its own failure")
    assert backend.retry_refusals([g.ids["b"]]) == {}
    assert backend.retry_jobs([g.ids["b"]]) == 1
    record = backend.get_job(g.ids["b"])
    assert record is not None and record.state is JobState.PENDING
    assert record.args == [[7], "b"]


def test_a_node_of_a_cancelled_workflow_is_refused(backend: Backend) -> None:
    """Nothing of a cancelled workflow is released, so a waiting node it cancelled is not
    retried either: the refusal says so."""
    g = Graph(backend, {"a": [], "b": ["a"]})
    assert backend.cancel_batch(g.id) == 2
    assert backend.retry_jobs([g.ids["b"]]) == 0
    assert backend.retry_refusals([g.ids["b"]]) == {
        g.ids["b"]: f"job {g.ids['b']} not retried: its workflow was cancelled, so none of its "
                    "waiting nodes runs"}


def test_a_parent_and_child_ended_in_one_step_keep_an_exact_count(backend: Backend) -> None:
    """A parent and its waiting child killed in one call settle in one step: the child's
    count of unsettled parents must reach zero, or its retry would wait for a parent that
    has already ended (it is refused, naming that parent)."""
    g = Graph(backend, {"a": [], "b": ["a"]})
    assert backend.kill_jobs([g.ids["b"], g.ids["a"]]) == 2
    assert backend.retry_jobs([g.ids["b"]]) == 0
    assert g.states() == {"a": "dead", "b": "dead"}
    assert f"its parent step.a {g.ids['a']} ended dead" in backend.retry_refusals(
        [g.ids["b"]])[g.ids["b"]]


def test_retry_all_steps_over_refused_nodes_to_the_jobs_behind_them(backend: Backend) -> None:
    """``retry_all(FAILED)`` (the dead/failed set's "retry all") retries the jobs it can,
    however many refused nodes come first in the state's order (more than one call's worth
    on Redis, which walks the index a chunk at a time)."""
    children = {f"c{i:02d}": ["y"] for i in range(60)}
    g = Graph(backend, {"y": [], **children, "x": []})  # ids sort c.., x.., y..
    g.run("y", Outcome.DEAD, error=boom())
    g.run("x", Outcome.FAILED, message="its own failure")
    assert backend.count_jobs(state=JobState.FAILED) == 61
    assert backend.retry_all(JobState.FAILED) == 1
    assert g.state("x") is JobState.PENDING
    assert backend.count_jobs(state=JobState.FAILED) == 60
