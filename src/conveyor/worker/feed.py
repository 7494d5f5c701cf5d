"""BrokerFeed: where a worker's jobs come from when a broker delivers them
(docs/internals/broker.md).

The fetcher asks the feed instead of ``Storage.dequeue``: the feed consumes up to the free
slots from the broker and starts each delivered job in the store (``Outbox.start``), which
decides. A delivery whose job started is held until the job's outcome is written to the store
(``settle``, called by the acker), so a worker that dies leaves its deliveries unsettled and
the broker hands them to another worker at once; every other delivery is settled on the spot.

The broker delivers, the store decides: a delivery whose id is not a job of the queue it came
on (``StartKind.FOREIGN``: another app's or another queue's message) is dropped, and so is one
whose id no store could hold (empty, over ``MAX_DELIVERED_ID`` characters, control
characters: a message conveyor never sent). Both are settled at once, counted in ``dropped``
and logged in one line per kind and call, so a stray message can neither run a job of a queue
this worker does not serve nor come back at every start.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence

from conveyor.broker.base import Broker, Delivery
from conveyor.core.job import LeasedJob
from conveyor.core.text import printable
from conveyor.storage.outbox import Arrival, Outbox, StartKind
from conveyor.worker.config import WorkerConfig

__all__ = ["MAX_DELIVERED_ID", "BrokerFeed"]

log = logging.getLogger("conveyor.worker")

#: The longest id a delivery may carry to reach the store (ids conveyor makes have 24
#: characters, ids a caller chooses at most 128).
MAX_DELIVERED_ID = 1024
_WHY = {"foreign": "not a job of its queue (a message of another app or queue?)",
        "malformed": "not a job id conveyor could have sent"}


class BrokerFeed:
    """Consume, start in the store, hold what runs, settle the rest."""

    def __init__(self, broker: Broker, outbox: Outbox, config: WorkerConfig) -> None:
        self.broker = broker
        self.outbox = outbox
        self.config = config
        self._lock = threading.Lock()
        self._held: dict[str, Delivery] = {}  # job id -> the delivery that started it
        self._unstarted: list[Delivery] = []  # consumed while the store did not answer
        #: Deliveries dropped unstarted, by why: "foreign", "malformed".
        self.dropped: Counter[str] = Counter()

    def take(self, order: Sequence[str], free: int, timeout: float) -> list[LeasedJob]:
        """Up to ``free`` jobs started from deliveries, queues tried in ``order``.

        Deliveries of a ``start`` that failed (the store did not answer) are kept and started
        first on the next call: the broker does not hand a live consumer's unsettled delivery
        to it again, and handing it back (a requeue) would count against the message's
        delivery limit at every failed call of a long outage."""
        with self._lock:
            deliveries, self._unstarted = self._unstarted[:free], self._unstarted[free:]
        if len(deliveries) < free:
            deliveries += self.broker.consume([(name, 0) for name in order],
                                              free - len(deliveries),
                                              0.0 if deliveries else timeout)
        if not deliveries:
            return []
        per_queue: dict[str, list[Delivery]] = defaultdict(list)
        settle: list[Delivery] = []
        dropped: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in deliveries:
            if not _could_be_id(delivery.job_id):
                dropped["malformed"].append(delivery)
            elif delivery.redelivered and self._holds(delivery.job_id):
                # An older message of a job running here, handed back with a pack or a closed
                # connection after the job was published again: this worker's connection is
                # alive, so it is a duplicate, never a reason to take the job over.
                settle.append(delivery)
            else:
                per_queue[delivery.queue].append(delivery)
        started: list[LeasedJob] = []
        groups = list(per_queue.items())
        try:
            for index, (queue, group) in enumerate(groups):
                try:
                    replies = self.outbox.start(
                        queue, [Arrival(d.job_id, d.redelivered, d.message_id) for d in group],
                        self.config.worker_id, self.config.lease, self.config.max_recoveries)
                except Exception:
                    # None of this group, nor of the queues after it, is started or settled.
                    # A start that committed before failing left its jobs active under a
                    # lease nobody runs: the next start of them says RUNNING, and the lease's
                    # expiry recovers them.
                    with self._lock:
                        self._unstarted = [d for _, g in groups[index:] for d in g]
                    if started:
                        return started  # run what did start; the next call meets the outage
                    raise
                for delivery, reply in zip(group, replies, strict=True):
                    if reply.kind is StartKind.STARTED and reply.job is not None:
                        started.append(reply.job)
                        with self._lock:
                            older = self._held.pop(reply.job.id, None)
                            self._held[reply.job.id] = delivery
                        if older is not None:  # this worker took its own job over
                            settle.append(older)
                    elif reply.kind is StartKind.FOREIGN:
                        dropped["foreign"].append(delivery)
                    else:
                        settle.append(delivery)
        finally:
            for kind, group in dropped.items():
                self._drop(kind, group)
                settle += group
            if settle:
                self.broker.ack(settle)
        return started

    def _drop(self, kind: str, deliveries: list[Delivery]) -> None:
        """Count and log deliveries dropped unstarted (one line per kind and call)."""
        with self._lock:
            self.dropped[kind] += len(deliveries)
        first = deliveries[0]
        log.warning("dropped %d %s delivery(ies) from queue %s, e.g. job id '%s': %s",
                    len(deliveries), kind, printable(first.queue),
                    printable(first.job_id[:40]), _WHY[kind])

    def _holds(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._held

    def settle(self, job_ids: Sequence[str]) -> None:
        """The store has these jobs' outcomes: their deliveries are done with."""
        with self._lock:
            done = [d for d in (self._held.pop(j, None) for j in job_ids) if d is not None]
        if done:
            self.broker.ack(done)

    @property
    def held(self) -> int:
        """Deliveries held for running jobs."""
        with self._lock:
            return len(self._held)

    def close(self) -> None:
        """Close the connection: deliveries still held go back to the broker."""
        with self._lock:
            self._held.clear()
            self._unstarted = []
        self.broker.close()


def _could_be_id(job_id: object) -> bool:
    """Whether a delivered id is one a store could hold: a non-empty printable string of at
    most ``MAX_DELIVERED_ID`` characters (a NUL, say, is refused by PostgreSQL itself: the
    whole start would fail, and the delivery be tried again at every call)."""
    return (isinstance(job_id, str) and 0 < len(job_id) <= MAX_DELIVERED_ID
            and job_id.isprintable())
