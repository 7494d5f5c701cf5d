"""JSON-ready views of what the ``Inspector`` reports, shared by the CLI, web UI and metrics.

One place shapes the data so ``conveyor stats --json`` and ``/api/stats`` agree, and so a
backend only has to implement the ``Inspector`` protocol to get every operations surface.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from conveyor.client.payloads import JobData
from conveyor.client.periodic import next_tick, unlistened
from conveyor.client.reveal import reveal, reveal_steps
from conveyor.core.job import Event, EventKind, JobRecord, JobState
from conveyor.errors import BatchNotFound, JobNotFound, ScheduleNotFound
from conveyor.storage.base import Inspector
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.workers import WorkerInfo

FAILURE_STATES = (JobState.FAILED, JobState.DEAD)


def stats_view(inspector: Inspector) -> dict[str, Any]:
    """Every queue with sizes and totals, summed totals, and worker slot usage.

    ``failed`` is the stored all-time counter of failed *or dead* outcomes; ``failed_jobs``
    counts the jobs failed now, beside ``dead`` (the jobs dead now), so that no surface
    shows the all-time counter under a name that means the current state."""
    queues = [dataclasses.asdict(q) for q in inspector.queues()]
    for q in queues:
        q["failed_jobs"] = inspector.count_jobs(state=JobState.FAILED, queue=q["name"])
    keys = ("waiting", "aggregating", "pending", "scheduled", "active", "retrying", "processed",
            "failed", "failed_jobs", "dead", "processed_today", "failed_today")
    totals = {k: sum(int(q[k]) for q in queues) for k in keys}
    workers = inspector.workers()
    return {
        "now": inspector.now(),
        "queues": queues,
        "totals": totals,
        "workers": {
            "count": len(workers),
            "slots": sum(w.concurrency for w in workers),
            "busy": sum(len(w.busy) for w in workers),
        },
    }


def periodic_view(inspector: Inspector) -> list[dict[str, Any]]:
    """Every stored periodic schedule with its last tick enqueued and the next one due."""
    now = inspector.now()
    schedules = inspector.schedules()
    missing = unlistened(schedules, {q for w in inspector.workers() for q in w.queues})
    out = []
    for info in schedules:
        row: dict[str, Any] = dataclasses.asdict(info)
        row["next_tick"] = None if info.paused else next_tick(info, now)
        # False: no live worker listens to the schedule's queue, so its ticks wait there.
        row["queue_listened"] = info.queue not in missing
        # Where the definition in force comes from: "code", "code, edited" (an operator's
        # edit stands over the code's, shown as "code"), or "runtime" (added by an operator).
        row["edited"] = info.edited
        row["code"] = info.code_definition()
        row["source"] = f"{info.origin}, edited" if info.edited else info.origin
        out.append(row)
    return out


def get_schedule(inspector: Inspector, name: str) -> dict[str, Any]:
    """The ``periodic_view`` row of schedule ``name``; ``ScheduleNotFound`` if none."""
    for row in periodic_view(inspector):
        if row["name"] == name:
            return row
    raise ScheduleNotFound(f"no periodic schedule named {name!r} (workers register the "
                           "code's schedules when they start; add one with `conveyor "
                           "periodic add`)")


def schedule_changes_view(inspector: Inspector, name: str | None = None,
                          limit: int = 50) -> list[dict[str, Any]]:
    """The audit trail of schedule changes, newest first (of ``name``, or of all)."""
    return [c.to_wire() for c in inspector.schedule_changes(name, limit)]


def worker_view(worker: WorkerInfo, now: float) -> dict[str, Any]:
    """A worker with each busy slot's job and how long it has been running."""
    out = worker.to_wire()
    out["busy"] = [
        {"job_id": b.job_id, "name": b.name, "queue": b.queue, "started_at": b.started_at,
         "running_for": max(0.0, now - b.started_at)}
        for b in worker.busy
    ]
    out["busy_count"] = len(worker.busy)
    return out


def workers_view(inspector: Inspector) -> list[dict[str, Any]]:
    """Every live worker (see ``worker_view``)."""
    now = inspector.now()
    return [worker_view(w, now) for w in inspector.workers()]


