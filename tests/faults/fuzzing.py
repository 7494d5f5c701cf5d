"""Running a storage state machine on one backend: the one harness of the fuzzers
(``test_fuzz_*.py``). Each machine class has an ``open_store(clock)`` class attribute, set
here per backend; every example gets its own store (a new file, prefix or memory instance)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from conveyor.core.clock import FakeClock
from conveyor.storage import Backend
from tests.conformance.backends import backend_url, open_backend


def run_machine(machine: type[RuleBasedStateMachine], name: str, request: pytest.FixtureRequest,
                tmp_path: Path, examples: int, steps: int = 25) -> None:
    """Run ``machine`` on backend ``name`` for ``examples`` examples of up to ``steps``."""
    def open_store(clock: FakeClock) -> Backend:
        where = tmp_path / uuid.uuid4().hex[:8]
        where.mkdir()
        return open_backend(name, backend_url(name, where, request.getfixturevalue), clock)

    open_store(FakeClock()).close()  # fail now, not inside hypothesis, when it cannot open
    bound: Any = type(f"{machine.__name__}_{name}", (machine,),
                      {"open_store": staticmethod(open_store)})
    run_state_machine_as_test(bound, settings=settings(  # type: ignore[no-untyped-call]
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
