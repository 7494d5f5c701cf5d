"""``conveyor workers [list]``, ``conveyor workers quiet ID…``, ``conveyor workers stop ID…``."""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import add_source_args, emit, open_backend, table
from conveyor.cli.terminal import safe, say
from conveyor.errors import ConveyorError
from conveyor.views.records import fmt_duration, fmt_time, workers_view


def register(sub: Any) -> None:
    """Add ``workers``."""
    parser = sub.add_parser(
        "workers", help="live workers; 'quiet ID' stops fetching, 'stop ID' shuts down",
        description="Without an action, list every live worker with what each slot runs.",
    )
    parser.add_argument("action", nargs="?", choices=("list", "quiet", "stop"), default="list")
    parser.add_argument("worker_ids", nargs="*", metavar="ID")
    add_source_args(parser)
    parser.set_defaults(func=cmd_workers)


def cmd_workers(args: argparse.Namespace) -> int:
    """List workers, or send quiet/stop to the given ones."""
    if args.action == "list":
        if args.worker_ids:
            raise ConveyorError("'workers list' takes no ids; did you mean 'workers quiet ID'?")
        with open_backend(args) as backend:
            view = workers_view(backend)
        return emit(args, view, format_workers)
    if not args.worker_ids:
        raise ConveyorError(f"'workers {args.action}' needs at least one worker id")
    with open_backend(args) as backend:
        known = {w.id for w in backend.workers()}
        unknown = [w for w in args.worker_ids if w not in known]
        if unknown:
            raise ConveyorError(f"no live worker with id {', '.join(unknown)}")
        for worker_id in args.worker_ids:
            backend.command_worker(worker_id, args.action)
            say(f"sent {args.action} to {worker_id}; it acts at its next heartbeat")
    return 0


def format_workers(view: list[dict[str, Any]]) -> str:
    """The text form of ``workers_view``: a table, then one line per busy slot."""
    if not view:
        return "no live workers"
    rows = [(w["id"], w["hostname"], w["pid"], ",".join(w["queues"]),
             f"{w['busy_count']}/{w['concurrency']}", w["status"], fmt_time(w["started_at"]))
            for w in view]
    lines = [table(("ID", "HOST", "PID", "QUEUES", "BUSY", "STATUS", "STARTED"), rows)]
    for w in view:
        for slot in w["busy"]:
            lines.append(f"  {safe(w['id'])}: {safe(slot['name'])} {safe(slot['job_id'])} on "
                         f"{safe(slot['queue'])}, "
                         f"running {fmt_duration(slot['running_for'])} "
                         f"(since {fmt_time(slot['started_at'])})")
    return "\n".join(lines)
