"""What a worker and its job processes say to each other: JSON frames over a pipe.

Each frame is a 4-byte big-endian length and that many bytes of JSON (ASCII escapes, so any
text round-trips, lone surrogates included). JSON, never pickle: a job process is handed a
leased job's fields (its payload is JSON already) and hands back the ``Ack`` its run ended
with, both as plain dicts (``leased_to_wire``, ``ack_from_wire``).

| frame | from | fields |
|---|---|---|
| ``hello`` | worker | ``app``, ``path`` (``sys.path``), ``worker``, ``logs``, ``limits`` |
| ``ready`` | job process | ``error`` when the app could not be imported |
| ``run`` | worker | ``job``: the leased job |
| ``cancel`` | worker | the running job's cancellation was requested |
| ``events`` | job process | ``events``, ``progress``: the running job's messages so far |
| ``done`` | job process | ``ack``; ``retire`` when a limit says the process must be replaced |
"""

from __future__ import annotations

import json
import os
import select
import struct
from typing import Any

from conveyor.core.job import Ack, ErrorInfo, Event, LeasedJob, Outcome

__all__ = ["Closed", "ack_from_wire", "ack_to_wire", "event_from_wire", "leased_from_wire",
           "leased_to_wire", "read_frame", "write_frame"]

_LENGTH = struct.Struct(">I")


class Closed(Exception):
    """The other end of the pipe is gone (its process ended)."""


def write_frame(fd: int, frame: dict[str, Any]) -> None:
    """Send one frame whole (``Closed`` if the reader is gone)."""
    body = json.dumps(frame, separators=(",", ":")).encode("ascii")
    data = memoryview(_LENGTH.pack(len(body)) + body)
    try:
        while data:
            data = data[os.write(fd, data):]
    except (BrokenPipeError, OSError) as exc:
        raise Closed(str(exc)) from None


def read_frame(fd: int, timeout: float | None = None) -> dict[str, Any] | None:
    """The next frame; None when none began within ``timeout`` seconds (None: wait). Once a
    frame began it is read whole. ``Closed`` at the end of the pipe."""
    if timeout is not None:
        ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
        if not ready:
            return None
    (size,) = _LENGTH.unpack(_read(fd, _LENGTH.size))
    frame: dict[str, Any] = json.loads(_read(fd, size))
    return frame


def _read(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        try:
            chunk = os.read(fd, min(size, 1 << 20))
        except OSError as exc:
            raise Closed(str(exc)) from None
        if not chunk:
            raise Closed("end of pipe")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def leased_to_wire(job: LeasedJob) -> dict[str, Any]:
    """A leased job's fields."""
    return {"id": job.id, "name": job.name, "queue": job.queue, "payload": job.payload,
            "token": job.token, "attempt": job.attempt, "errors": job.errors,
            "max_retries": job.max_retries, "timeout": job.timeout, "batch_id": job.batch_id,
            "recoveries": job.recoveries, "unreadable": job.unreadable}


def leased_from_wire(raw: dict[str, Any]) -> LeasedJob:
    """Undo ``leased_to_wire``."""
    return LeasedJob(**raw)


def event_from_wire(raw: dict[str, Any]) -> Event:
    """Undo ``Event.to_wire``."""
    return Event(ts=float(raw["t"]), kind=str(raw["k"]), state=raw.get("s"),
                 message=raw.get("m"), worker=raw.get("w"), attempt=int(raw.get("a", 0)),
                 data=raw.get("d"))


def ack_to_wire(ack: Ack) -> dict[str, Any]:
    """An ack's fields (a job process never runs an aggregated job: no bundle)."""
    error = ack.error
    return {"job_id": ack.job_id, "token": ack.token, "outcome": ack.outcome.value,
            "result": ack.result, "message": ack.message, "retry_in": ack.retry_in,
            "error": None if error is None else [error.type, error.message, error.traceback],
            "events": [e.to_wire() for e in ack.events],
            "progress": None if ack.progress is None else list(ack.progress),
            "resume_at": ack.resume_at, "ran": ack.ran}


def ack_from_wire(raw: dict[str, Any]) -> Ack:
    """Undo ``ack_to_wire``."""
    error = raw.get("error")
    progress = raw.get("progress")
    return Ack(job_id=raw["job_id"], token=raw["token"], outcome=Outcome(raw["outcome"]),
               result=raw.get("result"), message=raw.get("message"),
               retry_in=raw.get("retry_in"),
               error=None if error is None else ErrorInfo(*error),
               events=tuple(event_from_wire(e) for e in raw.get("events", ())),
               progress=None if progress is None else (int(progress[0]), int(progress[1])),
               resume_at=raw.get("resume_at"), ran=bool(raw.get("ran", True)))
