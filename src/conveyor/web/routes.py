"""Routing of the dashboard's GET requests: every path and the page or endpoint it shows."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from conveyor.core.job import JobState
from conveyor.web import api, pages, pages_jobs, pages_periodic
from conveyor.web.http import Request, Response, StorageCaller

Dashboard = StorageCaller
Page = Callable[[Dashboard, Request, str, re.Match[str]], Awaitable[Response]]


def _state_page(state: JobState) -> Page:
    async def show(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
        return await pages_jobs.jobs(dash, request, csrf, state, f"/{state.value}")

    return show


async def _jobs(dash: Dashboard, request: Request, csrf: str, m: re.Match[str]) -> Response:
    return await pages_jobs.jobs(dash, request, csrf, None, "/jobs")


ROUTES: list[tuple[re.Pattern[str], Page]] = [
    (re.compile(p), f) for p, f in (
        (r"/", pages.overview), (r"/queues", pages.queues), (r"/workers", pages.workers),
        (r"/jobs", _jobs), (r"/periodic", pages_periodic.periodic),
        (r"/api/periodic", pages_periodic.api_periodic),
        (r"/api/periodic/history", pages_periodic.api_history),
        (r"/periodic/(?P<name>[^/]+)", pages_periodic.schedule),
        (r"/scheduled", _state_page(JobState.SCHEDULED)),
        (r"/retrying", _state_page(JobState.RETRYING)), (r"/dead", _state_page(JobState.DEAD)),
        (r"/jobs/(?P<id>[^/]+)", pages_jobs.job), (r"/batches", pages_jobs.batches),
        (r"/workflows", pages_jobs.workflows),
        (r"/workflows/(?P<id>[^/]+)", pages_jobs.workflow_graph),
        (r"/batches/(?P<id>[^/]+)", pages_jobs.batch),
        (r"/batches/(?P<id>[^/]+)/failures\.(?P<format>csv|json)", api.batch_failures),
        (r"/metrics", api.metrics),
        (r"/api/stats", api.stats), (r"/api/workers", api.workers),
        (r"/api/history", api.history), (r"/api/scale-hint", api.scale_hint),
        (r"/api/breakers", api.breakers),
        (r"/api/jobs/(?P<id>[^/]+)", api.job), (r"/api/batches/(?P<id>[^/]+)", api.batch),
    )
]


async def route(dash: Dashboard, request: Request, csrf: str) -> Response:
    """Dispatch a GET to its page."""
    path = request.path.rstrip("/") or "/"
    for pattern, handler in ROUTES:
        match = pattern.fullmatch(path)
        if match:
            return await handler(dash, request, csrf, match)
    return pages.error_page(f"no page at {request.path}", 404, csrf)
