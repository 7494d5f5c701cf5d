"""``conveyor periodic list|add|change|pause|resume|remove|reset|history``: the periodic
schedules in the store, changed at run time (docs/operations.md, "Schedules at run time").

Every change is recorded with who made it (``cli <user>@<host>``) and shown by ``history``.
A schedule declared in code and edited here keeps the edit, across restarts, until ``reset``
or a deploy that declares something new for it: ``list`` marks it ``code, edited`` and says
what the code declares.
"""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import (
    add_pause_resume,
    add_source_args,
    emit,
    open_backend,
    parse_json_arg,
    source_of,
    table,
)
from conveyor.cli.terminal import say
from conveyor.client.periodic import check_definition
from conveyor.client.schedules import who
from conveyor.core.text import check_name
from conveyor.errors import ConveyorError, ScheduleNotFound
from conveyor.storage.schedule_records import ScheduleInfo
from conveyor.views.records import fmt_time, get_schedule, periodic_view, schedule_changes_view


def register(sub: Any) -> None:
    """Add ``periodic`` and its actions."""
    periodic = sub.add_parser("periodic", help="periodic schedules: list, add, change, pause, "
                                               "resume, remove, reset, history")
    psub = periodic.add_subparsers(dest="periodic_command", required=True, metavar="ACTION")
    lst = psub.add_parser("list", help="every schedule with its last and next tick")
    add_source_args(lst)
    lst.set_defaults(func=cmd_list)
    add = psub.add_parser("add", help="add a schedule at run time (every worker whose app "
                                      "defines JOB enqueues its ticks)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("cron", metavar="CRON", help="e.g. '*/5 * * * *'")
    add.add_argument("job", metavar="JOB", help="the job's name, as workers register it")
    _definition_args(add)
    add.add_argument("--paused", action="store_true", help="store it paused")
    add_source_args(add, json_flag=False)
    add.set_defaults(func=cmd_add)
    change = psub.add_parser("change", help="change a schedule's definition (an edit of one "
                                            "the code declares stands until reset or a new "
                                            "declaration)")
    change.add_argument("name", metavar="NAME")
    change.add_argument("--cron", default=None)
    change.add_argument("--job", default=None, metavar="JOB")
    _definition_args(change)
    add_source_args(change, json_flag=False)
    change.set_defaults(func=cmd_change)
    add_pause_resume(psub, ("stop every worker enqueueing a schedule's ticks",
                            "let workers enqueue a paused schedule again"),
                     cmd_pause_resume, dest="names", metavar="NAME")
    for action, helptext, func in (
            ("remove", "remove schedules (one the code declares comes back at the next "
                       "worker start: pause it instead)", cmd_remove),
            ("reset", "drop an edit: the code's definition is in force again", cmd_reset)):
        parser = psub.add_parser(action, help=helptext)
        parser.add_argument("names", nargs="+", metavar="NAME")
        add_source_args(parser, json_flag=False)
        parser.set_defaults(func=func)
    history = psub.add_parser("history", help="who changed which schedule, and when")
    history.add_argument("name", nargs="?", default=None, metavar="NAME")
    history.add_argument("--limit", type=int, default=50)
    add_source_args(history)
    history.set_defaults(func=cmd_history)


def _definition_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", default=None, help="where ticks go (add: the job's queue "
                                                      "when the app is known, else default)")
    parser.add_argument("--tz", default=None, help="IANA time zone (add: UTC)")
    parser.add_argument("--args", default=None, metavar="JSON", help="a JSON array")
    parser.add_argument("--kwargs", default=None, metavar="JSON", help="a JSON object")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The definition fields given on the command line, parsed and checked."""
    fields: dict[str, Any] = {}
    for key, flag in (("cron", "cron"), ("tz", "tz"), ("job_name", "job"), ("queue", "queue")):
        value = getattr(args, flag, None)
        if value is not None:
            fields[key] = value
    if args.args is not None:
        fields["args"] = parse_json_arg(args.args, "--args", list)
    if args.kwargs is not None:
        fields["kwargs"] = parse_json_arg(args.kwargs, "--kwargs", dict)
    try:
        return check_definition(fields)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None


def cmd_list(args: argparse.Namespace) -> int:
    """Print one row per schedule."""
    with open_backend(args) as backend:
        view = periodic_view(backend)
    return emit(args, view, format_list)


def format_list(view: list[dict[str, Any]]) -> str:
    """The text form of ``periodic_view``."""
    if not view:
        return ("no periodic schedules yet (workers register the code's when they start; "
                "`conveyor periodic add` adds one)")
    rows = [(s["name"], s["cron"], s["tz"], s["job_name"],
             s["queue"] if s["queue_listened"] else f"{s['queue']} (!)",
             "yes" if s["paused"] else "no", s["source"], fmt_time(s["last_tick"]),
             fmt_time(s["next_tick"])) for s in view]
    text = table(("NAME", "CRON", "TZ", "JOB", "QUEUE", "PAUSED", "FROM", "LAST TICK (UTC)",
                  "NEXT TICK (UTC)"), rows)
    for s in view:
        if s["code"] is not None:
            code = s["code"]
            text += (f"\n{s['name']}: edited at run time; the code declares cron "
                     f"{code.get('cron')!r} job {code.get('job_name')!r} queue "
                     f"{code.get('queue')!r} args {code.get('args')} kwargs "
                     f"{code.get('kwargs')}; the edit stands until `conveyor periodic reset "
                     f"{s['name']}` or a deploy declares something new for it")
    unheard = sorted({s["queue"] for s in view if not s["queue_listened"]})
    if unheard:
        text += ("\n\n(!) no running worker listens to " + ", ".join(unheard)
                 + ": ticks wait there until one does (conveyor worker … "
                 + " ".join(f"-q {q}" for q in unheard) + ")")
    return text


def cmd_add(args: argparse.Namespace) -> int:
    """Store a new schedule."""
    fields = _fields(args)
    if "queue" not in fields:  # the job's own queue when the app is known
        app = source_of(args).app
        opts = app.registry.options(fields["job_name"]) if app is not None else None
        fields["queue"] = opts.queue if opts is not None else "default"
    fields.setdefault("tz", "UTC")
    fields.setdefault("args", "[]")
    fields.setdefault("kwargs", "{}")
    check_name("schedule name", args.name)
    info = ScheduleInfo(args.name, fields["cron"], fields["tz"], fields["job_name"],
                        fields["queue"], paused=args.paused, args=fields["args"],
                        kwargs=fields["kwargs"])
    with open_backend(args) as backend:
        backend.add_schedule(info, who("cli"))
    say(f"added {args.name}: {info.cron} ({info.tz}) -> {info.job_name} on {info.queue}"
        + (", paused" if args.paused else ""))
    return 0


def cmd_change(args: argparse.Namespace) -> int:
    """Change fields of one schedule's definition."""
    fields = _fields(args)
    if not fields:
        raise ConveyorError("nothing to change: give --cron, --job, --queue, --tz, --args or "
                            "--kwargs")
    with open_backend(args) as backend:
        info = backend.change_schedule(args.name, fields, who("cli"))
    say(f"changed {args.name}: {info.cron} ({info.tz}) -> {info.job_name} on {info.queue}"
        + (" (edited: stands over the code's definition until reset or a new declaration)"
           if info.edited else ""))
    return 0


def cmd_pause_resume(args: argparse.Namespace) -> int:
    """Pause or resume each named schedule; an unknown name is an error."""
    with open_backend(args) as backend:
        for name in args.names:
            get_schedule(backend, name)
        change = backend.pause_schedule if args.action == "pause" else backend.resume_schedule
        for name in args.names:
            change(name, who("cli"))
            say(f"{args.action}d {name}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Remove each named schedule; an unknown name is an error."""
    with open_backend(args) as backend:
        for name in args.names:
            get_schedule(backend, name)
        for name in args.names:
            removed = backend.remove_schedule(name, who("cli"))
            if removed is None:
                raise ScheduleNotFound(f"no periodic schedule named {name!r}")
            note = ("; the code declares it, so the next worker to start adds it again "
                    "(pause it to stop it)") if removed.origin == "code" else ""
            say(f"removed {name}{note}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    """Put the code's definition of each named schedule back in force."""
    with open_backend(args) as backend:
        for name in args.names:
            try:
                info = backend.reset_schedule(name, who("cli"))
            except ValueError as exc:
                raise ConveyorError(str(exc)) from None
            say(f"reset {name}: {info.cron} ({info.tz}) -> {info.job_name} on {info.queue}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Print the audit trail, newest first."""
    with open_backend(args) as backend:
        view = schedule_changes_view(backend, args.name, max(1, args.limit))
    return emit(args, view, format_history)


def format_history(view: list[dict[str, Any]]) -> str:
    """The text form of ``schedule_changes_view``."""
    if not view:
        return "no schedule changes recorded"
    return table(("WHEN (UTC)", "SCHEDULE", "ACTION", "BY", "WHAT"),
                 [(fmt_time(c["at"]), c["name"], c["action"], c["by"], c["detail"])
                  for c in view])
