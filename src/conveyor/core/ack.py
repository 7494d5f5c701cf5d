"""How an execution ended, as a worker acknowledges it: ``Outcome``, the ``ErrorInfo`` of an
exception, and the ``Ack`` that storage backends apply under the lease's fencing token.

Plain data, no I/O. Re-exported by ``core/job.py``, the job vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from conveyor.core.events import Event
from conveyor.core.text import storable


class Outcome(str, Enum):
    """How an execution ended, as reported in an ``Ack``."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY = "retry"
    DEAD = "dead"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    SUSPENDED = "suspended"  # a durable job sleeps or waits: scheduled until ``resume_at``
    SNOOZE = "snooze"  # RetryAfter: scheduled again in retry_in s, the errors untouched

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An exception as stored: type, message and traceback text."""

    type: str
    message: str
    traceback: str = ""

    def __post_init__(self) -> None:
        for name in ("type", "message", "traceback"):  # human text: see text.py
            value = getattr(self, name)
            if not value.isascii():
                object.__setattr__(self, name, storable(value))

    def to_wire(self) -> dict[str, str]:
        """Dict stored in the error event's data."""
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass(frozen=True, slots=True)
class Ack:
    """A worker's acknowledgement of one execution, fenced by the lease ``token``.

    ``events`` are the job's own buffered messages, stored before the final event.
    """

    job_id: str
    token: str
    outcome: Outcome
    result: str | None = None
    message: str | None = None
    error: ErrorInfo | None = None
    retry_in: float | None = None
    events: tuple[Event, ...] = ()
    progress: tuple[int, int] | None = None
    bundle: tuple[Ack, ...] = ()  # the other members' acks of an aggregated run it leads
    resume_at: float | None = None  # SUSPENDED: when it runs again (the storage's clock)
    ran: bool = True  # False: never ran (unreadable, unknown): no breaker counts it

    def flatten(self) -> list[Ack]:
        """This ack and its bundle, each to be written as an ack of its own."""
        return [replace(self, bundle=()), *self.bundle] if self.bundle else [self]

    def __post_init__(self) -> None:
        # The message is human text (text.py); ``result`` is JSON the serializer made storable.
        if self.message is not None and not self.message.isascii():
            object.__setattr__(self, "message", storable(self.message))
