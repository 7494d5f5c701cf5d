"""Do long dashboard reads stall the other pages? ``/api/stats`` latency while searches and a
failures export run (issue 49, item 6). Run through ``admin_stall``:

``python -m benchmarks.admin_stall --web [--web-jobs 2000] [--arg-kb 100] [--export-rows
100000] [--src PATH/src]``

Fills a fresh SQLite file with ``--web-jobs`` pending jobs of ``--arg-kb`` KB arguments and a
batch of ``--export-rows`` failed jobs, serves ``conveyor web`` over it in a subprocess (the
conveyor of ``--src``, default this checkout: run it once with a checkout from before the
change to compare), and polls ``/api/stats`` every ~50 ms from its own thread through
phases: idle; three searches for a text no job holds, each abandoned after 0.3 s; one search
waited for; the export downloaded whole; the export abandoned after its first 64 KiB. Prints
per phase the wall time, the stats polls' p50/p99/max and the server's peak RSS.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor.core.ids import new_id
from conveyor.core.job import Ack, BatchSpec, JobSpec, Outcome
from conveyor.storage import open_storage

STEP = 1000


def fill(url: str, jobs: int, arg_kb: int, rows: int) -> str:
    """Pending jobs with big arguments, and a batch of ``rows`` failed jobs; the batch id."""
    store = open_storage(url)
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    for start in range(0, rows, STEP):
        count = min(STEP, rows - start)
        store.enqueue([JobSpec(id=new_id(), name="bench.row", queue="rows", batch_id=batch,
                               payload=json.dumps({"a": [start + n, "sku"], "k": {}}))
                       for n in range(count)])
        leased = store.dequeue(["rows"], "w-bench", count, 600.0)
        store.ack([Ack(job.id, job.token, Outcome.FAILED, message="bad SKU")
                   for job in leased])
    bulky = "x" * (arg_kb * 1024)
    for start in range(0, jobs, 100):  # after the batch: the newest, read first by a search
        store.enqueue([JobSpec(id=new_id(), name="bench.big", queue="big",
                               payload=json.dumps({"a": [n, bulky], "k": {}}))
                       for n in range(start, min(jobs, start + 100))])
    store.close_batch(batch)
    store.close()
    return batch


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(port: int, path: str, timeout: float = 120.0) -> tuple[int, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, len(reply.read())
    finally:
        conn.close()


def _abandon(port: int, path: str, after: float, read: int = 0) -> None:
    """Send a GET, read ``read`` bytes of the answer (or wait ``after`` s), hang up."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        got = 0
        while got < read:
            got += len(sock.recv(65536) or b"x" * read)
        if not read:
            time.sleep(after)


class Poller:
    """``/api/stats`` every ~50 ms, and the server's RSS, from a thread of its own."""

    def __init__(self, port: int, pid: int) -> None:
        self.port, self.pid = port, pid
        self.samples: list[tuple[float, float]] = []
        self.rss: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            start = time.monotonic()
            _get(self.port, "/api/stats")
            self.samples.append((start, (time.monotonic() - start) * 1000))
            status = Path(f"/proc/{self.pid}/status").read_text()
            kb = int(next(line.split()[1] for line in status.splitlines()
                          if line.startswith("VmRSS")))
            self.rss.append((time.monotonic(), kb))
            time.sleep(0.05)

    def between(self, start: float, end: float) -> dict[str, float]:
        """The polls in flight at any time in [start, end] (one that waited through the whole
        phase counts) and the peak RSS then."""
        got = [ms for ts, ms in self.samples if ts <= end and ts + ms / 1000 >= start]
        rss = [kb for ts, kb in self.rss if start <= ts <= end] or [0]
        ordered = sorted(got) or [0.0]
        return {"polls": len(got), "p50_ms": statistics.median(ordered),
                "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                "max_ms": max(ordered), "rss_mb": max(rss) / 1024}


def run(jobs: int, arg_kb: int, rows: int, src: str | None) -> list[dict[str, Any]]:
    """Every phase against one served dashboard; one row per phase."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'web.db'}"
        batch = fill(url, jobs, arg_kb, rows)
        port = _free_port()
        code = ("import sys; from conveyor.cli.main import main; "
                f"sys.argv = ['conveyor', 'web', '--url', {url!r}, '--port', '{port}']; main()")
        env = {**os.environ}
        if src:
            env["PYTHONPATH"] = src
        server = subprocess.Popen([sys.executable, "-c", code], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    _get(port, "/api/stats", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            poller = Poller(port, server.pid)
            poller.thread.start()
            export = f"/batches/{batch}/failures.csv"

            def abandoned_searches() -> None:
                threads = [threading.Thread(target=_abandon, args=(port, f"/jobs?q=zzz{n}", 0.3))
                           for n in range(3)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                time.sleep(8)  # what they leave running behind them

            phases: list[tuple[str, Callable[[], object]]] = [
                ("idle", lambda: time.sleep(3)),
                ("3 searches, abandoned", abandoned_searches),
                ("1 search, waited for", lambda: _get(port, "/jobs?q=zzz")),
                (f"export of {rows:,} rows", lambda: _get(port, export)),
                ("export abandoned at 64 KiB",
                 lambda: (_abandon(port, export, 0, 65536), time.sleep(5))),
            ]
            rows_out = []
            for name, action in phases:
                start = time.monotonic()
                action()
                end = time.monotonic()
                rows_out.append({"phase": name, "wall_s": end - start,
                                 **poller.between(start, end)})
            poller.stop.set()
            poller.thread.join(130)
        finally:
            server.terminate()
            server.wait(10)
    return rows_out


def report(jobs: int, arg_kb: int, rows: int, src: str | None) -> None:
    """Run and print the table."""
    print(f"conveyor web over SQLite: {jobs:,} jobs of {arg_kb} KB arguments, a batch of "
          f"{rows:,} failed jobs; /api/stats polled every ~50 ms ({src or 'this checkout'})")
    print(f"{'phase':30} {'wall s':>7} {'polls':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'RSS MB':>7}")
    for r in run(jobs, arg_kb, rows, src):
        print(f"{r['phase']:30} {r['wall_s']:7.2f} {r['polls']:6d} {r['p50_ms']:8.1f} "
              f"{r['p99_ms']:8.1f} {r['max_ms']:8.1f} {r['rss_mb']:7.1f}")
