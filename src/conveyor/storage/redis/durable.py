"""The Redis backend's durable records (``storage/durable.py``): a job's steps, wait and
inbox live in its queue's slot (``keys.QueueKeys``: steps, waits, inbox, listeners), so each
transition is one script there (``lua/steps.lua``, ``receive.lua``, ``deliver.lua``); events
kept for later waits live in the ``{events}`` slot (``lua/kept.lua``).

An event reaches waits in every queue: ``send_event`` keeps it first (when asked to), then
runs ``deliver.lua`` queue by queue. A wait registers before it reads the kept events (a
second ``receive.lua`` call takes one), so an event is either delivered to the registered
wait or read as kept: never missed by both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.core.steps import EVENT, DurableHistory, Message, Received, Step, Wait, step_event
from conveyor.storage.durable import WOKEN_MESSAGE
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.graph import RedisGraph

__all__ = ["RedisDurable"]

US, RS = "\x1f", "\x1e"  # lua/_durable.lua's separators


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisDurable:
    """``DurableStore`` over one Redis deployment (single server, Sentinel or Cluster); a
    delivery's moves (a woken batch job) are fed to ``graph.sync_batches``."""

    def __init__(self, ctx: RedisContext, graph: RedisGraph) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._graph = graph

    def read(self, job_id: str) -> DurableHistory:
        """The job's steps, wait and inbox size."""
        queue = self.ctx.find_queue(job_id)
        if queue is None:
            return DurableHistory()
        qk = self.keys.queue(queue)
        names, wait, inbox = self.link.call_many(
            ("HGET", qk.steps, job_id), ("HGET", qk.waits, job_id), ("HGET", qk.inbox, job_id))
        steps: list[Step] = []
        if names:
            wanted = [n for n in _text(names).split("\n") if n]
            if wanted:
                bodies = self.link.call("HMGET", qk.steps, *[job_id + US + n for n in wanted])
                steps = [Step.from_json(b, n) for n, b in zip(wanted, bodies, strict=True)
                         if b is not None]
        return DurableHistory(steps, None if wait is None else _wait(_text(wait)),
                              0 if not inbox else len(_text(inbox).split("\n")))

    def save_steps(self, job_id: str, token: str, steps: Sequence[Step]) -> bool:
        """Record steps of the running job, fenced by its lease (``steps.lua``)."""
        queue = self.ctx.find_queue(job_id, token)
        if queue is None:
            return False
        args: list[Any] = [self.ctx.now_arg(), queue, job_id, token]
        for step in steps:
            event = "" if step.status == "cursor" else step_event(step).to_json() + "\n"
            args += [step.name, step.to_json(), step.origin or "", event]
        return bool(self.scripts.run("steps", self.keys.queue(queue), args))

    def receive(self, job_id: str, token: str, wait: Wait) -> Received | None:
        """Register the wait and take what answers it (``receive.lua``; a second call with
        the kept events of an event wait that found nothing)."""
        queue = self.ctx.find_queue(job_id, token)
        if queue is None:
            return None
        reply = self._receive(queue, job_id, token, wait, [])
        if reply[0] == 0 and wait.kind == EVENT and wait.window > 0:
            kept = self.scripts.run("kept", self.keys.events, [
                self.ctx.now_arg(), "read", wait.name + US + wait.key])
            if kept:
                reply = self._receive(queue, job_id, token, wait, list(kept))
        if reply[0] < 0:
            return None
        data = None if reply[1] is None else _text(reply[1])
        return Received(reply[0] == 1, data, float(reply[2]))

    def _receive(self, queue: str, job_id: str, token: str, wait: Wait,
                 kept: list[Any]) -> list[Any]:
        reply: list[Any] = self.scripts.run("receive", self.keys.queue(queue), [
            self.ctx.now_arg(), queue, job_id, token, wait.kind, wait.step, wait.name,
            wait.key, repr(wait.until), repr(wait.window), *kept])
        return [int(reply[0]), *reply[1:]]

    def send(self, job_id: str, message: Message) -> bool | None:
        """Put a message in a job's inbox, waking it if it waits for it (``deliver.lua``)."""
        queue = self.ctx.find_queue(job_id)
        if queue is None:
            return None
        reached = self._deliver(queue, job_id, message)
        return None if reached < 0 else reached > 0

    def send_event(self, message: Message, keep: float) -> int:
        """Keep the event (``kept.lua``), then deliver it in every queue (``deliver.lua``)."""
        if keep > 0:
            self.scripts.run("kept", self.keys.events, [
                self.ctx.now_arg(), "add", message.name + US + message.key, message.id,
                message.data, repr(keep)])
        return sum(self._deliver(queue, "", message) for queue in self.ctx.known_queues())

    def _deliver(self, queue: str, job_id: str, message: Message) -> int:
        reached, woken, moves = self.scripts.run("deliver", self.keys.queue(queue), [
            self.ctx.now_arg(), queue, job_id, message.id, message.kind, message.name,
            message.key, message.data, WOKEN_MESSAGE])
        self._graph.sync_batches(moves)
        self.ctx.ring(queue, int(woken))
        return int(reached)

    def sweep(self) -> None:
        """Drop kept events past their time (the janitor's trim)."""
        self.scripts.run("kept", self.keys.events, [self.ctx.now_arg(), "sweep"])


def _wait(line: str) -> Wait | None:
    parts = line.split("\t")
    try:
        return Wait(kind=parts[0], step=parts[1], name=parts[2], key=parts[3],
                    until=float(parts[4]), window=float(parts[5]), since=float(parts[6]))
    except (IndexError, ValueError):
        return None
