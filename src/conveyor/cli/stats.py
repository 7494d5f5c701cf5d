"""``conveyor stats``, ``conveyor pause QUEUE`` and ``conveyor resume QUEUE``."""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import (
    add_pause_resume,
    add_source_args,
    emit,
    open_backend,
    table,
)
from conveyor.cli.terminal import say
from conveyor.web.views import fmt_duration, stats_view


def register(sub: Any) -> None:
    """Add the queue-level commands."""
    parser = sub.add_parser("stats", help="per-queue sizes, latency and totals")
    add_source_args(parser)
    parser.set_defaults(func=cmd_stats)
    add_pause_resume(sub, ("stop workers taking jobs from a queue",
                           "let workers take jobs from a paused queue again"),
                     cmd_pause_resume, dest="queue", metavar="QUEUE")


def cmd_stats(args: argparse.Namespace) -> int:
    """Print one row per queue, then the totals and worker slot usage."""
    with open_backend(args) as backend:
        view = stats_view(backend)
    return emit(args, view, format_stats)


def format_stats(view: dict[str, Any]) -> str:
    """The text form of ``stats_view``."""
    headers = ("QUEUE", "PENDING", "SCHEDULED", "ACTIVE", "RETRYING", "LATENCY", "PAUSED",
               "PROCESSED", "FAILED", "DEAD", "TODAY OK", "TODAY FAILED")
    rows = [
        (q["name"], q["pending"], q["scheduled"], q["active"], q["retrying"],
         fmt_duration(q["latency"]), "yes" if q["paused"] else "no", q["processed"],
         q["failed"], q["dead"], q["processed_today"], q["failed_today"])
        for q in view["queues"]
    ]
    if not rows:
        return "no queues yet"
    t, w = view["totals"], view["workers"]
    return (
        table(headers, rows)
        + f"\n\ntotal: {t['pending']} pending, {t['active']} active, {t['retrying']} retrying,"
        f" {t['scheduled']} scheduled, {t['dead']} dead; processed {t['processed']},"
        f" failed {t['failed']}"
        + f"\nworkers: {w['count']} ({w['busy']}/{w['slots']} slots busy)"
    )


def cmd_pause_resume(args: argparse.Namespace) -> int:
    """Pause or resume each named queue."""
    with open_backend(args) as backend:
        change = backend.pause_queue if args.action == "pause" else backend.resume_queue
        for queue in args.queue:
            change(queue)
            say(f"{args.action}d {queue}")
    return 0
