"""A bulk block of jobs as the client's bulk path hands it to ``Storage.enqueue_block``, and
what became of its jobs (``BlockResults``). Plain data, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from conveyor.core.job import EnqueueResult, FlowControl, JobSpec


@dataclass(frozen=True, slots=True)
class JobBlock:
    """Many jobs of one name and queue with the same options, as columns: what the client's
    bulk path hands to ``Storage.enqueue_block``.

    Job ``i`` has the id ``ids[i]``, the payload ``payloads[i]`` and, when ``flows`` is given,
    the flow control ``flows[i]``; every other field is shared. It stands for exactly the
    ``JobSpec``s of ``specs()``, in that order.
    """

    name: str
    queue: str
    ids: Sequence[str]
    payloads: Sequence[str]
    max_retries: int = 25
    timeout: float | None = None
    deadline: float | None = None
    run_at: float | None = None
    batch_id: str | None = None
    flows: Sequence[FlowControl | None] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def specs(self) -> list[JobSpec]:
        """The block's jobs one by one."""
        flows = self.flows if self.flows is not None else [None] * len(self.ids)
        return [
            JobSpec(id=job_id, name=self.name, queue=self.queue, payload=payload,
                    max_retries=self.max_retries, timeout=self.timeout, deadline=self.deadline,
                    run_at=self.run_at, batch_id=self.batch_id, flow=flow)
            for job_id, payload, flow in zip(self.ids, self.payloads, flows, strict=True)
        ]


class BlockResults(Sequence[EnqueueResult]):
    """What became of a block's jobs, as a storage reports it in one string: job ``i`` is
    ``ids[i]``, created when ``codes[i]`` is "1". An ``EnqueueResult`` is made only for the
    jobs read one by one; the client's bulk path reads ``ids`` and ``all_created`` instead.
    """

    __slots__ = ("codes", "ids")

    def __init__(self, ids: Sequence[str], codes: str) -> None:
        if len(codes) != len(ids):
            raise ValueError(f"{len(codes)} result codes for {len(ids)} jobs")
        self.ids = ids
        self.codes = codes

    @property
    def all_created(self) -> bool:
        """Whether every job of the block was created (none existed already)."""
        return "0" not in self.codes

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> EnqueueResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[EnqueueResult]: ...

    def __getitem__(self, index: int | slice) -> EnqueueResult | list[EnqueueResult]:
        if isinstance(index, slice):
            return [EnqueueResult(i, c == "1")
                    for i, c in zip(self.ids[index], self.codes[index], strict=True)]
        return EnqueueResult(self.ids[index], self.codes[index] == "1")
