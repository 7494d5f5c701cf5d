"""Relay: publishes the store's due jobs to the broker (docs/internals/outbox.md).

Writers only write the store; this component, one per worker process with a broker, asks
the store for pending jobs due to be published (``Outbox.publish_due``) and publishes them,
handing the unconfirmed back (``publish_failed``). It keeps each broker queue shallow — at
most a window of messages waiting (``relay_window``, default 16 times the worker's
concurrency, at least 1,024; refilled once half of it has been delivered) — so the backlog
waits in the store, where pausing, flow control and cancelling see it.

A broker that packs many job ids into one message (RabbitMQ) is told how many one message
may carry: what this process starts within ``reserve_window`` at its recent pace, the bound
the reserve holds itself to (worker/reserve.py). A worker keeps on hand the jobs of a message
it cannot start yet, and no other worker can take them from it: so short jobs go in big
messages (the per-message cost is most of what a no-op job costs), long ones one per message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from conveyor.broker.base import Broker
from conveyor.core.clock import Clock
from conveyor.storage.base import Storage
from conveyor.storage.outbox import as_outbox
from conveyor.worker.component import PeriodicComponent
from conveyor.worker.config import WorkerConfig

__all__ = ["DELIVERY_LIMIT_REACHED", "Relay"]

log = logging.getLogger(__name__)

#: Seconds at least between two rounds that were not full: a store whose every ack wakes the
#: relay is not asked what is due hundreds of times a second.
MIN_GAP = 0.002
#: Seconds at most of one wait in the store (``stop`` waits for it to end).
WAIT_SLICE = 0.25
#: Seconds before the first look at the broker again after a round that found a queue's window
#: full while it had published into it: consumers empty a window in milliseconds during a
#: drain, and the store has no news to wake the relay then (waiting ``relay_idle`` for it ran
#: the workers dry four times a second: 3,700 against 8,300 jobs/s in broker_probe). Doubled
#: each round the window stays full, up to ``relay_idle``.
BACKLOG_POLL = 0.002
#: Seconds between two looks at the broker's dead-letter queue.
DEAD_CHECK_INTERVAL = 1.0
#: Why a job whose message the broker dead-lettered ends ``dead``.
DELIVERY_LIMIT_REACHED = ("delivery limit reached: the broker gave up on its message (a job "
                          "that kills the worker running it?)")


class Relay(PeriodicComponent):
    """``tick()`` publishes one round over the worker's queues; it goes again at once while a
    queue had a full window due. Otherwise it waits for news from the store — the wait an idle
    worker does without a broker (``Storage.wait``: a blocking pop on Redis, LISTEN on
    PostgreSQL, a notification or a commit seen on SQLite) — for at most ``relay_idle``, the
    bound on how late a job due by the clock alone (a publish to retry) is noticed."""

    name = "relay"

    def __init__(self, storage: Storage, clock: Clock, config: WorkerConfig, *,
                 broker: Broker, pace: Callable[[], float] | None = None) -> None:
        super().__init__(storage, clock, config)
        self.outbox = as_outbox(storage)
        self.broker = broker
        self._pace = pace or (lambda: 0.0)  # jobs this process starts a second (Reserve.pace)
        self.window = config.relay_window or max(1024, 16 * config.concurrency)
        self.published = 0
        self.buried = 0
        self._busy = False
        self._backed_up = 0.0  # the next look while a window stays full (0: none is)
        self._published_at_look = 0
        self._next_dead_check = 0.0
        # Per queue, at most how many jobs wait in the broker: the backlog last read there
        # plus what this relay has published since (consumers only take away). While it is
        # under half the window the broker is not asked (a round trip each round: 1.5 ms
        # of an idle job's latency through RabbitMQ).
        self._at_most: dict[str, int] = {}
        self._round_at = 0.0  # monotonic start of the last round

    def pack_size(self) -> int:
        """At most how many job ids one message may carry: what this process starts within
        ``reserve_window`` at its recent pace; before it has a pace (its first window goes out
        before any job ran here), its concurrency: what one worker like it runs at once."""
        pace = self._pace()
        if pace <= 0:
            return max(1, self.config.concurrency)
        return max(1, int(pace * self.config.reserve_window))

    def tick(self) -> None:
        """Publish what is due on every queue, up to each queue's free window; now and then
        record the jobs whose messages the broker dead-lettered as ``dead``."""
        now = self.clock.now()
        if now >= self._next_dead_check:
            self._next_dead_check = now + DEAD_CHECK_INTERVAL
            self.bury_dead_lettered()
        self._round_at = time.monotonic()
        busy = full = False
        for queue in self.config.queue_names:
            waiting = self._at_most.get(queue, self.window)  # unknown: ask (a restart)
            if waiting >= self.window // 2:
                waiting = self._at_most[queue] = self.broker.backlog(queue)
            room = self.window - waiting
            if room < self.window // 2:  # refill in big steps: one store call per half window
                full = True
                continue
            due = self.outbox.publish_due(queue, room, self.config.republish_after)
            if not due:
                continue
            self._at_most[queue] = waiting + len(due)  # counted before the publish: it may
            # raise after some messages reached the broker
            try:
                keys = self.outbox.order_keys(queue, due) if self.broker.keyed else None
                confirmed = self.broker.publish(queue, due, keys, pack=self.pack_size())
            except Exception:
                # Some may have reached the broker: a second message for a job is skipped at
                # start, while a job stamped but never sent would wait ``republish_after``.
                self.outbox.publish_failed(due)
                raise
            failed = [job_id for job_id, ok in zip(due, confirmed, strict=True) if not ok]
            if failed:
                self.outbox.publish_failed(failed)
                log.warning("relay: the broker did not confirm %d of %d publishes to %r; "
                            "they are due again", len(failed), len(due), queue)
            self.published += len(due) - len(failed)
            busy = busy or len(due) == room
        self._busy = busy
        if not full:
            self._backed_up = 0.0
        elif self.published > self._published_at_look:  # it filled the window: look again soon
            self._backed_up = BACKLOG_POLL
        else:
            self._backed_up = min(max(self._backed_up, BACKLOG_POLL / 2) * 2,
                                  self.config.relay_idle)
        self._published_at_look = self.published

    def bury_dead_lettered(self) -> int:
        """Jobs the broker gave up on (its delivery limit) end ``dead`` with the reason."""
        buried = 0
        while ids := self.broker.dead_lettered():
            buried += self.outbox.bury(ids, DELIVERY_LIMIT_REACHED)
            self.buried += len(ids)
        return buried

    def interval(self) -> float:
        """At once after publishing a full window; soon (``BACKLOG_POLL``, doubling) while a
        queue's window stays full; else ``relay_idle`` at most (``rest``)."""
        if self._busy:
            return 0.0
        return self._backed_up or self.config.relay_idle

    def rest(self, seconds: float) -> None:
        """After a full window go on; else wait for the store to have news, ``seconds`` at
        most, and after news never start a round sooner than ``MIN_GAP`` after the last one
        began (news comes with every commit of a busy store: each ack; news after a quiet
        spell is acted on at once). A job due between the round and the wait may wait out
        ``seconds`` (``Storage.wait`` allows a missed wake-up): ``relay_idle`` bounds it."""
        deadline = time.monotonic() + seconds
        # In slices, so that ``stop`` never waits long for a relay blocked in the store.
        while not self._stopping.is_set() and (left := deadline - time.monotonic()) > 0:
            if self.storage.wait(self.config.queue_names, min(left, WAIT_SLICE)):
                gap = self._round_at + MIN_GAP - time.monotonic()
                if gap > 0:
                    self._stopping.wait(gap)
                return

    def stop(self, timeout: float = 5.0) -> None:
        """Stop publishing and close the relay's broker connection."""
        super().stop(timeout)
        self.broker.close()
