"""RQ. Variants: ``default`` (the forking Worker: one fork per job) and ``simple``
(SimpleWorker: jobs run in the worker process). One job at a time per worker process, so total
concurrency is the number of worker processes. Results are kept 500 s (RQ's default) only for
the tracked form; the plain job uses ``result_ttl=0``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from common import QUEUE, Peer, main, paced
from rq import Queue
from rq.group import Group

from redis import Redis

FUNC = "body.run"


class RQPeer(Peer):
    """RQ on Redis."""

    name = "rq"
    module = "rq"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.variant = cfg.get("variant", "default")
        self.conn = Redis.from_url(self.url)
        self.q = Queue(QUEUE, connection=self.conn)

    def _ttl(self, kind: str) -> int:
        return 500 if kind == "tracked" else 0

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        ttl = self._ttl(kind)
        for _ in paced(n, interval):
            self.q.enqueue(FUNC, kind, time.time(), result_ttl=ttl)

    def enqueue_bulk(self, kind: str, n: int) -> None:
        ttl = self._ttl(kind)
        datas = [Queue.prepare_data(FUNC, (kind, 0.0), result_ttl=ttl) for _ in range(n)]
        for start in range(0, n, 1000):  # one pipeline per 1,000 jobs
            self.q.enqueue_many(datas[start:start + 1000])

    def batch(self, n: int, timeout: float) -> None:
        group = Group.create(connection=self.conn)
        datas = [Queue.prepare_data(FUNC, ("noop", 0.0), result_ttl=500) for _ in range(n)]
        group.enqueue_many(self.q, datas)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = Group.fetch(group.name, self.conn).get_jobs()
            if all(j.get_status(refresh=False) == "finished" for j in jobs):
                return
            time.sleep(0.01)
        raise TimeoutError("group not finished")

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        cls = "rq.worker.SimpleWorker" if self.variant == "simple" else "rq.worker.Worker"
        return [[sys.executable, "-m", "rq.cli", "worker", QUEUE, "-u", self.url, "-w", cls,
                 "--quiet", "-n", f"w{i}-{time.time_ns()}"] for i in range(processes)]


if __name__ == "__main__":
    main(RQPeer)
