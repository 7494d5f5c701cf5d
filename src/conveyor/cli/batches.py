"""``conveyor batch list|show ID|watch ID|cancel ID``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from conveyor.cli.common import (
    add_source_args,
    emit,
    open_backend,
    print_json,
    short,
    table,
)
from conveyor.cli.terminal import safe, say
from conveyor.core.job import SHOWN_STATES
from conveyor.storage import Backend
from conveyor.views.failures import (
    failure_states,
    failures,
    failures_csv,
    failures_json,
    retry_failures,
)
from conveyor.views.records import batch_state, batch_view, fmt_duration, fmt_time, get_batch

BAR_WIDTH = 30


def register(sub: Any) -> None:
    """Add ``batch``."""
    batch = sub.add_parser("batch", help="list, show, watch, cancel batches; retry or export "
                           "their failures")
    bsub = batch.add_subparsers(dest="batch_command", required=True, metavar="ACTION")
    lst = bsub.add_parser("list", help="batches, newest first")
    lst.add_argument("--offset", type=int, default=0)
    lst.add_argument("--limit", type=int, default=20)
    add_source_args(lst)
    lst.set_defaults(func=cmd_list)
    show = bsub.add_parser("show", help="counts, timings, ETA and failures of a batch")
    show.add_argument("batch_id")
    add_source_args(show)
    show.set_defaults(func=cmd_show)
    watch = bsub.add_parser("watch", help="live progress until the batch is complete")
    watch.add_argument("batch_id")
    watch.add_argument("--interval", type=float, default=0.5, help="seconds between redraws")
    watch.add_argument("--timeout", type=float, default=None,
                       help="give up (exit 1) after this many seconds")
    add_source_args(watch, json_flag=False)
    watch.set_defaults(func=cmd_watch)
    cancel = bsub.add_parser("cancel", help="cancel every job of a batch that has not finished")
    cancel.add_argument("batch_id")
    add_source_args(cancel, json_flag=False)
    cancel.set_defaults(func=cmd_cancel)
    retry = bsub.add_parser("retry", help="retry a batch's failed and/or dead jobs")
    retry.add_argument("batch_id")
    retry.add_argument("--state", choices=("failed", "dead", "all"), default="all",
                       help="which failures to retry (default: all)")
    add_source_args(retry, json_flag=False)
    retry.set_defaults(func=cmd_retry)
    export = bsub.add_parser("failures", help="a batch's failed and dead jobs as CSV or JSON "
                             "(id, name, state, args, kwargs, reason, attempts, errors)")
    export.add_argument("batch_id")
    export.add_argument("--state", choices=("failed", "dead", "all"), default="all")
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    add_source_args(export, json_flag=False)
    export.set_defaults(func=cmd_failures)


def cmd_list(args: argparse.Namespace) -> int:
    """One line per batch."""
    with open_backend(args) as backend:
        now = backend.now()
        batches = [b.as_dict(now) for b in backend.list_batches(args.offset, args.limit)]
    if args.json:
        print_json(batches)
        return 0
    if not batches:
        say("no batches")
        return 0
    say(table(
        ("ID", "DESCRIPTION", "DONE", "TOTAL", "%", "FAILED", "STATE", "CREATED"),
        [(b["id"], short(b["description"] or "", 40), b["done"], b["total"], b["percent"],
          b["counts"]["failed"] + b["counts"]["dead"], batch_state(b), fmt_time(b["created_at"]))
         for b in batches],
    ))
    return 0



def cmd_show(args: argparse.Namespace) -> int:
    """A batch's counts, timings, ETA and failures."""
    with open_backend(args) as backend:
        view = batch_view(backend, args.batch_id)
    return emit(args, view, format_batch)


