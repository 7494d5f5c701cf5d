"""One size rule (issue 51): ``max_payload`` holds what a job hands back and what a workflow
node is handed, not only what is enqueued.

- A result over the limit is not stored: the job ends ``dead`` at once (a second run would
  most likely return the same), its message naming the job and the size: Netflix
  Conductor likewise ends a task whose output is over its payload threshold with a terminal
  error (no retry) rather than storing it (Netflix/conductor#574, #3272).
- A fan-in node whose parents' results would make its arguments larger than the limit ends
  ``failed`` by the graph, its message naming the node and the size (the storage side of
  that is in tests/conformance/test_workflow_sizes.py, on every store).
"""

from __future__ import annotations

import pytest

from conveyor import Conveyor, JobState, chord
from conveyor.errors import JobFailed
from conveyor.testing import drain
from conveyor.workflow.canvas import Run

LIMIT = 1000


@pytest.fixture
def small(app: Conveyor) -> Conveyor:
    app.max_payload = LIMIT
    return app


def test_a_result_over_max_payload_ends_the_job_dead(small: Conveyor) -> None:
    reported: list[str] = []
    small.on_error(lambda report: reported.append(str(report.exception)))

    @small.job(name="big")
    def big(n: int) -> str:
        return "z" * n

    ok, too_big = big.enqueue(900), big.enqueue(5000)
    assert drain(small) == 2
    assert ok.result(timeout=1) == "z" * 900
    record = too_big.status()
    assert record.state is JobState.DEAD and record.result is None and record.attempt == 1
    message = (f"job big {too_big.id} returned 5,002 bytes, over max_payload (1,000 bytes); "
               "store large results elsewhere and return a reference")
    assert record.message == message
    assert reported == [message]  # error hooks hear of it, as of any death
    with pytest.raises(JobFailed, match="over max_payload"):
        too_big.result(timeout=1)


def _chord(app: Conveyor, parts: int, size: int) -> Run:
    """A chord of ``parts`` results of ``size`` characters each, its body counting them."""

    @app.job(name="part")
    def part(i: int) -> str:
        return f"{i}" * size

    @app.job(name="join")
    def join(results: list[str]) -> int:
        return sum(len(r) for r in results)

    return chord([part.s(i) for i in range(parts)], join.s()).enqueue()


def test_a_chords_body_over_max_payload_ends_failed_naming_it(small: Conveyor) -> None:
    run = _chord(small, 5, 400)
    assert drain(small) == 5  # the body never runs
    [body] = run.tails
    record = body.status()
    assert record.state is JobState.FAILED
    assert record.message is not None and record.message.startswith(f"join {body.id}: its "
                                                                    "parents' results make")
    assert record.message.endswith("bytes, over max_payload (1,000 bytes)")


def test_a_chord_under_max_payload_runs_its_body(small: Conveyor) -> None:
    run = _chord(small, 3, 100)
    drain(small)
    assert run.result(timeout=1) == 300
