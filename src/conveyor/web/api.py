"""What machines read from the dashboard: the JSON API, Prometheus metrics, and a batch's
failures as a CSV or JSON download (the schedules' JSON is ``pages_periodic``'s, beside
their pages)."""

from __future__ import annotations

import re

from conveyor.http.metrics import CONTENT_TYPE, render_inspector
from conveyor.storage.totals import HISTORY_MINUTES
from conveyor.views.breakers import breakers_view
from conveyor.views.failures import (
    check_batch,
    failure_states,
    failures,
    failures_csv,
    failures_json,
)
from conveyor.views.history import history_view
from conveyor.views.records import (
    batch_view,
    job_detail,
    stats_view,
    workers_view,
)
from conveyor.views.scaling import DEFAULT_LATENCY_TARGET, scale_view
from conveyor.web.http import Request, Response, StorageCaller, json_response
from conveyor.web.pages import error_page

Dashboard = StorageCaller
# Bytes of jobs (arguments, reasons) an export reads at a time: whole records, so a page of
# big jobs stays a few megabytes, and small ones come 500 at a time.
EXPORT_BYTES = 4 * 1024 * 1024


async def stats(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """``stats_view`` as JSON (the overview charts poll it)."""
    return json_response(await dash.call(stats_view))


async def history(dash: Dashboard, request: Request, csrf: str,
                  m: re.Match[str]) -> Response:
    """``history_view`` as JSON: ``?queue=`` one queue (else all), ``?minutes=`` how many of
    the last day's (1,440 by default)."""
    minutes = request.int_arg("minutes", HISTORY_MINUTES, 1, HISTORY_MINUTES)
    queue = request.arg("queue") or None
    return json_response(await dash.call(lambda insp: history_view(insp, queue, minutes)))


async def scale_hint(dash: Dashboard, request: Request, csrf: str,
                     m: re.Match[str]) -> Response:
    """``scale_view`` as JSON, for KEDA's metrics-api scaler: ``?queue=`` one queue (else
    all), ``?slots=`` slots per worker (else the live workers' mean), ``?latency_target=``
    whole seconds (30 by default)."""
    queue = request.arg("queue") or None
    slots = request.int_arg("slots", 0, 0) or None
    target = request.int_arg("latency_target", int(DEFAULT_LATENCY_TARGET), 0, 86_400)
    return json_response(await dash.call(lambda insp: scale_view(
        insp, slots, float(target), None if queue is None else [queue])))


async def breakers(dash: Dashboard, request: Request, csrf: str,
                   m: re.Match[str]) -> Response:
    """``breakers_view`` as JSON: the open and half-open breakers first, then the keys with
    recent errors (what ``conveyor breakers --json`` prints)."""
    return json_response(await dash.call(breakers_view))


async def workers(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """``workers_view`` as JSON."""
    return json_response(await dash.call(workers_view))


async def job(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """One job in full as JSON."""
    return json_response(await dash.call(lambda insp: job_detail(insp, m["id"], dash.data)))


async def batch(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
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
