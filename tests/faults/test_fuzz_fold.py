"""Random debounce and throttle calls against every backend, checked against a model.

``FoldMachine`` calls three keys (one per fold mode, plus a second debounce key) with
random arguments while the clock moves, due jobs are promoted, leased and acknowledged in
random order. After every step: each key has at most one scheduled job; a call joined that
job exactly when the model says it was still scheduled; the job's arguments and run time
are the ones its mode keeps (docs/flow-control.md, "Debounce and throttle").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.backends import BACKENDS
from tests.conformance.helpers import spec
from tests.faults.fuzzing import run_machine

QUEUE = "fold"
WAIT = 5.0
KEYS = {"d": "debounce", "d1": "debounce-first", "t": "throttle", "tl": "throttle-last"}
EXAMPLES = {"memory": 100, "sqlite": 60, "postgres": 25, "redis": 30, "redis_cluster": 12}
SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
FUZZED = tuple(name for name in BACKENDS if name != "redis_sentinel")


class FoldMachine(RuleBasedStateMachine):
    """Calls on one store; ``open_store`` is set per backend by the test below."""

    open_store: ClassVar[Callable[[FakeClock], Backend]]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = type(self).open_store(self.clock)
        # key -> (job id, args, run_at) of the job its calls join, per the model
        self.open: dict[str, tuple[str, int, float]] = {}
        self.leased: dict[str, str] = {}
        self.calls = 0

    def teardown(self) -> None:
        self.store.close()

    @rule(key=st.sampled_from(sorted(KEYS)), arg=st.integers(0, 10_000))
    def call(self, key: str, arg: int) -> None:
        mode = KEYS[key]
        self.calls += 1
        job_id = f"{key}-{self.calls:04d}"
        run_at = self.clock.now() + WAIT
        [result] = self.store.enqueue([spec(QUEUE, job_id=job_id, args=[arg], run_at=run_at,
                                            flow=FlowControl(fold_key=key, fold=mode))])
        held = self.open.get(key)
        if held is None:
            assert result.created and result.id == job_id, (key, result)
            self.open[key] = (job_id, arg, run_at)
            return
        assert (result.id, result.created) == (held[0], False), (key, held, result)
        keeps_last = mode in ("debounce", "throttle-last")
        moves = mode.startswith("debounce")
        self.open[key] = (held[0], arg if keeps_last else held[1],
                          run_at if moves else held[2])

    @rule(seconds=st.sampled_from([0.5, 2.0, 4.0, 6.0]))
    def advance_and_promote(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.store.promote_due()
        now = self.clock.now()
        self.open = {k: v for k, v in self.open.items() if v[2] > now}

    @rule(count=st.integers(1, 3))
    def lease(self, count: int) -> None:
        for job in self.store.dequeue([QUEUE], "fuzz", count, 30.0):
            self.leased[job.id] = job.token

    @rule()
    def ack_all(self) -> None:
        acks = [Ack(job_id, token, Outcome.SUCCEEDED) for job_id, token in self.leased.items()]
        assert all(self.store.ack(acks))
        self.leased.clear()

    @invariant()
    def each_key_has_one_scheduled_job_as_the_model_says(self) -> None:
        scheduled = self.store.list_jobs(state=JobState.SCHEDULED, queue=QUEUE, limit=1000)
        by_key: dict[str, list[Any]] = {}
        for rec in scheduled:
            key = rec.flow.fold_key if rec.flow else None
            by_key.setdefault(str(key), []).append(rec)
        for key, recs in by_key.items():
            assert len(recs) == 1, f"key {key}: {len(recs)} scheduled jobs"
        for key, (job_id, arg, run_at) in self.open.items():
            [rec] = by_key.get(key, [None])
            assert rec is not None and rec.id == job_id, (key, job_id)
            assert rec.args == [arg], (key, rec.args, arg)
            assert rec.run_at is not None and abs(rec.run_at - run_at) < 1e-3, (
                key, rec.run_at, run_at)


@pytest.mark.parametrize("name", FUZZED)
def test_fold_state_machine(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    run_machine(FoldMachine, name, request, tmp_path, EXAMPLES[name] * SCALE, steps=30)
