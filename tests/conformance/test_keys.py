"""The key rule on every backend (docs/flow-control.md, "Keys"; issue 49, item 1).

Every flow-control key — unique, concurrency, rate, order, debounce/throttle, aggregation — is
1 to 512 bytes of UTF-8 with no control character, line or paragraph separator or lone
surrogate. The client checks it at enqueue with one line naming the kind of key and the job,
before anything is stored, the same on every store. A stored job whose concurrency, order or
rate key breaks it (written before the rule, or by a client that does not check) ends dead
where it would start, with a reason naming the key, and never holds up the jobs beside it.

Where the expectation comes from: issue 49's High finding (on PostgreSQL one job with a 3 KB
rate or concurrency key failed every fetch of its queue, ``ProgramLimitExceeded ...
rate_hits_key``, while SQLite and Redis ran it); the engine's own rule that one bad input harms
only its own job (docs/reliability.md). Peers bound their keys too: BigQuery job ids are 1,024
characters of a small alphabet, BullMQ refuses ``:`` in a custom id, Sidekiq Enterprise's
unique locks hash their arguments into a fixed-length digest.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Aggregate, Conveyor, Debounce, FakeClock, JobState, Member, Throttle
from conveyor.core.job import EventKind, FlowControl, Outcome
from conveyor.core.text import MAX_KEY_BYTES
from conveyor.errors import InvalidKeyError
from conveyor.storage import Backend
from conveyor.storage.outbox import StartKind, as_outbox
from conveyor.storage.rules import broken_key_message
from tests.conformance.backends import BACKENDS, backend_url
from tests.conformance.helpers import ack, events_of, put, spec, state_of, take

LONG = "partner:" + secrets.token_hex(3000)  # the finding's key: 6,008 bytes
BAD = {"6,008 bytes": LONG, "a newline": "partner:a\nb", "a tab": "k\tv",
       "a C1 control": "k\x85v", "a line separator": "k\u2028v"}
# The most a key may be: ASCII, and three-byte characters (what the B-tree entry holds).
AT_THE_BOUND = ["k" * MAX_KEY_BYTES, "€" * (MAX_KEY_BYTES // 3)]
GATES = {
    "concurrency key": lambda key: FlowControl(concurrency_key=key, concurrency_limit=2),
    "order key": lambda key: FlowControl(order_key=key),
    "rate key": lambda key: FlowControl(rate_key=key, rate_limit=100, rate_period=1.0),
    "breaker key": lambda key: FlowControl(breaker_key=key, breaker_open_after=5,
                                           breaker_within=60.0, breaker_cool_down=30.0),
}


def _noop(key: str) -> None:
    return None


def _app(url: str) -> Conveyor:
    """An app with one job per kind of key, each key the job's first argument."""
    app = Conveyor(url, clock=FakeClock())
    options: dict[str, dict[str, Any]] = {
        "unique": {"unique_for": 60, "unique_key": lambda key: key},
        "concurrency": {"concurrency": 1, "concurrency_key": lambda key: key},
        "rate": {"rate_limit": 5, "rate_period": 1, "rate_key": lambda key: key},
        "order": {"order_key": lambda key: key},
        "debounce": {"debounce": Debounce(lambda key: key, wait=5)},
        "throttle": {"throttle": Throttle(lambda key: key, every=5)},
        "aggregation": {"aggregate": Aggregate(lambda key: key, grace=5)},
    }
    for kind, opts in options.items():
        app.job(name=f"keys.{kind}", **opts)(_noop)

    @app.aggregate("keys.aggregation")
    def digest(members: list[Member]) -> None:
        return None

    return app


