"""Random sequences of lifecycle operations against every backend, checked against a model.

``JobMachine`` (a hypothesis ``RuleBasedStateMachine``) drives enqueue (one by one and in
blocks), dequeue, every acknowledgement, stale acknowledgements, heartbeats, lease expiry +
reclaim, cancel, kill, retry by hand, batch close and promotion, and after each step checks
that the storage agrees with a small model of where every job must be: per-state lists and
counts match, no job is in two states, nothing is lost, and the batch's counters, pages by
state and callbacks match the real job states.
``FlowMachine`` does the same for concurrency, order and unique keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from conveyor.core.clock import FakeClock
from conveyor.core.ids import new_id, new_ids
from conveyor.core.job import (
    TERMINAL_STATES,
    Ack,
    BatchSpec,
    ErrorInfo,
    FlowControl,
    JobState,
    Outcome,
)
from conveyor.errors import BatchClosedError
from conveyor.storage import Backend
from conveyor.storage.blocks import JobBlock
from conveyor.storage.workers import WorkerInfo
from tests.conformance.backends import BACKENDS
from tests.conformance.helpers import new_job_id, spec
from tests.faults.fuzzing import run_machine

LEASE = 30.0
MAX_RECOVERIES = 2
QUEUES = ("default", "other")
EVERYTHING = 1_000_000
RETRYABLE = frozenset({JobState.DEAD, JobState.FAILED, JobState.CANCELLED, JobState.RETRYING})
WAITING = frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.RETRYING})
AFTER_ACK = {
    Outcome.SUCCEEDED: JobState.SUCCEEDED,
    Outcome.FAILED: JobState.FAILED,
    Outcome.RETRY: JobState.RETRYING,
    Outcome.DEAD: JobState.DEAD,
    Outcome.INTERRUPTED: JobState.PENDING,
}
# Examples per backend: enough to find ordering bugs, few enough for < 60 s in total.
EXAMPLES = {"memory": 100, "sqlite": 30, "postgres": 20, "redis": 20, "redis_cluster": 10}
# Sentinel runs the same scripts as a single server (only the connection differs, and the
# conformance suite and the lifecycle model cover it): not fuzzed again, to spare CI time.
FUZZED = tuple(name for name in BACKENDS if name != "redis_sentinel")


@dataclass
class ModelJob:
    """Where the model says a job must be."""

    queue: str
    in_batch: bool
    state: JobState
    run_at: float | None = None
    recoveries: int = 0
    token: str | None = None
    lease_until: float = 0.0
    cancel_requested: bool = False  # asked while active: sticks until it ends


class JobMachine(RuleBasedStateMachine):
    """The lifecycle model; ``open_store`` is set per backend by the test below."""

    open_store: ClassVar[Callable[[FakeClock], Backend]]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = type(self).open_store(self.clock)
        self.worker = WorkerInfo(id="fuzz-worker", hostname="fuzz", pid=1, queues=QUEUES,
                                 concurrency=4, started_at=self.clock.now())
        self.jobs: dict[str, ModelJob] = {}
        # (job id, old token, the outcome applied with it; None when the lease was reclaimed)
        self.stale: list[tuple[str, str, Outcome | None]] = []
        self.batch_id = new_job_id("fuzz")
        callbacks = {m: spec("cb", name=m, job_id=f"{self.batch_id}-{m}")
                     for m in ("complete", "success", "death")}
        self.store.create_batch(BatchSpec(id=self.batch_id, callbacks=callbacks))
        self.closed = False
        self.completed = False
        self.success_expected = False
        self.died = False

    def teardown(self) -> None:
        self.store.close()

    # -- rules -------------------------------------------------------------------------------

    @rule(n=st.integers(1, 3), queue=st.sampled_from(QUEUES), in_batch=st.booleans(),
          delay=st.sampled_from([0.0, 0.0, 20.0]))
    def enqueue(self, n: int, queue: str, in_batch: bool, delay: float) -> None:
        run_at = self.clock.now() + delay if delay else None
        # Ids as the client makes them, so that bulk enqueues (runs on Redis) and these
        # interleave in one batch.
        specs = [spec(queue, batch_id=self.batch_id if in_batch else None, run_at=run_at,
                      job_id=new_id()) for _ in range(n)]
        if in_batch and self._batch_finished():
            with pytest.raises(BatchClosedError):
                self.store.enqueue(specs)
            return
        assert all(r.created for r in self.store.enqueue(specs))
        state = JobState.SCHEDULED if delay else JobState.PENDING
        for s in specs:
            self.jobs[s.id] = ModelJob(queue, in_batch, state, run_at=run_at)

    @rule(n=st.integers(1, 5), queue=st.sampled_from(QUEUES),
          delay=st.sampled_from([0.0, 0.0, 20.0]))
    def enqueue_block(self, n: int, queue: str, delay: float) -> None:
        """A bulk enqueue into the batch (ids that count up: on Redis, a run)."""
        run_at = self.clock.now() + delay if delay else None
        block = JobBlock(name="tests.noop", queue=queue, ids=new_ids(n),
                         payloads=['{"a":[],"k":{}}'] * n, run_at=run_at, batch_id=self.batch_id)
        if self._batch_finished():
            with pytest.raises(BatchClosedError):
                self.store.enqueue_block(block)
            return
        assert all(r.created for r in self.store.enqueue_block(block))
        state = JobState.SCHEDULED if delay else JobState.PENDING
        for job_id in block.ids:
            self.jobs[job_id] = ModelJob(queue, True, state, run_at=run_at)

    @rule(count=st.integers(1, 4),
          queues=st.sampled_from([("default",), ("other",), ("default", "other")]))
    def dequeue(self, count: int, queues: tuple[str, ...]) -> None:
        leased = self.store.dequeue(list(queues), "fuzz-worker", count, LEASE)
        ready = [m for m in self.jobs.values() if m.state is JobState.PENDING and m.queue in queues]
        assert len(leased) == min(count, len(ready))
        for job in leased:
            model = self.jobs[job.id]
            assert model.state is JobState.PENDING and model.queue in queues
            model.state, model.token = JobState.ACTIVE, job.token
            model.lease_until = self.clock.now() + LEASE

    @precondition(lambda self: self._active())
    @rule(data=st.data(), outcome=st.sampled_from(list(AFTER_ACK)),
          retry_in=st.sampled_from([0.0, 15.0]))
    def ack(self, data: st.DataObject, outcome: Outcome, retry_in: float) -> None:
        job_id = data.draw(st.sampled_from(self._active()))
        model = self.jobs[job_id]
        assert model.token is not None
        error = ErrorInfo("RuntimeError", "boom", "Traceback ...") if outcome in (
            Outcome.RETRY, Outcome.DEAD) else None
        ack = Ack(job_id, model.token, outcome, error=error, message="no",
                  retry_in=retry_in if outcome is Outcome.RETRY else None)
        assert self.store.ack([ack]) == [True]
        cancels = model.cancel_requested and outcome not in (Outcome.SUCCEEDED, Outcome.FAILED)
        self._release(job_id, JobState.CANCELLED if cancels else AFTER_ACK[outcome], outcome)
        if outcome is Outcome.RETRY:
            model.run_at = self.clock.now() + retry_in

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def stale_ack(self, data: st.DataObject) -> None:
        job_id, token, applied = data.draw(st.sampled_from(self.stale))
        # A replay of the very outcome applied with this token may be answered True (a
        # retried call); any other outcome on an old lease must be refused.
        outcome = Outcome.FAILED if applied is Outcome.SUCCEEDED else Outcome.SUCCEEDED
        assert self.store.ack([Ack(job_id, token, outcome, message="stale")]) == [False]

    @rule(seconds=st.sampled_from([10.0, LEASE + 1]))
    def expire_leases(self, seconds: float) -> None:
        now = self.clock.advance(seconds)
        expired = [i for i in self._active() if self.jobs[i].lease_until <= now]
        assert self.store.reclaim_expired(max_recoveries=MAX_RECOVERIES) == len(expired)
        for job_id in expired:
            model = self.jobs[job_id]
            model.recoveries += 1
            poisoned = model.recoveries > MAX_RECOVERIES
            if model.cancel_requested:  # a cancelled job must never run again
                self._release(job_id, JobState.CANCELLED)
            else:
                self._release(job_id, JobState.DEAD if poisoned else JobState.PENDING)

    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        leases = {i: self.jobs[i].token or "" for i in self._active()}
        gone = [(i, t) for i, t, _ in self.stale if i not in leases]
        lost = set()
        send_stale = data.draw(st.booleans())
        if gone and send_stale:
            job_id, token = data.draw(st.sampled_from(gone))
            leases[job_id] = token
            lost.add(job_id)
        reply = self.store.heartbeat(self.worker, leases, LEASE)
        assert reply.lost == lost
        for job_id in self._active():
            self.jobs[job_id].lease_until = self.clock.now() + LEASE

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        model = self.jobs[job_id]
        eligible = model.state in WAITING
        assert self.store.kill_jobs([job_id]) == int(eligible)
        if eligible:
            model.state = JobState.DEAD
            self.died = self.died or model.in_batch

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        model = self.jobs[job_id]
        result = self.store.cancel(job_id)
        if model.state in WAITING:
            model.state = JobState.CANCELLED
        elif model.state is JobState.ACTIVE:
            model.cancel_requested = True
        assert result is model.state

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def retry_by_hand(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        model = self.jobs[job_id]
        eligible = model.state in RETRYABLE
        assert self.store.retry_jobs([job_id]) == int(eligible)
        if eligible:
            model.state, model.run_at = JobState.PENDING, None
            model.cancel_requested = False

    @rule(seconds=st.sampled_from([0.0, 5.0, 20.0]))
    def promote(self, seconds: float) -> None:
        now = self.clock.advance(seconds)
        due = [m for m in self.jobs.values() if m.state in (JobState.SCHEDULED, JobState.RETRYING)
               and m.run_at is not None and m.run_at <= now]
        assert self.store.promote_due() == len(due)
        for model in due:
            model.state = JobState.PENDING

    @precondition(lambda self: not self.closed)
    @rule()
    def close_batch(self) -> None:
        self.store.close_batch(self.batch_id)
        self.closed = True

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def every_job_is_where_the_model_says(self) -> None:
        seen: dict[str, JobState] = {}
        for state in JobState:
            for queue in QUEUES:
                listed = self.store.list_jobs(state=state, queue=queue, limit=EVERYTHING)
                assert self.store.count_jobs(state=state, queue=queue) == len(listed)
                for record in listed:
                    assert record.state is state and record.id not in seen, record.id
                    seen[record.id] = state
        assert seen == {job_id: m.state for job_id, m in self.jobs.items()}

    @invariant()
    def batch_counters_and_callbacks_match_the_jobs(self) -> None:
        self._note_batch_moments()
        status = self.store.get_batch(self.batch_id)
        assert status is not None
        real = Counter(r.state.value for r in
                       self.store.list_jobs(batch_id=self.batch_id, limit=EVERYTHING))
        assert {k: v for k, v in status.counts.items() if v} == dict(real)
        assert status.total == sum(real.values()) == sum(m.in_batch for m in self.jobs.values())
        for state in JobState:
            want = sorted(i for i, m in self.jobs.items() if m.in_batch and m.state is state)
            assert self.store.count_jobs(state=state, batch_id=self.batch_id) == len(want)
            assert sorted(r.id for r in self.store.list_jobs(
                state=state, batch_id=self.batch_id, limit=EVERYTHING)) == want, state
        fired = list(status.callbacks_fired)
        assert len(fired) == len(set(fired)), f"a callback fired twice: {fired}"
        assert ("complete" in fired) == self.completed
        assert ("death" in fired) == self.died
        assert "success" not in fired or self.completed
        assert "success" in fired or not self.success_expected
        assert {r.name for r in self.store.list_jobs(queue="cb", limit=10)} == set(fired)

    # -- model helpers -----------------------------------------------------------------------

    def _active(self) -> list[str]:
        return sorted(i for i, m in self.jobs.items() if m.state is JobState.ACTIVE)

    def _release(self, job_id: str, state: JobState, outcome: Outcome | None = None) -> None:
        model = self.jobs[job_id]
        assert model.token is not None
        self.stale.append((job_id, model.token, outcome))
        model.token, model.state = None, state
        if state.terminal:
            model.cancel_requested = False
        if state is JobState.DEAD and model.in_batch:
            self.died = True

    def _batch_jobs(self) -> list[ModelJob]:
        return [m for m in self.jobs.values() if m.in_batch]

    def _batch_finished(self) -> bool:
        return self.closed and all(m.state in TERMINAL_STATES for m in self._batch_jobs())

    def _note_batch_moments(self) -> None:
        if self._batch_finished() and not self.completed:
            self.completed = True
            self.success_expected = all(m.state is JobState.SUCCEEDED for m in self._batch_jobs())


CONC_LIMIT = 2
FLOWS: dict[str, Callable[[str], FlowControl | None]] = {
    "conc": lambda key: FlowControl(concurrency_key=key, concurrency_limit=CONC_LIMIT),
    "order": lambda key: FlowControl(order_key=key),
    "unique": lambda key: FlowControl(unique_key=key),
    "plain": lambda key: None,
}


@dataclass
class FlowJob:
    """A job of the flow-control model: its kind of limit, key and enqueue order."""

    kind: str
    key: str
    seq: int
    state: JobState
    token: str | None = None
    run_at: float = 0.0
    cancel_requested: bool = False


class FlowMachine(RuleBasedStateMachine):
    """Concurrency, order and unique keys under random lifecycles: limits always hold, and a
    dequeue that returns less than asked leaves no job behind that was free to start."""

    open_store: ClassVar[Callable[[FakeClock], Backend]]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = type(self).open_store(self.clock)
        self.jobs: dict[str, FlowJob] = {}

    def teardown(self) -> None:
        self.store.close()

    @rule(kind=st.sampled_from(sorted(FLOWS)), key=st.sampled_from(["a", "b"]),
          n=st.integers(1, 3))
    def enqueue(self, kind: str, key: str, n: int) -> None:
        key = f"{kind}-{key}"
        for _ in range(n):
            s = spec("flow", flow=FLOWS[kind](key))
            [result] = self.store.enqueue([s])
            holder = self._unique_holder(key) if kind == "unique" else None
            if holder is not None:
                assert (result.id, result.created) == (holder, False)
                continue
            assert result.created and result.id == s.id
            self.jobs[s.id] = FlowJob(kind, key, len(self.jobs), JobState.PENDING)

    @rule(count=st.integers(1, 6))
    def dequeue(self, count: int) -> None:
        leased = self.store.dequeue(["flow"], "flow-worker", count, LEASE)
        for job in leased:
            model = self.jobs[job.id]
            assert model.state is JobState.PENDING
            if model.kind == "order":
                older = [o for o in self._of(model.key) if o.seq < model.seq]
                assert all(o.state in TERMINAL_STATES for o in older), "order key overtaken"
            model.state, model.token = JobState.ACTIVE, job.token
        if len(leased) < count:
            self._nothing_startable_left()

    @precondition(lambda self: self._active())
    @rule(data=st.data(), outcome=st.sampled_from(
        [Outcome.SUCCEEDED, Outcome.FAILED, Outcome.RETRY, Outcome.DEAD]),
        retry_in=st.sampled_from([0.0, 5.0]))
    def ack(self, data: st.DataObject, outcome: Outcome, retry_in: float) -> None:
        job_id = data.draw(st.sampled_from(self._active()))
        model = self.jobs[job_id]
        ack = Ack(job_id, model.token or "", outcome, message="no",
                  retry_in=retry_in if outcome is Outcome.RETRY else None)
        assert self.store.ack([ack]) == [True]
        cancels = model.cancel_requested and outcome in (Outcome.RETRY, Outcome.DEAD)
        model.state = JobState.CANCELLED if cancels else AFTER_ACK[outcome]
        model.token, model.cancel_requested = None, False
        model.run_at = self.clock.now() + retry_in

    @rule()
    def expire_leases(self) -> None:
        self.clock.advance(LEASE + 1)
        active = self._active()
        assert self.store.reclaim_expired(max_recoveries=1000) == len(active)
        for job_id in active:
            model = self.jobs[job_id]
            model.state = JobState.CANCELLED if model.cancel_requested else JobState.PENDING
            model.token, model.cancel_requested = None, False

    @rule(seconds=st.sampled_from([0.0, 5.0]))
    def promote(self, seconds: float) -> None:
        now = self.clock.advance(seconds)
        due = [m for m in self.jobs.values()
               if m.state is JobState.RETRYING and m.run_at <= now]
        assert self.store.promote_due() == len(due)
        for model in due:
            model.state = JobState.PENDING

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        model = self.jobs[job_id]
        if model.state in WAITING:
            model.state = JobState.CANCELLED
        elif model.state is JobState.ACTIVE:
            model.cancel_requested = True
        assert self.store.cancel(job_id) is model.state

    @invariant()
    def limits_hold_and_states_match(self) -> None:
        for key in {m.key for m in self.jobs.values()}:
            active = sum(m.state is JobState.ACTIVE for m in self._of(key))
            limit = {"conc": CONC_LIMIT, "order": 1}.get(key.split("-")[0], EVERYTHING)
            assert active <= limit, f"{active} active jobs of {key}"
        listed = self.store.list_jobs(queue="flow", limit=EVERYTHING)
        assert {r.id: r.state for r in listed} == {i: m.state for i, m in self.jobs.items()}

    def _nothing_startable_left(self) -> None:
        for key in {m.key for m in self.jobs.values()}:
            jobs = self._of(key)
            pending = [m for m in jobs if m.state is JobState.PENDING]
            busy = [m for m in jobs if m.state in (JobState.ACTIVE, JobState.RETRYING)]
            kind = key.split("-")[0]
            if kind == "conc":
                running = sum(m.state is JobState.ACTIVE for m in jobs)
                assert not pending or running >= CONC_LIMIT, f"{key} left behind"
            elif kind == "order":
                assert not pending or busy, f"{key} left behind"
            else:
                assert not pending, f"{key} left behind"

    def _of(self, key: str) -> list[FlowJob]:
        return [m for m in self.jobs.values() if m.key == key]

    def _active(self) -> list[str]:
        return sorted(i for i, m in self.jobs.items() if m.state is JobState.ACTIVE)

    def _unique_holder(self, key: str) -> str | None:
        return next((i for i, m in self.jobs.items()
                     if m.key == key and m.state not in TERMINAL_STATES), None)


@pytest.mark.parametrize("name", FUZZED)
def test_lifecycle_state_machine(name: str, request: pytest.FixtureRequest,
                                 tmp_path: Path) -> None:
    run_machine(JobMachine, name, request, tmp_path, EXAMPLES[name])


@pytest.mark.parametrize("name", FUZZED)
def test_flow_control_state_machine(name: str, request: pytest.FixtureRequest,
                                    tmp_path: Path) -> None:
    run_machine(FlowMachine, name, request, tmp_path, EXAMPLES[name] // 2)
