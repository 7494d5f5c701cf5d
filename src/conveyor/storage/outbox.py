"""What a store does for a message broker (docs/internals/outbox.md): it is the outbox.

With a broker the store still holds every job's state; the broker only delivers job ids.
Nothing here changes the path without a broker: ``enqueue``, ``promote_due``,
``reclaim_expired``, ``release_worker``, retries and the operator's actions make jobs
``pending`` exactly as today, and a pending job *is* a job to publish. A relay asks
``publish_due`` for them, publishes them, and the worker that receives a delivery calls
``start``. The publish stamp is bookkeeping, not a state: a published job is ``pending`` to
every reader, with no event, until it starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Protocol, runtime_checkable

from conveyor.core.job import LeasedJob
from conveyor.errors import BrokerUnsupported
from conveyor.storage import redact

__all__ = ["Arrival", "Delivered", "Outbox", "StartKind", "StartReply", "arrivals", "as_outbox",
           "mark", "marked_by"]


class StartKind(str, Enum):
    """What ``Outbox.start`` did with one delivered job id."""

    STARTED = "started"  # leased to the caller: run it (``StartReply.job``)
    RUNNING = "running"  # already active under another live lease: a duplicate, skip it
    SKIPPED = "skipped"  # finished, cancelled, expired, or not pending: skip it
    PARKED = "parked"  # held back by flow control or a paused queue: waits in the store
    #: No job of the delivery's queue has this id (another queue's or another app's job, or
    #: an id nothing stored): never started here; the worker drops the delivery and counts it.
    FOREIGN = "foreign"


@dataclass(frozen=True, slots=True)
class StartReply:
    """The outcome of one delivery handed to ``Outbox.start``."""

    job_id: str
    kind: StartKind
    job: LeasedJob | None = None  # set when ``kind`` is STARTED


class Arrival(NamedTuple):
    """One delivered job id as ``Outbox.start`` takes it.

    ``message`` is the id of the broker message that carried it (the broker layer's, a short
    hex string), None for a message without one. A job started from a message keeps that id in
    its lease token (``mark``), so a redelivered message takes the job over only when it is
    the very message that started the current attempt: an older message of a job that was
    published again (the first never started) is a duplicate, not news of a dead holder.
    """

    job_id: str
    redelivered: bool = False
    message: str | None = None


#: What ``Outbox.start`` accepts per delivery: an ``Arrival`` or a ``(job_id, redelivered)``.
Delivered = tuple[str, bool] | tuple[str, bool, str | None]

_MARK = "#"  # between a lease token and the id of the message that started the lease
_MESSAGE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def arrivals(deliveries: Sequence[Delivered]) -> list[Arrival]:
    """``deliveries`` as ``Arrival`` s (a pair has no message id). A message id that is not 1
    to 64 letters, digits, ``-`` or ``_`` (a hand-made message) counts as none: every store
    puts it inside a lease token."""
    out = [d if isinstance(d, Arrival) else Arrival(*d) for d in deliveries]
    return [d if d.message is None or _MESSAGE_ID.fullmatch(d.message)
            else d._replace(message=None) for d in out]


def mark(message: str | None) -> str:
    """The suffix a lease token started from ``message`` carries ('' without a message)."""
    return "" if message is None else _MARK + message


def marked_by(token: str | None, message: str | None) -> bool:
    """Whether a redelivery of ``message`` may take over a lease holding ``token``: the lease
    was started by that message, or the message has no id (published before ids existed)."""
    return message is None or (token or "").endswith(_MARK + message)


@runtime_checkable
class Outbox(Protocol):
    """The three calls a relay and a broker-fed worker make; one atomic transition each."""

    def publish_due(self, queue: str, count: int, republish_after: float) -> list[str]:
        """Ids of up to ``count`` pending jobs of ``queue`` due to be published, oldest first.

        Due: pending and runnable now (not scheduled for later, queue not paused) and either
        not handed out by this call since it last became pending, or handed out more than
        ``republish_after`` seconds ago (storage clock) without being started (a publish never
        confirmed, a message the broker lost). Each returned job is stamped in the same atomic
        step, so concurrent callers never get the same job within ``republish_after``. A job
        parked by ``start`` (flow control) is not due until it may run: an ``ack`` that frees
        its concurrency or order key makes it due at once; a rate-limited one is due when its
        window admits it.
        """
        ...

    def publish_failed(self, job_ids: Sequence[str]) -> None:
        """The broker did not confirm these: make each still-pending one due again at once."""
        ...

    def start(self, queue: str, deliveries: Sequence[Delivered], worker_id: str,
              lease_seconds: float, max_recoveries: int = 5) -> list[StartReply]:
        """Lease delivered jobs of ``queue`` (``Arrival`` s) as ``dequeue`` would.

        One reply per delivery, in order, each one atomic transition:

        * pending and admitted (pause, flow control, deadline and unreadable records exactly
          as ``dequeue`` treats them) -> STARTED with the ``LeasedJob`` as ``dequeue`` returns
          it (``started`` event, attempt + 1, fresh token, batch counters moved); the token
          carries ``mark(message)`` (each store puts it where its acks do not look);
        * pending but held back by flow control or a paused queue -> PARKED: it stays pending
          and is not due to publish until it may run (see ``publish_due``);
        * deadline passed -> moved to ``dead`` (``expired``) and SKIPPED;
        * active under a lease and ``redelivered`` False -> RUNNING (a duplicate message);
        * active, ``redelivered`` True but the lease not started by this message
          (``marked_by`` false: an older message of a job published again, or a job leased
          by ``dequeue``) -> RUNNING, the holder untouched;
        * active, ``redelivered`` True and ``marked_by`` -> the broker says its holder's
          connection died: it is taken over at once as a lease expiry would take it
          (``recovered`` event, ``recoveries`` + 1, ``dead`` past ``max_recoveries``) and
          leased to this worker:
          STARTED with a new token, so the old holder's ack is refused (fencing);
        * anything else (finished, cancelled, scheduled, unknown id) -> SKIPPED, untouched;
        * a job named again later in the same call -> RUNNING (a duplicate), whatever its
          flags: only its first delivery in the call counts.
        """
        ...

    def order_keys(self, queue: str, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's order key (None for a job without one, or one not of ``queue``): a
        broker that keeps one key's messages in order (Kafka's message key) asks for them
        before publishing. A read, no transition."""
        ...

    def bury(self, job_ids: Sequence[str], reason: str) -> int:
        """Jobs whose message the broker gave up on (its delivery limit: a job that kills
        every worker it runs on): each one still pending or active ends ``dead`` with
        ``reason`` (a ``dead`` event, batch counters moved, an active one's lease fenced).
        Returns how many; the others are left as they are."""
        ...


def as_outbox(storage: object) -> Outbox:
    """``storage`` as an ``Outbox``, or ``BrokerUnsupported`` saying which store is not one."""
    if not isinstance(storage, Outbox):
        url = getattr(storage, "url", type(storage).__name__)
        raise BrokerUnsupported(
            f"storage {redact(str(url))!r} cannot feed a broker (memory://, sqlite://, Redis "
            "and PostgreSQL can; docs/brokers.md)")
    return storage
