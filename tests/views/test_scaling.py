"""The scale formula (``views/scaling.desired_workers``) on facts given directly.

Expectations: KEDA's scalers divide a metric by a per-replica target and round up (the
Prometheus scaler's ``threshold``), and its Celery scaler's README warns that queue length
alone is "probably not what you want"; Little's law gives the slots that clear a backlog
within a latency target (ready x run time / target).
"""

from __future__ import annotations

import pytest

from conveyor.views.scaling import KeyLoad, QueueFacts, desired_workers


def _facts(*loads: KeyLoad, run_time: float | None = None, paused: bool = False) -> QueueFacts:
    return QueueFacts("q", paused, sum(x.ready for x in loads), sum(x.running for x in loads),
                      run_time, loads)


def test_without_a_run_time_every_ready_job_wants_a_slot() -> None:
    hint = desired_workers(_facts(KeyLoad("free", "", 25, 5, None)), slots_per_worker=10)
    assert (hint.slots, hint.workers, hint.capped, hint.reason) == (30, 3, 0, "backlog")


def test_the_latency_target_asks_only_for_the_slots_that_clear_the_backlog_in_time() -> None:
    """1,000 jobs of 0.3 s within 30 s: 10 slots run them (each runs 100), plus the 4 busy."""
    hint = desired_workers(_facts(KeyLoad("free", "", 1000, 4, None), run_time=0.3),
                           slots_per_worker=4, latency_target=30.0)
    assert (hint.slots, hint.workers) == (14, 4)
    # Jobs longer than the target: one slot each, never more slots than ready jobs.
    long = desired_workers(_facts(KeyLoad("free", "", 7, 0, None), run_time=120.0),
                           slots_per_worker=4, latency_target=30.0)
    assert (long.slots, long.workers) == (7, 2)


def test_limits_cap_each_group_and_the_caps_add_up() -> None:
    facts = _facts(KeyLoad("concurrency", "api", 500, 2, 3), KeyLoad("order", "c-1", 9, 1, 1),
                   KeyLoad("rate", "mail", 80, 0, 20), KeyLoad("free", "", 6, 0, None))
    hint = desired_workers(facts, slots_per_worker=5, latency_target=0.0)
    assert (hint.slots, hint.workers) == (3 + 1 + 20 + 6, 6)
    assert hint.capped == (502 - 3) + (10 - 1) + (80 - 20)
    assert hint.reason == f"limits leave {hint.capped} wanted slot(s) unusable"


def test_running_jobs_keep_their_slots_above_a_lowered_cap() -> None:
    hint = desired_workers(_facts(KeyLoad("rate", "mail", 10, 25, 20)), slots_per_worker=1,
                           latency_target=0.0)
    assert hint.slots == 25


def test_paused_and_idle_queues_want_no_worker() -> None:
    assert desired_workers(_facts(KeyLoad("free", "", 50, 3, None), paused=True), 1).workers == 0
    idle = desired_workers(_facts(), 1)
    assert (idle.workers, idle.reason) == (0, "idle")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="slots per worker"):
        desired_workers(_facts(), 0)
    with pytest.raises(ValueError, match="latency target"):
        desired_workers(_facts(), 1, latency_target=float("nan"))
