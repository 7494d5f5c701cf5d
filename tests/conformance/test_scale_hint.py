"""The scale signal read from every store: a backlog behind a per-key limit asks for no more
workers than the limit can use (issue 56, "A signal to scale on").

The expectation is the one the KEDA Celery scaler's README concedes queue length misses
("probably not what you want"): a worker added for jobs that a concurrency key or an order
key holds back sits idle, as Sidekiq Enterprise's and BullMQ's limiters would leave it.
"""

from __future__ import annotations

from conveyor.core.job import FlowControl, Outcome
from conveyor.storage import Backend
from conveyor.views.scaling import read_facts, scale_hints
from tests.conformance.helpers import ack, put, take

KEY = FlowControl(concurrency_key="partner-api", concurrency_limit=3)


def _hint(backend: Backend, queue: str = "default", slots: int = 1, target: float = 0.0,
          ) -> tuple[int, int, int]:
    [hint] = scale_hints(backend, slots, target, [queue])
    return hint.workers, hint.slots, hint.capped


def test_a_backlog_behind_a_concurrency_key_asks_for_no_more_than_its_limit(
        backend: Backend) -> None:
    """100 ready jobs of one key with limit 3: 3 slots, never 100, idle or running."""
    for _ in range(100):
        put(backend, flow=KEY)
    assert _hint(backend) == (3, 3, 97)
    assert _hint(backend, slots=2) == (2, 3, 97)
    running = take(backend, count=10)
    assert len(running) == 3  # the store admits the limit, no more
    assert _hint(backend) == (3, 3, 97)
    for job in running:
        ack(backend, job)
    assert _hint(backend, slots=10) == (1, 3, 94)


def test_jobs_without_a_limit_beside_the_key_add_their_own_slots(backend: Backend) -> None:
    for _ in range(40):
        put(backend, flow=KEY)
    for _ in range(5):
        put(backend)
    for _ in range(6):
        put(backend, flow=FlowControl(order_key="customer-7"))
    assert _hint(backend) == (3 + 5 + 1, 9, 37 + 5)


def test_a_sampled_backlog_is_scaled_to_the_counts(backend: Backend) -> None:
    """Only the oldest ``sample`` jobs are read; the rest are taken to be like them."""
    for _ in range(30):
        put(backend, flow=KEY)
        put(backend)
    facts = read_facts(backend, "default", False, ready=60, running=0, sample=20)
    assert {(load.kind, load.key): (load.ready, load.cap) for load in facts.loads} == {
        ("concurrency", "partner-api"): (30, 3), ("free", ""): (30, None)}


def test_a_paused_or_empty_queue_wants_no_worker(backend: Backend) -> None:
    """Scale to zero: nothing ready or running, or nothing a worker may take."""
    assert scale_hints(backend, 1, 0.0, ["default"]) == []  # no such queue yet
    job_id = put(backend)
    [job] = take(backend)
    assert job.id == job_id and _hint(backend) == (1, 1, 0)
    ack(backend, job, Outcome.SUCCEEDED)
    assert _hint(backend) == (0, 0, 0)
    put(backend)
    backend.pause_queue("default")
    [hint] = scale_hints(backend, 1, 0.0, ["default"])
    assert (hint.workers, hint.reason) == (0, "paused")


def test_a_costly_job_asks_for_the_slots_it_takes(backend: Backend) -> None:
    """A job of ``cost=4`` takes four worker slots while it runs (docs/scheduling.md, the
    slot "weight" of Hatchet's and asynq's weighted workers), so a backlog of them wants four
    slots each, running or ready."""
    for _ in range(3):
        put(backend, flow=FlowControl(cost=4))
    put(backend)
    assert _hint(backend, slots=4) == (4, 13, 0)
    [running] = take(backend, count=4)  # room for one of them
    assert running.cost == 4
    assert _hint(backend, slots=4) == (4, 13, 0)
