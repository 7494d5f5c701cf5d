"""`make demo`: import a 2,000-row spreadsheet on the embedded SQLite default, end to end.

Starts two worker processes, hands the rows over as one batch, shows the live progress bar
(`conveyor batch watch`), prints the failed rows with their reasons, stops the workers with
SIGTERM and exits 0.
"""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from conveyor import Conveyor

HERE = Path(__file__).resolve().parent
ROWS = 2_000


def write_spreadsheet(path: Path, rows: int) -> None:
    """A products.csv with about 3 % bad rows of several kinds."""
    rng = random.Random(7)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["sku", "name", "price"])
        writer.writeheader()
        for i in range(1, rows + 1):
            price = f"{rng.uniform(1, 99):.2f}"
            row = {"sku": f"PRD-{i:04d}", "name": f"Product {i}", "price": price}
            bad = rng.random()
            if bad < 0.01:
                row["price"] = "twelve"
            elif bad < 0.02:
                row["name"] = " "
            elif bad < 0.03:
                row["sku"] = f"prd{i}"
            writer.writerow(row)


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-demo-"))
    os.environ.setdefault("CONVEYOR_URL", f"sqlite:///{workdir / 'demo.db'}")
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    sys.path.insert(0, str(HERE))
    from app import app, import_row, report_import

    sheet = workdir / "products.csv"
    write_spreadsheet(sheet, ROWS)
    say(f"wrote a spreadsheet of {ROWS} product rows, about 3% of them bad: {sheet}")
    say(f"the store: {os.environ['CONVEYOR_URL']} (an embedded SQLite file, no server)")

    conveyor = [sys.executable, "-m", "conveyor.cli.main"]
    say("starting 2 worker processes: conveyor worker app:app -q imports -c 8 --processes 2 "
        f"(the jobs are in {HERE / 'app.py'})")
    workers = subprocess.Popen(
        [*conveyor, "worker", "app:app", "-q", "imports", "-c", "8", "--processes", "2"],
        env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        with sheet.open(newline="") as fh, app.batch(
            description=f"import {sheet.name}", on_complete=report_import, meta={"file": sheet.name}
        ) as batch:
            for row_no, row in enumerate(csv.DictReader(fh), 1):
                import_row.enqueue(row_no, row)
        say(f"enqueued one job per row ({ROWS}) in batch {batch.id}; watching it: "
            f"conveyor batch watch {batch.id}\n")
        subprocess.run([*conveyor, "batch", "watch", batch.id], env=env, check=True)
        print_failures(app, batch.id)
    finally:
        say("\nstopping the workers (SIGTERM: they finish what they run, then exit)")
        workers.send_signal(signal.SIGTERM)
        _, err = workers.communicate(timeout=60)
    if workers.returncode != 0:
        print(err, file=sys.stderr)
        return workers.returncode
    cli = os.path.join(os.path.relpath(os.path.dirname(sys.executable)), "conveyor")
    say(f"done. Look around: CONVEYOR_URL={os.environ['CONVEYOR_URL']} {cli} batch show "
        f"{batch.id} (or {cli} web, after pip install -e '.[web]')")
    return 0


def say(text: str) -> None:
    """A line of the demo's narration (blank lines before it kept before the prefix)."""
    body = text.lstrip("\n")
    print(f"{text[:len(text) - len(body)]}demo: {body}", flush=True)


def print_failures(app: Conveyor, batch_id: str) -> None:
    """The rows a business rule refused, each with its reason."""
    failed = app.batch_jobs(batch_id, state="failed", limit=1000)
    print(f"\n{len(failed)} rows failed validation (Fail: recorded with the reason, never "
          "retried):")
    for job in failed:
        print(f"  {job.message}")
    retried = [j for j in app.batch_jobs(batch_id, state="succeeded", limit=ROWS) if j.errors]
    print(f"\n{len(retried)} rows hit a transient error and succeeded on retry, e.g.:")
    for job in retried[:3]:
        print(f"  row {job.args[0]}: " + " → ".join(e.kind for e in job.events or []))


if __name__ == "__main__":
    sys.exit(main())
