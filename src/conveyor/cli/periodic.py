"""``conveyor periodic list|pause|resume``: the schedules workers registered."""

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
from conveyor.views import fmt_time, get_schedule, periodic_view


def register(sub: Any) -> None:
    """Add ``periodic`` and its actions."""
    periodic = sub.add_parser("periodic", help="periodic schedules: list, pause, resume")
    psub = periodic.add_subparsers(dest="periodic_command", required=True, metavar="ACTION")
    lst = psub.add_parser("list", help="every schedule with its last and next tick")
    add_source_args(lst)
    lst.set_defaults(func=cmd_list)
    add_pause_resume(psub, ("stop every worker enqueueing a schedule's ticks",
                            "let workers enqueue a paused schedule again"),
                     cmd_pause_resume, dest="names", metavar="NAME")


def cmd_list(args: argparse.Namespace) -> int:
    """Print one row per schedule."""
    with open_backend(args) as backend:
        view = periodic_view(backend)
    return emit(args, view, format_list)


def format_list(view: list[dict[str, Any]]) -> str:
    """The text form of ``periodic_view``."""
    if not view:
        return "no periodic schedules yet (workers register them when they start)"
    rows = [(s["name"], s["cron"], s["tz"], s["job_name"],
             s["queue"] if s["queue_listened"] else f"{s['queue']} (!)",
             "paused" if s["paused"] else "active", fmt_time(s["last_tick"]),
             fmt_time(s["next_tick"])) for s in view]
    text = table(("NAME", "CRON", "TZ", "JOB", "QUEUE", "STATE", "LAST TICK (UTC)",
                  "NEXT TICK (UTC)"), rows)
    unheard = sorted({s["queue"] for s in view if not s["queue_listened"]})
    if unheard:
        text += ("\n\n(!) no running worker listens to " + ", ".join(unheard)
                 + ": ticks wait there until one does (conveyor worker … "
                 + " ".join(f"-q {q}" for q in unheard) + ")")
    return text


def cmd_pause_resume(args: argparse.Namespace) -> int:
    """Pause or resume each named schedule; an unknown name is an error."""
    with open_backend(args) as backend:
        for name in args.names:
            get_schedule(backend, name)
        change = backend.pause_schedule if args.action == "pause" else backend.resume_schedule
        for name in args.names:
            change(name)
            say(f"{args.action}d {name}")
    return 0
