"""One size rule: a workflow node's arguments, once its parents' results are put in them, are
held to the limit every enqueued payload is (``Node.limit``, the client's ``max_payload``).

A chord of five 400-byte results under a 1,000-byte limit would hand its body 2,000 bytes:
the graph ends the body ``failed`` instead (as a failed parent would), its message naming
the node and the size; the payload it would have run with is never stored. Celery has no
such rule (a chord body gets whatever its header returned); the rule here is conveyor's own
``max_payload`` (docs/api.md, "Size"), applied where the arguments are assembled.
"""

from __future__ import annotations

import json

from conveyor.core.job import Ack, BatchSpec, JobState, Node, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import new_job_id, spec, state_of, take

LIMIT = 1000


def _fan_in(backend: Backend, parents: int, results: str = "list") -> tuple[list[str], str]:
    """``parents`` roots and one node after them (its parents' results in its arguments,
    held to ``LIMIT``); returns (root ids, the node's id)."""
    workflow = new_job_id("w")
    backend.create_batch(BatchSpec(workflow, kind="workflow"))
    roots = [new_job_id("p") for _ in range(parents)]
    join = new_job_id("j")
    specs = [spec("wf", name="step.join", job_id=join, batch_id=workflow,
                  node=Node(tuple(roots), (), "fail", results, LIMIT))]
    specs += [spec("wf", name="step.part", job_id=r, batch_id=workflow,
                   node=Node((), (join,))) for r in roots]
    assert all(r.created for r in backend.enqueue(specs))
    backend.close_batch(workflow)
    return roots, join


def _succeed_all(backend: Backend, result: object) -> None:
    leased = take(backend, ["wf"], count=100)
    acks = [Ack(j.id, j.token, Outcome.SUCCEEDED, result=json.dumps(result)) for j in leased]
    assert backend.ack(acks) == [True] * len(acks)


def test_a_fan_in_over_the_limit_ends_failed_naming_the_node_and_its_size(
        backend: Backend) -> None:
    roots, join = _fan_in(backend, 5)
    _succeed_all(backend, "x" * 400)  # each result alone is well under the limit
    assert state_of(backend, join) is JobState.FAILED
    record = backend.get_job(join)
    assert record is not None and record.args == []  # the 2 KB arguments were never stored
    size = len(json.dumps({"a": [["x" * 400] * 5], "k": {}}, separators=(",", ":")))
    assert record.message == (f"step.join {join}: its parents' results make its arguments "
                              f"{size:,} bytes, over max_payload ({LIMIT:,} bytes)")
    # A retry of the node by hand would assemble the same: refused, with the same reason.
    assert backend.retry_jobs([join]) == 0
    assert backend.retry_refusals([join]) == {join: f"job {join} not retried: "
                                              f"{record.message}"}
    assert [state_of(backend, r) for r in roots] == [JobState.SUCCEEDED] * 5


def test_a_fan_in_under_the_limit_is_released_with_every_result(backend: Backend) -> None:
    _, join = _fan_in(backend, 2)
    _succeed_all(backend, "x" * 400)
    record = backend.get_job(join)
    assert record is not None and record.state is JobState.PENDING
    assert record.args == [["x" * 400] * 2]


def test_one_parents_result_over_the_limit_fails_its_child(backend: Backend) -> None:
    """``results="one"``: the chain's step gets the one result itself, held the same way."""
    _, join = _fan_in(backend, 1, results="one")
    _succeed_all(backend, "y" * 2000)
    assert state_of(backend, join) is JobState.FAILED
    record = backend.get_job(join)
    assert record is not None and "over max_payload (1,000 bytes)" in (record.message or "")
