"""Flow control under concurrency: several workers, each on its own storage connection.

Each test lets threads race on the same store (through separate clients or SQLite files, as
separate worker processes would) and checks invariants that must hold whatever the
interleaving: no timing is asserted, and the fake clock stands still unless a test moves it.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.core.job import (
    Ack,
    EnqueueResult,
    EventKind,
    FlowControl,
    JobState,
    LeasedJob,
    Outcome,
)
from conveyor.storage import Backend
from tests.conformance.helpers import (
    boom,
    connections,
    kinds_of,
    put,
    run_in_threads,
    spec,
    state_of,
    take,
    worker_info,
)

_WAIT = 60.0  # seconds a barrier waits before it breaks and fails the test, instead of hanging
_IDLE = 0.001  # a worker that found nothing yields the CPU before it asks again


def _acked(store: Backend, job: LeasedJob, outcome: Outcome = Outcome.SUCCEEDED,
           **kwargs: Any) -> None:
    applied = store.ack([Ack(job.id, job.token, outcome, **kwargs)])
    assert applied == [True], f"ack of {job.id} refused"


# -- unique jobs ------------------------------------------------------------------------------


def test_racing_enqueues_of_a_unique_job_store_it_once(backend: Backend, clock: FakeClock) -> None:
    keys = [f"report:{n}" for n in range(15)]
    workers = 6
    got: list[list[EnqueueResult]] = [[] for _ in range(workers)]
    start = threading.Barrier(workers, timeout=_WAIT)

    with connections(backend, clock, workers) as stores:
        def enqueue(slot: int) -> None:
            specs = [spec(flow=FlowControl(unique_key=key)) for key in keys]
            start.wait()  # all at once, so every key is contended
            if slot % 2:  # half enqueue one by one, half in one bulk call
                got[slot] = stores[slot].enqueue(specs)
            else:
                got[slot] = [stores[slot].enqueue([s])[0] for s in specs]

        run_in_threads(enqueue, workers)

    for index, key in enumerate(keys):
        results = [got[slot][index] for slot in range(workers)]
        winners = [r for r in results if r.created]
        assert len(winners) == 1, f"{key}: {len(winners)} jobs created"
        # Every loser is told the winner's id, and that it did not create a job.
        assert {r.id for r in results} == {winners[0].id}
        assert state_of(backend, winners[0].id) is JobState.PENDING
    assert backend.count_jobs() == len(keys)


# -- rate limits ------------------------------------------------------------------------------


def _hammer(stores: list[Backend], key_of: dict[str, str]) -> Counter[str]:
    """Every store's worker asks for jobs 25 times and finishes what it gets; starts per key."""
    starts: Counter[str] = Counter()
    guard = threading.Lock()

    def work(slot: int) -> None:
        for _ in range(25):
            jobs = stores[slot].dequeue(["default"], f"w{slot}", 3, 60)
            with guard:
                starts.update(key_of[job.id] for job in jobs)
            for job in jobs:  # finishing a job must not give its start back
                _acked(stores[slot], job)

    run_in_threads(work, len(stores))
    return starts


def test_rate_limit_holds_under_concurrent_dequeuers(backend: Backend, clock: FakeClock) -> None:
    limits = {"api": 4, "other-api": 2}
    period, rounds, workers = 60.0, 3, 4
    key_of: dict[str, str] = {}
    for n in range(14):  # interleaved, so no key hides the others behind a long blocked run
        for key, limit in limits.items():
            flow = FlowControl(rate_key=key, rate_limit=limit, rate_period=period)
            key_of[put(backend, flow=flow)] = key
        if n < 3:
            key_of[put(backend)] = "plain"

    with connections(backend, clock, workers) as stores:
        for round_no in range(rounds):
            starts = _hammer(stores, key_of)
            assert starts["api"] <= limits["api"] and starts["other-api"] <= limits["other-api"]
            # Whatever the racing workers left of this period's allowance is still there: the
            # limit was not undercounted either.
            starts.update(key_of[job.id] for job in take(backend, count=50))
            assert (starts["api"], starts["other-api"]) == (limits["api"], limits["other-api"])
            assert starts["plain"] == (3 if round_no == 0 else 0)  # never held back
            clock.advance(period + 1)

    waiting = backend.list_jobs(state=JobState.PENDING, limit=100)
    assert Counter(key_of[r.id] for r in waiting) == {"api": 2, "other-api": 8}
    assert all(r.attempt == 0 for r in waiting)  # held back is not an attempt


# -- ordered keys -----------------------------------------------------------------------------


class _OrderLog:
    """What the workers of the ordered-key test saw, checked as they go."""

    def __init__(self, key_of: dict[str, str]) -> None:
        self.key_of = key_of
        self.lock = threading.Lock()
        self.running: dict[str, str] = {}
        self.overlaps: list[str] = []
        self.done: dict[str, list[str]] = defaultdict(list)
        self.retried: set[str] = set()

    def started(self, jobs: list[LeasedJob]) -> None:
        with self.lock:
            for job in jobs:
                key = self.key_of[job.id]
                if key in self.running:
                    self.overlaps.append(f"{job.id} started while {self.running[key]} ran")
                self.running[key] = job.id

    def finishing(self, job: LeasedJob, retry: bool) -> None:
        # Called before the ack: the storage frees the key only after it.
        with self.lock:
            del self.running[self.key_of[job.id]]
            if retry:
                self.retried.add(job.id)
            else:
                self.done[self.key_of[job.id]].append(job.id)

    def finished(self, total: int) -> bool:
        with self.lock:
            return sum(len(ids) for ids in self.done.values()) == total


