"""Doing a worker's part by hand through the storage protocol: dequeue, then acknowledge."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from conveyor import Conveyor
from conveyor.client.registry import JobFunction
from conveyor.core.job import Ack, LeasedJob, Outcome


def run_by_hand(
    app: Conveyor,
    outcome: Outcome = Outcome.SUCCEEDED,
    *,
    result: Any = None,
    message: str | None = None,
    queues: Sequence[str] = ("default",),
) -> LeasedJob:
    """Lease the next job of ``queues`` and acknowledge it with ``outcome``, as a worker would."""
    [job] = app.storage.dequeue(list(queues), "hand", 1, 30.0)
    ack = Ack(
        job_id=job.id, token=job.token, outcome=outcome, message=message,
        result=None if result is None else json.dumps(result),
    )
    assert app.storage.ack([ack]) == [True]
    return job


def echo_job(app: Conveyor) -> JobFunction:
    """A job ``t.echo`` on ``app`` returning its one argument."""

    @app.job(name="t.echo")
    def echo(n: int) -> int:
        return n

    return echo
