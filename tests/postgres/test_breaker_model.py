"""PostgreSQL's breakers (functions/breaker.sql) against the rules as Python runs them
(storage/breakers.py, on the memory store): one script of leases, acks of every kind, clock
moves and lost leases, played on both stores, must leave the same breakers, the same jobs
leased at each step and the same ``breaker`` events, word for word.

The conformance suite (tests/conformance/test_breakers.py) pins each rule by an example;
this plays them against each other in orders nobody wrote down (two keys, jobs leased
before a key opened, a probe that is interrupted, snoozed or lost, acks of several jobs in
one call). The scripts are fixed (seeded), so a failure replays.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, ErrorInfo, FlowControl, LeasedJob, Outcome
from conveyor.storage import Backend, open_storage
from tests.conformance.helpers import spec

FLOWS = {key: FlowControl(breaker_key=key, breaker_open_after=2, breaker_within=20.0,
                          breaker_cool_down=15.0) for key in ("a", "b")}


def _ack(job: LeasedJob, roll: int, snooze: float) -> Ack:
    """One of the acks a worker sends, by ``roll``."""
    error = ErrorInfo("ConnectionError", f"503 from {job.id[:6]}")
    return [
        Ack(job.id, job.token, Outcome.SUCCEEDED),
        Ack(job.id, job.token, Outcome.FAILED, message="declined"),
        Ack(job.id, job.token, Outcome.RETRY, error=error, retry_in=500.0),
        Ack(job.id, job.token, Outcome.RETRY, error=error, retry_in=500.0),
        Ack(job.id, job.token, Outcome.DEAD, error=error),
        Ack(job.id, job.token, Outcome.DEAD, error=error, ran=False),
        Ack(job.id, job.token, Outcome.SNOOZE, message="HTTP 429", retry_in=snooze),
        Ack(job.id, job.token, Outcome.INTERRUPTED),
    ][roll]


def _kind(message: str) -> str:
    """``"opened again"`` of ``"breaker 'b' opened again: probe failed"``."""
    if message.startswith("probe of"):
        return "probe"
    return message.split(": ")[0].split("' ", 1)[1].split(" for ")[0]


def _seen(store: Backend, ids: list[str]) -> tuple[Any, ...]:
    """What must match: every breaker as listed, and each job's breaker events."""
    events = {i: [(e.state, e.message) for e in store.get_job(i).events or []  # type: ignore[union-attr]
                  if e.kind == "breaker"] for i in ids}
    return tuple(store.breakers()), events


def test_scripts_leave_the_same_breakers_as_the_rules_in_python(postgres_server: Any) -> None:
    said = set().union(*(_play(postgres_server.url, seed) for seed in (1, 2, 3)))
    # the scripts went through every move a breaker makes (else they proved little)
    assert {"opened", "opened again", "closed", "paused", "probe"} <= said, said


def _play(url: str, seed: int) -> set[str]:
    """Play script ``seed`` on both stores, comparing them at each step; returns the kinds
    of ``breaker`` event the script caused."""
    rng = random.Random(seed)
    clocks = [FakeClock(), FakeClock()]
    stores = [open_storage("memory://", clocks[0]),
              open_storage(f"{url}?schema=m{uuid.uuid4().hex[:10]}", clocks[1])]
    held: list[list[LeasedJob]] = [[], []]
    ids: list[str] = []
    try:
        for step in range(80):
            move = rng.choice(("put", "put", "take", "ack", "ack", "acks", "wait", "lose"))
            if move == "put":
                job = spec(flow=FLOWS[rng.choice("ab")], job_id=f"j{step:03d}")
                ids.append(job.id)
                for store in stores:
                    assert store.enqueue([job])[0].created
            elif move == "take":
                count = rng.randint(1, 3)
                got = [store.dequeue(["default"], "w", count, 10.0) for store in stores]
                assert [j.id for j in got[0]] == [j.id for j in got[1]], step
                for mine, jobs in zip(held, got, strict=True):
                    mine.extend(jobs)
            elif move in ("ack", "acks") and held[0]:
                places = rng.sample(range(len(held[0])), min(len(held[0]), 1 if move == "ack"
                                                             else 3))
                rolls = [(rng.randrange(8), rng.choice((5.0, 12.5, 40.0))) for _ in places]
                for mine, store in zip(held, stores, strict=True):
                    acks = [_ack(mine[p], *roll) for p, roll in zip(places, rolls, strict=True)]
                    assert store.ack(acks) == [True] * len(acks), step
                for mine in held:
                    mine[:] = [j for k, j in enumerate(mine) if k not in places]
            elif move == "wait":
                seconds = rng.choice((3.0, 8.0, 16.0))
                for clock in clocks:
                    clock.advance(seconds)
            elif move == "lose":  # leases past their expiry are recovered
                for clock in clocks:
                    clock.advance(11.0)
                assert stores[0].reclaim_expired() == stores[1].reclaim_expired(), step
                held = [[], []]
            for clock in clocks:  # promote what is due, as the scheduler does
                clock.advance(0.5)
            assert stores[0].promote_due() == stores[1].promote_due(), step
            assert _seen(stores[0], ids) == _seen(stores[1], ids), step
        return {_kind(message) for per_job in _seen(stores[1], ids)[1].values()
                for _, message in per_job}
    finally:
        for store in stores:
            store.close()
