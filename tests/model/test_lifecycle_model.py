"""The job lifecycle, end to end: a real worker against a plain-Python model of the promise.

A hypothesis state machine drives real workers (``Launcher`` components ticked under a fake
clock, bodies on the real thread pool and asyncio loop) with jobs that succeed, ``Fail``,
raise, run past their timeout, log, are sync or async, or have a name the worker does not
know; interleaved with operators (cancel a job or a batch, retry by hand, pause and resume a
queue), time passing, and workers that go quiet, stop, die without a word and are replaced by
old or new code. After every step each job's stored state, attempt, errors, message and
sequence of event kinds must equal the model's (``tests/model/promise.py``, which encodes
docs/api.md "Job lifecycle rules"); at the end everything is driven to rest and compared
again. On memory, SQLite, Redis and Redis Cluster.

Runs in CI derandomized (``ci`` profile); ``MODEL_EXAMPLES`` raises the example count for a
longer local hunt.
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import conveyor.core.retry
from conveyor import Conveyor, FakeClock
from conveyor.core.job import JobRecord, LeasedJob
from conveyor.core.node import PARENT_FAILURE_POLICIES
from conveyor.storage.rules import REDELIVERED
from tests.model.durable_promise import DURABLE, EVENT, event_sent
from tests.model.durable_promise import run as run_durable
from tests.model.harness import (
    LEASE,
    MAX_RETRIES,
    NEW_JOB,
    QUEUES,
    SOLO,
    SYNC_TIMEOUT,
    Bodies,
    Worker,
    register,
)
from tests.model.promise import (
    BOOM,
    HANDED_BACK,
    MAX_RECOVERIES,
    RETRYABLE,
    SHUT_DOWN,
    Expected,
    backoff_window,
    timeout_message,
    unknown_message,
)
from tests.model.stores import BACKENDS, StoreFactory, store_factory

# Knobs to look past one known difference (e.g. against old code): MODEL_WITHOUT=unknown runs
# only new code, MODEL_WITHOUT=kill stops workers instead of killing them; MODEL_IGNORE=
# message,errors leaves those fields out of the comparison.
WITHOUT = frozenset(os.environ.get("MODEL_WITHOUT", "").split(","))
REACHED: Counter[str] = Counter()  # event kinds reached, per example (MODEL_STATS=1 prints)
EXAMPLES = int(os.environ.get("MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("MODEL_STEPS", "20"))
# MODEL_NO_SHRINK=1 reports the first failing run as found (a quick look while debugging).
PHASES = tuple(p for p in Phase if not (os.environ.get("MODEL_NO_SHRINK") and p is Phase.shrink))

STEP = st.sampled_from(["ok", "log", "fail", "raise", "hold", "hold"])
PLAN = st.lists(STEP, min_size=1, max_size=3).map(tuple)
# A durable job's plan: actions run from the top on every attempt (durable_promise.py).
DURABLE_PLAN = st.lists(st.sampled_from(["step", "flaky", "sleep", "wait"]), min_size=1,
                        max_size=4).map(tuple)
JOB = st.one_of(st.tuples(st.sampled_from(["sync", "sync", "async", NEW_JOB, SOLO]),
                          st.sampled_from(QUEUES), PLAN),
                st.tuples(st.just(DURABLE), st.sampled_from(QUEUES), DURABLE_PLAN))
FINISH = st.sampled_from(["ok", "log", "fail", "raise"])


def _released(job: Expected) -> bool:
    """The graph released the node since it last went back to waiting (its record's
    payload holds its parent's result)."""
    marks = [k for k in job.kinds if k in ("released", "reopened", "retried")]
    return bool(marks) and marks[-1] == "released"


def make_machine(open_store: StoreFactory,
                 broker: Callable[[], str] | None = None) -> type[RuleBasedStateMachine]:
    """The state machine class for one backend; with ``broker`` (a new broker URL per
    example) the workers take their jobs from the broker's deliveries (docs/brokers.md)."""

    class Lifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.clock = FakeClock()
            self.storage = open_store(self.clock)
            self.broker_url = broker() if broker is not None else None
            # Jobs active under a killed worker's lease whose message the broker hands out
            # again (its connection died with it): the next worker takes them over on
            # delivery, without waiting for the lease.
            self.redelivered: set[str] = set()
            self.bodies = Bodies()
            self.client = register(Conveyor(storage=self.storage, clock=self.clock),
                                   self.bodies, new_code=True)
            self.jobs: dict[str, Expected] = {}
            self.batches: dict[str, list[str]] = {}
            # Workflows of two nodes: child id -> (parent id, on_parent_failure), and the
            # children the graph ended (failed or skipped), which a parent's retry re-opens.
            self.edges: dict[str, tuple[str, str]] = {}
            self.graph_ended: set[str] = set()
            self.paused: set[str] = set()
            self.workers: list[Worker] = []
            self.worker: Worker | None = None
            # Bodies parked at their gate whose outcome the model still expects to count.
            self.held: dict[tuple[str, int], str] = {}  # (job id, attempt) → worker id
            # Parked, but their outcome is void (a dict: insertion order keeps draws stable).
            self.orphans: dict[tuple[str, int], None] = {}

        # -- helpers ------------------------------------------------------------------------
        def now(self) -> float:
            return self.clock.now()

        def start_worker(self, new_code: bool) -> None:
            new_code = new_code or "unknown" in WITHOUT
            app = register(Conveyor(storage=self.storage, clock=self.clock,
                                    broker=self.broker_url), self.bodies, new_code=new_code)
            worker = Worker(app, self.clock, self.bodies, f"w{len(self.workers) + 1}",
                            new_code)
            self.workers.append(worker)
            self.worker = worker

        def live(self) -> Worker | None:
            worker = self.worker
            return worker if worker is not None and worker.alive else None

        def held_by(self, worker: Worker) -> list[tuple[str, int]]:
            return [key for key, wid in self.held.items() if wid == worker.id]

        def orphan(self, key: tuple[str, int]) -> None:
            self.held.pop(key, None)
            self.orphans[key] = None

        def run(self, job: Expected, step: str) -> None:
            """The model's outcome of the current attempt ending with ``step``."""
            if step in ("ok", "log"):
                job.succeeded(logged=step == "log")
            elif step == "fail":
                job.failed()
            elif step == "raise":
                job.errored(f"RuntimeError: {BOOM}", self.now())  # the class is kept
            else:
                raise AssertionError(step)

        def observe_fetch(self, worker: Worker, free: int) -> None:
            self.settle_graph()
            eligible = [j.id for j in self.jobs.values()
                        if j.queue not in self.paused and (j.state == "pending" or (
                            j.id in self.redelivered and not j.cancel_requested
                            and j.recoveries < MAX_RECOVERIES))]
            want = 0 if worker.quiet else min(free, len(eligible))
            rounds = worker.fetch_rounds(want)
            self.observe_takeovers()
            ids = [job.id for leased in rounds for job in leased]
            allowed = set(eligible)
            for leased in rounds:
                got = [job.id for job in leased]
                assert set(got) <= allowed, (
                    f"leased {got}, but only {sorted(allowed)} were pending at {self.now()}: "
                    f"{[(j.id, j.state, j.due) for j in self.jobs.values()]}")
                self.observe_round(worker, leased)
                # Through a broker the fetch goes on after the round's acks: a workflow node
                # they released may be published and leased in the next round.
                self.settle_graph()
                allowed |= {j.id for j in self.jobs.values()
                            if j.state == "pending" and j.queue not in self.paused}
            assert len(ids) == want, f"leased {ids} with {free} free slots of {eligible}"

        def observe_takeovers(self) -> None:
            """A redelivered message of a dead worker's job was taken over when its record
            counts one more recovery: when that happens is the broker's timing, what it
            does to the record is the model's (``recovered``: cancelled if asked, dead past
            the limit, else pending and leased at once)."""
            for job_id in sorted(self.redelivered):
                job = self.jobs[job_id]
                record = self.storage.get_job(job_id)
                assert record is not None
                if job.state != "active":
                    self.redelivered.discard(job_id)
                elif record.recoveries > job.recoveries:
                    self.redelivered.discard(job_id)
                    job.recovered(REDELIVERED)

        def observe_round(self, worker: Worker, leased: list[LeasedJob]) -> None:
            suspect_here = any(self.jobs[jid].recoveries for jid, _ in self.held_by(worker))
            for leased_job in leased:
                job = self.jobs[leased_job.id]
                timeout = SYNC_TIMEOUT if job.name in ("sync", SOLO) else None  # newjob: none
                job.leased(worker.id, self.now(), LEASE, timeout)
                known = job.name != NEW_JOB or worker.new_code
                if job.recoveries and suspect_here:
                    job.interrupted(HANDED_BACK)
                    continue
                if job.recoveries and known:
                    suspect_here = True
                if not known:
                    job.errored(unknown_message(job.name), self.now(),
                                backoff_window(job.errors + 1))
                    continue
                if job.name == DURABLE:
                    run_durable(job, self.now())
                    continue
                step = job.step()
                if step == "hold":
                    self.held[(job.id, job.attempt)] = worker.id
                else:
                    self.run(job, step)

        def heartbeat(self, worker: Worker) -> None:
            ending = []
            for key in self.held_by(worker):
                job = self.jobs[key[0]]
                job.lease_until = self.now() + LEASE
                if job.cancel_requested and not job.ctx_cancelled:
                    job.ctx_cancelled = True
                    if job.name == "async":  # cancelled at its next await
                        self.held.pop(key)
                        job.cancelled_running()
                        ending.append(key)
            worker.launcher.heartbeat.tick()
            worker.settle(ending)

        def promote(self, worker: Worker | None) -> None:
            if worker is not None:
                worker.tick(worker.launcher.poller.tick)
            else:
                self.storage.promote_due()
            now = self.now()
            for job in self.jobs.values():
                if job.state == "scheduled" and job.due is not None and job.due[1] <= now:
                    job.promoted()  # a durable job's sleep or wait timed out
                    job.durable.suspended_for = None
                    continue
                if job.state != "retrying" or job.due is None:
                    continue
                low, high = job.due
                if high <= now:
                    job.promoted()
                elif low <= now:  # inside the backoff's jitter: either is right, see which
                    record = self.storage.get_job(job.id)
                    assert record is not None
                    if record.state.value == "pending":
                        job.promoted()

        def recover(self, worker: Worker | None) -> None:
            if worker is not None:
                worker.tick(worker.launcher.recoverer.tick)
            else:
                self.storage.reclaim_expired(5)
            now = self.now()
            for job in self.jobs.values():
                if job.state == "active" and job.lease_until <= now:
                    assert job.holder is not None
                    held_live = any(w.id == job.holder and w.alive for w in self.workers)
                    assert not held_live, f"{job.id}: a live worker's lease expired"
                    self.orphan((job.id, job.attempt))
                    self.redelivered.discard(job.id)
                    job.recovered()

        # -- rules --------------------------------------------------------------------------
        @initialize(new_code=st.booleans(), jobs=st.lists(JOB, min_size=1, max_size=4),
                    batch=st.lists(JOB, max_size=3))
        def first_worker(self, new_code: bool, jobs: list[tuple[str, str, tuple[str, ...]]],
                         batch: list[tuple[str, str, tuple[str, ...]]]) -> None:
            """A worker, a few jobs waiting, maybe a batch, and a first fetch."""
            self.start_worker(new_code)
            for spec in jobs:
                self.enqueue(spec)
            if batch:
                self.enqueue_batch(batch)
            self.fetch()

        @rule(spec=JOB)
        def enqueue(self, spec: tuple[str, str, tuple[str, ...]]) -> None:
            name, queue, plan = spec
            ref = self.client.enqueue(name, kwargs={"plan": list(plan)}, queue=queue,
                                      retry=MAX_RETRIES)
            assert ref is not None
            self.jobs[ref.id] = Expected(ref.id, name, queue, plan, MAX_RETRIES)

        @rule(parent=JOB, child=JOB, policy=st.sampled_from(PARENT_FAILURE_POLICIES))
        def enqueue_workflow(self, parent: tuple[str, str, tuple[str, ...]],
                             child: tuple[str, str, tuple[str, ...]], policy: str) -> None:
            wf = self.client.workflow()
            refs = []
            for (name, queue, plan), after in ((parent, ()), (child, refs)):
                fn = self.client.registry.get(name)
                assert fn is not None
                step = fn.options(queue=queue, retry=MAX_RETRIES).s(plan=list(plan))
                refs.append(wf.add(step, after=after, on_parent_failure=policy))
            wf.enqueue()
            for ref, (name, queue, plan), state in zip(refs, (parent, child),
                                                       ("pending", "waiting"), strict=True):
                self.jobs[ref.id] = Expected(ref.id, name, queue, plan, MAX_RETRIES,
                                             batch=wf.id, state=state)
            self.edges[refs[1].id] = (refs[0].id, policy)

        def settle_graph(self) -> None:
            """docs/workflows.md for a node of one parent: once the parent settled, the
            child runs, fails or is skipped by its policy; a parent retried by hand takes
            back the child it ended."""
            for child_id, (parent_id, policy) in self.edges.items():
                parent, child = self.jobs[parent_id], self.jobs[child_id]
                if child_id in self.graph_ended and child.terminal and not parent.terminal:
                    self.graph_ended.discard(child_id)
                    child.state, child.message = "waiting", None
                    child.kinds.append("reopened")
                if child.state != "waiting" or not parent.terminal:
                    continue
                if parent.state == "succeeded" or policy in ("continue", "ignore"):
                    child.state = "pending"
                    child.kinds.append("released")
                    continue
                self.graph_ended.add(child_id)
                who = f"{parent.name} {parent.id}"
                if policy == "skip":
                    child._end("cancelled", "cancelled", f"skipped: parent {who} ended "
                               f"{parent.state}")
                else:
                    why = f": {parent.message}" if parent.message else ""
                    child._end("failed", "failed", f"parent {who} ended {parent.state}{why}")

        @rule(specs=st.lists(JOB, min_size=1, max_size=3))
        def enqueue_batch(self, specs: list[tuple[str, str, tuple[str, ...]]]) -> None:
            with self.client.batch() as batch:
                refs = [self.client.enqueue(name, kwargs={"plan": list(plan)}, queue=queue,
                                            retry=MAX_RETRIES) for name, queue, plan in specs]
            self.batches[batch.id] = []
            for ref, (name, queue, plan) in zip(refs, specs, strict=True):
                assert ref is not None
                self.jobs[ref.id] = Expected(ref.id, name, queue, plan, MAX_RETRIES,
                                             batch=batch.id)
                self.batches[batch.id].append(ref.id)

        @precondition(lambda self: self.live() is not None)
        @rule()
        def fetch(self) -> None:
            worker = self.live()
            assert worker is not None
            free = worker.launcher.inflight.free
            self.observe_fetch(worker, free)

        @precondition(lambda self: bool(self.held) or bool(self.orphans))
        @rule(data=st.data(), then=FINISH)
        def release(self, data: st.DataObject, then: str) -> None:
            keys = list(self.held) + list(self.orphans)
            key = data.draw(st.sampled_from(keys), label="job")
            self.bodies.release(key, then)
            worker_id = self.held.pop(key, None)
            self.orphans.pop(key, None)
            for worker in self.workers:
                if worker.alive:
                    worker.settle()
            if worker_id is not None:
                self.run(self.jobs[key[0]], then)

        @precondition(lambda self: self.live() is not None)
        @rule()
        def heartbeat_now(self) -> None:
            worker = self.live()
            assert worker is not None
            self.heartbeat(worker)

        @rule(seconds=st.sampled_from([0.5, 3.0, 11.0]))
        def time_passes(self, seconds: float) -> None:
            """Time passes with the live worker beating, watching, promoting, recovering and
            fetching (a dead worker's leases expire; a live one's never do: it beats first)."""
            self.clock.advance(seconds)
            worker = self.live()
            if worker is not None:
                self.heartbeat(worker)
                worker.tick(worker.launcher.watchdog.tick)
                for key in self.held_by(worker):
                    job = self.jobs[key[0]]
                    if job.deadline is not None and job.deadline <= self.now():
                        self.orphan(key)  # its thread is abandoned: a late end is void
                        job.errored(timeout_message(job.name, SYNC_TIMEOUT), self.now())
            self.promote(worker)
            self.recover(worker)
            if worker is not None:
                self.observe_fetch(worker, worker.launcher.inflight.free)

        def pick(self, data: st.DataObject, fits: Callable[[Expected], bool]) -> Expected | None:
            """A job, one that ``fits`` when there is one (so actions mostly do something)."""
            self.settle_graph()
            # Insertion order, never the ids' order: ids differ between runs, draws must not.
            ids = [j.id for j in self.jobs.values() if fits(j)] or list(self.jobs)
            return self.jobs[data.draw(st.sampled_from(ids), label="job")] if ids else None

        @rule(data=st.data(), running=st.booleans())
        def cancel(self, data: st.DataObject, running: bool) -> None:
            job = self.pick(data, (lambda j: j.state == "active") if running
                            else (lambda j: not j.terminal))
            if job is None:
                return
            state = self.storage.cancel(job.id)
            expected = job.cancel()
            assert state is not None and state.value == expected, (state, expected)

        @precondition(lambda self: bool(self.batches))
        @rule(data=st.data())
        def cancel_batch(self, data: st.DataObject) -> None:
            batch_id = data.draw(st.sampled_from(list(self.batches)), label="batch")
            jobs = [self.jobs[job_id] for job_id in self.batches[batch_id]]
            expected = sum(1 for job in jobs if job.cancellable())
            for job in jobs:
                job.cancel()
            assert self.storage.cancel_batch(batch_id) == expected

        @rule(data=st.data())
        def retry_by_hand(self, data: st.DataObject) -> None:
            job = self.pick(data, lambda j: j.terminal or j.state == "retrying")
            if job is None:
                return
            held = self.held_node(job)
            expected = job.retry_by_hand() if held is None else held
            if expected:
                self.graph_ended.discard(job.id)  # it runs again: no longer the graph's
            assert self.storage.retry_jobs([job.id]) == int(expected)

        def held_node(self, job: Expected) -> bool | None:
            """docs/workflows.md, "Retry a node by hand" (issue 51): a child the graph never
            released (it never ran) is decided again by its parent — back to ``waiting``
            while the parent has not settled or when its outcome releases the child (the
            settle then releases it with the parent's result), refused (``False``) when its
            outcome would end the child again. ``None``: retried as any job."""
            edge = self.edges.get(job.id)
            if edge is None or job.attempt > 0 or job.state not in RETRYABLE or _released(job):
                return None
            parent_id, policy = edge
            parent = self.jobs[parent_id]
            if parent.terminal and parent.state != "succeeded" and policy not in (
                    "continue", "ignore"):
                return False
            job.retry_by_hand()
            job.state = "waiting"
            return True

        @rule(data=st.data())
        def send_event(self, data: st.DataObject) -> None:
            """An event for one durable job (its id is the key): delivered to its wait when
            it listens, waking it when it is suspended there (docs/durable.md)."""
            job = self.pick(data, lambda j: j.name == DURABLE and j.durable.wait is not None)
            if job is None:
                return
            assert self.client.send_event(EVENT, key=job.id, data=job.id) == event_sent(job)

        @rule(queue=st.sampled_from(QUEUES), pause=st.booleans())
        def pause_or_resume(self, queue: str, pause: bool) -> None:
            if pause:
                self.storage.pause_queue(queue)
                self.paused.add(queue)
            else:
                self.storage.resume_queue(queue)
                self.paused.discard(queue)

        @precondition(lambda self: self.live() is not None)
        @rule()
        def quiet(self) -> None:
            worker = self.live()
            assert worker is not None
            worker.launcher.quiet()
            worker.quiet = True

        @precondition(lambda self: self.live() is not None)
        @rule(kill=st.booleans(), new_code=st.booleans())
        def replace_worker(self, kill: bool, new_code: bool) -> None:
            """Stop the worker (its running jobs are interrupted) or kill it (its leases
            expire), then start another, running the old or the new code."""
            worker = self.live()
            assert worker is not None
            if kill and "kill" not in WITHOUT:
                worker.kill()
                for key in self.held_by(worker):
                    self.orphan(key)
                    if self.broker_url is not None:
                        self.redelivered.add(key[0])
            else:
                held = self.held_by(worker)
                worker.stop()
                for key in held:
                    self.orphan(key)
                    self.jobs[key[0]].interrupted(SHUT_DOWN)
            self.start_worker(new_code)

        # -- the comparison -----------------------------------------------------------------
        @invariant()
        def records_match(self) -> None:
            self.settle_graph()
            for job in self.jobs.values():
                self.compare(job, self.storage.get_job(job.id))

        def compare(self, job: Expected, record: JobRecord | None) -> None:
            assert record is not None, f"{job.id} is not stored"
            kinds = [e.kind for e in record.events or ()]
            got: dict[str, Any] = {
                "state": record.state.value, "attempt": record.attempt,
                "errors": record.errors, "message": record.message, "kinds": kinds,
            }
            want: dict[str, Any] = {
                "state": job.state, "attempt": job.attempt, "errors": job.errors,
                "message": job.message, "kinds": job.kinds,
            }
            if not job.terminal:
                got["cancel_requested"] = record.cancel_requested
                want["cancel_requested"] = job.cancel_requested
            if job.state == "succeeded":
                got["result"], want["result"] = record.result, job.result
            if job.name == DURABLE:  # every recorded step ran once (a flaky one: twice)
                got["ran"] = [self.bodies.ran[(job.id, i)] for i in range(len(job.plan))]
                want["ran"] = [(2 if a == "flaky" and i < job.durable.done else
                                int(i in job.durable.raised or i < job.durable.done))
                               if a in ("step", "flaky") else 0
                               for i, a in enumerate(job.plan)]
                got["waited"] = {i: self.bodies.waited.get((job.id, i))
                                 for i in job.durable.results}
                want["waited"] = dict(job.durable.results)
            for ignored in os.environ.get("MODEL_IGNORE", "").split(","):
                got.pop(ignored, None)
                want.pop(ignored, None)
            assert got == want, f"job {job.id} ({job.name} {job.plan}): {got} != {want}"

        def teardown(self) -> None:
            try:
                if not self.failed_already():
                    self.drive_to_rest()
            finally:
                self.bodies.release_all()
                for worker in self.workers:
                    worker.close()
                self.storage.close()

        @staticmethod
        def failed_already() -> bool:
            """True when a step failed: hypothesis tears down while that error propagates,
            and driving on would only hide it."""
            return sys.exc_info()[0] is not None

        def drive_to_rest(self) -> None:
            """Resume the queues, run new code, finish every held job; time passes until
            every job ended. Then compare once more."""
            for queue in sorted(self.paused):
                self.storage.resume_queue(queue)
            self.paused.clear()
            worker = self.live()
            if worker is None or worker.quiet or not worker.new_code:
                if worker is not None:
                    self.replace_worker(kill=False, new_code=True)
                else:
                    self.start_worker(True)
            worker = self.live()
            assert worker is not None
            for _ in range(200):
                for key in list(self.held):
                    self.bodies.release(key, "ok")
                    self.held.pop(key)
                    worker.settle()
                    self.run(self.jobs[key[0]], "ok")
                self.fetch()
                if all(job.terminal for job in self.jobs.values()) and not self.held:
                    break
                self.time_passes(3.0)
            self.records_match()
            assert all(job.terminal for job in self.jobs.values()), "jobs never came to rest"
            # What the example reached (``--hypothesis-show-statistics``).
            for kind in sorted({k for job in self.jobs.values() for k in job.kinds}):
                event(f"reached: {kind}")
                REACHED[kind] += 1
            REACHED["examples"] += 1

    return Lifecycle


class _MidJitter:
    """The backoff's jitter, fixed at its middle: hypothesis replays an example and must see
    the same run again (the model still allows the whole jitter window)."""

    @staticmethod
    def uniform(low: float, high: float) -> float:
        return (low + high) / 2


#: Examples per store: in full on memory, SQLite (the default store) and Redis; a smoke run on
#: PostgreSQL (a fresh schema and its migrations per example made it the suite's costliest
#: model run: the conformance suite holds its PL/pgSQL to every rule, and the smoke and the
#: postgres+amqp run below put it through the same model), and on Redis Cluster and Sentinel,
#: which run Redis's own scripts (only the keys' routing or the connection differs).
SMOKE = max(3, EXAMPLES // 5)
STORE_EXAMPLES = {"postgres": SMOKE, "redis_cluster": SMOKE, "redis_sentinel": SMOKE}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_lifecycle_matches_the_model(backend: str, tmp_path: Path,
                                         request: pytest.FixtureRequest,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job's record equals the model's after every step, on every backend."""
    monkeypatch.setattr(conveyor.core.retry, "_rng", _MidJitter())
    run_model(make_machine(store_factory(backend, tmp_path, request)),
              STORE_EXAMPLES.get(backend, EXAMPLES), backend)


def run_model(machine: type[RuleBasedStateMachine], examples: int, label: str) -> None:
    """Run the state machine ``examples`` times (MODEL_STATS=1 prints what was reached)."""
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        phases=PHASES))
    if os.environ.get("MODEL_STATS"):
        print(f"\n{label}: {dict(sorted(REACHED.items()))}")
        REACHED.clear()


# Through a broker (issue 20): SQLite + RabbitMQ fully, the in-process broker fully (cheap),
# the other stores with RabbitMQ as a smoke run (the same relay and feed; their ``start`` and
# ``publish_due`` are held to one contract by tests/conformance/test_outbox.py).
BROKERED = [
    pytest.param("sqlite", "amqp", EXAMPLES, marks=pytest.mark.rabbitmq, id="sqlite+amqp"),
    pytest.param("memory", "memory", EXAMPLES, id="memory+memory"),
    pytest.param("redis", "amqp", SMOKE, marks=pytest.mark.rabbitmq, id="redis+amqp"),
    pytest.param("postgres", "amqp", SMOKE, marks=pytest.mark.rabbitmq, id="postgres+amqp"),
]


@pytest.mark.parametrize(("backend", "broker", "examples"), BROKERED)
def test_the_lifecycle_through_a_broker_matches_the_model(
        backend: str, broker: str, examples: int, tmp_path: Path,
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same promise when a broker delivers the jobs: the store decides, and a killed
    worker's jobs are taken over when the broker hands their messages out again."""
    monkeypatch.setattr(conveyor.core.retry, "_rng", _MidJitter())
    counter = itertools.count()
    base = request.getfixturevalue("rabbitmq_server").url if broker == "amqp" else None

    def broker_url() -> str:
        tag = f"m{next(counter)}{uuid.uuid4().hex[:6]}"
        return f"{base}?prefix={tag}" if base is not None else f"memory://{tag}"

    machine = make_machine(store_factory(backend, tmp_path, request), broker_url)
    run_model(machine, examples, f"{backend}+{broker}")
