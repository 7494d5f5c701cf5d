"""Why a job waits, on the dashboard: a badge and a sentence on the job page, the reason in
the jobs list (``conveyor.client.explain``, the same gates as ``conveyor jobs explain``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.client.explain import Explanation, explain
from conveyor.storage.base import Inspector
from conveyor.web.render import badge, e

__all__ = ["reasons", "why_field"]


def why_field(found: Explanation | None) -> tuple[str, str]:
    """The job page's "Why" field: the badge (waiting, ready, running, finished) and each
    gate holding the job back, one line each."""
    if found is None:
        return ("Why", "-")
    lines = [e(r.text) for r in found.reasons] or [e(found.sentence)]
    return ("Why", badge(found.status) + " " + "<br>".join(lines))


def reasons(insp: Inspector, rows: Sequence[dict[str, Any]], brokered: bool) -> None:
    """Set each listed row's "why": the first gate holding it back for a job still waiting,
    else "" (read without its place in line: a list stays a handful of reads per job)."""
    waiting = [r for r in rows if r["state"] not in _NOT_WAITING]
    workers = insp.workers() if waiting else []
    for row in rows:
        row["why"] = ""
    for row in waiting:
        found = explain(insp, row["id"], broker=brokered, workers=workers, place=False)
        if found is not None:
            row["why"] = found.sentence


_NOT_WAITING = frozenset({"succeeded", "failed", "dead", "cancelled", "active"})
