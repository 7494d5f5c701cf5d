"""Kafka as conveyor's broker (``kafka://``, ``kafkas://``) through confluent-kafka.

A topic per queue; a job's message key is its order key (else its id), so one key's jobs are
read in order from one partition while the store's order-key gate still decides. Each
partition has an ``OffsetWindow``: every message is handed out as the worker has room, and
only the oldest unfinished one's offset is committed, so a slow job never holds back the
messages behind it and a dead consumer leaves them all to the next owner (the store skips
those finished or running). Kafka cannot tell a dead holder from one rebalanced away, so a
delivery never takes a running job over: a dead worker's jobs come back by lease expiry.
Read positions go under ``<group>.read`` for the relay's backlog. docs/brokers.md, "Kafka".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from conveyor.broker.base import Delivery
from conveyor.broker.kafka.offsets import OffsetWindow
from conveyor.broker.kafka.positions import GroupPositions
from conveyor.broker.kafka.url import parse_kafka_url
from conveyor.broker.kafka.windows import Windows
from conveyor.errors import BrokerUnavailable, BrokerURLError
from conveyor.storage import redact, without_secrets

__all__ = ["KafkaBroker", "open_kafka"]

log = logging.getLogger(__name__)

#: Seconds at least between two commits of read positions (they only size the backlog).
READ_COMMIT_GAP = 0.1
#: Seconds at least between two commits of commit points.
COMMIT_GAP = 0.02
#: Seconds at most of one wait in the consumer: commits made due meanwhile go out after it.
WAIT_SLICE = 0.1


def open_kafka(url: str) -> KafkaBroker:
    """A broker on the Kafka cluster ``url`` names (raises ``BrokerURLError`` for a bad URL)."""
    return KafkaBroker(url)


@dataclass(frozen=True, slots=True)
class _Handle:
    """A delivery's place in its partition, and the window that handed it out."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    window: OffsetWindow


def _built(url: str, client: Callable[[dict[str, Any]], Any], config: dict[str, Any]) -> Any:
    """A client of ``config``; a setting librdkafka refuses is the URL's fault: one line,
    ``BrokerURLError``, with no secret of the URL in it."""
    try:
        return client(config)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        detail = error.str() if isinstance(error, KafkaError) else str(exc)
        raise BrokerURLError(f"broker URL {redact(url)!r}: {without_secrets(detail, url)}"
                             ) from None


