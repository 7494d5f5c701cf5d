"""``Member``: one job of an aggregated run, as the aggregator sees it (docs/aggregation.md).

The aggregator registered with ``@app.aggregate(job)`` runs once with a list of members; each
member is acknowledged on its own, by the outcome the aggregator gave it or else by how the
run ended: returned (succeeded, with the aggregator's return value as its result) or raised
(each member retried by its own retry rules, or failed on ``Fail``).
"""

from __future__ import annotations

from typing import Any

from conveyor.client.context import JobContext
from conveyor.errors import Retry

__all__ = ["Member"]


class Member:
    """A member job: its id, arguments and context, and the outcome the aggregator gives it."""

    __slots__ = ("ctx", "outcome")

    def __init__(self, ctx: JobContext) -> None:
        #: The member's own context: its id, attempt, meta, and its event log.
        self.ctx = ctx
        #: What the aggregator decided for it: None (the run's outcome decides), or
        #: ("done", result), ("fail", message), ("retry", (message, seconds)), ("error", exc).
        self.outcome: tuple[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<Member {self.ctx.name} id={self.ctx.job_id} args={self.ctx.args!r}>"

    @property
    def id(self) -> str:
        """The member job's id."""
        return self.ctx.job_id

    @property
    def args(self) -> list[Any]:
        """The positional arguments it was enqueued with."""
        return self.ctx.args

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments it was enqueued with."""
        return self.ctx.kwargs

    @property
    def attempt(self) -> int:
        """Its attempt number (1 on its first run)."""
        return self.ctx.attempt

    @property
    def cancelled(self) -> bool:
        """True once the member's cancellation was requested: leave it out (it ends
        ``cancelled`` unless given another outcome)."""
        return self.ctx.cancelled

    def log(self, message: str, **data: Any) -> None:
        """Add a message to this member's event log."""
        self.ctx.log(message, **data)

    def done(self, result: Any = None) -> None:
        """It succeeded, with ``result`` (JSON) as its result."""
        self._mark("done", result)

    def fail(self, message: str) -> None:
        """It failed for a business reason: ``failed``, never retried (as ``raise Fail``)."""
        self._mark("fail", message)

    def retry(self, message: str | None = None, *, in_seconds: float | None = None) -> None:
        """Run it again (as ``raise Retry``): ``retrying``, then back into its aggregation; dead
        when its retries are used up. ``in_seconds``: a finite number >= 0 (``ValueError``
        here otherwise, as ``Retry`` says)."""
        Retry(message or "", in_seconds=in_seconds)  # the same rule, checked at the call
        self._mark("retry", (message, in_seconds))

    def error(self, exc: BaseException) -> None:
        """It raised ``exc``: recorded with its traceback and retried by its retry rules."""
        self._mark("error", exc)

    def _mark(self, kind: str, value: Any) -> None:
        # One outcome per member: a second mark was kept silently over the first, so an
        # aggregator that marked a member done and then failed (or the reverse) by mistake
        # never knew which one stood.
        if self.outcome is not None:
            raise RuntimeError(f"member {self.ctx.job_id} is already marked "
                               f"{self.outcome[0]}; a member takes one outcome")
        self.outcome = (kind, value)
