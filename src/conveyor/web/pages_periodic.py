"""The Periodic pages: every schedule (with pause, resume, edit and remove), a form to add
one, each schedule's page with its edit form and history, and the audit trail.

Forms stand outside the live region (``before``), so a refresh never clears what an operator
is typing; every change is a CSRF-checked POST to ``/action`` (``web/schedule_actions.py``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from conveyor.views.records import get_schedule, periodic_view, schedule_changes_view
from conveyor.web.http import Request, Response, StorageCaller, json_response
from conveyor.web.render import button_form, e, link, page, paused, table, when

_NO_WORKER = (' <span class="badge s-dead" title="no running worker listens to this queue: '
              'its ticks wait there">no worker</span>')
_SOURCE_TIPS = {
    "code": "declared in code (@app.periodic); workers write it at start",
    "code, edited": "declared in code, edited at run time: the edit stands until reset or "
                    "until a deploy declares something new",
    "runtime": "added at run time; workers whose app defines the job run it",
}


def _href(name: str) -> str:
    return f"/periodic/{quote(name, safe='')}"


def _source(row: dict[str, Any]) -> str:
    return (f'<span class="badge" title="{e(_SOURCE_TIPS.get(row["source"], ""))}">'
            f'{e(row["source"])}</span>')


def _actions(row: dict[str, Any], csrf: str, here: str) -> str:
    name = row["name"]
    pause = ("resume-schedule", "Resume") if row["paused"] else ("pause-schedule", "Pause")
    out = button_form(pause[0], pause[1], csrf, here, schedule=name)
    if row["edited"]:
        out += button_form("reset-schedule", "Reset", csrf, here, schedule=name,
                           confirm=f"Put the code's definition of {name} back in force?")
    then = "/periodic"
    remove_note = (" The code declares it: the next worker to start adds it again."
                   if row["origin"] == "code" else "")
    return out + button_form("remove-schedule", "Remove", csrf, then, cls="danger",
                             schedule=name, confirm=f"Remove schedule {name}?{remove_note}")


def _changes_table(changes: list[dict[str, Any]], with_name: bool) -> str:
    rows = [[when(c["at"]), *([link(_href(c["name"]), c["name"])] if with_name else []),
             e(c["action"]), e(c["by"]), e(c["detail"])] for c in changes]
    heads = ("When", *(("Schedule",) if with_name else ()), "Change", "By", "What")
    return table(heads, rows, "changes")


def _field(name: str, label: str, value: str = "", hint: str = "") -> str:
    return (f'<label>{e(label)} <input name="{e(name)}" value="{e(value)}" '
            f'placeholder="{e(hint)}"></label>')


def _form(op: str, csrf: str, next_url: str, fields: str, button: str) -> str:
    return (f'<form class="filters" method="post" action="/action">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="next" value="{e(next_url)}">{fields}'
            f'<button name="op" value="{e(op)}">{e(button)}</button></form>')


def _add_form(csrf: str) -> str:
    fields = (_field("schedule", "Name", hint="nightly-report")
              + _field("cron", "Cron", hint="0 3 * * *") + _field("tz", "Time zone", hint="UTC")
              + _field("job", "Job", hint="myapp.jobs.report")
              + _field("queue", "Queue", hint="default") + _field("args", "Args", hint="[]")
              + _field("kwargs", "Kwargs", hint="{}")
              + '<label><input type="checkbox" name="paused" value="1"> paused</label>')
    return ("<details><summary>Add a schedule</summary>"
            + _form("add-schedule", csrf, "/periodic", fields, "Add") + "</details>")


async def periodic(dash: StorageCaller, request: Request, csrf: str,
                   m: re.Match[str]) -> Response:
    """Every stored schedule, with its actions, and the newest changes."""
    view, changes = await dash.call(lambda insp: (periodic_view(insp),
                                                  schedule_changes_view(insp, None, 20)))
    rows = []
    for s in view:
        rows.append([link(_href(s["name"]), s["name"]), f"<code>{e(s['cron'])}</code>",
                     e(s["tz"]), e(s["job_name"]),
                     link(f"/jobs?queue={quote(s['queue'], safe='')}", s["queue"])
                     + ("" if s["queue_listened"] else _NO_WORKER), _source(s),
                     paused(s["paused"]),
                     when(s["last_tick"]), when(s["next_tick"]),
                     _actions(s, csrf, "/periodic")])
    live = (table(("Schedule", "Cron", "Time zone", "Job", "Queue", "From", "Paused",
                   "Last tick", "Next tick", ""), rows, "periodic") if rows else
            '<p class="empty">No periodic schedules yet: workers register the app\'s '
            "<code>@app.periodic</code> schedules when they start, and one can be added "
            "here.</p>")
    live += ('<p class="empty">A schedule declared in code and edited here keeps the edit '
             "across restarts, until it is reset or a deploy declares something new for it; "
             "a pause stands until a resume.</p>")
    live += "<h3>Recent changes</h3>" + _changes_table(changes, with_name=True)
    return page("Periodic", "/periodic", live, request, csrf, before=_add_form(csrf))


async def schedule(dash: StorageCaller, request: Request, csrf: str,
                   m: re.Match[str]) -> Response:
    """One schedule: its definition (and the code's, when edited), actions, an edit form and
    its history."""
    name = m["name"]
    row, changes = await dash.call(lambda insp: (get_schedule(insp, name),
                                                 schedule_changes_view(insp, name, 100)))
    here = _href(name)
    facts = [("From", _source(row)), ("Paused", paused(row["paused"])),
             ("Cron", f"<code>{e(row['cron'])}</code>"), ("Time zone", e(row["tz"])),
             ("Job", e(row["job_name"])), ("Queue", e(row["queue"])),
             ("Args", f"<code>{e(row['args'])}</code>"),
             ("Kwargs", f"<code>{e(row['kwargs'])}</code>")]
    if row["code"] is not None:
        code = row["code"]
        facts.append(("The code declares", e(", ".join(f"{k} {code[k]}" for k in code))))
    facts += [("Added", when(row["created_at"])), ("Changed", when(row["changed_at"])),
              ("Last tick", when(row["last_tick"])), ("Next tick", when(row["next_tick"]))]
    live = (table(("", ""), [[e(k), v] for k, v in facts], "facts")
            + f"<p>{_actions(row, csrf, here)}</p><h3>History</h3>"
            + _changes_table(changes, with_name=False))
    fields = "".join(_field(f, label, row[key]) for f, label, key in (
        ("cron", "Cron", "cron"), ("tz", "Time zone", "tz"), ("job", "Job", "job_name"),
        ("queue", "Queue", "queue"), ("args", "Args", "args"), ("kwargs", "Kwargs", "kwargs")))
    fields += f'<input type="hidden" name="schedule" value="{e(name)}">'
    edit = ("<details open><summary>Edit</summary>"
            + _form("change-schedule", csrf, here, fields, "Save") + "</details>")
    return page(f"Schedule {name}", "/periodic", live, request, csrf, before=edit)


async def api_periodic(dash: StorageCaller, request: Request, csrf: str,
                       m: re.Match[str]) -> Response:
    """``periodic_view`` as JSON."""
    return json_response(await dash.call(periodic_view))


async def api_history(dash: StorageCaller, request: Request, csrf: str,
                      m: re.Match[str]) -> Response:
    """The audit trail as JSON (``?schedule=NAME`` for one schedule's)."""
    name = request.arg("schedule") or None
    return json_response(await dash.call(lambda insp: schedule_changes_view(insp, name, 200)))
