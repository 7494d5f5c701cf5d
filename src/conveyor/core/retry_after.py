"""An HTTP response's ``Retry-After`` as a ``RetryAfter``: a throttling or unavailable
downstream service makes the job wait, without spending an attempt (docs/api.md,
"Outcomes").

The response is duck-typed, so neither httpx nor requests is a dependency: its status is
``.status_code`` (httpx, requests) or ``.status`` (aiohttp, urllib3), its headers
``.headers`` with ``.get`` (case-insensitive in those libraries; a plain dict is asked for
``Retry-After`` and ``retry-after``). RFC 9110 §10.2.3 allows a number of seconds or an
HTTP-date; a date in the past means now.
"""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime
from typing import Any

from conveyor.errors import RetryAfter

__all__ = ["THROTTLED", "raise_for_retry_after", "retry_after_seconds"]

#: Too Many Requests, Service Unavailable: the statuses whose ``Retry-After`` is honoured.
THROTTLED = frozenset({429, 503})


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds from ``now`` (epoch seconds; the wall clock by default) a ``Retry-After``
    header value asks to wait: a non-negative number of seconds, or an HTTP-date (a past
    one is 0). None for a missing or unreadable value."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        return max(0.0, when - (time.time() if now is None else now))
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def raise_for_retry_after(response: Any, default: float | None = None,
                          now: float | None = None) -> None:
    """Raise ``RetryAfter`` when ``response`` is a 429 or 503 whose ``Retry-After`` says how
    long to wait (or, without a readable one, when ``default`` seconds are given); return
    None otherwise, so that ``response.raise_for_status()`` can follow for other errors."""
    status = getattr(response, "status_code", None)
    if status is None:
        status = getattr(response, "status", None)
    if status not in THROTTLED:
        return
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After")
    if value is None:
        value = headers.get("retry-after")
    seconds = retry_after_seconds(value, now)
    if seconds is None:
        seconds = default
    if seconds is None:
        return
    given = str(value)[:80] if value else "missing"
    raise RetryAfter(seconds, f"HTTP {status}, Retry-After: {given}")
