"""Celery with the Redis broker, or RabbitMQ when ``BENCH_AMQP_URL`` is set (pyamqp; results
stay in Redis). Variants: ``prefork`` (one child per process) and ``threads``.

Settings: JSON serializer, results ignored except for the tracked task (W4/storage), prefetch
multiplier 16 (Celery's "Optimizing" guide: raise it for many short tasks), and the worker flags
``--without-gossip --without-mingle --without-heartbeat`` that production guides recommend.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import body
from celery import Celery, chord, group
from celery import chain as celery_chain
from common import QUEUE, Peer, main, paced

_amqp = os.environ.get("BENCH_AMQP_URL", "")
app = Celery("bench", broker=("py" + _amqp) if _amqp else os.environ.get("BENCH_DONE_URL",
                                                                        "redis://"),
             backend=os.environ.get("BENCH_DONE_URL", "redis://"))
app.conf.update(
    task_serializer="json", accept_content=["json"], result_serializer="json",
    task_ignore_result=True, worker_prefetch_multiplier=16, task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
)


@app.task(name="job")
def job(kind: str, ts: float) -> None:
    """The shared body."""
    body.run(kind, ts)


@app.task(name="job_tracked", ignore_result=False)
def job_tracked(kind: str, ts: float) -> None:
    """The shared body, with its result and state kept in the result backend."""
    body.run(kind, ts)


@app.task(name="joined", ignore_result=False)
def joined(results: list[Any]) -> int:
    """A chord's callback: runs once every header task has finished."""
    return len(results)


@app.task(name="step", ignore_result=False)
def step(count: int) -> int:
    """A chain's step: the previous step's count, plus one."""
    return count + 1


class CeleryPeer(Peer):
    """Celery 5 on Redis or RabbitMQ."""

    name = "celery"
    module = "celery"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.variant = cfg.get("variant", "prefork")

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        task = job_tracked if kind == "tracked" else job
        for _ in paced(n, interval):
            task.apply_async((kind, body.time.time()))

    def fanout(self, n: int, timeout: float) -> None:
        res = chord(job_tracked.s("noop", 0.0) for _ in range(n))(joined.s())
        res.get(timeout=timeout)

    def chain(self, n: int, timeout: float) -> None:
        res = celery_chain(step.s(0), *(step.s() for _ in range(n - 1)))()
        if res.get(timeout=timeout) != n:
            raise AssertionError("the chain's last step did not count every step")

    def batch(self, n: int, timeout: float) -> None:
        res = group(job_tracked.s("noop", 0.0) for _ in range(n)).apply_async()
        res.get(timeout=timeout)

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        base = [sys.executable, "-m", "celery", "-A", "celery_peer", "worker", "-Q", QUEUE,
                "-l", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        if self.variant == "prefork":
            return [[*base, "-P", "prefork", "-c", str(processes)]]
        return [[*base, "-P", "threads", "-c", str(concurrency), "-n", f"w{i}@%h"]
                for i in range(processes)]


if __name__ == "__main__":
    main(CeleryPeer)
