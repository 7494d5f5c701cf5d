"""The last day's outcomes per minute, shaped for the overview's chart, its table, the CLI and
``/api/history``: what ``Inspector.history`` stores, made dense and summed.

Every store adds to the history in the same statement (or script) that applies an outcome:
succeeded → processed, failed, dead (retries exhausted, killed, recovered too often,
unreadable) and retried (an error that runs again). A minute is kept for a day
(``HISTORY_MINUTES``): SQLite and PostgreSQL rows are deleted by ``trim`` (the workers'
janitor), Redis keeps a ring of 1,440 fields per queue, memory drops them at ``trim``.
"""

from __future__ import annotations

from typing import Any

from conveyor.storage.base import Inspector
from conveyor.storage.totals import HISTORY_MINUTES, MinuteTotals, history_start, minute_of

KINDS = ("processed", "failed", "dead", "retried")
HOUR = 60  # minutes summed into each queue's "last hour"


def _zero() -> dict[str, int]:
    return dict.fromkeys(KINDS, 0)


def history_view(inspector: Inspector, queue: str | None = None,
                 minutes: int = HISTORY_MINUTES) -> dict[str, Any]:
    """The last ``minutes`` (at most a day) as one number per minute and kind, oldest first,
    summed over every queue or of ``queue`` alone; and every queue with outcomes in the day
    with its sums over the last hour and the whole day.

    ``start`` is the epoch second the first minute begins at, ``step`` 60: minute ``i`` of a
    series begins at ``start + 60 * i``; the last one is the current, unfinished minute.
    """
    minutes = max(1, min(int(minutes), HISTORY_MINUTES))
    now = inspector.now()
    current = minute_of(now)
    first, hour = current - minutes + 1, current - HOUR + 1
    rows: list[MinuteTotals] = inspector.history(since=history_start(now))
    series = {k: [0] * minutes for k in KINDS}
    queues: dict[str, dict[str, dict[str, int]]] = {}
    for row in rows:
        sums = queues.setdefault(row.queue, {"hour": _zero(), "day": _zero()})
        for kind in KINDS:
            n = int(getattr(row, kind))
            sums["day"][kind] += n
            if row.minute >= hour:
                sums["hour"][kind] += n
            if row.minute >= first and queue in (None, row.queue):
                series[kind][row.minute - first] += n
    return {
        "now": now, "start": first * 60, "step": 60, "minutes": minutes, "queue": queue,
        "series": series,
        "queues": [{"name": name, **sums} for name, sums in sorted(queues.items())],
    }
