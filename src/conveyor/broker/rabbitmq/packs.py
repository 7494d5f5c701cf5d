"""Packs: one AMQP message carrying several job ids, and how a connection holds one.

The per-message cost of AMQP (framing, a confirm, a delivery, an ack) is most of what a job
costs a worker fed by RabbitMQ, so a publish of many ids sends them a few dozen to a message
as a JSON list; a single id travels as the plain body. docs/brokers.md explains the sizes.
"""

from __future__ import annotations

import json
import secrets

from aio_pika.abc import AbstractIncomingMessage

__all__ = ["MAX_PACK", "PACKED", "REDELIVERED", "Malformed", "Pack", "encode", "job_ids",
           "new_message_id"]

# On a message that is one job of a pack handed back: deliver it as redelivered.
REDELIVERED = "x-conveyor-redelivered"
PACKED = "application/json"  # the content type of a pack: a JSON list of job ids
#: The most ids a pack may carry (a relay sends at most 128): a longer one is malformed.
MAX_PACK = 4096


class Malformed(ValueError):
    """A message that carries no job ids conveyor could have sent (say why): it is settled
    and counted, never handed out, so it cannot come back at every start."""


def new_message_id() -> str:
    """The id a published message carries (AMQP ``message-id``): 16 hex digits."""
    return secrets.token_hex(8)


def encode(ids: list[str]) -> tuple[bytes, str | None]:
    """A message's body and content type for ``ids``: the id itself when there is one."""
    if len(ids) == 1:
        return ids[0].encode(), None
    return json.dumps(ids).encode(), PACKED


class Pack:
    """One message as this connection holds it: its jobs' deliveries share it as their
    handle, and it is settled with RabbitMQ when the last of them is."""

    __slots__ = ("attempts", "handed_at", "message", "message_id", "open", "redelivered",
                 "requeue")

    def __init__(self, message: AbstractIncomingMessage, size: int) -> None:
        headers = message.headers or {}
        count = headers.get("x-delivery-count")
        self.message = message
        self.open = size
        self.requeue = False
        self.handed_at = 0.0  # monotonic time its first delivery was handed out
        self.redelivered = bool(message.redelivered or headers.get(REDELIVERED))
        self.attempts = (int(count) if isinstance(count, int) else 0) + 1
        self.message_id = message.message_id  # kept by a redelivery and by a split

    def live(self) -> bool:
        """Whether the channel it came on is open (else it can no longer be settled)."""
        try:
            return self.message.channel is not None  # raises once the channel is closed
        except Exception:
            return False


def job_ids(message: AbstractIncomingMessage) -> list[str]:
    """The job ids a message carries: its body, or a pack's JSON list of strings. Raises
    ``Malformed`` (never anything else) for a pack that is not one."""
    text = message.body.decode(errors="replace")
    if message.content_type != PACKED:
        return [text]
    try:
        ids = json.loads(text)
    except RecursionError:  # 200,000 nested "[" raised it out of the consumer callback
        raise Malformed("a pack nested too deeply to decode") from None
    except ValueError:
        raise Malformed("a pack that is not JSON") from None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise Malformed("a pack that is not a list of job ids")
    if len(ids) > MAX_PACK:
        raise Malformed(f"a pack of {len(ids):,} ids (at most {MAX_PACK:,})")
    return ids
