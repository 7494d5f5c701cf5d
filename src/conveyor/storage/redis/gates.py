"""Redis's ``Inspector.gate_facts``: what holds a job back, read from the keys its
``dequeue.lua`` decides by (``storage/gates.py``): the queue's meta (paused), active zset and
flow hash (concurrency holders, order holders), rate log (``lua/_rates.lua``), breakers hash
(``lua/_breakers.lua``), parked zset and pending list (the order jobs are popped in), the
published zset (with a broker), a workflow's graph hash and an aggregation group's record; its
place in its queue's lineup from the lineup zset (``lua/_lineup.lua``), its turn order through
the same reads ``dequeue.lua`` makes.

One approximation: in the turn of the jobs without a fair key at priority 0, the walk
interleaves plain jobs and lined ones by when each became pending; ``earlier`` counts the
jobs of the job's own kind ahead of it (list and parked, or lineup)."""

from __future__ import annotations

import struct

from conveyor.core.job import JobRecord, JobState
from conveyor.storage.gates import FAIR_KEYS_SHOWN, GateFacts, Holder
from conveyor.storage.graph import parents_of
from conveyor.storage.lineup import keys_before
from conveyor.storage.redis.breakers import RedisBreakers
from conveyor.storage.redis.connection import Link
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.inspect import RedisInspector
from conveyor.storage.redis.keys import QueueKeys

__all__ = ["RedisGates"]

PLAIN = b"100"  # the lineup's band of priority 0 (lua/_lineup.lua)

_UNSETTLED = frozenset({"pending", "active", "scheduled", "retrying", "waiting",
                        "aggregating"})