@pytest.fixture(params=BACKENDS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    conveyor = _app(backend_url(str(request.param), tmp_path, request.getfixturevalue))
    try:
        yield conveyor
    finally:
        conveyor.close()


def _total(app: Conveyor) -> int:
    return sum(app.storage.count_jobs(state=s) for s in JobState)


def test_enqueue_refuses_a_key_that_breaks_the_rule_with_one_line(app: Conveyor) -> None:
    jobs = [app.registry.get(name) for name in app.registry.names() if name.startswith("keys.")]
    assert len(jobs) == 7
    for fn in jobs:
        assert fn is not None
        for what, key in [*BAD.items(), ("a lone surrogate", "k\ud800"), ("nothing", "")]:
            with pytest.raises((InvalidKeyError, TypeError)) as info:
                fn.enqueue(key)
            text = str(info.value)
            assert "\n" not in text and len(text) < 400, (fn.name, what, text)
            if key:  # an empty key is a key callable's mistake (TypeError, as before)
                assert isinstance(info.value, ValueError), (fn.name, what)
                assert " key " in text and fn.name in text, (fn.name, what, text)
    assert _total(app) == 0  # nothing stored, not even half


def test_the_findings_long_rate_key_is_refused_and_the_queue_runs(app: Conveyor) -> None:
    rated = app.registry.get("keys.rate")
    assert rated is not None
    with pytest.raises(InvalidKeyError, match=r"rate key .* is 6,008 bytes long"):
        rated.enqueue(LONG)
    refs = [rated.enqueue(f"partner:{n}") for n in range(4)]
    leased = app.storage.dequeue(["default"], "w", 10, 30.0)
    assert sorted(j.id for j in leased) == sorted(r.id for r in refs if r is not None)


@pytest.mark.parametrize("key", AT_THE_BOUND, ids=["ascii", "three-byte"])
def test_a_key_at_the_bound_is_stored_and_runs(app: Conveyor, key: str) -> None:
    names = ["keys.unique", "keys.concurrency", "keys.rate", "keys.order"]
    refs = []
    for name in names:
        fn = app.registry.get(name)
        assert fn is not None
        refs.append(fn.enqueue(key))
    leased = app.storage.dequeue(["default"], "w", 10, 30.0)
    assert {j.id for j in leased} == {r.id for r in refs if r is not None}


def _stored_bad_jobs(backend: Backend) -> dict[str, tuple[str, str]]:
    """One job per kind of gate key and bad value, written as a client that does not check
    would write it; id -> (kind, what)."""
    out = {}
    for kind, flow in GATES.items():
        for what, key in BAD.items():
            out[put(backend, flow=flow(key))] = (kind, what)
    return out


def test_a_stored_key_that_breaks_the_rule_ends_its_own_job_dead(backend: Backend) -> None:
    bad = _stored_bad_jobs(backend)
    good = [put(backend) for _ in range(4)]
    leased = take(backend, count=len(bad) + len(good))
    assert sorted(j.id for j in leased) == sorted(good)  # the queue is not held up
    for job_id, (kind, what) in bad.items():
        record = backend.get_job(job_id)
        assert record is not None and record.state is JobState.DEAD, (kind, what)
        assert record.message == broken_key_message(kind), (kind, what, record.message)
        last = events_of(backend, job_id)[-1]
        assert (last.kind, last.message) == (EventKind.DEAD, record.message)
    for job in leased:
        assert ack(backend, job)
    assert take(backend, count=10) == []


def test_a_delivered_job_whose_stored_key_breaks_the_rule_ends_dead(backend: Backend) -> None:
    bad = _stored_bad_jobs(backend)
    good = put(backend)
    replies = as_outbox(backend).start("default", [(j, False) for j in [*bad, good]], "w",
                                        30.0)
    assert [r.kind for r in replies] == [StartKind.SKIPPED] * len(bad) + [StartKind.STARTED]
    for job_id, (kind, _) in bad.items():
        record = backend.get_job(job_id)
        assert record is not None and record.state is JobState.DEAD
        assert record.message == broken_key_message(kind)
    assert state_of(backend, good) is JobState.ACTIVE


def test_a_scheduled_job_with_a_long_order_key_is_promoted_then_ends_dead(
        backend: Backend, clock: FakeClock) -> None:
    """PostgreSQL's order index held no entry past ~2,700 bytes: promoting such a job failed
    every promotion of the store, not only its own."""
    late = backend.enqueue([spec(flow=FlowControl(order_key=LONG), run_at=clock.now() + 5)])
    later = backend.enqueue([spec(run_at=clock.now() + 5)])
    clock.advance(6)
    backend.promote_due()
    leased = take(backend, count=5)
    assert [j.id for j in leased] == [later[0].id]
    assert state_of(backend, late[0].id) is JobState.DEAD
    assert ack(backend, leased[0], Outcome.SUCCEEDED)


@pytest.mark.parametrize("key", [LONG, "a\x1fb"], ids=["long", "unit-separator"])
def test_a_stored_aggregation_key_that_breaks_the_rule_runs_its_job_alone(
        backend: Backend, clock: FakeClock, key: str) -> None:
    """No store can keep a group under such a key: on PostgreSQL a scheduled member of a
    6 KB key failed every promotion of the store (its index refused the key), on Redis a
    key holding the state line's separator left its member aggregating for good. Such a
    job is no member: it runs as a lead of its own, and a good group beside it is whole."""
    bad = FlowControl(group_key=key, grace=1.0, max_delay=5.0, max_size=3)
    good = FlowControl(group_key="g", grace=1.0, max_delay=5.0, max_size=3)
    now_bad = put(backend, flow=bad)
    later_bad = backend.enqueue([spec(flow=bad, run_at=clock.now() + 5)])[0].id
    members = [put(backend, flow=good) for _ in range(3)]  # a full run: the third leads
    clock.advance(6)
    backend.promote_due()
    leased = {j.id: j for j in take(backend, count=10)}
    assert {now_bad, later_bad, members[2]} == set(leased)
    for lone in (now_bad, later_bad):
        assert backend.gather(lone, leased[lone].token) == []
        assert ack(backend, leased[lone])
    gathered = backend.gather(members[2], leased[members[2]].token)
    assert gathered is not None and sorted(j.id for j in gathered) == sorted(members[:2])


def test_a_parked_job_whose_stored_key_breaks_the_rule_is_published_then_ends_dead(
        backend: Backend) -> None:
    """Parked (a paused queue) before its key was checked, such a job must not wait parked
    for good: once the queue runs it is due, and its start ends it."""
    job_id = put(backend, flow=GATES["rate key"](LONG))
    outbox = as_outbox(backend)
    assert outbox.publish_due("default", 10, 300.0) == [job_id]
    backend.pause_queue("default")
    [parked] = outbox.start("default", [(job_id, False)], "w", 30.0)
    assert parked.kind is StartKind.PARKED
    backend.resume_queue("default")
    assert outbox.publish_due("default", 10, 300.0) == [job_id]
    [ended] = outbox.start("default", [(job_id, False)], "w", 30.0)
    assert ended.kind is StartKind.SKIPPED
    assert state_of(backend, job_id) is JobState.DEAD
