"""A whole worker fed by a broker (docs/internals/broker.md): the relay publishes what the store has
due, the feed starts deliveries in the store, the acker settles them. Real clock, real
storage, the in-process ``memory://`` broker (a real broker's semantics, not a mock).
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import conveyor
import conveyor.storage
from conveyor import Conveyor, JobState
from conveyor.broker import open_broker
from conveyor.errors import BrokerUnsupported, BrokerURLError
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.outbox import as_outbox
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.relay import BACKLOG_POLL, DELIVERY_LIMIT_REACHED, Relay
from tests.support.waiting import wait_until

#: (storage, broker) pairs every test here runs on: each store with the in-process broker,
#: each network broker (RabbitMQ, Kafka) on SQLite. The batch runs on every pair (EVERY_PAIR:
#: the smoke run of each store with each network broker); the store's side of the relay and
#: the feed is one contract on every store (tests/conformance/test_outbox.py), so the other
#: scenarios run a network broker on one store only (each costs a RabbitMQ setup, or a
#: consumer group join: ~3 s on Tansu).
PAIRS = [("memory", "memory"), ("sqlite", "memory"), ("redis", "memory"),
         ("postgres", "memory"),
         pytest.param(("sqlite", "amqp"), marks=pytest.mark.rabbitmq),
         pytest.param(("sqlite", "kafka"), marks=pytest.mark.kafka)]
IDS = ["memory+memory", "sqlite+memory", "redis+memory", "postgres+memory", "sqlite+amqp",
       "sqlite+kafka"]
EVERY_PAIR = [*PAIRS, pytest.param(("redis", "amqp"), marks=pytest.mark.rabbitmq),
              pytest.param(("postgres", "amqp"), marks=pytest.mark.rabbitmq),
              pytest.param(("redis", "kafka"), marks=pytest.mark.kafka),
              pytest.param(("postgres", "kafka"), marks=pytest.mark.kafka)]
#: Brokers that say when a consumer's connection died (a delivery limit, a takeover at once);
#: Kafka cannot tell a dead consumer from one rebalanced away.
TELLS_DEATH = [p for p, name in zip(PAIRS, IDS, strict=True) if "kafka" not in name]


def _until(check: Callable[[], bool]) -> bool:
    return wait_until(check, 30.0, interval=0.01)


@pytest.fixture(params=PAIRS, ids=IDS)
def brokered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    """An app whose workers take jobs from a broker of their own: a fresh memory:// name, or
    queues of a fresh prefix on the session's RabbitMQ node."""
    store, broker = request.param
    tag = uuid.uuid4().hex[:10]
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path}/b.db"}.get(store) or (
        f"{request.getfixturevalue('postgres_server').url}?schema=w{tag}"
        if store == "postgres" else
        f"{request.getfixturevalue('redis_server').url}?prefix=w{tag}")
    if broker == "amqp":
        broker_url = f"{request.getfixturevalue('rabbitmq_server').url}?prefix=w{tag}"
    elif broker == "kafka":
        broker_url = request.getfixturevalue("kafka_server").broker_url(f"w{tag}")
    else:
        broker_url = f"memory://{tag}"
    app = Conveyor(url, broker=broker_url)
    try:
        yield app
    finally:
        app.close()


def _batch(app: Conveyor, batch_id: str) -> BatchStatus:
    status = app.storage.get_batch(batch_id)
    assert status is not None
    return status


def _state(app: Conveyor, job_id: str) -> JobState | None:
    record = app.get_job(job_id)
    return None if record is None else record.state


@pytest.mark.parametrize("brokered", EVERY_PAIR, indirect=True,
                         ids=[*IDS, "redis+amqp", "postgres+amqp", "redis+kafka",
                              "postgres+kafka"])
