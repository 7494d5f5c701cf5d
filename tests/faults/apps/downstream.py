"""The app of the breaker fault scenario (tests/faults/test_breaker_faults.py): jobs that
call one HTTP service, the scenario's stub, which answers 503 for a span and then 200.

``faults.call`` has no breaker; ``faults.call_guarded`` has ``Breaker("downstream")``. Both
raise ``ConnectionError`` on a 503 (an ordinary error, retried after ``RETRY_IN`` seconds)
and return the status on a 200. ``conveyor worker tests.faults.apps.downstream:app`` runs
them; the scenario builds its client with ``register``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from conveyor import Breaker, Conveyor, current_job
from conveyor.client.registry import JobFunction

#: The scenario's breaker: open after 5 errors within a minute, probe every second.
BREAKER = Breaker("downstream", open_after=5, within=60.0, cool_down=1.0)
#: Seconds before a failed call is retried (short: an outage spends attempts quickly).
RETRY_IN = 0.5


def call(url: str) -> int:
    """One request to the stub naming this job; a 503 is an error."""
    try:
        with urllib.request.urlopen(f"{url}?job={current_job().job_id}", timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as refused:
        raise ConnectionError(f"downstream answered {refused.code}") from None


def _retry_in(attempt: int, exc: BaseException) -> float:
    return RETRY_IN


def register(target: Conveyor) -> dict[str, JobFunction]:
    """Register both jobs on ``target``; returns them by name."""
    options: dict[str, Any] = {"retry_in": _retry_in}
    return {"faults.call": target.job(name="faults.call", **options)(call),
            "faults.call_guarded": target.job(name="faults.call_guarded", breaker=BREAKER,
                                              **options)(call)}


app = Conveyor()
register(app)
