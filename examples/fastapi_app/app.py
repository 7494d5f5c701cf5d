"""FastAPI + conveyor: endpoints that enqueue without blocking the event loop, a batch with
live progress, and the request's trace carried into its jobs.

Run the API and a worker (same CONVEYOR_URL, default ./conveyor.db)::

    uvicorn examples.fastapi_app.app:api
    conveyor worker examples.fastapi_app.app:jobs -q reports -q imports

    curl -X POST 'localhost:8000/reports/42?month=2026-11'     # {"job_id": "..."}
    curl localhost:8000/status/<job_id>                        # state, result, message
    curl -X POST localhost:8000/imports -H 'content-type: application/json' \\
         -d '[{"sku": "ABC-0001", "qty": "3"}, {"sku": "bad", "qty": "1"}]'
    curl localhost:8000/imports/<batch_id>                     # counts, percent, failures
    open http://localhost:8000/jobs/                           # the dashboard, mounted

With ``CONVEYOR_OTEL=1`` (and opentelemetry-sdk installed) each request runs in a span whose
context comes from the caller's ``traceparent`` header, and every job it enqueues carries
that trace (``conveyor.otel``): the worker's span of the job joins the request's trace.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response

from conveyor import Conveyor, Fail
from conveyor.errors import BatchNotFound
from conveyor.web import create_app

jobs = Conveyor()  # CONVEYOR_URL, else ./conveyor.db


@jobs.job(queue="reports", retry=3)
def build_report(customer_id: int, month: str) -> dict[str, Any]:
    """A report a customer asked for (the real one would query and render)."""
    return {"customer": customer_id, "month": month, "orders": customer_id % 7}


@jobs.job(queue="imports", retry=3)
def import_row(row_no: int, row: dict[str, str]) -> str:
    """One row of an uploaded sheet: a bad SKU is a business "no", never retried."""
    sku = row.get("sku", "")
    if len(sku) != 8 or sku[3] != "-":
        raise Fail(f"row {row_no}: bad SKU {sku!r}")
    return sku


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    yield
    await jobs.aclose()  # the asyncio clients of this loop
    jobs.close()


api = FastAPI(title="conveyor + FastAPI", lifespan=lifespan)
# The dashboard inside the API, under /jobs: its links, assets, redirects and cookies carry the
# prefix. CONVEYOR_WEB_TOKEN protects it; without one it answers loopback hosts only.
api.mount("/jobs", create_app(jobs, token=os.environ.get("CONVEYOR_WEB_TOKEN")))

if os.environ.get("CONVEYOR_OTEL"):
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind

    from conveyor.otel import instrument

    instrument(jobs)
    tracer = trace.get_tracer("fastapi-example")

    @api.middleware("http")
    async def traced(request: Request,
                     call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """A server span per request, continuing the caller's trace (what
        opentelemetry-instrumentation-fastapi does, in a few lines)."""
        parent = propagate.extract(dict(request.headers))
        with tracer.start_as_current_span(f"{request.method} {request.url.path}",
                                          context=parent, kind=SpanKind.SERVER):
            return await call_next(request)


@api.post("/reports/{customer_id}", status_code=202)
async def request_report(customer_id: int, month: str) -> dict[str, str]:
    """Enqueue a report; the event loop never waits on the storage."""
    ref = await build_report.aenqueue(customer_id, month)
    assert ref is not None
    return {"job_id": ref.id}


@api.get("/status/{job_id}")
async def job_status(job_id: str) -> dict[str, Any]:
    """A job's state, and its result or last message."""
    record = await jobs.aget_job(job_id)
    if record is None:
        raise HTTPException(404, f"no job {job_id}")
    result = json.loads(record.result) if record.result is not None else None
    return {"state": record.state.value, "result": result,
            "message": record.message, "attempt": record.attempt}


@api.post("/imports", status_code=202)
async def start_import(rows: list[dict[str, str]]) -> dict[str, str]:
    """One job per row, all in one batch."""
    async with jobs.batch(description=f"import of {len(rows)} rows") as batch:
        for row_no, row in enumerate(rows, 1):
            await import_row.aenqueue(row_no, row)
    return {"batch_id": batch.id}


@api.get("/imports/{batch_id}")
async def import_progress(batch_id: str) -> dict[str, Any]:
    """Live counters of an import, and the rows that failed with their reasons."""
    try:
        status = await jobs.abatch_status(batch_id)
    except BatchNotFound:
        raise HTTPException(404, f"no import {batch_id}") from None
    return {key: status[key] for key in ("total", "done", "percent", "complete", "counts",
                                         "failures")}
