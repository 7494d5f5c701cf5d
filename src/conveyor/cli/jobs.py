"""``conveyor jobs …``, ``dead …``, ``retrying list`` and ``scheduled list``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from conveyor.cli.common import (
    add_source_args,
    brokered,
    emit,
    job_data,
    open_backend,
    print_json,
    short,
    table,
)
from conveyor.cli.terminal import safe, say
from conveyor.client.explain import explain
from conveyor.client.payloads import JobData
from conveyor.core.job import JobRecord, JobState
from conveyor.errors import ConveyorError
from conveyor.views.records import (
    fmt_duration,
    fmt_time,
    job_detail,
    job_row,
    parse_state,
)
from conveyor.views.reseal import reseal_jobs
from conveyor.views.search import BUDGET, SCAN, sealed_note, search_jobs


def register(sub: Any) -> None:
    """Add ``jobs``, ``dead``, ``retrying`` and ``scheduled``."""
    jobs = sub.add_parser("jobs", help="list, show, retry, delete, kill or cancel jobs")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    lst = jsub.add_parser("list", help="jobs filtered by queue, state and batch")
    lst.add_argument("--state", default=None, help="scheduled, pending, active, retrying, "
                     "succeeded, failed, dead or cancelled (default: all)")
    _list_args(lst)
    lst.add_argument("--batch", default=None, help="only jobs of this batch")
    lst.set_defaults(func=cmd_list, fixed_state=None)
    show = jsub.add_parser("show", help="a job's args, options, events and errors")
    show.add_argument("job_id")
    add_source_args(show)
    show.set_defaults(func=cmd_show)
    why = jsub.add_parser("explain", help="why a job waits: each gate holding it back, "
                          "naming its holder or its time (docs/scheduling.md)")
    why.add_argument("job_id")
    add_source_args(why)
    why.set_defaults(func=cmd_explain)
    for action, helptext in (("retry", "dead/failed/cancelled/retrying jobs → pending now"),
                             ("delete", "delete jobs that are not active"),
                             ("kill", "waiting jobs → dead")):
        p = jsub.add_parser(action, help=helptext)
        p.add_argument("job_ids", nargs="+", metavar="ID")
        add_source_args(p, json_flag=False)
        p.set_defaults(func=cmd_action, action=action)

    cancel = jsub.add_parser("cancel", help="waiting jobs → cancelled; running jobs are asked "
                             "to stop (they see ctx.cancelled)")
    cancel.add_argument("job_ids", nargs="+", metavar="ID")
    add_source_args(cancel, json_flag=False)
    cancel.set_defaults(func=cmd_cancel)

    again = jsub.add_parser("reencrypt", help="seal stored jobs' data again with the newest "
                            "key (after a key rotation; docs/job-data.md)")
    again.add_argument("--state", default=None, help="only jobs in this state")
    again.add_argument("--queue", default=None, help="only this queue")
    add_source_args(again)
    again.set_defaults(func=cmd_reencrypt)

    dead = sub.add_parser("dead", help="the dead set: list, retry-all, clear")
    dsub = dead.add_subparsers(dest="dead_command", required=True, metavar="ACTION")
    _state_list(dsub, JobState.DEAD)
    for action, helptext in (("retry-all", "retry every dead job"),
                             ("clear", "delete every dead job")):
        p = dsub.add_parser(action, help=helptext)
        p.add_argument("--queue", default=None, help="only this queue")
        add_source_args(p, json_flag=False)
        p.set_defaults(func=cmd_dead_bulk, action=action)

    for state in (JobState.RETRYING, JobState.SCHEDULED):
        parser = sub.add_parser(state.value, help=f"{state.value} jobs")
        _state_list(parser.add_subparsers(dest=f"{state.value}_command", required=True,
                                          metavar="ACTION"), state)


def _list_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", default=None, help="only this queue")
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--newest", action="store_true", help="newest first")
    parser.add_argument("--name", default=None, help="only jobs of this name")
    parser.add_argument("--search", default="", metavar="TEXT",
                        help="a job id, or text in the arguments or the last message (reads "
                             f"at most the newest {SCAN:,} jobs of the selection)")
    add_source_args(parser)


def _state_list(sub: Any, state: JobState) -> None:
    parser = sub.add_parser("list", help=f"{state.value} jobs, oldest first")
    _list_args(parser)
    parser.set_defaults(func=cmd_list, fixed_state=state, state=None, batch=None)


def cmd_list(args: argparse.Namespace) -> int:
    """List jobs, paged."""
    try:
        state = args.fixed_state or parse_state(args.state)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None
    with open_backend(args) as backend:
        if args.name or args.search:
            found = search_jobs(backend, args.search, name=args.name, state=state,
                                queue=args.queue, limit=args.limit)
            jobs, total = found.jobs, len(found.jobs)
            if not found.complete and not args.json:
                stopped = f"stopped after {BUDGET:g} s: " if found.cut_short else ""
                say(f"({stopped}read the newest {found.scanned:,} jobs of the selection)")
            note = sealed_note(found)
            if note and not args.json:
                say(f"({note})")
        else:
            # a batch's running jobs have their latest message only in their events
            jobs = backend.list_jobs(state=state, queue=args.queue, batch_id=args.batch,
                                     offset=args.offset, limit=args.limit,
                                     with_events=args.batch is not None,
                                     newest_first=args.newest)
            total = backend.count_jobs(state=state, queue=args.queue, batch_id=args.batch)
    data = job_data(args)
    rows = [list_row(j, data) for j in jobs]
    if args.json:
        print_json({"total": total, "offset": args.offset, "jobs": rows})
        return 0
    if not rows:
        say("no jobs")
        return 0
    when = "run_at" if state in (JobState.SCHEDULED, JobState.RETRYING) else "created_at"
    say(format_list(rows, when))
    say(f"\n{args.offset + 1}-{args.offset + len(rows)} of {total}")
    return 0


def list_row(record: JobRecord, data: JobData | None = None) -> dict[str, Any]:
    """``job_row`` plus why the stored record could not be read, if it could not."""
    return {**job_row(record, data), "unreadable": record.unreadable}


def format_list(rows: list[dict[str, Any]], when: str) -> str:
    """The text table of ``jobs list``; an unreadable record says so in its MESSAGE."""
    return table(
        ("ID", "STATE", "QUEUE", "NAME", "ARGS", "TRY", when.upper().replace("_", " "), "MESSAGE"),
        [(r["id"], r["state"], r["queue"], r["name"], short(r["args"], 40), r["attempt"],
          fmt_time(r[when]), short(_unreadable_prefix(r) + (r["message"] or ""), 50))
         for r in rows],
    )


def _unreadable_prefix(view: dict[str, Any]) -> str:
    return f"UNREADABLE ({view['unreadable']}) " if view.get("unreadable") else ""


def cmd_show(args: argparse.Namespace) -> int:
    """Print a job in full."""
    with open_backend(args) as backend:
        view = job_detail(backend, args.job_id, job_data(args))
    return emit(args, view, format_job)


def format_job(view: dict[str, Any]) -> str:
    """The text form of ``job_view``; every value from job data is escaped onto its line."""
    flag = ", UNREADABLE" if view.get("unreadable") else ""
    lines = [f"job {safe(view['id'])}  {safe(view['name'])}  [{view['state']}{flag}]"]
    for key in ("unreadable", "queue", "batch_id", "attempt", "errors", "recoveries", "worker",
                "message"):
        if view.get(key) not in (None, ""):
            lines.append(f"  {key:<11} {safe(str(view[key]))}")
    if view.get("progress"):
        done, total = view["progress"]
        lines.append(f"  {'progress':<11} {done}/{total or '?'}")
    for key in ("created_at", "run_at", "started_at", "finished_at"):
        if view.get(key):
            lines.append(f"  {key:<11} {fmt_time(view[key])}")
    lines.append(f"  {'args':<11} {short(view['args'], 400)}")
    lines.append(f"  {'kwargs':<11} {short(view['kwargs'], 400)}")
    opts = {k: v for k, v in view["options"].items() if v not in (None, {})}
    lines.append(f"  {'options':<11} {short(opts, 400)}")
    if view.get("result") is not None:
        lines.append(f"  {'result':<11} {short(view['result'], 400)}")
    lines.extend(format_steps(view.get("durable")))
    lines.append("events:")
    for e in view.get("events") or []:
        text = safe(e["message"] or "")
        lines.append(f"  {fmt_time(e['ts'])}  {safe(e['kind']):<16} {safe(e['state'] or ''):<10} "
                     f"{'#' + str(e['attempt']) if e['attempt'] else '':<4} {text}".rstrip())
    for err in view["errors_detail"]:
        lines.append(f"error on attempt {err['attempt']}: {safe(err['type'] or '')}: "
                     f"{safe(err['message'] or '')}")
        lines.extend("    " + safe(line)
                     for line in (err["traceback"] or "").rstrip().split("\n"))
    return "\n".join(lines)


def cmd_explain(args: argparse.Namespace) -> int:
    """Print why a job waits, one gate a line; exit 1 for an unknown id."""
    with open_backend(args) as backend:
        found = explain(backend, args.job_id, broker=brokered(args))
    if found is None:
        raise ConveyorError(f"no job with id {args.job_id}")
    if args.json:
        print_json(found.as_dict())
    else:
        say("\n".join(safe(line) for line in found.lines()))
    return 0


def format_steps(durable: dict[str, Any] | None) -> list[str]:
    """A durable job's lines (docs/durable.md): what it waits for, then each step: name,
    status, when it ended, how long it took, its result in short."""
    if not durable:
        return []
    lines: list[str] = []
    waiting = durable.get("waiting_for")
    if waiting:
        what = ("sleep" if waiting["kind"] == "sleep" else
                f"{waiting['kind']} {safe(waiting['name'])}"
                + (f" key {safe(waiting['key'])}" if waiting.get("key") else ""))
        until = f" until {fmt_time(waiting['until'])}" if waiting.get("until") else ""
        lines.append(f"  {'waits for':<11} {what}{until}")
    if durable.get("inbox"):
        lines.append(f"  {'inbox':<11} {durable['inbox']} message(s) not yet received")
    if durable.get("steps"):
        lines.append("steps:")
    for step in durable.get("steps") or []:
        lines.append(f"  {fmt_time(step['ended'])}  {safe(step['name']):<24} "
                     f"{safe(step['status']):<8} {fmt_duration(step['duration']):>8}  "
                     f"{safe(step['summary'])}".rstrip())
    return lines


def cmd_action(args: argparse.Namespace) -> int:
    """Retry, delete or kill jobs by id; exit 1 when none of them could be acted on."""
    with open_backend(args) as backend:
        missing = [i for i in args.job_ids if backend.get_job(i) is None]
        if len(missing) == len(args.job_ids):
            raise ConveyorError(f"no job with id {', '.join(missing)}")
        method = {"retry": backend.retry_jobs, "delete": backend.delete_jobs,
                  "kill": backend.kill_jobs}[args.action]
        done = method(args.job_ids)
        # a workflow node left as it is says which job to retry instead (one line each)
        refused = backend.retry_refusals(args.job_ids) if args.action == "retry" and \
            done < len(args.job_ids) else {}
    past = {"retry": "retried", "delete": "deleted", "kill": "killed"}[args.action]
    say(f"{past} {done} of {len(args.job_ids)} job(s)"
          + (f"; not found: {', '.join(missing)}" if missing else ""))
    for reason in refused.values():
        say(reason, file=sys.stderr)
    return 0 if done else 1


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel jobs by id, one line each; exit 1 when none of them exists."""
    with open_backend(args) as backend:
        outcomes = {job_id: backend.cancel(job_id) for job_id in args.job_ids}
    for job_id, state in outcomes.items():
        if state is None:
            say(f"{job_id}: no such job")
        elif state is JobState.ACTIVE:
            say(f"{job_id}: running; cancellation requested (the job sees ctx.cancelled)")
        else:
            say(f"{job_id}: {state.value}")
    return 0 if any(s is not None for s in outcomes.values()) else 1


