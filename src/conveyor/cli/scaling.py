"""``conveyor scale-hint``: how many workers each queue can use now (views/scaling.py)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from conveyor.cli.common import add_source_args, emit, open_backend, table
from conveyor.views.scaling import DEFAULT_LATENCY_TARGET, scale_view


def register(sub: Any) -> None:
    """Add ``scale-hint``."""
    parser = sub.add_parser(
        "scale-hint", help="workers each queue can use now, flow-control limits counted")
    add_source_args(parser)
    parser.add_argument("--queue", action="append", default=None,
                        help="only this queue (repeat for several; default: every queue)")
    parser.add_argument("-c", "--slots-per-worker", type=_slots, default=None,
                        help="slots of one worker, its -c (default: the live workers' mean, "
                             "else 10)")
    parser.add_argument("--latency-target", type=_seconds, default=DEFAULT_LATENCY_TARGET,
                        help="seconds a ready job may wait to start (default %(default)g; "
                             "0: a slot for every ready job)")
    parser.set_defaults(func=cmd_scale_hint)


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r:.40}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be seconds >= 0, not {text!r:.40}")
    return value


def cmd_scale_hint(args: argparse.Namespace) -> int:
    """Print one row per queue: the workers and slots its work can use, and why."""
    with open_backend(args) as backend:
        view = scale_view(backend, args.slots_per_worker, args.latency_target, args.queue)
    return emit(args, view, format_hints)


def format_hints(view: dict[str, Any]) -> str:
    """The text form: a table, then the sum (what a fleet serving every queue would use)."""
    rows = [(q["queue"], q["workers"], q["slots"], q["ready"], q["running"], q["reason"])
            for q in view["queues"].values()]
    if not rows:
        return "no queue"
    return (table(("QUEUE", "WORKERS", "SLOTS", "READY", "RUNNING", "WHY"), rows)
            + f"\nworkers for every queue listed: {view['total']}")