def error_events(events: Sequence[Event] | None) -> list[dict[str, Any]]:
    """The error events of a job with their exception type, message and traceback."""
    out = []
    for event in events or ():
        if event.kind not in (EventKind.ERROR, EventKind.DEAD) or not event.data:
            continue
        data = dict(event.data)
        if "type" in data or "traceback" in data:
            out.append({"ts": event.ts, "attempt": event.attempt, "type": data.get("type"),
                        "message": data.get("message", event.message),
                        "traceback": data.get("traceback", "")})
    return out


def readable(record: JobRecord, data: JobData | None = None, *,
             fetch: bool = False) -> JobRecord:
    """``record``, or a copy whose undecodable payload or result is shown as its stored text.

    A damaged record (truncated JSON, nesting too deep to decode) must still be listed, shown
    and deletable; such a copy is marked ``unreadable`` with the reason. Sealed data is
    opened with ``data``'s keys, else shown as ``encrypted``; data by reference is named
    (read with ``fetch``: ``conveyor.client.reveal``).
    """
    record = reveal(record, data, fetch=fetch)
    changes: dict[str, Any] = {}
    for name in ("payload", "result"):
        text = getattr(record, name)
        if text is None:
            continue
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            raw = text[:2000]
            changes[name] = json.dumps({"a": [raw]} if name == "payload" else raw)
    if not changes:
        return record
    why = record.unreadable or f"stored {' and '.join(changes)} is not readable JSON"
    return dataclasses.replace(record, unreadable=why, **changes)


def job_view(record: JobRecord, data: JobData | None = None) -> dict[str, Any]:
    """A job with args, options, its full event log and its errors with tracebacks (sealed
    data opened with ``data``'s keys, data by reference read: ``readable``)."""
    record = readable(record, data, fetch=data is not None and data.offload is not None)
    out = record.as_dict(with_events=True)
    out["options"] = {
        "max_retries": record.max_retries, "timeout": record.timeout,
        "deadline": record.deadline,
        "flow": record.flow.to_wire() if record.flow else None,
    }
    out["errors_detail"] = error_events(record.events)
    out["message"] = last_message(record)
    return out


def job_detail(inspector: Inspector, job_id: str,
               data: JobData | None = None) -> dict[str, Any]:
    """``job_view`` of a job with its durable records (docs/durable.md): ``durable`` holds its
    steps (name, status, started, ended, duration, result summary), its inbox size and what
    it waits for (``waiting_for``: a sleep until a time, an event, a message; None unless
    it is scheduled by a suspension), for ``jobs show``, the job page and ``explain``."""
    record = get_job(inspector, job_id)
    view = job_view(record, data)
    durable = reveal_steps(inspector.durable.read(job_id), data).as_dict()
    durable["waiting_for"] = waiting_for(record, durable["wait"])
    view["durable"] = durable
    return view


