"""A downstream service down for a span, with and without a breaker (docs/operations.md,
"Breakers"; issue 56's proof at its own size).

    python -m benchmarks.breaker_probe                        # 2,000 jobs, 30 s of 503s
    python -m benchmarks.breaker_probe --jobs 200 --outage 3  # a smoke run

One HTTP stub in this process answers 503 from its first request for ``--outage`` seconds,
then 200. 2,000 jobs that each call it once run on one worker (a ``Launcher`` in this
process, ``-c 8``, a SQLite file), with the job's default retry policy (exponential backoff
with jitter, 25 retries): first with no breaker, then with ``Breaker("downstream",
open_after=5, within=60, cool_down=5)``. Printed per run: calls that got a 503 (the attempts
the outage spent), jobs that ended ``dead`` (their retries spent during the outage), how long
after the recovery every job had ended, and the breaker's trips. The tests assert the facts
(tests/faults/test_breaker_faults.py: a 3 s outage); this measures the figure.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conveyor import Breaker, Conveyor, current_job
from conveyor.core.ids import new_id
from conveyor.core.job import JobState
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher

APP = "benchmarks.breaker_probe:app"
COOL_DOWN = 5.0
app = Conveyor(os.environ.get("CONVEYOR_URL", "memory://"))


def call(url: str) -> int:
    """One request to the stub; a 503 raises (an ordinary error: retried by the policy)."""
    try:
        with urllib.request.urlopen(f"{url}?job={current_job().job_id}", timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as refused:
        raise ConnectionError(f"downstream answered {refused.code}") from None


plain = app.job(name="probe.call")(call)
guarded = app.job(name="probe.call_guarded",
                  breaker=Breaker("downstream", open_after=5, within=60.0,
                                  cool_down=COOL_DOWN))(call)


class Stub:
    """503 for ``outage`` seconds from the first request, then 200; counts the answers."""

    def __init__(self, outage: float) -> None:
        self.outage = outage
        self.first: float | None = None
        self.answers: Counter[int] = Counter()
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the http.server hook's name
                with stub.lock:
                    now = time.time()
                    stub.first = stub.first or now
                    status = 503 if now < stub.first + stub.outage else 200
                    stub.answers[status] += 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    @property
    def recovered_at(self) -> float | None:
        return None if self.first is None else self.first + self.outage

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run(jobs: int, outage: float, with_breaker: bool, folder: str,
        limit: float) -> dict[str, Any]:
    """One run on a fresh SQLite file; returns its figures."""
    app.close()
    app.url = f"sqlite:///{os.path.join(folder, new_id())}.db"
    stub = Stub(outage)
    job = guarded if with_breaker else plain
    launcher = Launcher(app, WorkerConfig(concurrency=8, app=APP))
    try:
        job.enqueue_many([(stub.url,)] * jobs)
        launcher.start()
        deadline = time.time() + outage + limit
        ended, trips = 0, 0
        while time.time() < deadline:
            ended = sum(app.storage.count_jobs(state=s)
                        for s in (JobState.SUCCEEDED, JobState.DEAD))
            # a breaker closed by its probe is forgotten: its trips are read while it is open
            trips = max([trips, *(b.trips for b in app.storage.breakers())])
            if ended >= jobs:
                break
            time.sleep(0.05)
        recovered = stub.recovered_at or time.time()
        after = sorted(rec.finished_at - recovered for rec in app.storage.list_jobs(limit=jobs)
                       if rec.finished_at is not None)
        return {"breaker": with_breaker, "jobs": jobs, "outage_s": outage,
                "calls_503": stub.answers[503], "calls_200": stub.answers[200],
                "dead": app.storage.count_jobs(state=JobState.DEAD),
                "not_ended": jobs - ended, "trips": trips,
                "half_ended_after_recovery_s": round(after[len(after) // 2], 2) if after else None,
                "all_ended_after_recovery_s": round(after[-1], 2) if after else None}
    finally:
        launcher.stop(10)
        stub.close()
        app.close()


def main() -> None:
    """Both runs, one after the other, printed as they end."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds after the outage a run may take to end every job")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        for with_breaker in (False, True):
            figures = run(args.jobs, args.outage, with_breaker, folder, args.limit)
            print("  ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
