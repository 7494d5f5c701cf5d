"""The memory backend's ``Inspector.gate_facts``: what holds a job back, read under the lock
from the structures its dequeue decides by (``storage/gates.py``)."""

from __future__ import annotations

from conveyor.core.breaker import CLOSED
from conveyor.core.job import JobState
from conveyor.storage.gates import FAIR_KEYS_SHOWN, GateFacts, Holder
from conveyor.storage.lineup import keys_before
from conveyor.storage.memory.entry import Entry, group_of
from conveyor.storage.memory.flow import ScanBudget
from conveyor.storage.memory.inspect import MemoryInspector
from conveyor.storage.memory.lineup import MemoryLineups, band_of, cost_of, key_of
from conveyor.storage.memory.outbox import MemoryOutbox
from conveyor.storage.memory.state import MemoryState

__all__ = ["MemoryGates"]


class MemoryGates:
    """``gate_facts`` over the memory backend's state (a part of ``MemoryStorage``)."""

    def __init__(self, state: MemoryState, inspector: MemoryInspector,
                 lineups: MemoryLineups, outbox: MemoryOutbox) -> None:
        self.state = state
        self._inspector = inspector
        self._lineups = lineups
        self._outbox = outbox

    def gate_facts(self, job_id: str, place: bool = True) -> GateFacts | None:
        """What the fetch would weigh for ``job_id`` now; None for an unknown id."""
        state = self.state
        with state.lock:
            entry = state.jobs.get(job_id)
            if entry is None:
                return None
            rec = entry.rec
            now = state.now()
            copy = self._inspector.get_job(job_id)
            assert copy is not None
            facts = GateFacts(job=copy, now=now, paused=rec.queue in state.paused,
                              band=band_of(rec, entry.band))
            flow = rec.flow
            if flow is not None and flow.aging > 0:
                facts.age_next = entry.age_next
            if rec.state is JobState.PENDING:
                self._limits(entry, facts)
                if place:
                    self._place(entry, facts, now)
                facts.published = self._outbox.published(job_id, entry.version)
            elif rec.state is JobState.WAITING and job_id in state.nodes:
                facts.parents = [Holder(p, state.jobs[p].rec.state.value)
                                 for p in state.nodes[job_id].node.parents
                                 if p in state.jobs and not state.jobs[p].rec.state.terminal]
            elif rec.state is JobState.AGGREGATING:
                group = state.groups.get(group_of(rec))
                facts.members = len(state.members.get(group_of(rec), {}))
                facts.flush_at = None if group is None else group.flush_at
            return facts

    def _limits(self, entry: Entry, facts: GateFacts) -> None:
        flow, state = entry.rec.flow, self.state
        if flow is None:
            return
        if flow.concurrency_key:
            facts.concurrency = [
                Holder(e.rec.id, e.rec.state.value, e.rec.started_at, cost_of(e.rec))
                for i in state.active if (e := state.jobs[i]).rec.flow is not None
                and e.rec.flow.concurrency_key == flow.concurrency_key]
        if flow.order_key:
            holder = state.flow.order_holder(flow.order_key)
            if holder is not None and holder != entry.rec.id:
                held = state.jobs[holder].rec
                facts.order_holder = Holder(holder, held.state.value,
                                            held.started_at if held.state is JobState.ACTIVE
                                            else held.run_at)
        if flow.rate_key and flow.rate_limit > 0:
            facts.rate_starts = state.flow.starts(flow.rate_key, flow.rate_period, facts.now)
        row = state.flow.breakers.get(flow.breaker_key) if flow.breaker_key else None
        if row is not None and row.state != CLOSED:
            facts.breaker = row.view(facts.now)

    def _place(self, entry: Entry, facts: GateFacts, now: float) -> None:
        """Where the job stands in its queue's lineup (or arrival order)."""
        rec, state = entry.rec, self.state
        if not state.lined.get(rec.queue):
            facts.earlier = list(state.pending[rec.queue]).index(rec.id)
            return
        txn = self._lineups.lineup(rec.queue, now, ScanBudget())
        band, key = facts.band, key_of(rec)
        pending = [(state.jobs[i].rec, band_of(state.jobs[i].rec, state.jobs[i].band))
                   for i in state.pending[rec.queue]]
        facts.higher = sum(1 for _, b in pending if b > band)
        facts.earlier = [r.id for r, b in pending if b == band and key_of(r) == key].index(rec.id)
        facts.keys_before, facts.keys_before_count = keys_before(txn, band, key,
                                                                 FAIR_KEYS_SHOWN)
