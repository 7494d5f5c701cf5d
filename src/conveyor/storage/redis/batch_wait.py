"""Waiting for a batch on Redis (``Storage.batch_finished``): ``batch.lua`` publishes on the
channel named as the batch's key the moment it marks the batch finished; a waiter subscribes
to it, and has the subscription confirmed before the caller's first read, so a finish between
that read and the wait is not missed. Through Sentinel the storage gives a waiter that only
sleeps instead (a failover drops a subscription with the old primary), as ``afinished`` does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from conveyor.errors import StorageUnavailable
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.redis.connection import Link

_CONFIRM_SECONDS = 5.0


@contextmanager
def batch_waiter(link: Link, channel: str) -> Iterator[BatchWaiter]:
    """Wake-ups as the batch whose key is ``channel`` finishes (not through Sentinel)."""
    subs = [_subscribe(link, channel)]

    def wait(timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            while (left := deadline - time.monotonic()) > 0:
                note = subs[0].get_message(timeout=left)
                if note is not None and note.get("type") == "message":
                    return True
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            _close(subs[0])
            subs[0] = _subscribe(link, channel)  # a message may have gone with the connection
            return True
        return False

    try:
        yield BatchWaiter(wait, notifies=True)
    finally:
        _close(subs[0])


def _subscribe(link: Link, channel: str) -> Any:
    pubsub = link.client.pubsub()  # type: ignore[no-untyped-call]
    try:
        pubsub.subscribe(channel)
        deadline = time.monotonic() + _CONFIRM_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            note = pubsub.get_message(timeout=left)
            if note is not None and note.get("type") == "subscribe":
                return pubsub
        raise redis.TimeoutError(f"no confirmation of SUBSCRIBE within {_CONFIRM_SECONDS} s")
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        _close(pubsub)
        raise StorageUnavailable(link.unreachable(exc)) from None


def _close(pubsub: Any) -> None:
    with contextlib.suppress(redis.RedisError, OSError):
        pubsub.close()
