"""Routing of GET requests, and the overview, queues and workers pages.

Pages are rendered on the server (one escaping path, ``render.e``); the script re-fetches the
``#live`` region with ``?partial=1`` every couple of seconds, so pages stay live without a
JSON-to-HTML renderer in the browser.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from conveyor.core.job import JobState
from conveyor.http.metrics import CONTENT_TYPE, render_inspector
from conveyor.storage.records import HISTORY_MINUTES
from conveyor.views.failures import (
    check_batch,
    failure_states,
    failures,
    failures_csv,
    failures_json,
)
from conveyor.views.history import KINDS, history_view
from conveyor.views.records import (
    batch_view,
    fmt_duration,
    job_detail,
    stats_view,
    workers_view,
)
from conveyor.web import pages_jobs, pages_periodic
from conveyor.web.http import Request, Response, StorageCaller, json_response
from conveyor.web.render import badge, button_form, e, layout, link, page, table, when

Dashboard = StorageCaller
Page = Callable[[Dashboard, Request, str, re.Match[str]], Awaitable[Response]]
# Bytes of jobs (arguments, reasons) an export reads at a time: whole records, so a page of
# big jobs stays a few megabytes, and small ones come 500 at a time.
EXPORT_BYTES = 4 * 1024 * 1024



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
             ("aggregating", t["aggregating"], "members waiting for their group's run"),
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
               badge("paused") if q["paused"] else badge("running")]
        if actions:
            row += [e(q["processed"]), e(q["failed"]),
                    e(f"{q['processed_today']} / {q['failed_today']}"),
                    button_form("resume" if q["paused"] else "pause",
                                "Resume" if q["paused"] else "Pause", csrf, here, queue=q["name"])]
        rows.append(row)
    headers = ["Queue", "Pending", "Active", "Scheduled", "Retrying", "Waiting", "Aggregating",
               "Failed", "Dead", "Latency", "State"]
    if actions:
        headers += ["Succeeded ever", "Failed or dead ever",
                    "Today ok / not ok", ""]
    return table(headers, rows, "queues")


async def queues(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """Every queue with pause/resume."""
    view = await dash.call(stats_view)
    return page("Queues", "/queues", _queue_table(view["queues"], csrf, "/queues", True),
                request, csrf)


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


async def api_stats(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """``stats_view`` as JSON (the overview charts poll it)."""
    return json_response(await dash.call(stats_view))


async def api_history(dash: Dashboard, request: Request, csrf: str,
                      m: re.Match[str]) -> Response:
    """``history_view`` as JSON: ``?queue=`` one queue (else all), ``?minutes=`` how many of
    the last day's (1,440 by default)."""
    minutes = request.int_arg("minutes", HISTORY_MINUTES, 1, HISTORY_MINUTES)
    queue = request.arg("queue") or None
    return json_response(await dash.call(lambda insp: history_view(insp, queue, minutes)))


async def api_workers(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """``workers_view`` as JSON."""
    return json_response(await dash.call(workers_view))


async def api_job(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """One job in full as JSON."""
    return json_response(await dash.call(lambda insp: job_detail(insp, m["id"])))


async def api_batch(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """A batch's status and failures as JSON."""
    return json_response(await dash.call(lambda insp: batch_view(insp, m["id"])))


async def batch_failures(dash: Dashboard, request: Request, csrf: str,
                         m: re.Match[str]) -> Response:
    """A batch's failed and dead jobs as a CSV or JSON download (``?state=failed|dead``),
    streamed: read about ``EXPORT_BYTES`` at a time as the client takes them, and stopped
    when it goes away."""
    which = request.arg("state") or "all"
    try:
        states = failure_states(which)
    except ValueError as exc:
        return error_page(str(exc), 400, csrf)
    if request.cross_site:  # a page elsewhere cannot make the dashboard export
        return Response("open the export from the batch's page", 403, "text/plain")
    batch_id = m["id"]
    await dash.call(lambda insp: check_batch(insp, batch_id))  # 404 before the first byte
    csv_wanted = m["format"] == "csv"
    write = failures_csv if csv_wanted else failures_json
    name = f"batch-{batch_id}-{'failures' if which == 'all' else which}.{m['format']}"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    response = Response(b"", 200, "text/csv; charset=utf-8" if csv_wanted
                        else "application/json; charset=utf-8",
                        [("content-disposition", f'attachment; filename="{safe}"')])
    response.chunks = dash.stream(
        lambda insp: write(failures(insp, batch_id, states, page_bytes=EXPORT_BYTES)),
        request.gone)
    return response


async def metrics(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """Prometheus text."""
    return Response(await dash.call(render_inspector), 200, CONTENT_TYPE)


def _state_page(state: JobState) -> Page:
    async def show(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
        return await pages_jobs.jobs(dash, request, csrf, state, f"/{state.value}")

    return show


async def _jobs(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    return await pages_jobs.jobs(dash, request, csrf, None, "/jobs")


ROUTES: list[tuple[re.Pattern[str], Page]] = [
    (re.compile(p), f) for p, f in (
        (r"/", overview), (r"/queues", queues), (r"/workers", workers), (r"/jobs", _jobs),
        (r"/periodic", pages_periodic.periodic), (r"/api/periodic", pages_periodic.api_periodic),
        (r"/api/periodic/history", pages_periodic.api_history),
        (r"/periodic/(?P<name>[^/]+)", pages_periodic.schedule),
        (r"/scheduled", _state_page(JobState.SCHEDULED)),
        (r"/retrying", _state_page(JobState.RETRYING)), (r"/dead", _state_page(JobState.DEAD)),
        (r"/jobs/(?P<id>[^/]+)", pages_jobs.job), (r"/batches", pages_jobs.batches),
        (r"/workflows", pages_jobs.workflows),
        (r"/workflows/(?P<id>[^/]+)", pages_jobs.workflow_graph),
        (r"/batches/(?P<id>[^/]+)", pages_jobs.batch),
        (r"/batches/(?P<id>[^/]+)/failures\.(?P<format>csv|json)", batch_failures),
        (r"/metrics", metrics),
        (r"/api/stats", api_stats), (r"/api/workers", api_workers),
        (r"/api/history", api_history),
        (r"/api/jobs/(?P<id>[^/]+)", api_job), (r"/api/batches/(?P<id>[^/]+)", api_batch),
    )
]


async def route(dash: Dashboard, request: Request, csrf: str) -> Response:
    """Dispatch a GET to its page."""
    path = request.path.rstrip("/") or "/"
    for pattern, handler in ROUTES:
        match = pattern.fullmatch(path)
        if match:
            return await handler(dash, request, csrf, match)
    return error_page(f"no page at {request.path}", 404, csrf)


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
