"""``conveyor stats``, ``conveyor history``, ``conveyor pause QUEUE`` and ``conveyor resume
QUEUE``."""

from __future__ import annotations

import argparse
import time
from typing import Any

from conveyor.cli.common import (
    add_pause_resume,
    add_source_args,
    emit,
    open_backend,
    table,
)
from conveyor.cli.terminal import say
from conveyor.errors import ConveyorError
from conveyor.views.history import KINDS, history_view
from conveyor.views.records import fmt_duration, stats_view


def register(sub: Any) -> None:
    """Add the queue-level commands."""
    parser = sub.add_parser("stats", help="per-queue sizes, latency and totals")
    add_source_args(parser)
    parser.set_defaults(func=cmd_stats)
    parser = sub.add_parser("history", help="outcomes per minute over the last day")
    add_source_args(parser)
    parser.add_argument("--queue", default=None, help="one queue (default: all, summed)")
    parser.add_argument("--minutes", type=int, default=60,
                        help="how many of the last minutes (default 60, at most 1440)")
    parser.set_defaults(func=cmd_history)
    add_pause_resume(sub, ("stop workers taking jobs from a queue",
                           "let workers take jobs from a paused queue again"),
                     cmd_pause_resume, dest="queue", metavar="QUEUE",
                     force_help="also a queue that holds no job and no live worker listens to")


LEGEND = ("WAITING: workflow jobs waiting for their parents. AGGREGATING: members waiting for "
          "their aggregation's run. "
          "FAILED: jobs that ended by Fail (a business rule; never retried). "
          "DEAD: jobs out of retries or unable to run (retry them by hand).\n"
          "NOT OK EVER: failed and dead outcomes since the queue began, including jobs since "
          "retried or deleted; TODAY counts since midnight UTC.")


class UnknownQueueError(ConveyorError):
    """``conveyor pause`` named a queue nothing uses (likely a typo)."""


def cmd_stats(args: argparse.Namespace) -> int:
    """Print one row per queue, then the totals and worker slot usage."""
    with open_backend(args) as backend:
        view = stats_view(backend)
    return emit(args, view, format_stats)


def cmd_history(args: argparse.Namespace) -> int:
    """Print the last minutes that had outcomes, then each queue's last hour and day."""
    with open_backend(args) as backend:
        view = history_view(backend, args.queue, args.minutes)
    return emit(args, view, format_history)


def format_history(view: dict[str, Any]) -> str:
    """The text form of ``history_view``: only the minutes with an outcome."""
    series = view["series"]
    rows = [(time.strftime("%Y-%m-%d %H:%M", time.gmtime(view["start"] + 60 * i)),
             *(series[k][i] for k in KINDS))
            for i in range(view["minutes"]) if any(series[k][i] for k in KINDS)]
    which = f"queue {view['queue']}" if view["queue"] else "all queues"
    head = (f"{which}, last {view['minutes']} minute(s): "
            + (f"{len(rows)} with outcomes" if rows else "no outcomes"))
    out = [head] + ([table(("MINUTE (UTC)", *(k.upper() for k in KINDS)), rows)] if rows else [])
    sums = [(q["name"], *(q["hour"][k] for k in KINDS), *(q["day"][k] for k in KINDS))
            for q in view["queues"]]
    if sums:
        out.append(table(("QUEUE", *(f"{k.upper()} 1H" for k in KINDS),
                          *(f"{k.upper()} 24H" for k in KINDS)), sums))
    return "\n\n".join(out)


def format_stats(view: dict[str, Any]) -> str:
    """The text form of ``stats_view``."""
    headers = ("QUEUE", "WAITING", "AGGREGATING", "PENDING", "SCHEDULED", "ACTIVE", "RETRYING",
               "LATENCY", "PAUSED", "SUCCEEDED", "FAILED", "DEAD", "NOT OK EVER", "TODAY OK",
               "TODAY NOT OK")
    rows = [
        (q["name"], q["waiting"], q["aggregating"], q["pending"], q["scheduled"], q["active"],
         q["retrying"],
         fmt_duration(q["latency"]), "yes" if q["paused"] else "no", q["processed"],
         q["failed_jobs"], q["dead"], q["failed"], q["processed_today"], q["failed_today"])
        for q in view["queues"]
    ]
    if not rows:
        return "no queues yet"
    t, w = view["totals"], view["workers"]
    return (
        table(headers, rows)
        + f"\n\ntotal: {t['pending']} pending, {t['active']} active, {t['retrying']} retrying,"
        f" {t['scheduled']} scheduled, {t['waiting']} waiting, {t['aggregating']} aggregating;"
        f" {t['processed']} succeeded,"
        f" {t['failed_jobs']} failed,"
        f" {t['dead']} dead ({t['failed']} failed or dead ever)"
        + f"\nworkers: {w['count']} ({w['busy']}/{w['slots']} slots busy)"
        + "\n\n" + LEGEND
    )


def cmd_pause_resume(args: argparse.Namespace) -> int:
    """Pause or resume each named queue.

    Pausing a queue that holds no job (in any state) and that no live worker listens to is
    refused unless ``--force``: it is most likely a typo, and would leave a phantom paused
    queue behind. Resuming is always allowed (it can only undo a pause).
    """
    with open_backend(args) as backend:
        if args.action == "pause" and not args.force:
            known = {q.name for q in backend.queues()}
            known.update(name for w in backend.workers() for name in w.queues)
            unknown = [q for q in args.queue if q not in known]
            if unknown:
                raise UnknownQueueError(
                    f"no queue named {unknown[0]!r} (known: {', '.join(sorted(known)) or 'none'});"
                    " pass --force to pause it before any job or worker uses it")
        change = backend.pause_queue if args.action == "pause" else backend.resume_queue
        for queue in args.queue:
            change(queue)
            say(f"{args.action}d {queue}")
    return 0