def test_a_batch_runs_through_the_broker_with_exact_counters(brokered: Conveyor) -> None:
    @brokered.job
    def square(x: int) -> int:
        return x * x

    with brokered.batch(description="through the broker") as batch:
        refs = [square.enqueue(i) for i in range(300)]
    launcher = Launcher(brokered, WorkerConfig(concurrency=8, relay_window=64))
    launcher.start()
    try:
        assert _until(lambda: _batch(brokered, batch.id).complete)
        relay = launcher.relay
        assert relay is not None and _until(lambda: relay.broker.backlog("default") == 0)
    finally:
        launcher.stop(5)
    status = _batch(brokered, batch.id)
    assert status.counts.get("succeeded") == 300 and status.total == 300
    assert brokered.get_job(refs[7].id).result == "49"  # type: ignore[union-attr]
    assert launcher.relay is not None and launcher.relay.published >= 300
    assert launcher.feed is not None and launcher.feed.held == 0  # every delivery settled


def test_a_workflow_runs_through_the_broker(brokered: Conveyor) -> None:
    """A released node is a pending job like any other: the relay publishes it (a smoke run
    of a fan-out and fan-in on every store and broker; docs/workflows.md)."""
    @brokered.job
    def part(x: int) -> int:
        return x

    @brokered.job
    def total(parts: list[int]) -> int:
        return sum(parts)

    wf = brokered.workflow(description="through the broker")
    first = wf.add(part.s(0))
    middle = wf.add_group([part.s(i) for i in range(1, 21)], after=[first])
    last = wf.add(total.s(), after=middle, results=True)
    wf.enqueue()
    launcher = Launcher(brokered, WorkerConfig(concurrency=8, relay_window=64))
    launcher.start()
    try:
        assert _until(lambda: _batch(brokered, wf.id).complete)
    finally:
        launcher.stop(5)
    assert brokered.get_job(last.id).result == str(sum(range(1, 21)))  # type: ignore[union-attr]
    assert _batch(brokered, wf.id).counts.get("succeeded") == 22


def test_a_retry_and_a_scheduled_job_are_published_when_due(brokered: Conveyor) -> None:
    failures: list[int] = []

    @brokered.job(retry_in=lambda attempt, exc: 0.2)
    def flaky() -> str:
        if not failures:
            failures.append(1)
            raise RuntimeError("first attempt fails")
        return "ok"

    @brokered.job
    def later() -> str:
        return "later"

    retried = flaky.enqueue()
    scheduled = later.enqueue_in(0.3)
    assert scheduled is not None
    launcher = Launcher(brokered, WorkerConfig(concurrency=2, poll_interval=(0.05, 0.1)))
    launcher.start()
    try:
        assert _until(lambda: _state(brokered, retried.id) is JobState.SUCCEEDED
                      and _state(brokered, scheduled.id) is JobState.SUCCEEDED)
    finally:
        launcher.stop(5)
    record = brokered.get_job(retried.id)
    assert record is not None and record.attempt == 2 and record.errors == 1


@pytest.mark.parametrize("brokered", TELLS_DEATH, indirect=True, ids=IDS[:-1])
def test_a_lost_consumer_connection_hands_its_running_job_to_another_worker_at_once(
        brokered: Conveyor) -> None:
    """With a 60 s lease, the job runs again on the other worker while the first still holds
    it: the broker's redelivery took it over, not a lease expiry."""
    release = threading.Event()
    ran_on: list[str] = []

    @brokered.job
    def hold() -> None:
        from conveyor import current_job

        ran_on.append(current_job().worker_id)
        if len(ran_on) == 1:
            release.wait(60)  # the first run hangs on until the test ends

    ref = hold.enqueue()
    first = Launcher(brokered, WorkerConfig(concurrency=1, lease=60, worker_id="first"))
    second = Launcher(brokered, WorkerConfig(concurrency=1, lease=60, worker_id="second"))
    first.start()
    try:
        assert _until(lambda: ran_on == ["first"])
        second.start()
        assert first.feed is not None
        first.feed.broker.close()  # the first worker's connection dies; its job runs on
        assert _until(lambda: _state(brokered, ref.id) is JobState.SUCCEEDED)
        record = brokered.get_job(ref.id)
        assert record is not None and ran_on == ["first", "second"]
        assert record.worker == "second" and record.recoveries == 1
        assert not release.is_set()  # the first run never finished: no lease ran out
    finally:
        release.set()
        second.stop(5)
        first.stop(5)
    assert first.acker.refused == 1  # the first worker's late ack was fenced off


