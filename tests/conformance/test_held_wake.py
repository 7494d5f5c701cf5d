"""A held job starts as soon as what held it is gone: the idle worker's wait is woken, not
left to run out its ``timeout``.

A job waiting on a flow-control limit (a concurrency slot, an ordered key, a paused queue, an
open breaker) becomes ready without an enqueue: an ack frees its slot, an operator resumes the
queue or closes the breaker. ``Storage.wait`` promises to wake on work "made pending, or freed
to run"; a missed wake-up would delay the job by the worker's ``idle_wait``. The expectation
comes from Sidekiq Enterprise's concurrent limiter and Oban's ``global_limit`` (the next job
of the key runs when a slot frees, not at the next poll), asynq's paused queue (it runs as
soon as the queue is unpaused) and the classic breaker's manual reset (pybreaker's
``close()``: calls go through at once).

The wait the test watches is 30 s long; the test gives it a few seconds: a missed wake shows
as a wait that has not returned, and the fact asserted is that this very wait leased the
held job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, LeasedJob, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import ack, boom, connections, put, take, take_one

_LONG = 30.0  # the watched wait's timeout: far beyond the test's own bound
_BOUND = 10.0  # seconds the test waits for the woken wait before it fails


def _leased_after(store: Backend, free: Callable[[], None]) -> list[LeasedJob]:
    """What an idle worker's ``wait_dequeue`` leases when ``free`` runs during its wait.

    The worker first waits until a wait times out (so no earlier wake-up is left over to
    end the watched wait for another reason), then tells the test it is about to wait; a
    thread's waits in a row miss nothing between them, so ``free`` may run at any point of
    the watched wait, its start included."""
    ready = threading.Event()
    got: list[list[LeasedJob]] = []

    def idle_worker() -> None:
        for _ in range(100):  # wake-ups left by the setup's enqueues, drained
            if not store.wait(["default"], 0.05):
                break
        ready.set()
        got.append(list(store.wait_dequeue(["default"], ["default"], "w2", 1, 30.0, _LONG)))

    waiter = threading.Thread(target=idle_worker, daemon=True)
    waiter.start()
    assert ready.wait(_BOUND)
    free()
    waiter.join(_BOUND)
    assert not waiter.is_alive(), "the idle worker's wait was not woken"
    return got[0]


def test_an_ack_that_frees_a_concurrency_slot_wakes_an_idle_worker(backend: Backend) -> None:
    flow = FlowControl(concurrency_key="seller:1", concurrency_limit=1)
    put(backend, flow=flow)
    held = put(backend, flow=flow)
    running = take_one(backend)
    assert take(backend) == []  # the slot is taken: the second job is held
    leased = _leased_after(backend, lambda: ack(backend, running) or None)
    assert [job.id for job in leased] == [held]


def test_an_ack_from_another_process_wakes_an_idle_worker(backend: Backend,
                                                          clock: FakeClock) -> None:
    """The slot's holder ran in another worker process: its ack, on its own connection,
    wakes this one's idle worker (memory has one process: the same store)."""
    flow = FlowControl(concurrency_key="seller:1", concurrency_limit=1)
    put(backend, flow=flow)
    held = put(backend, flow=flow)
    running = take_one(backend)
    with connections(backend, clock, 1) as (other,):
        leased = _leased_after(backend, lambda: ack(other, running) or None)
    assert [job.id for job in leased] == [held]


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.RETRY])
def test_any_ending_of_the_slot_holder_wakes_an_idle_worker(backend: Backend,
                                                            outcome: Outcome) -> None:
    """The slot frees whatever the outcome: a failure or a retry ends the run too."""
    flow = FlowControl(concurrency_key="seller:1", concurrency_limit=1)
    put(backend, flow=flow)
    held = put(backend, flow=flow)
    running = take_one(backend)
    leased = _leased_after(
        backend, lambda: ack(backend, running, outcome, error=boom(), retry_in=600.0) or None)
    assert [job.id for job in leased] == [held]


def test_an_ack_that_ends_an_ordered_keys_run_wakes_an_idle_worker(backend: Backend) -> None:
    flow = FlowControl(order_key="account:7")
    put(backend, flow=flow)
    held = put(backend, flow=flow)
    running = take_one(backend)
    assert take(backend) == []
    leased = _leased_after(backend, lambda: ack(backend, running) or None)
    assert [job.id for job in leased] == [held]


def test_resuming_a_paused_queue_wakes_an_idle_worker(backend: Backend) -> None:
    held = put(backend)
    backend.pause_queue("default")
    assert take(backend) == []
    leased = _leased_after(backend, lambda: backend.resume_queue("default"))
    assert [job.id for job in leased] == [held]


def _open_breaker(store: Backend) -> FlowControl:
    """Breaker "stripe" opened by one counted error (cool-down: an hour)."""
    flow = FlowControl(breaker_key="stripe", breaker_open_after=1, breaker_within=60.0,
                       breaker_cool_down=3600.0)
    put(store, flow=flow)
    assert ack(store, take_one(store), Outcome.RETRY, error=boom("503"), retry_in=1e6)
    return flow


def test_closing_a_breaker_by_hand_wakes_an_idle_worker(backend: Backend) -> None:
    held = put(backend, flow=_open_breaker(backend))
    assert take(backend) == []
    leased = _leased_after(backend, lambda: backend.close_breaker("stripe") or None)
    assert [job.id for job in leased] == [held]


def test_a_probe_that_succeeds_wakes_an_idle_worker(backend: Backend, clock: FakeClock) -> None:
    """Half-open: the probe's success closes the breaker, and the key's waiting jobs run."""
    flow = _open_breaker(backend)
    clock.advance(3601.0)
    probe = put(backend, flow=flow)
    held = put(backend, flow=flow)
    taken = take_one(backend)
    assert taken.id == probe and take(backend) == []
    leased = _leased_after(backend, lambda: ack(backend, taken) or None)
    assert [job.id for job in leased] == [held]
