"""``conveyor enqueue NAME --args '[…]' [--kwargs '{…}'] [--queue Q] [--in SECONDS]``.

The JSON is checked as any enqueue is: against the job's signature, and its typed parameters
(a pydantic model, a dataclass, a TypedDict) validated from it (docs/job-data.md)."""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.app import Conveyor
from conveyor.cli.common import (
    add_source_args,
    parse_json_arg,
    print_json,
    source_of,
)
from conveyor.cli.source import announce
from conveyor.cli.terminal import say
from conveyor.errors import ConveyorError


def register(sub: Any) -> None:
    """Add ``enqueue``."""
    parser = sub.add_parser(
        "enqueue", help="enqueue a job by name (checked against --app; or --force)",
        description="With an app (--app, CONVEYOR_APP or pyproject.toml), NAME must be "
                    "registered in it and its options apply; with --force, any NAME is "
                    "enqueued as given. --url wins over the app's URL.")
    parser.add_argument("name", help="registered job name, e.g. myapp.send_welcome")
    parser.add_argument("--args", default="[]", help="JSON array of positional arguments")
    parser.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments")
    parser.add_argument("--queue", default=None, help="queue (default: the job's own)")
    parser.add_argument("--in", dest="delay", type=float, default=None, metavar="SECONDS",
                        help="run after this many seconds")
    parser.add_argument("--force", action="store_true",
                        help="enqueue even though NAME is not registered (or there is no --app)")
    add_source_args(parser)
    parser.set_defaults(func=cmd_enqueue)


def cmd_enqueue(args: argparse.Namespace) -> int:
    """Validate the arguments and enqueue one job."""
    job_args = parse_json_arg(args.args, "--args", list)
    job_kwargs = parse_json_arg(args.kwargs, "--kwargs", dict)
    source = source_of(args, need_app=True)
    app = source.app
    if app is not None:
        if app.registry.get(args.name) is None and not args.force:
            known = ", ".join(sorted(app.registry.names())) or "none"
            raise ConveyorError(f"no job named {args.name!r} in {args.app or 'the app'} "
                                f"(registered: {known}); use --force to enqueue it anyway")
        if source.url != app.url:  # --url wins over the app's URL, as for the worker
            app.close()
            app.url = source.url
    elif not args.force:
        raise ConveyorError("enqueue needs an app (--app MODULE:ATTR, CONVEYOR_APP or "
                            "[tool.conveyor] app in pyproject.toml) so the job name can be "
                            "checked, or --force to enqueue by name on the store alone")
    else:
        app = Conveyor(source.url)
    announce(source, args)
    try:
        return _enqueue(app, args, job_args, job_kwargs)
    finally:
        app.close()


def _enqueue(app: Conveyor, args: argparse.Namespace, job_args: list[Any],
             job_kwargs: dict[str, Any]) -> int:
    options: dict[str, Any] = {"queue": args.queue} if args.queue else {}
    try:
        ref = app.enqueue(args.name, job_args, job_kwargs, delay=args.delay, **options)
    except TypeError as exc:  # the JSON does not fit the job's signature or typed parameters
        raise ConveyorError(str(exc)) from None
    if ref is None:
        say("a client middleware stopped the enqueue")
        return 1
    if args.json:
        print_json({"id": ref.id, "created": ref.created})
    else:
        say(ref.id if ref.created else f"{ref.id} (a unique job already existed)")
    return 0
