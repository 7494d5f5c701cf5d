"""Finding jobs for an operator: by id, job name and a text in arguments or messages.

Bounded on every store the same way: an exact id is one lookup; the rest reads the newest
jobs of the selection (state, queue) page by page through ``Inspector.list_jobs(newest_first=
True)`` — an index walk on every store, never a scan of other states or queues — up to
``scan`` jobs, and stops at ``limit`` matches. A search says how far it read, so an operator
knows an empty answer covers the newest ``scan`` jobs, not all of history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from conveyor.job import JobRecord, JobState
from conveyor.storage.base import Inspector

__all__ = ["SCAN", "Found", "search_jobs"]

SCAN = 5000  # jobs a search reads at most
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Found:
    """The matches, how many jobs were read, and whether that was all of the selection."""

    jobs: list[JobRecord]
    scanned: int
    complete: bool


def search_jobs(insp: Inspector, text: str = "", *, name: str | None = None,
                state: JobState | None = None, queue: str | None = None, limit: int = 50,
                scan: int = SCAN) -> Found:
    """Jobs of ``state`` and ``queue`` whose id is ``text``, or whose name is ``name`` and
    whose id, arguments or message hold ``text`` (case-insensitive), newest first."""
    needle = text.strip().lower()
    out: list[JobRecord] = []
    seen: set[str] = set()
    exact = insp.get_job(text.strip()) if text.strip() else None
    if exact is not None and _fits(exact, name, state, queue):
        out.append(exact)
        seen.add(exact.id)
    scanned, complete = 0, False
    while scanned < scan and len(out) < limit:
        want = min(_PAGE, scan - scanned)
        page = insp.list_jobs(state=state, queue=queue, offset=scanned, limit=want,
                              newest_first=True)
        scanned += len(page)
        out += [r for r in page if r.id not in seen and (name is None or r.name == name)
                and (not needle or _holds(r, needle))]
        if len(page) < want:
            complete = True
            break
    return Found(out[:limit], scanned, complete)


def _fits(record: JobRecord, name: str | None, state: JobState | None,
          queue: str | None) -> bool:
    return ((name is None or record.name == name) and (state is None or record.state is state)
            and (queue is None or record.queue == queue))


def _holds(record: JobRecord, needle: str) -> bool:
    # The decoded arguments, not the stored JSON text, whose escapes ("\u00e9") a typed
    # "é" would never match.
    args = json.dumps([record.args, record.kwargs], ensure_ascii=False, default=str)
    return (needle in record.id.lower() or needle in args.lower()
            or needle in (record.message or "").lower())
