"""``conveyor breakers [list]`` and ``conveyor breakers close KEY``."""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import add_source_args, emit, open_backend, table
from conveyor.cli.terminal import say
from conveyor.errors import ConveyorError
from conveyor.views.breakers import breakers_view, close_breaker
from conveyor.views.records import fmt_time


def register(sub: Any) -> None:
    """Add ``breakers``."""
    parser = sub.add_parser(
        "breakers", help="circuit breakers; 'close KEY' closes one by hand",
        description="Without an action, list the open and half-open breakers, then the "
                    "closed ones with errors in their window.",
    )
    parser.add_argument("action", nargs="?", choices=("list", "close"), default="list")
    parser.add_argument("key", nargs="?", metavar="KEY")
    add_source_args(parser)
    parser.set_defaults(func=cmd_breakers)


def cmd_breakers(args: argparse.Namespace) -> int:
    """List the breakers, or close one."""
    if args.action == "list":
        if args.key is not None:
            raise ConveyorError("'breakers list' takes no key; did you mean "
                                "'breakers close KEY'?")
        with open_backend(args) as backend:
            view = breakers_view(backend)
        return emit(args, view, format_breakers)
    if not args.key:
        raise ConveyorError("'breakers close' needs the key of the breaker")
    with open_backend(args) as backend:
        closed, message = close_breaker(backend, args.key)
    say(message)
    return 0 if closed else 1  # as every action that changes nothing


def format_breakers(view: list[dict[str, Any]]) -> str:
    """The text form of ``breakers_view``: one row per breaker."""
    if not view:
        return "no breakers open, none with recent errors"
    queues = any(b["queue"] for b in view)
    rows = [(b["key"], *((b["queue"] or "-",) if queues else ()), b["state"], b["failures"],
             fmt_time(b["opened_at"]), fmt_time(b["probe_at"]), b["trips"], b["reason"] or "-")
            for b in view]
    headers = ("KEY", *(("QUEUE",) if queues else ()), "STATE", "ERRORS", "OPENED",
               "NEXT PROBE", "TRIPS", "REASON")
    return table(headers, rows)
