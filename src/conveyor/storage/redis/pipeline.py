"""A bulk block's enqueue.lua calls, written to the connection at once and read later.

The client's bulk path builds block k+1 while Redis stores block k (``SendsBlocks``): the
script call of block k is written to a connection that stays the caller's until its reply
is read, and no thread stands in between (a thread that needs the GIL back to read a reply
waits for the caller's thread to give it up, and Redis waits with it).

The reply is read before anything else is sent for the same call, so the blocks are stored
one after the other in order, and a block that fails leaves everything after it unsent.
A call that cannot go straight to its node, or whose reply is an outage, a missing script
or a Cluster redirect, is run again the ordinary way (``Scripts.run``: retried, reloaded,
redirected); enqueue.lua is safe to run again, a job that exists already is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
from conveyor.job import EnqueueResult
from conveyor.storage.records import BlockResults
from conveyor.storage.redis.connection import REDIRECTS, TRANSIENT
from conveyor.storage.redis.keys import QueueKeys

if TYPE_CHECKING:
    from conveyor.storage.redis.base import RedisBase

# A reply worth one more attempt the ordinary way: nothing was stored, or it is unknown.
AGAIN = (redis.exceptions.NoScriptError, *REDIRECTS, *TRANSIENT)


class Call:
    """One enqueue.lua call in "block" layout for ``ids``, sent when made."""

    def __init__(self, storage: RedisBase, keys: QueueKeys, queue: str, ids: Sequence[str],
                 args: list[Any]) -> None:
        self.storage, self.keys, self.queue, self.ids, self.args = storage, keys, queue, ids, args
        self.read: Callable[[], list[Any]] | None = None
        scripts = storage.scripts
        key_list = scripts.keys("enqueue", keys)
        command = ("EVALSHA", scripts.shas["enqueue"], len(key_list), *key_list, *args)
        link = storage.link
        if link.same_node(command):
            node = link.node_of(command) if link.settings.cluster else None
            try:
                self.read = link.send([command], node)
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
                located = self.storage.scripts.scripts["enqueue"].located(exc)
                raise self.storage.link.refused(located) from None
        if reply is None:
            reply = self.storage.scripts.run("enqueue", self.keys, self.args)
        codes = str(reply)  # one character per job
        self.storage.ring(self.queue, codes.count("1"))
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
    """A block already stored (job by job: flow control, or ids the layout cannot take)."""

    def __init__(self, results: list[EnqueueResult]) -> None:
        self.results = results

    def result(self) -> list[EnqueueResult]:
        """The results."""
        return self.results