class KafkaBroker:
    """A producer, and (from the first ``consume``) a consumer in the workers' group."""

    keyed = True  # the relay passes each job's order key (``publish``'s ``keys``)

    def __init__(self, url: str) -> None:
        self.url = url
        self.settings = s = parse_kafka_url(url)
        self._base: dict[str, Any] = {"bootstrap.servers": s.bootstrap, **s.client,
                                      # librdkafka logs every reconnect attempt; the
                                      # error callback says each new fault once
                                      "logger": log, "log_level": 2,
                                      "error_cb": self._client_error}
        self._producer: Any = _built(url, confluent_kafka.Producer, {
            # Not idempotent: a duplicate message is skipped by the store anyway, and an
            # idempotent producer whose broker lost its state (Tansu in memory, restarted)
            # had every later produce time out until it was made again.
            **self._base, "acks": "all", "enable.idempotence": False, "linger.ms": 1,
            "message.timeout.ms": int(s.timeout * 1000), **s.producer})
        self._admin: Any = _built(url, AdminClient, dict(self._base))
        try:  # fail at once, in one line, when no broker answers (as RabbitMQ's connect does)
            self._admin.list_topics(timeout=s.timeout)
        except KafkaException as exc:
            self._producer = self._admin = None
            raise self._unavailable("cannot connect", exc) from None
        self._consumer: Any = None  # joins the group on the first consume
        self._reader: Any = None  # commits read positions under <group>.read
        self._read_positions = GroupPositions(self._base, f"{s.group}.read", s.timeout)
        self._commit_points = GroupPositions(self._base, s.group, s.timeout)
        self._windows = Windows()
        self._topics: set[str] = set()  # created (or found) by this connection
        self._subscribed: tuple[str, ...] = ()
        self._queue_of: dict[str, str] = {}
        self._committed_at = self._read_committed_at = 0.0
        self._closed = False
        self._last_error = ""

    # -- helpers ----------------------------------------------------------------------------

    def _client_error(self, error: KafkaError) -> None:
        self._warn(error.str())

    def _warn(self, text: str) -> None:
        """One warning line per new fault: librdkafka repeats itself while a broker is away."""
        if text != self._last_error:
            self._last_error = text
            log.warning("Kafka at %s: %s", redact(self.url), text)

    def _unavailable(self, what: str, exc: BaseException) -> BrokerUnavailable:
        detail = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) \
            else str(exc)
        return BrokerUnavailable(f"Kafka at {redact(self.url)}: {what}: {detail}")

    def _ensure(self, queue: str) -> str:
        """The queue's topic, created with ``partitions`` partitions when missing."""
        topic = self.settings.topic(queue)
        self._queue_of[topic] = queue
        if topic in self._topics:
            return topic
        new = NewTopic(topic, num_partitions=self.settings.partitions,
                       replication_factor=self.settings.replication)
        try:
            self._admin.create_topics([new], request_timeout=self.settings.timeout)[topic] \
                .result(self.settings.timeout + 5)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError)
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise self._unavailable(f"creating topic {topic!r}", exc) from None
        except Exception as exc:  # a timeout: no broker answered
            raise self._unavailable(f"creating topic {topic!r}", exc) from None
        self._topics.add(topic)
        return topic

    # -- publishing -------------------------------------------------------------------------

    def publish(self, queue: str, job_ids: Sequence[str],
                keys: Sequence[str | None] | None = None, pack: int = 0) -> list[bool]:
        """One message per job (``pack`` is moot), keyed by its order key (else its id); True
        for each the broker acknowledged within ``timeout`` (``acks=all``)."""
        if not job_ids:
            return []
        topic = self._ensure(queue)
        results: list[bool] = [False] * len(job_ids)

        def confirmed(index: int) -> Any:
            def report(error: KafkaError | None, _message: Any) -> None:
                results[index] = error is None
            return report

        for index, job_id in enumerate(job_ids):
            key = (keys[index] if keys is not None else None) or job_id
            self._produce(topic, key.encode(errors="surrogatepass"), job_id.encode(
                errors="surrogatepass"), confirmed(index))
        self._producer.flush(self.settings.timeout + 1)
        if not all(results):  # the topic may be gone (a broker that lost its data)
            self._topics.discard(topic)
        return results

    def _produce(self, topic: str, key: bytes, value: bytes, report: Any) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=report)
                self._producer.poll(0)
                return
            except BufferError:  # the client's queue is full: let it send some first
                self._producer.poll(0.05)

    # -- consuming --------------------------------------------------------------------------

    def _join(self, topics: tuple[str, ...]) -> None:
        if self._consumer is None:
            config = {**self._base, "group.id": self.settings.group,
                      "enable.auto.commit": False, "enable.auto.offset.store": False,
                      "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": "cooperative-sticky",
                      # A fetch at the end of a partition waits this long for news. Kafka
                      # answers it as soon as a message arrives; Tansu only when the wait
                      # ends (500 ms by default: 250 ms per idle job, measured). 20 ms costs
                      # an idle consumer 50 small requests a second.
                      "fetch.wait.max.ms": 20, "on_commit": self._commit_done,
                      # how soon a topic created again (a broker that lost its data) is seen
                      "topic.metadata.refresh.interval.ms": 5000,
                      **self.settings.consumer}
            if self.settings.session_timeout:
                session = int(self.settings.session_timeout * 1000)
                config["session.timeout.ms"] = session
                config["heartbeat.interval.ms"] = max(100, min(3000, session // 10))
            self._consumer = _built(self.url, confluent_kafka.Consumer, config)
            self._reader = _built(self.url, confluent_kafka.Consumer, {
                **self._base, "group.id": f"{self.settings.group}.read",
                "enable.auto.commit": False})
        self._consumer.subscribe(list(topics), on_assign=self._assigned,
                                 on_revoke=self._revoked, on_lost=self._revoked)
        self._subscribed = topics

    @staticmethod
    def _assigned(_consumer: Any, partitions: list[TopicPartition]) -> None:
        if partitions:
            log.info("Kafka: assigned %s", ", ".join(
                f"{tp.topic}[{tp.partition}]" for tp in partitions))

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions taken away by a rebalance: commit what is done, forget the rest (the
        next owner is handed it again; the store skips what runs or ran here)."""
        if partitions:
            log.info("Kafka: gave up %s", ", ".join(
                f"{tp.topic}[{tp.partition}]" for tp in partitions))
        self._commit(self._windows.revoke([(tp.topic, tp.partition) for tp in partitions]),
                     asynchronous=False)

    def consume(self, queues: Sequence[tuple[str, int]], limit: int,
                timeout: float) -> list[Delivery]:
        """Up to ``limit`` deliveries from the topics of ``queues`` as they arrive (Kafka
        fetches every assigned partition side by side: queue weights and strict order are
        not applied), waiting up to ``timeout`` for the first."""
        if limit <= 0 or self._closed:
            return []
        topics = tuple(sorted(self._ensure(name) for name, _ in queues))
        if topics != self._subscribed:
            self._join(topics)
        # Every call on the group's consumer is made here, on the fetcher's thread (a call
        # from another thread while this one waits in ``consume`` can hang), so a long wait
        # goes in slices, committing between them what acks on other threads made due.
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            self._commit_due(waiting=left > 0)
            self._flow()
            out = self._receive(self._fetch(limit, max(0.0, min(left, WAIT_SLICE))))
            if out or left <= WAIT_SLICE:
                return out

    def _fetch(self, limit: int, wait: float) -> list[Any]:
        """Up to ``limit`` messages: what is there, else the first to arrive within ``wait``
        and what came with it. (librdkafka's batch ``consume`` waits for the whole batch or
        the timeout: an idle job waited out the slice, 30 ms at the median, measured.)"""
        batch: list[Any] = self._consumer.consume(num_messages=limit, timeout=0)
        if batch or wait <= 0:
            return batch
        first = self._consumer.poll(wait)
        if first is None:
            return []
        more = self._consumer.consume(num_messages=limit - 1, timeout=0) if limit > 1 else []
        return [first, *more]

    def _commit_due(self, waiting: bool) -> None:
        """Commit points that moved (at most every ``COMMIT_GAP``), and read positions (at
        most every ``READ_COMMIT_GAP``, or at once before a wait: the relay must see all
        that was read, or it may wait for this consumer while this consumer waits for it)."""
        if time.monotonic() - self._committed_at >= COMMIT_GAP:
            self._commit(self._windows.due_commits())
        self._commit_read(force=waiting)

    def _receive(self, messages: list[Any]) -> list[Delivery]:
        out: list[Delivery] = []
        for message in messages:
            if message.error() is not None:
                continue  # an event, not a message (the error callback reports faults)
            place = (message.topic(), message.partition())
            offset = message.offset()
            window = self._windows.take(place, offset)
            value = message.value() or b""
            out.append(Delivery(
                queue=self._queue_of.get(place[0], place[0]),
                job_id=value.decode(errors="replace"),
                handle=_Handle(place[0], place[1], offset, message.key(), window),
                message_id=f"{place[1]}-{offset}"))
        return out

    def _flow(self) -> None:
        """Pause a partition whose window is full (its oldest message is slow), resume it
        when the window has half its room again."""
        stop, go = self._windows.flow(self.settings.window)
        try:
            if stop:
                self._consumer.pause([TopicPartition(t, p) for t, p in stop])
            if go:
                self._consumer.resume([TopicPartition(t, p) for t, p in go])
        except KafkaException as exc:  # a partition revoked meanwhile: nothing to do
            log.debug("Kafka pause/resume: %s", exc)

    def _commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        if not offsets or self._consumer is None:
            return
        self._committed_at = time.monotonic()
        try:
            self._consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except KafkaException as exc:
            # Not a member any more (a zombie past its session) or the partition is gone:
            # the next owner resumes from the last commit that did land; nothing is lost.
            self._warn(f"commit refused: {exc.args[0].str() if exc.args else exc}")

    def _commit_done(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """An asynchronous commit's answer (served by ``consume``)."""
        if error is not None and error.code() != KafkaError._NO_OFFSET:
            self._warn(f"commit refused: {error.str()}")

    def _commit_read(self, force: bool = False) -> None:
        """Commit read positions that moved, at most every ``READ_COMMIT_GAP`` unless
        ``force``."""
        now = time.monotonic()
        if self._reader is None or (
                not force and now - self._read_committed_at < READ_COMMIT_GAP):
            return
        read = self._windows.read_positions()
        if read:
            self._read_committed_at = now
            try:
                self._reader.commit(offsets=read, asynchronous=True)
            except KafkaException as exc:
                log.debug("Kafka read positions: %s", exc)

    # -- settling ---------------------------------------------------------------------------

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Mark deliveries done; a partition's commit point moves past them once every older
        message of it is done too, and is committed by ``consume`` (within ``WAIT_SLICE``).
        A delivery of a partition since revoked is void."""
        for delivery in deliveries:
            handle = delivery.handle
            if isinstance(handle, _Handle):
                self._windows.done((handle.topic, handle.partition), handle.window,
                                   handle.offset)

    def release(self, deliveries: Sequence[Delivery]) -> None:
        """Kafka cannot hand one message back: produce it again (same key, at the end of its
        partition) and mark the original done."""
        again = [d for d in deliveries if isinstance(d.handle, _Handle)]
        for delivery in again:
            handle = delivery.handle
            assert isinstance(handle, _Handle)
            self._produce(handle.topic, handle.key or delivery.job_id.encode(),
                          delivery.job_id.encode(errors="surrogatepass"), None)
        if again:
            self._producer.flush(self.settings.timeout + 1)
        self.ack(again)

    # -- what the relay asks ----------------------------------------------------------------

    def backlog(self, queue: str) -> int:
        """Messages of the queue's topic no consumer has read yet: per partition, its end
        minus the furthest position read (``<group>.read``), else its start."""
        topic = self._ensure(queue)
        try:
            return self._read_positions.unread(topic)
        except KafkaException as exc:
            raise self._unavailable(f"reading the backlog of {topic!r}", exc) from None

    def committed(self, queue: str) -> dict[int, int]:
        """The workers' group's commit points for the queue's topic, by partition (-1001:
        none yet): where a new owner of each partition would resume."""
        topic = self._ensure(queue)
        try:
            return {tp.partition: tp.offset for tp in self._commit_points.committed(topic)}
        except KafkaException as exc:
            raise self._unavailable(f"reading the commit points of {topic!r}", exc) from None

    def dead_lettered(self, limit: int = 100) -> list[str]:
        """Always empty: Kafka has no delivery limit. A job that kills every worker it runs on
        is ended ``dead`` by the store's recovery count (``max_recoveries``)."""
        return []

    def close(self) -> None:
        """Commit what is done, leave the group (its partitions go to the other members,
        from the commit points on) and close every client."""
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            self._commit(self._windows.due_commits(), asynchronous=False)
            for client in (self._consumer, self._reader):
                try:
                    client.close()
                except (KafkaException, RuntimeError) as exc:
                    log.debug("Kafka close: %s", exc)
        self._read_positions.close()
        self._commit_points.close()
        self._producer.flush(self.settings.timeout)
        # Destroy the clients now: each holds this object through its callbacks (a cycle the
        # GC may collect much later), and librdkafka is not fork-safe — a client alive in the
        # supervisor when it forks (its check of the broker) hung every child.
        self._producer = self._admin = self._consumer = self._reader = None
