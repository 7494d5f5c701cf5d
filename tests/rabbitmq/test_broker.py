"""The RabbitMQ broker against a real private node (tests/support/rabbitmq.py): confirms,
order, prefetch, redelivery when a connection dies, the delivery limit, a node restart, and
what a wrong URL, password or permission says."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.broker import Broker, open_broker
from conveyor.broker.base import Delivery
from conveyor.broker.rabbitmq.broker import RabbitBroker
from conveyor.errors import BrokerUnavailable, BrokerURLError
from tests.cli.conftest import conveyor
from tests.support.rabbitmq import RabbitServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def url(rabbitmq_server: RabbitServer) -> str:
    """The session node's URL with a queue prefix of this test's own."""
    return f"{rabbitmq_server.url}?prefix=t{uuid.uuid4().hex[:10]}&timeout=5"


@pytest.fixture
def broker(url: str) -> Iterator[RabbitBroker]:
    opened = open_broker(url)
    assert isinstance(opened, RabbitBroker)
    try:
        yield opened
    finally:
        opened.close()


def _take(broker: Broker, queues: list[str], n: int, timeout: float = 5.0) -> list[str]:
    """Job ids of ``n`` deliveries (strict order over ``queues``), acked."""
    got: list[str] = []
    deadline_reached = False
    while len(got) < n and not deadline_reached:
        batch = broker.consume([(q, 0) for q in queues], n - len(got), timeout)
        deadline_reached = not batch
        broker.ack(batch)
        got += [d.job_id for d in batch]
    return got


def test_publish_is_confirmed_and_what_is_published_is_consumed_once(broker: RabbitBroker) -> None:
    ids = [f"j{i}" for i in range(500)]
    assert broker.publish("default", ids) == [True] * 500
    assert wait_until(lambda: broker.backlog("default") == 500, 10, what="500 ready")
    assert sorted(_take(broker, ["default"], 500)) == sorted(ids)
    assert broker.consume([("default", 0)], 10, 0.2) == []


def test_strict_order_takes_the_first_queue_while_it_has_messages(url: str) -> None:
    publisher = open_broker(url)
    consumer = open_broker(url + "&prefetch=10")
    assert isinstance(consumer, RabbitBroker)
    queues = [("high", 0), ("low", 0)]
    try:
        assert consumer.consume(queues, 1, 0) == []  # subscribed, nothing there yet
        publisher.publish("low", ["l1", "l2"])
        publisher.publish("high", ["h1", "h2"])
        # everything is prefetched into this consumer before it takes anything
        wait_until(lambda: publisher.backlog("low") + publisher.backlog("high") == 0
                   and consumer.buffered() == 4, 10, what="prefetched")
        got = consumer.consume(queues, 4, 5)
        assert [d.job_id for d in got] == ["h1", "h2", "l1", "l2"]
        consumer.ack(got)
    finally:
        publisher.close()
        consumer.close()


def test_a_consumer_never_holds_more_than_its_prefetch(url: str) -> None:
    publisher = open_broker(url)
    consumer = open_broker(url + "&prefetch=3")
    other = open_broker(url)
    assert isinstance(consumer, RabbitBroker)
    try:
        for i in range(10):  # one message each (prefetch counts messages, a pack is one)
            publisher.publish("default", [f"j{i}"])
        held = consumer.consume([("default", 0)], 10, 5)
        wait_until(lambda: len(held) + consumer.buffered() == 3, 10, what="the prefetch")
        held += consumer.consume([("default", 0)], 10, 0)
        assert len(held) == 3  # unacked deliveries cap what RabbitMQ sends this consumer
        assert consumer.consume([("default", 0)], 10, 0.5) == []
        assert len(_take(other, ["default"], 7)) == 7  # the rest went to the other one
    finally:
        for b in (publisher, consumer, other):
            b.close()


def test_release_and_a_lost_connection_redeliver_to_another_consumer(url: str) -> None:
    first = open_broker(url)
    second = open_broker(url)
    try:
        first.publish("default", ["a", "b"])
        got = first.consume([("default", 0)], 2, 5)
        got += first.consume([("default", 0)], 2 - len(got), 5)
        assert sorted(d.job_id for d in got) == ["a", "b"]
        first.release([d for d in got if d.job_id == "a"])
        again = first.consume([("default", 0)], 1, 5)  # handed back, delivered again
        assert [(d.job_id, d.redelivered, d.attempts) for d in again] == [("a", True, 2)]
        assert second.consume([("default", 0)], 2, 0.3) == []  # first holds both
        first.close()  # its connection dies holding both: the broker hands them on at once
        moved = second.consume([("default", 0)], 2, 10)
        moved += second.consume([("default", 0)], 2 - len(moved), 5) if len(moved) < 2 else []
        assert sorted((d.job_id, d.redelivered) for d in moved) == [("a", True), ("b", True)]
        second.ack(moved)
    finally:
        first.close()
        second.close()


def test_a_subscribe_that_fails_half_way_is_made_again_at_the_next_consume(
        broker: RabbitBroker) -> None:
    """A loaded node can take longer than the timeout to answer a declare, or close the
    connection with INTERNAL_ERROR while a consumer subscribes (both seen under load in
    test_broker_worker). The next ``consume`` must subscribe again: a queue taken for
    subscribed after a failed attempt got no delivery for as long as the worker ran."""
    assert broker.publish("default", ["a"]) == [True]
    channel = broker._consumer
    real = channel.declare_queue
    calls = 0

    async def slow_node(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.TimeoutError  # what the client raises when the node is too slow
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    channel.declare_queue = slow_node  # type: ignore[method-assign]
    with pytest.raises(BrokerUnavailable):
        broker.consume([("default", 0)], 1, 1.0)
    assert _take(broker, ["default"], 1) == ["a"]
    assert calls == 2


def test_many_ids_travel_in_few_messages_each_delivered_once(url: str) -> None:
    publisher = open_broker(url)
    fresh = open_broker(url)  # knows nothing of the publish: counts messages
    ids = [f"j{i}" for i in range(64)]
    try:
        assert publisher.publish("default", ids) == [True] * 64
        assert publisher.backlog("default") == 64  # the relay's window counts jobs
        assert fresh.backlog("default") == 4  # four packs of 16
        got = fresh.consume([("default", 0)], 100, 5)
        while len(got) < 64 and (more := fresh.consume([("default", 0)], 100, 5)):
            got += more
        assert sorted(d.job_id for d in got) == sorted(ids)
        assert not any(d.redelivered for d in got)
        fresh.ack(got)
    finally:
        publisher.close()
        fresh.close()


def test_a_publish_packs_no_more_ids_than_asked_and_the_url_caps_it(url: str) -> None:
    """``pack`` (the relay's pace-sized bound) and the URL's ``pack`` (default 128) both cap
    the ids per message; a publish of n ids still spreads over at least four messages."""
    publisher = open_broker(url)
    capped = open_broker(f"{url}&pack=16")
    try:
        def messages(broker: Broker, n: int, pack: int) -> int:
            ids = [uuid.uuid4().hex for _ in range(n)]
            assert broker.publish("default", ids, pack=pack) == [True] * n
            fresh = open_broker(url)  # knows nothing of the publish: counts messages
            try:
                count = fresh.backlog("default")
                got: list[Delivery] = []
                while len(got) < n and (more := fresh.consume([("default", 0)], n, 5)):
                    got += more
                assert sorted(d.job_id for d in got) == sorted(ids)
                fresh.ack(got)
            finally:
                fresh.close()
            return count

        assert messages(publisher, 64, 2) == 32
        assert messages(publisher, 1024, 1000) == 8  # the default cap: 128 ids a message
        assert messages(publisher, 40, 1000) == 4  # spread: n / 4
        assert messages(capped, 256, 100) == 16  # the URL's cap
        assert messages(publisher, 10, 1) == 10
    finally:
        publisher.close()
        capped.close()


def test_a_pack_is_settled_when_all_of_its_jobs_are_and_comes_back_one_by_one(url: str) -> None:
    """A consumer that took part of a pack and died: every job of it comes back, each in a
    message of its own marked redelivered (so the store takes over the started ones)."""
    first, second = open_broker(url), open_broker(url)
    ids = [f"j{i}" for i in range(16)]
    try:
        first.publish("default", ids)  # four packs of four
        part = first.consume([("default", 0)], 6, 5)
        first.ack(part[:5])  # five finished; the sixth and the rest still open
        first.close()
        back = second.consume([("default", 0)], 100, 10)
        while (more := second.consume([("default", 0)], 100, 2)):
            back += more
        done = {d.job_id for d in part[:5]}
        # the packs it held come back whole (the finished ones too: the store skips those),
        # one job per message now, every one redelivered, each with its pack's message id
        # (the store takes over a job only for the message that started it)
        assert {d.job_id for d in back} >= set(ids) - done
        assert all(d.redelivered for d in back)
        first_ids = {d.job_id: d.message_id for d in part}
        packs = {int(job_id[1:]) // 4 for job_id in first_ids}  # j0-j3 the first pack, ...
        assert len(set(first_ids.values())) == len(packs) and None not in first_ids.values()
        assert all(d.message_id == first_ids[d.job_id] for d in back if d.job_id in first_ids)
        assert second.backlog("default") == 0
        second.ack(back)
    finally:
        first.close()
        second.close()


def test_a_poison_job_in_a_pack_is_dead_lettered_alone(url: str) -> None:
    limited = url.replace("timeout=5", "timeout=5&delivery_limit=2")
    publisher = open_broker(limited)
    try:
        publisher.publish("default", ["poison", "a", "b", "c"])  # packs of 1: spread out
        # packs of four: "x", "y" and "z" share one with "poison2"
        publisher.publish("default", ["x", "poison2", "y", "z", *[f"p{i}" for i in range(12)]])
        victims = {"poison", "poison2"}
        survivors: set[str] = set()
        for _ in range(6):  # consumers that die whenever they hold a poison job
            consumer = open_broker(limited)
            got = consumer.consume([("default", 0)], 100, 2)
            while (more := consumer.consume([("default", 0)], 100, 0.5)):
                got += more
            consumer.ack([d for d in got if d.job_id not in victims])
            survivors |= {d.job_id for d in got if d.job_id not in victims}
            consumer.close()  # dies holding the poison jobs (and their packs)
        dead = sorted(wait_until(lambda: publisher.dead_lettered() or None, 10,
                                 what="dead-lettered"))
        while (more := publisher.dead_lettered()):
            dead += more
        assert sorted(dead) == ["poison", "poison2"]  # its pack-mates were not dead-lettered
        assert survivors == {"a", "b", "c", "x", "y", "z", *(f"p{i}" for i in range(12))}
    finally:
        publisher.close()


def test_a_message_past_the_delivery_limit_is_dead_lettered_and_reported(url: str) -> None:
    broker = open_broker(url.replace("timeout=5", "timeout=5&delivery_limit=2"))
    assert isinstance(broker, RabbitBroker)
    try:
        broker.publish("default", ["poison"])
        for _ in range(3):  # each consumer "dies" holding it
            held = broker.consume([("default", 0)], 1, 5)
            assert [d.job_id for d in held] == ["poison"]
            broker.release(held)
        assert wait_until(lambda: broker.dead_lettered() or None, 10,
                          what="dead-lettered") == ["poison"]
        assert broker.consume([("default", 0)], 1, 0.5) == []
    finally:
        broker.close()


def test_a_restarted_node_keeps_durable_messages_and_the_broker_reconnects(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    node = RabbitServer().start()  # its own node: restarting the session's would disturb others
    node_url = f"{node.url}?prefix=r&timeout=5"
    try:
        broker = open_broker(node_url)
        assert broker.publish("default", ["kept1", "kept2"]) == [True, True]
        with caplog.at_level(logging.DEBUG):
            node.stop()
            node.start()
            assert wait_until(lambda: _try_take(broker), 60, interval=0.5,
                              what="reconnected") == ["kept1", "kept2"]
        broker.close()
    finally:
        node.cleanup()
    # The client logs the outage (its reconnect attempts), each record one line.
    client = [r for r in caplog.records if r.name.startswith(("aiormq", "aio_pika"))]
    assert client, "the client logged nothing about losing its node"
    assert [r.name for r in client if r.exc_info] == []
    assert "Traceback" not in caplog.text


def _try_take(broker: Broker) -> list[str] | None:
    try:
        got = broker.consume([("default", 0)], 2, 1)
        got += broker.consume([("default", 0)], 2 - len(got), 1) if len(got) < 2 else []
    except BrokerUnavailable:
        return None
    broker.ack(got)
    return sorted(d.job_id for d in got) if len(got) == 2 else None


@pytest.mark.parametrize("make, says", [
    (lambda s: "amqp://guest:guest@127.0.0.1:1/%2F?timeout=2",
     "cannot connect"),
    (lambda s: f"amqp://guest:not-the-password@127.0.0.1:{s.port}/%2F?timeout=5",
     "wrong user or password"),
    (lambda s: f"amqp://guest:guest@127.0.0.1:{s.port}/no-such-vhost?timeout=5",
     "may not use this virtual host"),
], ids=["unreachable", "password", "vhost"])
def test_what_goes_wrong_is_one_line_without_the_password(
        rabbitmq_server: RabbitServer, make: object, says: str) -> None:
    target = make(rabbitmq_server)  # type: ignore[operator]
    with pytest.raises(BrokerUnavailable) as caught:
        open_broker(target)
    text = str(caught.value)
    assert says in text and "\n" not in text and "not-the-password" not in text


def test_a_malformed_url_is_refused_before_connecting() -> None:
    with pytest.raises(BrokerURLError, match="names no host"):
        open_broker("amqp:///nohost")
    with pytest.raises(BrokerURLError, match="not a number"):
        open_broker("amqp://h/?delivery_limit=many")


def test_a_user_without_permission_on_the_vhost_is_told_so(rabbitmq_server: RabbitServer) -> None:
    name = f"noperm{uuid.uuid4().hex[:6]}"
    target = rabbitmq_server.add_user(name, "secret-pw", permissions=None)
    with pytest.raises(BrokerUnavailable, match="may not use this virtual host") as caught:
        open_broker(target + "?timeout=5")
    assert "secret-pw" not in str(caught.value)


@pytest.mark.parametrize("processes", ["1", "2"], ids=["single", "supervised"])
def test_conveyor_worker_with_a_broker_it_cannot_use_says_so_in_one_line(
        rabbitmq_server: RabbitServer, tmp_path: Path, processes: str) -> None:
    bad = f"amqp://guest:not-the-password@127.0.0.1:{rabbitmq_server.port}/%2F?timeout=5"
    proc = conveyor("worker", "tests.cli.sample_app:app", "--processes", processes,
                    "--broker", bad, url=f"sqlite:///{tmp_path}/w.db")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("conveyor: error:") and "wrong user or password" in lines[-1]
    assert "not-the-password" not in proc.stderr and "Traceback" not in proc.stderr