def test_without_a_broker_there_is_no_relay_and_no_feed(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/plain.db")
    try:
        launcher = Launcher(app, WorkerConfig())
        assert launcher.relay is None and launcher.feed is None
        assert launcher.fetcher.feed is None and launcher.acker.on_written is None
    finally:
        app.close()


def test_a_store_that_is_not_an_outbox_and_a_bad_broker_url_are_one_line() -> None:
    with pytest.raises(BrokerUnsupported, match="cannot feed a broker"):
        as_outbox(object())
    with pytest.raises(BrokerURLError,
                       match="expected one of amqp://, amqps://, kafka://, kafkas://, memory://"):
        open_broker("carrier-pigeon://coop")


@pytest.mark.parametrize("brokered", TELLS_DEATH, indirect=True, ids=IDS[:-1])
def test_a_job_whose_message_the_broker_gives_up_on_ends_dead_with_the_reason(
        brokered: Conveyor) -> None:
    """A job that kills every consumer it reaches: after the delivery limit the broker
    dead-letters its message and the relay records the job dead, naming why."""
    assert brokered.broker_url is not None
    url = brokered.broker_url + ("&" if "?" in brokered.broker_url else "?") + "delivery_limit=2"
    brokered.broker_url = url

    @brokered.job
    def victim() -> None: ...

    ref = victim.enqueue()
    config = WorkerConfig(concurrency=1)
    relay = Relay(brokered.storage, brokered.clock, config, broker=open_broker(url))
    try:
        relay.tick()
        assert relay.published == 1
        for _ in range(5):  # consumers that die holding it, until the broker gives up
            consumer = open_broker(url)
            held = consumer.consume([("default", 0)], 1, 2)
            consumer.close()
            if not held:
                break
        wait_until(relay.bury_dead_lettered, 30, what="the dead-lettered job")
    finally:
        relay.stop(5)
    record = brokered.get_job(ref.id)
    assert record is not None and record.state is JobState.DEAD
    assert record.message == DELIVERY_LIMIT_REACHED


def test_a_publish_that_fails_outright_is_due_again_at_once(tmp_path: Path) -> None:
    """A broker call that raises (the connection dropped mid-publish) leaves no job stamped as
    published: each is due again at once, not ``republish_after`` (300 s) later."""
    from conveyor.broker.memory import MemoryBroker, open_memory_broker
    from conveyor.errors import BrokerUnavailable

    class DropsOnce(MemoryBroker):
        """A real in-process broker whose first publish dies, as a lost connection's does."""

        dropped = False

        def publish(self, queue: str, job_ids: Sequence[str],
                    keys: Sequence[str | None] | None = None, pack: int = 0) -> list[bool]:
            if not self.dropped:
                self.dropped = True
                raise BrokerUnavailable("connection lost")
            return super().publish(queue, job_ids, keys, pack)

    app = Conveyor(f"sqlite:///{tmp_path}/d.db", broker=f"memory://{uuid.uuid4().hex}")

    @app.job
    def noop() -> None: ...

    ref = noop.enqueue()
    real = open_memory_broker(app.broker_url or "")
    broker = DropsOnce(real.url, real._hub)
    relay = Relay(app.storage, app.clock, WorkerConfig(concurrency=1), broker=broker)
    try:
        with pytest.raises(BrokerUnavailable):
            relay.tick()
        assert as_outbox(app.storage).publish_due("default", 10, 300.0) == [ref.id]
    finally:
        relay.stop(5)
        app.close()


def test_an_idle_relay_publishes_a_new_job_at_once(brokered: Conveyor) -> None:
    """The relay waits for news from the store, not for a timer: with ``relay_idle`` at 60 s, a
    job enqueued into an idle worker runs long before the relay's wait could have run out."""
    @brokered.job
    def noop() -> None: ...

    launcher = Launcher(brokered, WorkerConfig(concurrency=2, relay_idle=60.0))
    launcher.start()
    try:
        relay = launcher.relay
        assert relay is not None and relay._thread is not None
        thread = relay._thread
        # its first round found nothing due: wait until it blocks in the store's wait
        wait_until(lambda: _blocked_in_storage_wait(thread), 30.0, interval=0.01,
                   what="the relay to block in the store's wait")
        ref = noop.enqueue()
        try:
            wait_until(lambda: _state(brokered, ref.id) is JobState.SUCCEEDED, 30.0,
                       interval=0.01, what="the job to run")
        except AssertionError as exc:  # what to look at: the job, the relay's count and place
            raise AssertionError(f"{exc}: job {_state(brokered, ref.id)}, relay published "
                                 f"{relay.published}, relay at {_stack(thread)}") from None
    finally:
        launcher.stop(5)


def _stack(thread: threading.Thread) -> list[str]:
    frame = sys._current_frames().get(thread.ident or 0)
    names = []
    while frame is not None:
        names.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")
        frame = frame.f_back
    return names


# conveyor's own code, told by where its package was imported from: a checkout in a folder
# named ``conveyor`` (what ``git clone`` makes) holds its .venv, whose libraries are not ours.
_OWN = str(Path(conveyor.__file__).parent) + os.sep
_STORAGE = str(Path(conveyor.storage.__file__).parent) + os.sep


def _blocked_in_storage_wait(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked inside a storage backend's ``wait``: in it, and deepest
    in a library's code (a condition's lock, a socket read), not conveyor's own."""
    frame = sys._current_frames().get(thread.ident or 0)
    names = []
    while frame is not None:
        names.append((frame.f_code.co_name, frame.f_code.co_filename))
        frame = frame.f_back
    return bool(names) and not names[0][1].startswith(_OWN) and any(
        name == "wait" and path.startswith(_STORAGE) for name, path in names)


def test_a_full_window_is_looked_at_again_soon_then_less_and_less(tmp_path: Path) -> None:
    """While a queue's window stays full the store has no news to wake the relay (Redis rings
    no doorbell for an ack), so the relay looks at the broker again after ``BACKLOG_POLL``,
    doubling up to ``relay_idle``: waiting ``relay_idle`` for news let a draining worker run
    dry four times a second."""
    app = Conveyor(f"sqlite:///{tmp_path}/w.db", broker=f"memory://{uuid.uuid4().hex}")

    @app.job
    def noop() -> None: ...

    for _ in range(10):
        noop.enqueue()
    relay = Relay(app.storage, app.clock, WorkerConfig(relay_window=4, relay_idle=60.0),
                  broker=open_broker(app.broker_url or ""))
    consumer = open_broker(app.broker_url or "")
    try:
        relay.tick()
        assert relay.published == 4 and relay.interval() == 0.0  # a full window: go on
        looks = []
        for _ in range(16):  # 2 ms doubled 15 times passes 60 s
            relay.tick()
            looks.append(relay.interval())
        assert relay.published == 4  # the window stayed full
        assert looks[:3] == [BACKLOG_POLL, 2 * BACKLOG_POLL, 4 * BACKLOG_POLL]
        assert looks == sorted(looks) and looks[-1] == 60.0
        consumer.ack(consumer.consume([("default", 0)], 4, 1.0))  # consumers took the window
        relay.tick()
        assert relay.published == 8 and relay.interval() == 0.0
        consumer.ack(consumer.consume([("default", 0)], 4, 1.0))
        relay.tick()  # the last two: the window is not full, nothing more is due
        consumer.ack(consumer.consume([("default", 0)], 4, 1.0))
        relay.tick()
        assert relay.published == 10 and relay.interval() == 60.0
    finally:
        consumer.close()
        relay.stop(5)
        app.close()


def test_the_relay_asks_the_broker_for_its_backlog_only_near_half_a_window(
        tmp_path: Path) -> None:
    """Each look at the backlog is a round trip to the broker (1.5 ms through RabbitMQ), most
    of an idle job's way through the relay. What waits in the broker is at most what it held
    at the last look plus what this relay published since, so the relay asks only once that
    reaches half the window, and still stops at a full window."""
    from conveyor.broker.memory import MemoryBroker, open_memory_broker

    class Counting(MemoryBroker):
        looks = 0

        def backlog(self, queue: str) -> int:
            self.looks += 1
            return super().backlog(queue)

    app = Conveyor(f"sqlite:///{tmp_path}/b.db", broker=f"memory://{uuid.uuid4().hex}")

    @app.job
    def noop() -> None: ...

    real = open_memory_broker(app.broker_url or "")
    broker = Counting(real.url, real._hub)
    relay = Relay(app.storage, app.clock, WorkerConfig(relay_window=8), broker=broker)
    try:
        for published in range(1, 4):  # one job at a time, as an idle worker sees them
            noop.enqueue()
            relay.tick()
            assert relay.published == published
        # the first round asked (a relay just started knows nothing of the queue); then at
        # most 3 wait: under half of 8, no need to ask
        assert broker.looks == 1
        noop.enqueue()
        relay.tick()
        assert relay.published == 4 and broker.looks == 1
        for _ in range(6):
            noop.enqueue()
        relay.tick()  # 4 may wait: ask; the broker holds 4, so 4 more fit
        assert broker.looks == 2 and relay.published == 8
        relay.tick()  # the window is full: asked again, nothing published
        assert broker.looks == 3 and relay.published == 8
        assert broker.backlog("default") == 8
    finally:
        relay.stop(5)
        app.close()


@pytest.mark.parametrize("brokered", [("redis", "memory")], indirect=True)
def test_a_drain_past_the_window_never_waits_for_relay_idle(brokered: Conveyor) -> None:
    """2,000 jobs through a window of 64 with ``relay_idle`` at 60 s on Redis, whose acks wake
    no relay: the batch completes long before one ``relay_idle`` could have passed."""
    @brokered.job
    def noop() -> None: ...

    with brokered.batch() as batch:
        noop.enqueue_many([] for _ in range(2000))
    launcher = Launcher(brokered, WorkerConfig(concurrency=8, relay_window=64, relay_idle=60.0))
    launcher.start()
    try:
        assert wait_until(lambda: _batch(brokered, batch.id).complete, 30.0, interval=0.05)
    finally:
        launcher.stop(5)


@pytest.mark.kafka
def test_a_slow_job_does_not_block_its_kafka_partition(kafka_server: Any,
                                                       tmp_path: Path) -> None:
    """Kafka's trap: one slow message holds back everything behind it in its partition. One
    partition, a job that runs until the test lets it go, then 300 jobs of other keys: they
    all finish while it still runs, and the group's commit point stays at the slow job (a
    worker dying now would leave it to the next one) until it is done."""
    from conveyor.broker.kafka.broker import KafkaBroker

    url = kafka_server.broker_url(f"h{uuid.uuid4().hex[:8]}", partitions=1)
    app = Conveyor(f"sqlite:///{tmp_path}/h.db", broker=url)
    gate = threading.Event()

    @app.job(order_key=lambda key: key)
    def step(key: str) -> str:
        if key == "slow":
            gate.wait(60)
        return key

    slow = step.enqueue("slow")
    fast = [step.enqueue(f"acct:{i}") for i in range(300)]
    launcher = Launcher(app, WorkerConfig(concurrency=4, relay_window=64))
    launcher.start()
    try:
        assert _until(lambda: all(_state(app, r.id) is JobState.SUCCEEDED for r in fast))
        assert _state(app, slow.id) is JobState.ACTIVE and not gate.is_set()
        assert launcher.feed is not None
        broker = launcher.feed.broker
        assert isinstance(broker, KafkaBroker)

        def committed() -> int:
            return broker.committed("default")[0]

        assert committed() <= 0  # nothing past the slow job, the first message
        gate.set()
        assert _until(lambda: _state(app, slow.id) is JobState.SUCCEEDED)
        assert _until(lambda: committed() >= 301)
    finally:
        gate.set()
        launcher.stop(5)
        app.close()


#: The pairs of the in-process broker: a test that drives the feed by hand needs a broker
#: whose deliveries it can hand back at a moment of its choosing.
MEMORY_PAIRS = [p for p, name in zip(PAIRS, IDS, strict=True) if name.endswith("+memory")]


@pytest.mark.parametrize("brokered", MEMORY_PAIRS, ids=[p[0] for p in MEMORY_PAIRS],
                         indirect=True)
def test_a_suspect_handed_back_lets_go_of_its_delivery_and_runs_when_published_again(
        brokered: Conveyor) -> None:
    """Two jobs taken over from a worker whose connection died are both suspects; isolation
    runs one and hands the other back to pending. The hand-back must settle the delivery
    that carried it: a worker still holding it took the job's next message, redelivered
    (its consumer died before starting it), for a duplicate of a job running here, and
    dropped it, so the job waited for ``republish_after`` (the kill -9 storm through
    RabbitMQ, scenario 24, caught it: two jobs pending after the batch's others finished)."""
    gate = threading.Event()
    ran: list[tuple[int, str]] = []

    @brokered.job
    def hold(n: int) -> None:
        from conveyor import current_job

        ran.append((n, current_job().worker_id))
        gate.wait(30)

    jobs = [hold.enqueue(n).id for n in range(2)]
    config = WorkerConfig(concurrency=2, lease=60, republish_after=300, worker_id="first")
    first = Launcher(brokered, config)
    second = Launcher(brokered, WorkerConfig(concurrency=2, lease=60, republish_after=300,
                                             worker_id="second"))
    other = open_broker(brokered.broker_url or "")
    second.threads.start()
    second.acker.start()
    try:
        assert first.relay is not None and first.feed is not None
        assert second.relay is not None and second.feed is not None
        first.relay.tick()  # both published
        assert len(first.feed.take(["default"], 2, 5.0)) == 2  # both leased by "first"
        first.feed.broker.close()  # its connection dies: both delivered again, redelivered
        assert second.fetcher.tick() == 2  # both taken over: one runs, one is handed back
        assert second.fetcher.isolation.handed_back == 1
        assert _until(lambda: len(ran) == 1)
        running, worker = ran[0]
        assert worker == "second"
        back = jobs[1 - running]
        assert _state(brokered, back) is JobState.PENDING
        assert second.feed.held == 1  # only the running suspect's delivery

        second.relay.tick()  # the handed-back job is due at once: published again
        taken = other.consume([("default", 0)], 10, 5.0)
        assert [d.job_id for d in taken] == [back]
        other.close()  # that consumer dies before starting it: its message comes back
        gate.set()
        assert _until(lambda: _state(brokered, jobs[running]) is JobState.SUCCEEDED)
        assert _until(lambda: second.fetcher.tick() == 1)  # the redelivered message starts it
        assert _until(lambda: _state(brokered, back) is JobState.SUCCEEDED)
    finally:
        gate.set()
        second.threads.stop(5)
        second.acker.stop(5)
        for launcher in (first, second):
            assert launcher.feed is not None and launcher.relay is not None
            launcher.feed.close()
            launcher.relay.broker.close()
    record = brokered.get_job(back)
    assert record is not None and record.recoveries == 1 and record.worker == "second"
