"""The overview, queues and workers pages, and the error and sign-in pages.

Pages are rendered on the server (one escaping path, ``render.e``); the script re-fetches the
``#live`` region with ``?partial=1`` every couple of seconds, so pages stay live without a
JSON-to-HTML renderer in the browser. ``routes`` maps paths to them; the periodic
pages are ``pages_periodic``'s.
"""

from __future__ import annotations

import re
from typing import Any

from conveyor.views.breakers import breakers_view
from conveyor.views.history import KINDS, history_view
from conveyor.views.records import fmt_duration, stats_view, workers_view
from conveyor.web.http import Request, Response, StorageCaller
from conveyor.web.render import (
    badge,
    button_form,
    e,
    layout,
    link,
    page,
    paused,
    table,
    when,
)

Dashboard = StorageCaller


async def overview(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """Totals, live charts of throughput and queue sizes, the last day per minute, the queue
    table and each queue's outcomes over the last hour and day."""
    view, past = await dash.call(lambda insp: (stats_view(insp), history_view(insp, minutes=60)))
    t, w = view["totals"], view["workers"]
    # Jobs in a state now, then outcomes ever: the all-time counter of failed or dead
    # outcomes is named as such, never "failed" beside the current "dead".
    cards = [("pending", t["pending"], "waiting to run now"),
             ("active", t["active"], "running now"),
             ("retrying", t["retrying"], "waiting for their next attempt"),
             ("scheduled", t["scheduled"], "waiting for their time"),
             ("waiting", t["waiting"], "workflow nodes waiting for their parents"),
             ("aggregating", t["aggregating"], "members waiting for their aggregation's run"),
             ("failed", t["failed_jobs"], "jobs now ended by Fail (a business rule)"),
             ("dead", t["dead"], "jobs now in the dead set (out of retries)"),
             ("succeeded ever", t["processed"], "succeeded since each queue began"),
             ("failed or dead ever", t["failed"],
              "failed and dead outcomes since each queue began, jobs since retried or "
              "deleted included"),
             ("busy slots", f"{w['busy']}/{w['slots']}", "worker slots running a job")]
    live = '<div class="cards">' + "".join(
        f'<div class="card" title="{e(hint)}"><b>{e(v)}</b><span>{e(k)}</span></div>'
        for k, v, hint in cards
    ) + "</div>" + _queue_table(view["queues"], csrf, "/", actions=False) + _recent(past)
    charts = ('<section class="charts">'
              '<figure><figcaption>Jobs per second <span class="key ok">processed</span>'
              '<span class="key bad">failed</span></figcaption>'
              '<svg id="chart-rate" class="chart" viewBox="0 0 600 160"></svg></figure>'
              '<figure><figcaption>Queue sizes (pending)</figcaption>'
              '<svg id="chart-queues" class="chart" viewBox="0 0 600 160"></svg>'
              '<div id="chart-queues-legend" class="legend"></div></figure></section>')
    options = "".join(f'<option value="{e(q["name"])}">{e(q["name"])}</option>'
                      for q in view["queues"])
    day = ('<section class="history"><figure><figcaption>Last 24 hours, jobs per minute '
           + "".join(f'<span class="key {k}">{k}</span>' for k in KINDS)
           + '<label class="pick">queue <select id="history-queue">'
           f'<option value="">all queues</option>{options}</select></label></figcaption>'
           '<svg id="chart-history" class="chart" viewBox="0 0 1200 160" '
           'data-api="/api/history"></svg></figure></section>')
    return page("Overview", "/", live, request, csrf, before=charts + day)


def _recent(past: dict[str, Any]) -> str:
    """Each queue's outcomes over the last hour and the last 24 hours."""
    rows = [[link(f"/jobs?queue={q['name']}", q["name"]),
             *(e(q[span][k]) for span in ("hour", "day") for k in KINDS)] for q in past["queues"]]
    headers = ["Queue", *(f"{k} ({span})" for span in ("1 h", "24 h") for k in KINDS)]
    return "<h2>Outcomes, last hour and last 24 hours</h2>" + table(headers, rows, "recent")


def _queue_table(queues: list[dict[str, Any]], csrf: str, here: str, actions: bool) -> str:
    rows = []
    for q in queues:
        row = [link(f"/jobs?queue={q['name']}", q["name"]), e(q["pending"]), e(q["active"]),
               e(q["scheduled"]), e(q["retrying"]), e(q["waiting"]), e(q["aggregating"]),
               e(q["failed_jobs"]), e(q["dead"]),
               e(fmt_duration(q["latency"])),
               paused(q["paused"])]
        if actions:
            row += [e(q["processed"]), e(q["failed"]),
                    e(f"{q['processed_today']} / {q['failed_today']}"),
                    button_form("resume" if q["paused"] else "pause",
                                "Resume" if q["paused"] else "Pause", csrf, here, queue=q["name"])]
        rows.append(row)
    headers = ["Queue", "Pending", "Active", "Scheduled", "Retrying", "Waiting", "Aggregating",
               "Failed", "Dead", "Latency", "Paused"]
    if actions:
        headers += ["Succeeded ever", "Failed or dead ever",
                    "Today ok / not ok", ""]
    return table(headers, rows, "queues")


async def queues(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """Every queue with pause/resume, then the open breakers with a close button."""
    view, held = await dash.call(lambda insp: (stats_view(insp), breakers_view(insp)))
    return page("Queues", "/queues", _queue_table(view["queues"], csrf, "/queues", True)
                + _breaker_table(held, csrf), request, csrf)


def _breaker_table(view: list[dict[str, Any]], csrf: str) -> str:
    """The open and half-open breakers (docs/operations.md, "Breakers"); none: nothing."""
    rows = [[e(b["key"]) + (f' <small>{e(b["queue"])}</small>' if b["queue"] else ""),
             badge(b["state"]), when(b["opened_at"]), when(b["probe_at"]),
             link(f"/jobs/{b['probe_id']}", b["probe_id"]) if b["probe_id"] else "",
             e(b["reason"] or ""),
             button_form("close-breaker", "Close", csrf, "/queues", key=b["key"],
                         confirm=f"Close breaker {b['key']}? Its jobs start at once.")]
            for b in view if b["state"] != "closed"]
    if not rows:
        return ""
    return "<h2>Open breakers</h2>" + table(
        ["Key", "State", "Since", "Next probe", "Probe", "Reason", ""], rows, "breakers")


async def workers(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """Live workers, what each busy slot runs, and quiet/stop buttons."""
    view = await dash.call(workers_view)
    rows = []
    for w in view:
        slots = "".join(
            f'<li>{link("/jobs/" + s["job_id"], s["name"])} <small>{e(s["queue"])} · '
            f'{e(fmt_duration(s["running_for"]))}</small></li>' for s in w["busy"])
        buttons = (button_form("quiet", "Quiet", csrf, "/workers", worker=w["id"]) +
                   button_form("stop", "Stop", csrf, "/workers", cls="danger", worker=w["id"],
                               confirm=f"Stop worker {w['id']}?"))
        rows.append([e(w["id"]), e(w["hostname"]), e(w["pid"]), e(", ".join(w["queues"])),
                     f'<meter min="0" max="{w["concurrency"]}" value="{w["busy_count"]}">'
                     f'</meter> {w["busy_count"]}/{w["concurrency"]}',
                     badge(w["status"]), when(w["started_at"]), f"<ul>{slots}</ul>", buttons])
    live = table(("Worker", "Host", "PID", "Queues", "Busy", "Status", "Started", "Running",
                  ""), rows, "workers")
    return page("Workers", "/workers", live, request, csrf)


def error_page(message: str, status: int, csrf: str) -> Response:
    """A page that says what went wrong."""
    titles = {404: "Not found", 503: "Storage unavailable"}
    return Response(layout(titles.get(status, "Error"), "",
                           f'<p class="error">{e(message)}</p>', csrf, refresh=0), status)


def login_page() -> Response:
    """The token form shown to a browser without a session (a GET, so no CSRF needed).

    The form has no ``action``: it goes back to the address it was shown at, on this server,
    whatever that path looks like (a path such as ``//evil.example/`` cannot make it post
    the token elsewhere).
    """
    body = ('<!doctype html><html lang=en><head><meta charset=utf-8><title>conveyor · sign in'
            '</title><link rel="stylesheet" href="/static/style.css"></head><body class="login">'
            '<form method="get"><h1>conveyor</h1>'
            '<label>Access token <input type="password" name="token" autofocus></label>'
            '<button>Sign in</button></form></body></html>')
    return Response(body, 401)
