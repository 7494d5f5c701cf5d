"""Chunked export of 500,000 records: one job per 10,000-record chunk, under one batch.

Each chunk job writes its part file and reports progress as it goes (`ctx.progress`), so the
batch page shows both how many chunks are done and how far the running ones are. When every
chunk is done, the `on_success` callback stitches the parts together.

Run it::

    conveyor worker app:app -q exports -c 4 --processes 2 &
    python -c "import app; print(app.start_export('/tmp/export'))"
    conveyor batch watch <printed batch id>
"""

from __future__ import annotations

import csv
from pathlib import Path

from conveyor import Conveyor, current_job

app = Conveyor()

RECORDS = 500_000
CHUNK = 10_000


def fake_record(i: int) -> tuple[int, str, str]:
    """Stands in for a database row."""
    return i, f"customer-{i}", f"user{i}@example.com"


@app.job(queue="exports", timeout=600)
def export_chunk(out_dir: str, start: int, stop: int) -> str:
    """Write records [start, stop) to their own part file, reporting progress every 1,000."""
    ctx = current_job()
    part = Path(out_dir) / f"part-{start:07d}.csv"
    with part.open("w", newline="") as fh:
        writer = csv.writer(fh)
        for n, i in enumerate(range(start, stop), 1):
            writer.writerow(fake_record(i))
            if n % 1_000 == 0:
                ctx.progress(n, stop - start)
    return str(part)


@app.job(queue="exports")
def join_parts(batch_id: str) -> str:
    """`on_success` callback: concatenate the parts in order into export.csv."""
    meta = app.batch_status(batch_id)["meta"]
    out_dir = Path(meta["out_dir"])
    target = out_dir / "export.csv"
    with target.open("w") as out:
        for part in sorted(out_dir.glob("part-*.csv")):
            out.write(part.read_text())
    current_job().log(f"wrote {target}")
    return str(target)


def start_export(out_dir: str, records: int = RECORDS, chunk: int = CHUNK) -> str:
    """Split the export into chunk jobs under one batch; returns the batch id at once."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with app.batch(description=f"export {records} records", on_success=join_parts,
                   meta={"out_dir": out_dir}) as batch:
        export_chunk.enqueue_many(
            [(out_dir, start, min(start + chunk, records)) for start in range(0, records, chunk)]
        )
    return batch.id
