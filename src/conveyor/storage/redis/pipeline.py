"""A bulk block's enqueue.lua calls, made ready beforehand, written at once, read later.

The client's bulk path overlaps the two halves of storing (``SendsBlocks``): while Redis
runs block k's script call, the caller builds block k+1 and makes its call ready (``Ready``:
the static JSONs, the arguments, the bytes on the wire). Once block k's reply is read,
block k+1's call is written straight away, on a connection that stays the caller's until its
reply is read (``Link.send``), so Redis waits for no more than a write between the two; and
no thread stands in between (a thread that needs the GIL back to read a reply waits for the
caller's thread to give it up, and Redis waits with it).

Nothing is written for a block before the reply of the block before it is read, so blocks
are stored one after the other in order, and a block that fails leaves everything after it
unsent. A block of a batch joins it (its own round trip) before its call is written. A call
that cannot go straight to its node, or whose reply is an outage, a missing script or a
Cluster redirect, is run again the ordinary way (``Scripts.run``: retried, reloaded,
redirected); enqueue.lua is safe to run again, a job that exists already is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from conveyor.core.ids import generated
from conveyor.core.job import EnqueueResult, JobSpec
from conveyor.storage.blocks import BlockResults, JobBlock
from conveyor.storage.redis import codec
from conveyor.storage.redis.batches import RedisBatches
from conveyor.storage.redis.connection import REDIRECTS, TRANSIENT, _hiredis_pack
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.keys import QueueKeys

# A reply worth one more attempt the ordinary way: nothing was stored, or it is unknown.
AGAIN = (redis.exceptions.NoScriptError, *REDIRECTS, *TRANSIENT)


class Ready:
    """A block made ready to store (``SendsBlocks.prepare_block``): its first chunk's call
    is built and packed, nothing is written until ``send``.

    A block with flow control, an id twice, a caller-chosen id (``enqueue.taken``), or (in
    a batch) ids that cannot be joined by newlines is stored spec by spec instead, at
    ``send``.
    """

    def __init__(self, ctx: RedisContext, batches: RedisBatches,
                 enqueue: Callable[[Sequence[JobSpec]], list[EnqueueResult]], block: JobBlock,
                 chunk: int) -> None:
        self.ctx, self.batches, self.enqueue = ctx, batches, enqueue
        self.block, self.chunk = block, chunk
        self.by_spec = bool((block.flows is not None and any(block.flows))
                            or not codec.distinct(block.ids)
                            or not all(map(generated, block.ids))
                            or (block.batch_id and not codec.joinable(block.ids)))
        self.first: tuple[list[Any], tuple[Any, ...], list[bytes] | None] | None = None
        self.joined = False  # the whole block joined its batch already (``ahead``)
        if not self.by_spec and len(block):
            self.keys = ctx.register_queue(block.queue)
            self.shared = codec.block_args(block)
            args = self._args(0)
            command = ctx.scripts.command("enqueue", self.keys, args)
            self.first = args, command, _packed(command)

    def _args(self, start: int) -> list[Any]:
        block, end = self.block, start + self.chunk
        return [self.ctx.now_arg(), block.queue, "block", *self.shared,
                *block.ids[start:end], *codec.block_statics(block, start, end)]

    def ahead(self) -> None:
        """Join the batch now, while Redis still runs the block before (``Ready.ahead``)."""
        if self.block.batch_id and not self.by_spec and not self.joined:
            self._join(0, len(self.block))
            self.joined = True

    def _join(self, start: int, end: int) -> None:
        batches, block = self.batches, self.block
        joins = batches.state_at(block.run_at, block.queue)
        for first in range(start, end, self.chunk):
            batches.join_batch(str(block.batch_id), joins,
                               block.ids[first:min(first + self.chunk, end)])

    def send(self) -> Sent | Done:
        """Store the block: every chunk but the last one by one, the last one's call left
        in flight (``Sent.result`` reads it)."""
        ctx, block = self.ctx, self.block
        if self.by_spec:
            return Done(self.enqueue(block.specs()))
        done: list[BlockResults] = []
        last: Call | None = None
        for start in range(0, len(block), self.chunk):
            if last is not None:  # one chunk at a time, in order
                done.append(last.result())
            ids = block.ids[start:start + self.chunk]
            if block.batch_id and not self.joined:
                self._join(start, start + len(ids))
            if start == 0 and self.first is not None:
                args, command, packed = self.first
            else:
                args = self._args(start)
                command, packed = ctx.scripts.command("enqueue", self.keys, args), None
            last = Call(ctx, self.keys, block.queue, ids, args, command, packed)
        return Sent(done, last)


def _packed(command: tuple[Any, ...]) -> list[bytes] | None:
    """The wire form of ``command``, made now (None: ``Link.send`` makes it, or reports why
    it cannot, as redis-py would)."""
    if _hiredis_pack is None:  # pragma: no cover - hiredis comes with conveyor[redis]
        return None
    try:
        return [_hiredis_pack(command)]
    except TypeError:
        return None


class Call:
    """One enqueue.lua call in "block" layout for ``ids``, written when made."""

    def __init__(self, ctx: RedisContext, keys: QueueKeys, queue: str, ids: Sequence[str],
                 args: list[Any], command: tuple[Any, ...], packed: list[bytes] | None) -> None:
        self.ctx, self.keys, self.queue, self.ids, self.args = ctx, keys, queue, ids, args
        self.read: Callable[[], list[Any]] | None = None
        link = ctx.link
        # With wait_replicas the call goes the ordinary way, which waits for the replicas
        # (Link.raw_durable) before the block counts as stored.
        if link.same_node(command) and not link.settings.wait_replicas:
            node = link.node_of(command) if link.settings.cluster else None
            try:
                self.read = link.send([command], node, packed=packed)
            except TRANSIENT:
                self.read = None  # sent again in result(), with retries

    def result(self) -> BlockResults:
        """The reply, read (or the call run again, see the module docstring)."""
        reply = None
        if self.read is not None:
            read, self.read = self.read, None
            try:
                reply = read()[0]
            except AGAIN:
                reply = None
            except redis.ResponseError as exc:  # what Scripts.run would have raised
                located = self.ctx.scripts.scripts["enqueue"].located(exc)
                raise self.ctx.link.refused(located) from None
        if reply is None:
            reply = self.ctx.scripts.run("enqueue", self.keys, self.args)
        codes = str(reply)  # one character per job
        self.ctx.ring(self.queue, codes.count("1"))
        return BlockResults(self.ids, codes)


class Sent:
    """A block whose chunks before the last are stored, and whose last one is in flight."""

    def __init__(self, done: list[BlockResults], last: Call | None) -> None:
        self.done, self.last = done, last

    def result(self) -> BlockResults:
        """Every chunk's results, as one."""
        last, self.last = self.last, None  # read once, even when it raises
        if last is not None:
            self.done.append(last.result())
        if len(self.done) == 1:
            return self.done[0]
        return BlockResults([i for part in self.done for i in part.ids],
                            "".join(part.codes for part in self.done))


class Done:
    """A block stored job by job."""

    def __init__(self, results: list[EnqueueResult]) -> None:
        self.results = results

    def result(self) -> list[EnqueueResult]:
        """The results."""
        return self.results
