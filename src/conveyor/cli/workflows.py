"""``conveyor workflow list|show ID|watch ID|cancel ID`` (docs/workflows.md).

A workflow is a batch of kind ``workflow``: its counters, progress and cancel are a batch's
(``cli/batches.py``); ``show`` adds the table of its nodes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from conveyor.cli.batches import format_batch, watch
from conveyor.cli.common import add_source_args, emit, open_backend, print_json, short, table
from conveyor.cli.terminal import safe, say
from conveyor.storage.base import Inspector
from conveyor.views.records import (
    batch_state,
    batch_view,
    fmt_time,
    get_batch,
    last_message,
)

NODES_SHOWN = 500  # nodes listed by ``show`` (every one is in ``conveyor jobs list --batch``)


def register(sub: Any) -> None:
    """Add ``workflow``."""
    wf = sub.add_parser("workflow", help="list, show, watch or cancel workflows")
    wsub = wf.add_subparsers(dest="workflow_command", required=True, metavar="ACTION")
    lst = wsub.add_parser("list", help="workflows, newest first")
    lst.add_argument("--offset", type=int, default=0)
    lst.add_argument("--limit", type=int, default=20)
    add_source_args(lst)
    lst.set_defaults(func=cmd_list)
    show = wsub.add_parser("show", help="counts, timings and every node's state")
    show.add_argument("workflow_id")
    add_source_args(show)
    show.set_defaults(func=cmd_show)
    watch_p = wsub.add_parser("watch", help="live progress until the workflow is complete")
    watch_p.add_argument("workflow_id")
    watch_p.add_argument("--interval", type=float, default=0.5, help="seconds between redraws")
    watch_p.add_argument("--timeout", type=float, default=None,
                         help="give up (exit 1) after this many seconds")
    add_source_args(watch_p, json_flag=False)
    watch_p.set_defaults(func=cmd_watch)
    cancel = wsub.add_parser("cancel", help="cancel every waiting node, stop running ones")
    cancel.add_argument("workflow_id")
    add_source_args(cancel, json_flag=False)
    cancel.set_defaults(func=cmd_cancel)


def cmd_list(args: argparse.Namespace) -> int:
    """One line per workflow."""
    with open_backend(args) as backend:
        now = backend.now()
        found = [b.as_dict(now) for b in backend.list_batches(args.offset, args.limit,
                                                              kind="workflow")]
    if args.json:
        print_json(found)
        return 0
    if not found:
        say("no workflows")
        return 0
    say(table(
        ("ID", "DESCRIPTION", "DONE", "NODES", "WAITING", "FAILED", "STATE", "CREATED"),
        [(w["id"], short(w["description"] or "", 40), w["done"], w["total"],
          w["counts"]["waiting"], w["counts"]["failed"] + w["counts"]["dead"], batch_state(w),
          fmt_time(w["created_at"])) for w in found],
    ))
    return 0


def workflow_view(inspector: Inspector, workflow_id: str) -> dict[str, Any]:
    """``batch_view`` of the workflow plus ``nodes``: id, name, state, message of each (the
    first ``NODES_SHOWN``, in enqueue order)."""
    view = batch_view(inspector, workflow_id, kind="workflow")
    records = inspector.list_jobs(batch_id=workflow_id, limit=NODES_SHOWN, with_events=False)
    records.sort(key=lambda r: r.id)
    view["nodes"] = [{"id": r.id, "name": r.name, "state": r.state.value,
                      "message": last_message(r)} for r in records]
    return view


def format_workflow(view: dict[str, Any]) -> str:
    """The text form of ``workflow_view``."""
    head = format_batch(view).replace("batch ", "workflow ", 1)
    rows = [(n["id"], short(n["name"], 40), n["state"], short(n["message"] or "", 60))
            for n in view["nodes"]]
    more = view["total"] - len(rows)
    tail = f"\n… and {more} more: conveyor jobs list --batch {safe(view['id'])}" if more > 0 \
        else ""
    return f"{head}\nnodes:\n{table(('ID', 'JOB', 'STATE', 'MESSAGE'), rows)}{tail}"


def cmd_show(args: argparse.Namespace) -> int:
    """A workflow's counts, timings and nodes."""
    with open_backend(args) as backend:
        view = workflow_view(backend, args.workflow_id)
    return emit(args, view, format_workflow)


def cmd_watch(args: argparse.Namespace) -> int:
    """Redraw the progress line until the workflow is complete, then print its nodes."""
    with open_backend(args) as backend:
        get_batch(backend, args.workflow_id, kind="workflow")
        complete = watch(backend, args.workflow_id, sys.stdout, args.interval, args.timeout)
        say(format_workflow(workflow_view(backend, args.workflow_id)))
    return 0 if complete else 1


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a workflow's waiting and pending nodes and ask its running ones to stop."""
    with open_backend(args) as backend:
        get_batch(backend, args.workflow_id, kind="workflow")
        count = backend.cancel_batch(args.workflow_id)
    say(f"cancelled workflow {args.workflow_id}: {count} node(s) cancelled or asked to stop")
    return 0


__all__ = ["format_workflow", "register", "workflow_view"]
