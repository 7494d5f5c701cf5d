"""``conveyor breakers`` and ``conveyor breakers close KEY`` (docs/operations.md, "Breakers").

The expectation: an operator sees which downstreams are cut off and why, and can close a
breaker by hand (resilience4j's ``transitionToClosedState``, Hatchet's and Sidekiq's
dashboards' controls), with the exit codes of the other actions.
"""

from __future__ import annotations

from conveyor.core.job import ErrorInfo, FlowControl, JobSpec, Outcome
from conveyor.storage import Backend
from tests.cli.conftest import Env, without_store
from tests.web.seed import run_one

STRIPE = FlowControl(breaker_key="stripe", breaker_open_after=2, breaker_within=60.0,
                     breaker_cool_down=30.0)


def open_stripe(storage: Backend) -> None:
    """Two jobs of breaker key "stripe" fail: the breaker opens."""
    for n in range(2):
        storage.enqueue([JobSpec(id=f"brk{n}", name="shop.register", queue="breakers",
                                 payload='{"a":[1,"x"],"k":{}}', flow=STRIPE)])
        run_one(storage, "breakers", Outcome.RETRY,
                error=ErrorInfo("ConnectionError", "stripe down", ""), retry_in=600.0)


def test_breakers_lists_the_open_one_and_close_closes_it(env: Env) -> None:
    code, out, _ = env.run("breakers")
    assert code == 0 and out.strip() == "no breakers open, none with recent errors"
    open_stripe(env.app.storage)
    code, out, _ = env.run("breakers")
    head, row = out.strip().splitlines()
    assert head.split()[:4] == ["KEY", "STATE", "ERRORS", "OPENED"]
    assert row.split()[:3] == ["stripe", "open", "2"]
    assert "2 errors within 60s; last: ConnectionError: stripe down" in row
    [listed] = env.json("breakers")
    assert (listed["key"], listed["state"], listed["trips"]) == ("stripe", "open", 1)
    code, out, _ = env.run("breakers", "close", "stripe")
    assert code == 0 and out.strip() == (
        "closed breaker 'stripe': its jobs start at the next fetch")
    assert env.app.storage.breakers() == []


def test_closing_a_closed_breaker_changes_nothing_and_exits_1(env: Env) -> None:
    code, out, _ = env.run("breakers", "close", "nothing")
    assert code == 1 and out.strip() == "breaker 'nothing' is not open: nothing to close"


def test_close_without_a_key_is_one_line_and_exit_2(env: Env) -> None:
    code, _, err = env.run("breakers", "close")
    assert code == 2
    assert without_store(err).strip().endswith("'breakers close' needs the key of the breaker")
    assert "Traceback" not in err