def format_batch(view: dict[str, Any]) -> str:
    """The text form of ``batch_view``."""
    lines = [f"batch {safe(view['id'])}  {safe(view['description'] or '')}".rstrip(),
             f"  {progress_line(view)}",
             f"  state       {batch_state(view)}",
             f"  created     {fmt_time(view['created_at'])}",
             f"  started     {fmt_time(view['started_at'])}",
             f"  finished    {fmt_time(view['finished_at'])}",
             f"  elapsed     {fmt_duration(view['elapsed'])}",
             f"  eta         {fmt_duration(view['eta'])}{_retry_note(view)}"]
    if view["callbacks_fired"]:
        lines.append(f"  callbacks   {safe(', '.join(view['callbacks_fired']))}")
    if view["failures"]:
        lines.append("failures (dead first, then failed; newest first):")
        lines.extend(f"  {safe(f['id'])} [{f['state']}] {safe(f['message'] or '(no message)')}"
                     for f in view["failures"])
        more = view["counts"]["failed"] + view["counts"]["dead"] - len(view["failures"])
        if more > 0:
            lines.append(f"  … and {more} more: conveyor jobs list --batch {safe(view['id'])} "
                         "--state failed (or dead)")
    return "\n".join(lines)


def _retry_note(view: dict[str, Any]) -> str:
    until = view.get("retries_until")
    if until is None:
        return ""
    return (f" (waiting for {view['counts']['retrying']} retries until {fmt_time(until)})")


def progress_line(view: dict[str, Any]) -> str:
    """``[#####-----]  40.0%  4/10  pending 6 · succeeded 3 · failed 1``."""
    filled = int(BAR_WIDTH * view["percent"] / 100)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    counts = " · ".join(f"{s.value} {view['counts'][s.value]}" for s in SHOWN_STATES
                        if view["counts"][s.value])
    eta = f"  eta {fmt_duration(view['eta'])}" if view["eta"] is not None else ""
    return (f"[{bar}] {view['percent']:5.1f}%  {view['done']}/{view['total']}  "
            f"{counts or 'no jobs yet'}{eta}")


def cmd_watch(args: argparse.Namespace) -> int:
    """Redraw the progress line until the batch is complete, then print the summary."""
    with open_backend(args) as backend:
        complete = watch(backend, args.batch_id, sys.stdout, args.interval, args.timeout)
        say(format_batch(batch_view(backend, args.batch_id)))
    return 0 if complete else 1


def watch(backend: Backend, batch_id: str, out: TextIO, interval: float,
          timeout: float | None) -> bool:
    """Draw progress in place on a TTY, or one plain line per change of the counts otherwise
    (not of the ETA, which moves with the clock); between
    redraws wait on the store's ``batch_finished``, so the end shows at once, not at the next
    redraw.

    Returns True once the batch is complete, False when ``timeout`` passes first.
    """
    tty = out.isatty()
    started = time.monotonic()
    last: tuple[Any, ...] = ()
    with backend.batch_finished(batch_id) as waiter:
        while True:
            view = batch_view(backend, batch_id, failures=0)
            line = progress_line(view)
            # A change is a change of the counts; the ETA moves with the clock alone, so a
            # pipe would otherwise get a line per redraw.
            seen = (view["done"], view["total"], sorted(view["counts"].items()),
                    view["complete"])
            if tty:
                out.write("\r\x1b[2K" + line)
            elif seen != last:
                out.write(line + "\n")
            out.flush()
            last = seen
            if view["complete"]:
                out.write("\n" if tty else "")
                return True
            if timeout is not None and time.monotonic() - started >= timeout:
                out.write("\ntimed out before the batch completed\n")
                return False
            waiter.wait(interval)


def cmd_retry(args: argparse.Namespace) -> int:
    """Retry a batch's failures."""
    with open_backend(args) as backend:
        done = retry_failures(backend, args.batch_id, failure_states(args.state))
    which = "failed and dead" if args.state == "all" else args.state
    say(done.summary(which, args.batch_id))
    return 0


def cmd_failures(args: argparse.Namespace) -> int:
    """Write a batch's failures as CSV or JSON."""
    write = failures_csv if args.format == "csv" else failures_json
    with open_backend(args) as backend:
        chunks = write(failures(backend, args.batch_id, failure_states(args.state)))
        if args.output == "-":
            for chunk in chunks:
                sys.stdout.buffer.write(chunk.encode("utf-8", "backslashreplace"))
            sys.stdout.flush()
        else:
            with open(args.output, "wb") as out:
                for chunk in chunks:
                    out.write(chunk.encode("utf-8", "backslashreplace"))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a batch's waiting jobs and ask its running ones to stop."""
    with open_backend(args) as backend:
        get_batch(backend, args.batch_id)
        count = backend.cancel_batch(args.batch_id)
    say(f"cancelled batch {args.batch_id}: {count} job(s) cancelled or asked to stop")
    return 0