def test_order_keys_hold_under_concurrent_dequeuers(backend: Backend, clock: FakeClock) -> None:
    keys, per_key = ("account-1", "account-2", "account-3"), 12
    enqueued: dict[str, list[str]] = defaultdict(list)
    for _ in range(per_key):
        for key in keys:
            enqueued[key].append(put(backend, flow=FlowControl(order_key=key)))
    key_of = {job_id: key for key, ids in enqueued.items() for job_id in ids}
    # Every fourth job fails once: the key must wait for its retry, not move past it.
    fail_once = {ids[n] for ids in enqueued.values() for n in range(3, per_key, 4)}
    log = _OrderLog(key_of)
    total = len(key_of)
    # One job per worker, then all meet: three keys active at once shows that different keys
    # run in parallel (a worker always finds a free key, as at most two are held by the others).
    together = threading.Barrier(len(keys), timeout=_WAIT)

    with connections(backend, clock, len(keys)) as stores:
        def work(slot: int) -> None:
            store, first = stores[slot], True
            for _ in range(50_000):
                if log.finished(total):
                    return
                jobs = store.dequeue(["default"], f"w{slot}", 1 if first else 2, 60)
                if not jobs:
                    store.promote_due()  # a retry with retry_in=0 is due at once
                    time.sleep(_IDLE)
                    continue
                log.started(jobs)
                if first:
                    together.wait()
                    first = False
                for job in jobs:
                    retry = job.id in fail_once and job.id not in log.retried
                    log.finishing(job, retry)
                    if retry:
                        _acked(store, job, Outcome.RETRY, error=boom(), retry_in=0.0)
                    else:
                        _acked(store, job)

        run_in_threads(work, len(keys))

    assert log.overlaps == []
    assert dict(log.done) == dict(enqueued)  # each key completed in enqueue order
    assert log.retried == fail_once
    assert backend.count_jobs(state=JobState.SUCCEEDED) == total
    for job_id in fail_once:
        record = backend.get_job(job_id)
        assert record is not None and (record.attempt, record.errors) == (2, 1)


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_from_another_connection_reaches_pending_and_running_jobs(
    backend: Backend, clock: FakeClock
) -> None:
    workers = 3
    ids = [put(backend) for _ in range(40)]
    # The workers' first jobs (the oldest) are cancelled while they run, for certain; the rest
    # of the targets race with the workers.
    targets = set(ids[:workers]) | set(random.Random(6).sample(ids[workers:], 17))
    guard = threading.Lock()
    taken: Counter[str] = Counter()
    seen_cancel: set[str] = set()
    answers: dict[str, JobState | None] = {}
    holding = threading.Barrier(workers + 1, timeout=_WAIT)
    cancelling_done = threading.Event()

    with connections(backend, clock, workers + 1) as stores:
        def run_one(store: Backend, slot: int, job: LeasedJob) -> None:
            # A worker heartbeats while its job runs; the job ends when the heartbeat reports
            # a cancellation, or normally once the canceller is through (checked before the
            # heartbeat, so a cancel made before that is certainly in its reply).
            while True:
                through = cancelling_done.is_set()
                reply = store.heartbeat(worker_info(clock, f"w{slot}"), {job.id: job.token}, 60)
                if job.id in reply.cancel:
                    with guard:
                        seen_cancel.add(job.id)
                    return _acked(store, job, Outcome.CANCELLED, message="saw the request")
                if through:
                    return _acked(store, job)
                time.sleep(_IDLE)

        def work(store: Backend, slot: int) -> None:
            first = True
            while True:
                through = cancelling_done.is_set()
                jobs = store.dequeue(["default"], f"w{slot}", 1, 60)
                with guard:
                    taken.update(job.id for job in jobs)
                if jobs and first:
                    holding.wait()
                    first = False
                for job in jobs:
                    run_one(store, slot, job)
                if not jobs and through:
                    return
                if not jobs:
                    time.sleep(_IDLE)

        def cancel(store: Backend) -> None:
            try:
                holding.wait()
                for job_id in random.Random(7).sample(sorted(targets), len(targets)):
                    answers[job_id] = store.cancel(job_id)
            finally:  # even if this thread fails, the workers must be let go
                cancelling_done.set()

        run_in_threads(
            lambda slot: work(stores[slot], slot) if slot < workers else cancel(stores[slot]),
            workers + 1,
        )

    assert max(taken.values()) == 1  # no job was handed out twice
    assert {answers[job_id] for job_id in ids[:workers]} == {JobState.ACTIVE}
    for job_id in ids:
        state = state_of(backend, job_id)
        if job_id not in targets:
            assert (state, job_id in seen_cancel) == (JobState.SUCCEEDED, False)
        elif answers[job_id] is JobState.CANCELLED:  # it was waiting: it never runs
            assert (state, taken[job_id]) == (JobState.CANCELLED, 0)
        else:  # it was running: its worker heard of it, and it ended cancelled
            assert answers[job_id] is JobState.ACTIVE
            assert (state, job_id in seen_cancel, taken[job_id]) == (JobState.CANCELLED, True, 1)
            assert kinds_of(backend, job_id)[-2:] == [EventKind.CANCEL_REQUESTED, "cancelled"]
