"""Dramatiq with the Redis broker, or its RabbitMQ broker (pika) when ``BENCH_AMQP_URL`` is
set: ``dramatiq -p P -t C`` (processes x threads).

Results middleware (Redis backend) only for the tracked actor used by W4/storage.
"""

from __future__ import annotations

import os
import sys
import time

import body
import dramatiq
from common import QUEUE, Peer, main, paced
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend as RateLimiterBackend
from dramatiq.results import ResultMissing, Results
from dramatiq.results.backends import RedisBackend

_url = os.environ.get("BENCH_DONE_URL", "redis://")
_amqp = os.environ.get("BENCH_AMQP_URL", "")
if _amqp:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    broker: dramatiq.Broker = RabbitmqBroker(url=_amqp)
else:
    broker = RedisBroker(url=_url)
broker.add_middleware(Results(backend=RedisBackend(url=_url)))
# A group's completion callback needs a barrier in a rate-limiter backend (Dramatiq's docs).
broker.add_middleware(GroupCallbacks(RateLimiterBackend(url=_url)))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def job(kind: str, ts: float) -> None:
    """The shared body."""
    body.run(kind, ts)


@dramatiq.actor(queue_name=QUEUE, max_retries=0, store_results=True)
def job_tracked(kind: str, ts: float) -> int:
    """The shared body, with its result stored."""
    body.run(kind, ts)
    return 1


@dramatiq.actor(queue_name=QUEUE, max_retries=0, store_results=True)
def joined() -> int:
    """A group's completion callback."""
    return 1


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def step(count: int) -> int:
    """A pipeline's step: the previous step's count, plus one (passed on by the pipeline)."""
    return count + 1


@dramatiq.actor(queue_name=QUEUE, max_retries=0, store_results=True)
def last_step(count: int) -> int:
    """The pipeline's last step, whose result is stored to be read."""
    return count + 1


class DramatiqPeer(Peer):
    """Dramatiq 2 on Redis or RabbitMQ."""

    name = "dramatiq"
    module = "dramatiq"

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        actor = job_tracked if kind == "tracked" else job
        for _ in paced(n, interval):
            actor.send(kind, time.time())

    def fanout(self, n: int, timeout: float) -> None:
        g = dramatiq.group(job_tracked.message("noop", 0.0) for _ in range(n))
        done = joined.message()
        g.add_completion_callback(done)
        g.run()
        # Polled: a blocking get outlasts the backend client's socket timeout on a long run.
        deadline = time.monotonic() + timeout
        while True:
            try:
                done.get_result()
                return
            except ResultMissing:
                if time.monotonic() > deadline:
                    raise TimeoutError("the completion callback did not run") from None
                time.sleep(0.001)

    def chain(self, n: int, timeout: float) -> None:
        pipe = dramatiq.pipeline([step.message(0), *(step.message() for _ in range(n - 2)),
                                  last_step.message()]).run()
        deadline = time.monotonic() + timeout
        while True:  # polled, as in fanout
            try:
                if pipe.get_result() != n:
                    raise AssertionError("the pipeline's last step did not count every step")
                return
            except ResultMissing:
                if time.monotonic() > deadline:
                    raise TimeoutError("the pipeline did not finish") from None
                time.sleep(0.001)

    def batch(self, n: int, timeout: float) -> None:
        g = dramatiq.group(job_tracked.message("noop", 0.0) for _ in range(n)).run()
        g.wait(timeout=int(timeout * 1000))

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        return [[sys.executable, "-m", "dramatiq", "dramatiq_peer", "-p", str(processes),
                 "-t", str(concurrency), "-Q", QUEUE]]


if __name__ == "__main__":
    main(DramatiqPeer)
