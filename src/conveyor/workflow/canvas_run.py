"""The run of an enqueued canvas (``conveyor.workflow.canvas``): the nodes its last steps left, and
their value — ``Run.result()`` / ``await Run.aresult()``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.client.refs import JobRef
from conveyor.core.job import JobState
from conveyor.core.reraise import failure, last_error
from conveyor.errors import JobFailed
from conveyor.workflow.graph import Workflow

__all__ = ["Run", "Tails"]


@dataclass(frozen=True, slots=True)
class Tails:
    """What placed steps leave to the next one: the nodes it waits for, how it receives
    their value (``mode``: ``""`` not at all, ``"one"`` the one node's result, ``"list"`` the
    list of their results) and arguments given at enqueue for the first steps (``partial``)."""

    refs: list[JobRef]
    mode: str
    partial: tuple[Sequence[Any], dict[str, Any]] | None = None



class Run:
    """An enqueued canvas: its ``workflow`` and the nodes of its last steps."""

    def __init__(self, workflow: Workflow, tails: Tails) -> None:
        self.workflow = workflow
        self.tails = tails.refs
        self._listed = tails.mode == "list"

    def __repr__(self) -> str:
        return f"<Run {self.id} tails={len(self.tails)}>"

    @property
    def id(self) -> str:
        """The workflow's id."""
        return self.workflow.id

    def result(self, timeout: float | None = None) -> Any:
        """The last step's value (the list of a group's values when the canvas ends in a
        group). A failure raises the exception of the job that failed first, rebuilt as
        ``JobRef.result`` rebuilds it (``JobFailed`` when it cannot be)."""
        limit = None if timeout is None else time.monotonic() + timeout
        values = []
        for ref in self.tails:
            left = None if limit is None else max(0.0, limit - time.monotonic())
            try:
                values.append(ref.result(timeout=left))
            except JobFailed as exc:
                raise self.cause(ref.id, exc) from None
        return values if self._listed else values[0]

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result`` for asyncio code."""
        limit = None if timeout is None else time.monotonic() + timeout
        values = []
        for ref in self.tails:
            left = None if limit is None else max(0.0, limit - time.monotonic())
            try:
                values.append(await ref.aresult(timeout=left))
            except JobFailed as exc:
                raise await asyncio.to_thread(self.cause, ref.id, exc) from None
        return values if self._listed else values[0]

    def cause(self, node_id: str, found: JobFailed) -> JobFailed:
        """The failure of the first job, upstream of ``node_id``, that ran and failed (the
        one its workflow ended the others for); ``found`` when there is none."""
        client = self.workflow.client
        queue, seen = [node_id], {node_id}
        while queue and client is not None:
            record = client.get_job(queue.pop(0))
            if record is None or record.state is JobState.SUCCEEDED:
                continue
            if record.attempt > 0 or last_error(record):
                return failure(record)
            for parent in self.workflow.parents_of(record.id):
                if parent not in seen:
                    seen.add(parent)
                    queue.append(parent)
        return found