def waiting_for(record: JobRecord, wait: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a suspended durable job waits for: its registered wait, or else a sleep until its
    run time; None for a job that is not scheduled by a suspension."""
    if record.state is not JobState.SCHEDULED or not record.events:
        return None
    last = next((ev for ev in reversed(record.events)
                 if ev.state == JobState.SCHEDULED.value), None)
    if last is None or last.kind != EventKind.SUSPENDED:
        return None
    return wait if wait is not None else {"kind": "sleep", "until": record.run_at}


def get_job(inspector: Inspector, job_id: str) -> JobRecord:
    """A job with events, or ``JobNotFound`` naming the id."""
    record = inspector.get_job(job_id)
    if record is None:
        raise JobNotFound(f"no job with id {job_id!r} (never existed, or trimmed by retention)")
    return record


def get_batch(inspector: Inspector, batch_id: str, kind: str | None = None) -> BatchStatus:
    """A batch's status, or ``BatchNotFound`` naming the id and the kind looked for: with
    ``kind="workflow"``, a batch that is not a workflow is not found either (a workflow is
    a batch, so the batch commands take both)."""
    status = inspector.get_batch(batch_id)
    if status is None:
        raise BatchNotFound(f"no {kind or 'batch'} with id {batch_id!r}")
    if kind is not None and status.kind != kind:
        raise BatchNotFound(f"no {kind} with id {batch_id!r}: it is a {status.kind}")
    return status


def last_message(record: JobRecord) -> str | None:
    """What every list, the batch page and ``jobs show`` display as a job's message.

    The job's ``message`` (docs/api.md: the text of its last outcome), except while it runs:
    then the newest line the running attempt logged itself (``ctx.log``), when the events
    were loaded and it logged one. Never any other event's text (a recovery note, a line of
    an earlier attempt), which would make one job read differently on different pages.
    """
    if record.state is JobState.ACTIVE:
        for event in reversed(record.events or []):
            if event.kind == EventKind.STARTED:
                break
            if event.kind == EventKind.MESSAGE and event.message:
                return event.message
    return record.message


_RETRY_SCAN = 1000


def batch_view(inspector: Inspector, batch_id: str, failures: int = 20,
               kind: str | None = None) -> dict[str, Any]:
    """A batch's counts, timings and ETA plus its latest failed or dead jobs with messages.

    The ETA is never earlier than the last retry the batch waits for (``retries_until``,
    the latest ``run_at`` of its retrying jobs, of the first 1,000 scanned): a rate measured
    while 32 jobs sit in their backoff says nothing about when they will run. Failures
    list the dead jobs first (they need a hand), then the failed ones, newest first in each.
    ``kind`` ("workflow") refuses a batch of another kind, naming the kind looked for.
    """
    status = get_batch(inspector, batch_id, kind)
    now = inspector.now()
    out = status.as_dict(now)
    until = None
    if out["counts"][JobState.RETRYING.value] and not out["complete"]:
        waiting = inspector.list_jobs(state=JobState.RETRYING, batch_id=batch_id,
                                      limit=_RETRY_SCAN)
        until = max((j.run_at for j in waiting if j.run_at is not None), default=None)
        if until is not None:
            out["eta"] = max(out["eta"] or 0.0, until - now, 0.0)
    out["retries_until"] = until
    found: list[dict[str, Any]] = []
    for state in (JobState.DEAD, JobState.FAILED) if failures else ():
        count = inspector.count_jobs(state=state, batch_id=batch_id)
        latest = inspector.list_jobs(state=state, batch_id=batch_id, with_events=True,
                                     offset=max(0, count - failures), limit=failures)
        latest.sort(key=lambda j: (j.finished_at or 0.0, j.id), reverse=True)
        for job in map(readable, latest):
            found.append({"id": job.id, "name": job.name, "state": job.state.value,
                          "args": job.args, "message": last_message(job)})
    out["failures"] = found[:failures]
    return out


def batch_jobs_view(
    inspector: Inspector, batch_id: str, state: JobState | None, offset: int, limit: int
) -> list[dict[str, Any]]:
    """A page of a batch's jobs, each with its state and last message."""
    jobs = inspector.list_jobs(state=state, batch_id=batch_id, offset=offset, limit=limit,
                               with_events=True)
    return [job_row(j) for j in jobs]


def job_row(job: JobRecord, data: JobData | None = None) -> dict[str, Any]:
    """The short form of a job used in lists (``data``: as ``readable``)."""
    job = readable(job, data)
    return {
        "id": job.id, "name": job.name, "queue": job.queue, "state": job.state.value,
        "args": job.args, "kwargs": job.kwargs, "attempt": job.attempt, "errors": job.errors,
        "created_at": job.created_at, "run_at": job.run_at, "finished_at": job.finished_at,
        "batch_id": job.batch_id, "message": last_message(job), "unreadable": job.unreadable,
    }


def parse_state(value: str | None) -> JobState | None:
    """A ``JobState`` from its name; ``None`` for empty/"all"; ``ValueError`` listing choices."""
    if value in (None, "", "all"):
        return None
    try:
        return JobState(str(value).lower())
    except ValueError:
        choices = ", ".join(s.value for s in JobState)
        raise ValueError(f"unknown state {value!r}; expected one of: {choices}") from None


def batch_state(view: dict[str, Any]) -> str:
    """``cancelled``, ``complete``, ``running`` (closed) or ``open`` for a batch dict."""
    if view["cancelled"]:
        return "cancelled"
    return "complete" if view["complete"] else ("running" if view["closed"] else "open")


def fmt_duration(seconds: float | None) -> str:
    """``3h 4m``, ``2m 5s``, ``4.2s`` or ``-``: short, for tables and progress lines."""
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 10:
        return f"{seconds:.1f}s"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def fmt_time(ts: float | None) -> str:
    """An epoch time as ``2026-01-02 03:04:05`` UTC, or ``-``."""
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
