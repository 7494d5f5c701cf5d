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

from conveyor.core.job import Ack, Outcome
from conveyor.storage.redis import codec
from conveyor.storage.redis.context import Move, RedisContext
from conveyor.storage.redis.graph import RedisGraph

__all__ = ["ACK_CHUNK", "ACK_PATIENCE", "RedisAcks"]

log = logging.getLogger("conveyor.storage.redis")

ACK_PATIENCE = 60.0  # an acknowledgement is retried through outages this long, never dropped
ACK_CHUNK = 1000  # acks per ack.lua call


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
        groups: dict[str, list[int]] = defaultdict(list)
        for i, ack in enumerate(acks):
            queue = self.ctx.find_queue(ack.job_id, ack.token)
            if queue is not None:
                groups[queue].append(i)
        for queue, idxs in groups.items():
            for start in range(0, len(idxs), ACK_CHUNK):
                self._ack_chunk(queue, acks, idxs[start:start + ACK_CHUNK], results)
        return results

    def _ack_chunk(self, queue: str, acks: Sequence[Ack], idxs: list[int],
                   results: list[bool]) -> None:
        later: list[int] = []
        intents: list[Move] = []  # outcomes about to be applied: the jobs are still ours
        moves: list[Move] = []  # what the store answered: applied before, or refused
        planned = self._ack_call(queue, acks, idxs, "plan")
        for i, (code, batch, value) in zip(idxs, planned, strict=True):
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
            for i, (code, batch, value) in zip(later, applied, strict=True):
                self._ack_result(acks[i], code, batch, value, results, i, moves)
            self._graph.sync_batches(moves)
        # A job put back in the queue (a stopping worker's "interrupted") is ready at once:
        # on Cluster the idle workers wait on the doorbell, which ack.lua cannot reach.
        back = sum(1 for code, _, value in [*planned, *applied]
                   if code == 1 and str(value).startswith("pending:"))
        self.ctx.ring(queue, back)

    def _ack_call(self, queue: str, acks: Sequence[Ack], idxs: list[int],
                  mode: str) -> list[list[object]]:
        args = [self.ctx.now_arg(), queue, mode]
        for i in idxs:
            fields = codec.ack_args(acks[i])
            if acks[i].outcome is Outcome.SUSPENDED and acks[i].resume_at is not None:
                fields[6] = repr(acks[i].resume_at)  # the wake time, in retry_in's place
            args.extend(fields)
        reply: list[list[object]] = self.scripts.run("ack", self.keys.queue(queue), args,
                                                     patience=ACK_PATIENCE)
        return reply

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
