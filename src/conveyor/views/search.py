"""Finding jobs for an operator: by id, job name and a text in arguments or messages.

Bounded on every store the same way: an exact id is one lookup; the rest reads the newest
jobs of the selection (state, queue) page by page through ``Inspector.job_heads`` — an index
walk on every store, never a scan of other states or queues, reading of each job only its
name, state and the first ``HEAD_CHARS`` characters of its arguments and its message, never
a whole payload — up to ``scan`` jobs, for at most ``budget`` seconds, and stops at ``limit``
matches or as soon as ``stop`` is set (the operator went away). Only the matches are then
read whole. A search says how far it read, so an operator knows an empty answer covers the
newest ``scanned`` jobs, not all of history.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from conveyor.core.job import JobRecord, JobState
from conveyor.storage.base import Inspector
from conveyor.storage.job_heads import HEAD_CHARS, JobHead

__all__ = ["BUDGET", "SCAN", "Found", "sealed_note", "search_jobs"]

SCAN = 5000  # jobs a search reads at most
BUDGET = 2.0  # seconds a search reads for at most
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Found:
    """The matches, how many jobs were read, whether that was all of the selection, whether
    the time budget (or the caller's ``stop``) ended the reading first, and how many of the
    jobs read were sealed (their text unsearchable)."""

    jobs: list[JobRecord]
    scanned: int
    complete: bool
    cut_short: bool = False
    #: Jobs read whose arguments or message are sealed (docs/job-data.md): a text search
    #: cannot see into them, only their id and name match.
    sealed: int = 0


def search_jobs(insp: Inspector, text: str = "", *, name: str | None = None,
                state: JobState | None = None, queue: str | None = None, limit: int = 50,
                scan: int = SCAN, budget: float = BUDGET,
                stop: threading.Event | None = None) -> Found:
    """Jobs of ``state`` and ``queue`` whose id is ``text``, or whose name is ``name`` and
    whose id, arguments or message hold ``text`` (case-insensitive; arguments and message
    within their first ``HEAD_CHARS`` characters), newest first."""
    needle = text.strip().lower()
    matched: list[str] = []
    exact = insp.get_job(text.strip()) if text.strip() else None
    if exact is not None and _fits(exact, name, state, queue):
        matched.append(exact.id)
    deadline = time.monotonic() + budget
    scanned, complete, cut_short, sealed = 0, False, False, 0
    while scanned < scan and len(matched) < limit:
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            cut_short = True
            break
        want = min(_PAGE, scan - scanned)
        page = insp.job_heads(state=state, queue=queue, offset=scanned, limit=want,
                              chars=HEAD_CHARS)
        scanned += len(page)
        sealed += sum(1 for h in page if _sealed(h))
        matched += [h.id for h in page if h.id not in matched
                    and (name is None or h.name == name) and (not needle or _holds(h, needle))]
        if len(page) < want:
            complete = True
            break
    found = [r for r in (insp.get_job(i) for i in matched[:limit]) if r is not None]
    return Found(found, scanned, complete, cut_short, sealed)


def _fits(record: JobRecord, name: str | None, state: JobState | None,
          queue: str | None) -> bool:
    return ((name is None or record.name == name) and (state is None or record.state is state)
            and (queue is None or record.queue == queue))


def _sealed(head: JobHead) -> bool:
    """A job whose arguments or message are sealed: its head shows ciphertext only."""
    return '"x":{"e":' in head.payload or "$enc$" in head.message


def sealed_note(found: Found) -> str | None:
    """What a search says when it read sealed jobs, or None."""
    if not found.sealed:
        return None
    return (f"{found.sealed:,} of the jobs read are encrypted: their arguments and messages "
            "cannot be searched (only their id and name)")


def _holds(head: JobHead, needle: str) -> bool:
    return (needle in head.id.lower() or needle in unescaped(head.payload).lower()
            or needle in head.message.lower())


_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def unescaped(json_text: str) -> str:
    """JSON text (maybe cut anywhere) with its string escapes decoded, so that a typed
    ``é`` or ``"`` matches an argument stored as ``\\u00e9`` or ``\\"``."""
    if "\\" not in json_text:
        return json_text
    text = _ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else _SIMPLE.get(m[2], m[2]),
                       json_text)
    # a pair of escaped UTF-16 surrogates is one character
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
