"""``conveyor check-compat [APP]``: before a deploy, the stored jobs the new code cannot run
(views/compat.py); exit 1 when there are any (docs/durable.md, "Safe deploys")."""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import add_source_args, print_json, source_of
from conveyor.cli.source import announce
from conveyor.cli.terminal import safe, say
from conveyor.errors import ConveyorError
from conveyor.views.compat import compat_view


def register(sub: Any) -> None:
    """Add ``check-compat``."""
    parser = sub.add_parser(
        "check-compat", help="list the stored jobs this code cannot run (exit 1 if any)")
    parser.add_argument("target", nargs="?", default=None, metavar="APP",
                        help="the new code's app, MODULE:ATTR (default: --app, "
                             "$CONVEYOR_APP, [tool.conveyor] app)")
    add_source_args(parser)
    parser.set_defaults(func=cmd_check_compat)


def cmd_check_compat(args: argparse.Namespace) -> int:
    """Print one line per problem (or JSON); 1 when the code cannot run some stored job."""
    if args.target:
        args.app = args.target
    source = source_of(args, need_app=True)
    if source.app is None:
        raise ConveyorError("check-compat needs the code to check: conveyor check-compat "
                            "MODULE:ATTR (or --app, CONVEYOR_APP, [tool.conveyor] app)")
    app = source.app
    if source.url != app.url:  # --url wins over the app's URL
        app.close()
        app.url = source.url
    announce(source, args)
    try:
        view = compat_view(app.storage, app.registry)
    finally:
        app.close()
    if args.json:
        print_json(view)
    else:
        say(format_compat(view))
    return 1 if view["problems"] else 0


def format_compat(view: dict[str, Any]) -> str:
    """One line per problem, then a count."""
    lines = []
    for p in view["problems"]:
        version = "" if p["version"] is None else f" version {p['version']}"
        states = ", ".join(f"{n} {s}" for s, n in sorted(p["states"].items()))
        lines.append(safe(f"{p['name']}{version}: {p['count']} job(s) ({states}), e.g. "
                          f"{', '.join(p['examples'])}: {p['reason']}"))
    checked = view["checked"]
    if not lines:
        return f"every stored job can run on this code ({checked} unfinished checked)"
    total = sum(p["count"] for p in view["problems"])
    return "\n".join([*lines, f"{total} of {checked} unfinished job(s) cannot run on this code"])