def cmd_dead_bulk(args: argparse.Namespace) -> int:
    """Retry or delete the whole dead set (optionally one queue's)."""
    with open_backend(args) as backend:
        if args.action == "retry-all":
            say(f"retried {backend.retry_all(JobState.DEAD, queue=args.queue)} dead job(s)")
        else:
            say(f"deleted {backend.clear(JobState.DEAD, queue=args.queue)} dead job(s)")
    return 0



def cmd_reencrypt(args: argparse.Namespace) -> int:
    """Seal again, with the newest key, every stored job an older key sealed."""
    try:
        state = parse_state(args.state)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None
    data = job_data(args)
    if data is None or data.keys is None:
        raise ConveyorError("reencrypt needs the keys: an app (--app) whose Conveyor(encrypt="
                            "Keys(...)) holds them, or $CONVEYOR_KEYS (id:base64,...; the "
                            "last one seals)")
    with open_backend(args) as backend:
        done = reseal_jobs(backend, data, state=state, queue=args.queue)
    if args.json:
        print_json({"read": done.read, "resealed": done.resealed, "changed": done.changed,
                    "failed": done.failed, "key": data.keys.current})
    else:
        say(f"read {done.read:,} jobs: {done.resealed:,} sealed again with key "
            f"{data.keys.current!r}, {done.changed:,} changed meanwhile (run again), "
            f"{done.failed:,} could not be opened here (a key not held, a blob gone)")
    return 0 if not done.changed and not done.failed else 1
