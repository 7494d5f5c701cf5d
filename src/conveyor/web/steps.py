"""A durable job's part of its page (docs/durable.md): what it waits for, and its steps."""

from __future__ import annotations

from typing import Any

from conveyor.views.records import fmt_duration
from conveyor.web.render import badge, e, table, when


def waits_field(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Waits for" field of a suspended durable job (none for any other job)."""
    waiting = (view.get("durable") or {}).get("waiting_for")
    if not waiting:
        return []
    what = ("sleep" if waiting["kind"] == "sleep" else
            f"{waiting['kind']} <code>{e(waiting['name'])}</code>"
            + (f" key <code>{e(waiting['key'])}</code>" if waiting.get("key") else ""))
    until = f" until {when(waiting['until'])}" if waiting.get("until") else ""
    return [("Waits for", what + until)]


def steps_section(view: dict[str, Any]) -> str:
    """The "Steps" table: name, status, ended, duration, result summary (empty without)."""
    durable = view.get("durable") or {}
    steps = durable.get("steps") or []
    inbox = durable.get("inbox") or 0
    if not steps and not inbox:
        return ""
    rows = [[e(s["name"]), badge(s["status"]), when(s["ended"]), e(fmt_duration(s["duration"])),
             f"<code>{e(s['summary'])}</code>"] for s in steps]
    note = f'<p class="sub">{e(inbox)} message(s) in its inbox, not yet received</p>' \
        if inbox else ""
    return "<h2>Steps</h2>" + note + (table(["Step", "Status", "Ended", "Took", "Result"], rows)
                                      if rows else "")
