"""Retry timing: Sidekiq's polynomial backoff, so a failing job backs off from seconds to days.

With the default 25 retries the last attempt comes about 25 days after the first error,
long enough to deploy a fix before the job is moved to the dead set.
"""

from __future__ import annotations

import random

_rng = random.SystemRandom()


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): ``attempt**4 + 15 + jitter``.

    The jitter (0 to ``10 * (attempt + 1)`` seconds) spreads a burst of failures, e.g. after an
    outage, so the retries do not all hit the recovering service at the same instant.
    """
    attempt = max(int(attempt), 0)
    return float(attempt**4 + 15) + _rng.uniform(0.0, 10.0 * (attempt + 1))
