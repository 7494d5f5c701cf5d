"""Spreadsheet import: one job per row, all under one batch.

Rows with bad data raise ``Fail`` (a business "no": recorded with its reason, never retried).
A few rows meet a flaky "inventory service" on their first attempt: that is an *error*, so
conveyor retries it and the row then succeeds — both outcomes stay visible in the job's events.
"""

from __future__ import annotations

import re
import time
from decimal import Decimal, InvalidOperation

from conveyor import Conveyor, Fail, current_job

app = Conveyor()  # CONVEYOR_URL, else ./conveyor.db: the embedded SQLite default

SKU = re.compile(r"^[A-Z]{3}-\d{4}$")


def quick_retry(attempt: int, exc: BaseException) -> float:
    """Retry flaky rows after a second, so the demo does not wait for Sidekiq-style backoff."""
    return 1.0


@app.job(queue="imports", retry=3, retry_in=quick_retry, timeout=30)
def import_row(row_no: int, row: dict[str, str]) -> dict[str, str]:
    """Validate and store one spreadsheet row."""
    ctx = current_job()
    sku = row.get("sku", "").strip()
    if not SKU.match(sku):
        raise Fail(f"row {row_no}: SKU {sku!r} is not like ABC-1234")
    name = row.get("name", "").strip()
    if not name:
        raise Fail(f"row {row_no}: product name is empty")
    try:
        price = Decimal(row.get("price", ""))
    except InvalidOperation:
        raise Fail(f"row {row_no}: price {row.get('price')!r} is not a number") from None
    if price <= 0:
        raise Fail(f"row {row_no}: price must be positive, got {price}")
    if row_no % 97 == 0 and ctx.attempt == 1:
        raise ConnectionError("inventory service timed out")  # an error: retried, then fine
    time.sleep(0.004)  # stands in for the database write
    ctx.log(f"row {row_no}: imported {sku} ({name}) at {price}")
    return {"sku": sku}


@app.job(queue="imports")
def report_import(batch_id: str) -> dict[str, int]:
    """Batch callback: runs exactly once, when every row reached a final state."""
    status = app.batch_status(batch_id)
    current_job().log(f"import finished: {status['counts']}")
    return {"succeeded": status["counts"]["succeeded"], "failed": status["counts"]["failed"]}
