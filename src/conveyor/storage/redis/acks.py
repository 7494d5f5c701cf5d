"""``Storage.ack`` on Redis: outcomes applied by ``lua/ack.lua``, one call per queue and
``ACK_CHUNK`` acknowledgements, each fenced by its lease token.

A job of a batch is acknowledged in two steps ("plan", then "apply") so that its batch's
counters (in another hash slot on Cluster) are updated before the job leaves ``active``:
a crash between the two leaves a count that the next ack or repair confirms, never a job
the batch has lost.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from conveyor.core.job import Ack, Outcome
from conveyor.storage.redis import codec
from conveyor.storage.redis.connection import REDIRECTS
from conveyor.storage.redis.context import Move, RedisContext
from conveyor.storage.redis.graph import RedisGraph

__all__ = ["ACK_CHUNK", "ACK_PATIENCE", "Carried", "RedisAcks"]

log = logging.getLogger("conveyor.storage.redis")

ACK_PATIENCE = 60.0  # an acknowledgement is retried through outages this long, never dropped
ACK_CHUNK = 1000  # acks per ack.lua call


@dataclass(frozen=True)
class Carried:
    """Acks on their way with a lease: the acks, their chunks (queue, indexes into
    ``acks``) and each chunk's first ack.lua call, to send ahead of the lease."""

    acks: Sequence[Ack]
    chunks: list[tuple[str, list[int]]]
    commands: list[tuple[Any, ...]]


class RedisAcks:
    """The acknowledgement part of ``Storage`` on one Redis deployment; the moves are fed
    to ``graph.sync_batches`` (counters, then workflows)."""

    def __init__(self, ctx: RedisContext, graph: RedisGraph) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._graph = graph

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes; a batch job's batch is updated before the job is acknowledged."""
        results = [False] * len(acks)
        for queue, idxs in self._chunks(acks):
            self._ack_chunk(queue, acks, idxs, results)
        return results

    def carry(self, acks: Sequence[Ack]) -> Carried:
        """The first call of each chunk of ``acks`` (ack.lua's "plan", which applies the
        outcomes of jobs without a batch) as commands to send ahead of a lease, in the same
        write (``storage/redis/leases.py``); ``finish`` takes their replies."""
        chunks = self._chunks(acks)
        commands = [self.scripts.command("ack", self.keys.queue(queue),
                                         self._ack_args(queue, acks, idxs, "plan"))
                    for queue, idxs in chunks]
        return Carried(acks, chunks, commands)

    def finish(self, carried: Carried, replies: Sequence[Any]) -> tuple[list[bool], bool]:
        """Complete carried acks from the replies of their ``carry`` commands, as ``ack``
        completes its own calls (a batch job's second step, batch counters, workflows); a
        chunk whose script did not run (NOSCRIPT, a slot that moved) is acknowledged anew,
        after the lease: the second value says so. A script error is raised once every
        other chunk is complete."""
        acks, results = carried.acks, [False] * len(carried.acks)
        error: Exception | None = None
        late = False
        for (queue, idxs), reply in zip(carried.chunks, replies, strict=True):
            if isinstance(reply, (redis.exceptions.NoScriptError, *REDIRECTS)):
                self._ack_chunk(queue, acks, idxs, results)
                late = True
            elif isinstance(reply, Exception):
                if isinstance(reply, redis.ResponseError):
                    reply = self.scripts.scripts["ack"].located(reply)
                error = error or self.link.refused(reply)
            else:
                self._ack_chunk(queue, acks, idxs, results, reply)
        if error is not None:
            raise error
        return results, late

    def _chunks(self, acks: Sequence[Ack]) -> list[tuple[str, list[int]]]:
        """The indexes of ``acks`` per ack.lua call: by queue, ``ACK_CHUNK`` at most."""
        groups: dict[str, list[int]] = defaultdict(list)
        for i, ack in enumerate(acks):
            queue = self.ctx.find_queue(ack.job_id, ack.token)
            if queue is not None:
                groups[queue].append(i)
        return [(queue, idxs[start:start + ACK_CHUNK]) for queue, idxs in groups.items()
                for start in range(0, len(idxs), ACK_CHUNK)]

    def _ack_chunk(self, queue: str, acks: Sequence[Ack], idxs: list[int],
                   results: list[bool], planned: list[list[object]] | None = None) -> None:
        later: list[int] = []
        intents: list[Move] = []  # outcomes about to be applied: the jobs are still ours
        moves: list[Move] = []  # what the store answered: applied before, or refused
        if planned is None:
            planned = self._ack_call(queue, acks, idxs, "plan")
        for i, (code, batch, value, *_) in zip(idxs, planned, strict=True):
            if code == 2:
                later.append(i)
                intents.append((str(batch), acks[i].job_id, str(value)))
            else:
                self._ack_result(acks[i], code, batch, value, results, i, moves)
        # Counted before the jobs leave active; a workflow's marks are settled only once the
        # outcomes stand (below): a refused one releases nothing. A refused ack reports the
        # job as its new holder has it, who may finish it before the report lands: that
        # report is confirmed (RedisBatches.confirm), an intent is not (it is ours).
        self._graph.sync_batches(intents, settle=False, confirm=False)
        self._graph.sync_batches(moves, settle=False)
        applied: list[list[object]] = []
        if later:
            moves = []
            applied = self._ack_call(queue, acks, later, "apply")
            for i, (code, batch, value, *_) in zip(later, applied, strict=True):
                self._ack_result(acks[i], code, batch, value, results, i, moves)
            self._graph.sync_batches(moves)
        # A job put back in the queue (a stopping worker's "interrupted") is ready at once,
        # and so is a job its key held when a keyed run ended (ack.lua's ``frees``): on
        # Cluster the idle workers wait on the doorbell, which ack.lua cannot reach.
        ready = sum(1 for code, _, value, *frees in [*planned, *applied]
                    if code == 1 and (str(value).startswith("pending:") or frees == [1]))
        self.ctx.ring(queue, ready)

    def _ack_call(self, queue: str, acks: Sequence[Ack], idxs: list[int],
                  mode: str) -> list[list[object]]:
        reply: list[list[object]] = self.scripts.run(
            "ack", self.keys.queue(queue), self._ack_args(queue, acks, idxs, mode),
            patience=ACK_PATIENCE)
        return reply

    def _ack_args(self, queue: str, acks: Sequence[Ack], idxs: list[int],
                  mode: str) -> list[Any]:
        args: list[Any] = [self.ctx.now_arg(), queue, mode]
        for i in idxs:
            fields = codec.ack_args(acks[i])
            if acks[i].outcome is Outcome.SUSPENDED and acks[i].resume_at is not None:
                fields[6] = repr(acks[i].resume_at)  # the wake time, in retry_in's place
            args.extend(fields)
        return args

    @staticmethod
    def _ack_result(ack: Ack, code: object, batch: object, value: object,
                    results: list[bool], i: int, moves: list[Move]) -> None:
        results[i] = code == 1
        if code != 1:
            log.warning("acknowledgement of job %s refused: its lease is no longer token %s",
                        ack.job_id, ack.token)
        if batch:
            # Applied: confirms the count. Refused: re-syncs the batch with the real state.
            moves.append((str(batch), ack.job_id, str(value)))