class RedisGates:
    """``gate_facts`` over one Redis deployment (a part of ``RedisStorage``)."""

    def __init__(self, ctx: RedisContext, inspector: RedisInspector,
                 breakers: RedisBreakers) -> None:
        self.ctx = ctx
        self.link = ctx.link
        self._inspector = inspector
        self._breakers = breakers

    def gate_facts(self, job_id: str, place: bool = True) -> GateFacts | None:
        """What the fetch would weigh for ``job_id`` now; None for an unknown id."""
        record = self._inspector.get_job(job_id)
        if record is None:
            return None
        qk = self.ctx.keys.queue(record.queue)
        facts = GateFacts(job=record, now=self.ctx.now())
        facts.paused = bool(self.link.call("HEXISTS", qk.meta, "paused"))
        member = self.link.call("HGET", qk.lined, job_id)
        line = str(member).encode("utf-8", "surrogateescape") if member else None
        if line is not None:
            facts.band = 100 - int(line[:3])
            facts.age_next = self.link.call("ZSCORE", qk.aging, job_id)
        if record.state is JobState.PENDING:
            self._limits(qk, facts)
            facts.published = self.link.call("ZSCORE", qk.published, job_id) is not None
            if place:
                self._place(qk, facts, line)
        elif record.state is JobState.WAITING and record.batch_id:
            facts.parents = self._parents(record)
        elif record.state is JobState.AGGREGATING and record.flow is not None:
            group = self.link.call("HGET", qk.groups,
                                   f"{record.name}\x1f{record.flow.group_key or ''}")
            if group:  # "first|last|size|flush_at|…" (lua/_groups.lua)
                parts = str(group).split("|")
                facts.members, facts.flush_at = int(parts[2]), float(parts[3])
        return facts

    def _limits(self, qk: QueueKeys, facts: GateFacts) -> None:
        """The holders of the job's concurrency and order keys, its rate key's window: the
        counts and holders ``lua/_admit.lua`` reads, kept per queue."""
        flow = facts.job.flow
        if flow is None:
            return
        if flow.concurrency_key:
            active = self.link.call("ZRANGE", qk.active, 0, -1)
            facts.concurrency = [  # each counts 1 here: cost is not built on Redis yet
                Holder(r.id, r.state.value, r.started_at) for r in
                self.ctx.records(facts.job.queue, active, with_events=False)
                if r.flow is not None and r.flow.concurrency_key == flow.concurrency_key]
        if flow.order_key:
            holder = self.link.call("HGET", qk.flow, f"o:{flow.order_key}")
            if holder and holder != facts.job.id:
                held = self.ctx.records(facts.job.queue, [holder], with_events=False)
                facts.order_holder = _holder(held[0]) if held else Holder(holder, "unknown")
        if flow.rate_key and flow.rate_limit > 0:
            facts.rate_starts = self._starts(qk, flow.rate_key, flow.rate_period, facts.now)
        if flow.breaker_key:  # its queue's breaker of the key (lua/_breakers.lua)
            facts.breaker = self._breakers.breaker(facts.job.queue, flow.breaker_key)

    def _starts(self, qk: QueueKeys, key: str, period: float, now: float) -> list[float]:
        """Start times of rate key ``key`` within ``(now - period, now]``, from its log: the
        members "<byte length>:<key>" + the time as a big-endian double + a tag."""
        prefix = f"{len(key.encode())}:{key}".encode()
        members = self.link.call("ZRANGEBYLEX", qk.rates, b"[" + prefix, b"(" + prefix + b"\x80")
        starts = []
        for member in members:
            raw = str(member).encode("utf-8", "surrogateescape")[len(prefix):len(prefix) + 8]
            if len(raw) == 8 and (at := struct.unpack(">d", raw)[0]) > now - period:
                starts.append(at)
        return starts

    def _place(self, qk: QueueKeys, facts: GateFacts, line: bytes | None) -> None:
        """Where the job stands: higher priorities, keys before its own, jobs before it."""
        if not self.link.call("EXISTS", qk.lined):
            facts.earlier = self._earlier(qk, facts.job.id)
            return
        band = b"%03d" % (100 - facts.band)
        facts.higher = int(self.link.call("ZLEXCOUNT", qk.lineup, "-", b"(" + band))
        if band > PLAIN:
            facts.higher += sum(self.link.call_many(("LLEN", qk.pending), ("ZCARD", qk.parked)))
        key = b""
        if line is None:
            facts.earlier = self._earlier(qk, facts.job.id)
        else:
            key = line[3:line.index(b"\0", 3)]
            facts.earlier = int(self.link.call("ZLEXCOUNT", qk.lineup,
                                               b"[" + line[:line.index(b"\0", 3)] + b"\0",
                                               b"(" + line))
        facts.keys_before, facts.keys_before_count = keys_before(
            _FairKeys(self.link, qk), facts.band, key.decode(), FAIR_KEYS_SHOWN)

    def _earlier(self, qk: QueueKeys, job_id: str) -> int:
        """Jobs the fetch pops before this one: the parked ones first (held back before),
        then the list from its tail (oldest first). An entry dequeue would drop as stale (a
        job cancelled or deleted while pending) counts until it is dropped."""
        parked = self.link.call("ZRANK", qk.parked, job_id)
        if parked is not None:
            return int(parked)
        at = self.link.call("LPOS", qk.pending, job_id)
        if at is None:
            return 0
        size, held = self.link.call_many(("LLEN", qk.pending), ("ZCARD", qk.parked))
        return int(held) + int(size) - 1 - int(at)

    def _parents(self, record: JobRecord) -> list[Holder]:
        """The workflow parents not settled yet (the graph's node, the batch's states)."""
        assert record.batch_id is not None
        bk = self.ctx.keys.batch(record.batch_id)
        node = self.link.call("HGET", bk.graph, f"n:{record.id}")
        parents = list(parents_of(node))
        if not parents:
            return []
        states = self.link.call("HMGET", bk.jobs, *parents)
        return [Holder(p, str(s).partition(":")[0]) for p, s in zip(parents, states, strict=True)
                if s and str(s).partition(":")[0] in _UNSETTLED]


class _FairKeys:
    """``lineup.FairKeys`` over one queue's lineup zset: dequeue.lua's ``next_key``."""

    def __init__(self, link: Link, qk: QueueKeys) -> None:
        self.link, self.qk = link, qk

    def next_key(self, band: int, after: str | None) -> str | None:
        """The first key after ``after`` with a pending job at ``band``."""
        at = b"%03d" % (100 - band)
        start = b"[" + at + b"\1"
        if after is None:
            if self.link.call("ZRANGEBYLEX", self.qk.lineup, b"[" + at + b"\0",
                              b"(" + at + b"\1", "LIMIT", 0, 1) or (
                    at == PLAIN and sum(self.link.call_many(("LLEN", self.qk.pending),
                                                            ("ZCARD", self.qk.parked)))):
                return ""
        elif after:
            start = b"[" + at + after.encode() + b"\1"
        found = self.link.call("ZRANGEBYLEX", self.qk.lineup, start, b"(" + at + b"\xff",
                               "LIMIT", 0, 1)
        if not found:
            return None
        member = str(found[0]).encode("utf-8", "surrogateescape")
        return member[3:member.index(b"\0", 3)].decode()

    def pointer(self) -> str | None:
        """The fair key served last in the queue."""
        found = self.link.call("HGET", self.qk.meta, "fair")
        return None if found is None else str(found)


def _holder(rec: JobRecord) -> Holder:
    return Holder(rec.id, rec.state.value,
                  rec.started_at if rec.state is JobState.ACTIVE else rec.run_at)
