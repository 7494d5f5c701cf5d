"""Flow control: what the client side checks before the server-side functions enforce it.

Jobs with a concurrency, order or rate key are "gated": a queue holding any pending gated job
is dequeued by walking its pending jobs in order and admitting each one that its limits allow
(``flow_pick`` in migrations/002_functions.sql, under a transaction advisory lock per schema,
so counting a limit and admitting against it never interleave between transactions). Jobs
over a limit stay pending (no attempt is spent). Unique keys take an advisory lock per key in
``enqueue``.
"""

from __future__ import annotations

from conveyor.job import FlowControl


def validate(flow: FlowControl) -> None:
    """Raise ``ValueError`` for settings that could never admit a job."""
    if flow.concurrency_key is not None and flow.concurrency_limit < 1:
        raise ValueError(f"concurrency_key {flow.concurrency_key!r} needs concurrency_limit >= 1")
    if flow.rate_key is not None and (flow.rate_limit < 1 or flow.rate_period <= 0):
        raise ValueError(f"rate_key {flow.rate_key!r} needs rate_limit >= 1 and rate_period > 0")


def is_gated(flow: FlowControl | None) -> bool:
    """True when the job waits on a concurrency, order or rate limit."""
    return flow is not None and bool(flow.concurrency_key or flow.order_key or flow.rate_key)
