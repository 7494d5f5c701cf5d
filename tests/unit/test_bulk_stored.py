"""``bulk.stored``: the order in which blocks are made ready, joined ahead, sent and read."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.client.bulk import stored
from conveyor.core.job import EnqueueResult
from conveyor.storage.blocks import JobBlock

Log = list[str]


class FakeSent:
    def __init__(self, name: str, log: Log) -> None:
        self.name, self.log = name, log

    def result(self) -> Sequence[EnqueueResult]:
        self.log.append(f"result {self.name}")
        return [EnqueueResult(self.name, True)]


class FakeReady:
    def __init__(self, block: JobBlock, log: Log) -> None:
        self.name, self.log = block.ids[0], log
        log.append(f"prepare {self.name}")

    def ahead(self) -> None:
        self.log.append(f"ahead {self.name}")

    def send(self) -> FakeSent:
        self.log.append(f"send {self.name}")
        return FakeSent(self.name, self.log)


def _block(name: str) -> JobBlock:
    return JobBlock(name="t", queue="q", ids=[name], payloads=["[]"])


def test_a_block_is_joined_ahead_while_the_one_before_is_stored() -> None:
    log: Log = []
    pairs = [(_block(n), None) for n in ("a", "b", "c")]
    results = list(stored(pairs, store=lambda b: [], prepare=lambda b: FakeReady(b, log),
                          before=lambda b: None))
    assert [r[0].id for r in results] == ["a", "b", "c"]
    # The first block has nothing in flight before it: no ahead. Each later block does
    # its ahead part before the block before it is read, and is sent only after.
    assert log == ["prepare a", "send a",
                   "prepare b", "ahead b", "result a", "send b",
                   "prepare c", "ahead c", "result b", "send c",
                   "result c"]
