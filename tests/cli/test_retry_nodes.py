"""Issue 51's retry by hand, from the places an operator retries: ``conveyor jobs retry``,
``conveyor batch retry`` and the dashboard's action endpoint (its "Retry N failed" button).

The workflow is the issue's: ``a`` raises ``Fail``, ``b`` gets ``a``'s result (``results="one"``).
Both settle; retrying ``b`` alone must not run it with no argument (it is refused, naming
``a``), and retrying the workflow's failures re-runs ``a`` then ``b`` with ``a``'s result, as
Airflow's "clear" of a failed run re-runs its failed task and the tasks its failure held.
The stores' side is tested on every backend in tests/conformance/test_workflow_retry.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, Fail, JobState
from conveyor.cli.main import main
from conveyor.http.server import RunningServer
from conveyor.testing import drain
from conveyor.web import create_app
from tests.web.conftest import Client


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(f"sqlite:///{tmp_path / 'wf.db'}")
    yield app
    app.close()


def _the_issues_workflow(app: Conveyor) -> tuple[str, str, str]:
    """Enqueue and drain it; returns (workflow id, a, b)."""
    attempts: list[int] = []

    @app.job(name="boom")
    def boom() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise Fail("the feed was empty")
        return 21

    @app.job(name="double")
    def double(n: int) -> int:
        return n * 2

    wf = app.workflow(description="issue 51")
    a = wf.add(boom.s())
    b = wf.add(double.s(), after=[a], results="one")
    wf.enqueue()
    drain(app)
    assert [app.get_job(r.id).state for r in (a, b)] == [  # type: ignore[union-attr]
        JobState.FAILED, JobState.FAILED]
    return wf.id, a.id, b.id


def _cli(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv, "--url", url])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_refuses_the_child_and_retries_the_workflow_from_its_root(
        app: Conveyor, capsys: pytest.CaptureFixture[str]) -> None:
    wf, a, b = _the_issues_workflow(app)
    url = app.storage.url
    code, out, err = _cli(capsys, url, "jobs", "retry", b)
    assert code == 1
    assert out == "retried 0 of 1 job(s)\n"
    # the last line (a command may first say which store it read)
    assert err.splitlines()[-1] == (f"job {b} not retried: its parent boom {a} ended failed; "
                                    f"retry {a} and this job waits for it again")
    assert app.get_job(b).state is JobState.FAILED  # type: ignore[union-attr]
    code, out, err = _cli(capsys, url, "batch", "retry", wf)
    assert code == 0, err
    assert out == (f"retried 1 failed and dead job(s) of batch {wf}; 1 node(s) the workflow "
                   "had ended wait for them again\n")
    assert drain(app) == 2
    record = app.get_job(b)
    assert record is not None and record.state is JobState.SUCCEEDED
    assert record.args == [21] and record.result == "42"


def test_the_dashboard_retries_a_workflows_failures_from_their_roots(app: Conveyor) -> None:
    wf, a, b = _the_issues_workflow(app)
    server = RunningServer(create_app(app, None), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        client.get("/")
        one = client.post("/action", {"op": "retry", "ids": b, "next": "/",
                                      "csrf": client.csrf()})
        assert one.status == 303
        flash = client.get("/").body
        assert f"retried 0 job(s); job {b} not retried: its parent boom {a} ended" in flash
        assert "Retry 2 failed" in client.get(f"/batches/{wf}").body
        every = client.post("/action", {"op": "retry-batch", "batch": wf, "state": "failed",
                                        "next": "/", "csrf": client.csrf()})
        assert every.status == 303
        assert "retried 1 failed job(s) of batch" in client.get("/").body
    finally:
        server.stop()
    assert [app.get_job(i).state for i in (a, b)] == [  # type: ignore[union-attr]
        JobState.PENDING, JobState.WAITING]
    assert drain(app) == 2
    assert app.get_job(b).result == "42"  # type: ignore[union-attr]
