"""The worker's side of job data (docs/job-data.md): a leased job's payload opened and its
typed arguments made (``open_call``), the job's own text sealed on its way out (messages,
errors, log lines: ``Sealer``). Everything a job writes leaves through ``JobContext.drain``
or an ``Ack``, and both pass here, so no path writes a sealed job's text in clear.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from conveyor.client.payloads import JobData
from conveyor.client.registry import JobFunction
from conveyor.core.envelope import TEXT_TOKEN
from conveyor.core.job import ErrorInfo, Event, EventKind, LeasedJob
from conveyor.errors import BlobMissing, PayloadError, TypedDataError, UnsealError

__all__ = ["Migrate", "Sealer", "Unrunnable", "open_call"]

#: ``(args, kwargs, meta) -> (args, kwargs)``: stored arguments brought to this code's version.
Migrate = Callable[[list[Any], dict[str, Any], Mapping[str, Any]],
                   tuple[list[Any], dict[str, Any]]]


class Unrunnable(Exception):
    """A job whose data cannot become a call, ever: its key is not held, its blob is gone,
    a typed argument does not validate. It ends dead with this one line."""


def open_call(data: JobData, job: LeasedJob, fn: JobFunction,
              migrate: Migrate | None = None) -> tuple[list[Any], dict[str, Any],
                                                       dict[str, Any], list[Any],
                                                       dict[str, Any]]:
    """``(args, kwargs, meta, stored args, stored kwargs)`` of a leased job: the call's
    arguments (typed ones made their type) and the JSON ones the context keeps.
    ``Unrunnable`` names the job (and its workflow) and the problem; ``BlobUnavailable``
    (a blob store that does not answer) is raised as it is: the job is retried.
    ``migrate`` (a versioned type's, worker/versions.py) brings the JSON arguments to this
    code's version first; what it raises but ``ValueError`` goes through."""
    who = f"job {job.name} {job.id}" + (f" (of batch {job.batch_id})" if job.batch_id else "")
    try:
        args, kwargs, meta = data.open_payload(job.id, job.name, job.payload)
    except (UnsealError, BlobMissing, PayloadError) as exc:
        raise Unrunnable(f"{who}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an envelope damaged in the store
        raise Unrunnable(f"{who}: its stored arguments cannot be read: {exc}") from None
    if migrate is not None:
        try:
            args, kwargs = migrate(args, kwargs, meta)
        except ValueError as exc:
            raise Unrunnable(f"{who}: {exc}") from None
    if fn.opts.aggregate is not None or not fn.shape.typed:
        return args, kwargs, meta, args, kwargs
    try:
        typed, named = fn.shape.load(args, kwargs, who)
    except TypedDataError as exc:
        raise Unrunnable(str(exc)) from None
    return typed, named, meta, args, kwargs


class Sealer:
    """Seals the text one job writes when its data is sealed (``JobData.seals``)."""

    __slots__ = ("_data", "_id", "_name")

    def __init__(self, data: JobData, job_id: str, name: str) -> None:
        self._data, self._id, self._name = data, job_id, name

    def text(self, text: str | None) -> str | None:
        """A message sealed (left as it is when it is a sealed text already: a job
        process's line, sealed there, passes the worker's context too)."""
        if text is None or TEXT_TOKEN.fullmatch(text):
            return text
        return self._data.seal_text(self._id, self._name, text)

    def event(self, event: Event) -> Event:
        """A log line's message and data sealed (progress stays clear: numbers, no data)."""
        if event.kind != EventKind.MESSAGE:
            return event
        data = event.data
        if data and set(data) != {"sealed"}:
            data = {"sealed": self.text(json.dumps(dict(data), default=str))}
        return dataclasses.replace(event, message=self.text(event.message), data=data)

    def error(self, info: ErrorInfo | None) -> ErrorInfo | None:
        """An error's message and traceback sealed; its type stays readable."""
        if info is None:
            return None
        return ErrorInfo(info.type, self.text(info.message) or "",
                         self.text(info.traceback) or "")
