"""The memory backend's durable records (``storage/durable.py``): dicts beside the jobs,
under the store's one lock, so every method is atomic as a script or a transaction is."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from conveyor.core.job import Ack, EventKind, JobState
from conveyor.core.steps import EVENT, DurableHistory, Message, Received, Step, Wait
from conveyor.storage.durable import (
    WOKEN_MESSAGE,
    kept_pick,
    merge,
    outcome_of,
    received,
    step_events,
)
from conveyor.storage.memory.entry import Entry
from conveyor.storage.memory.state import MemoryState

__all__ = ["DurableRows", "MemoryDurable"]


@dataclass(slots=True)
class DurableRows:
    """What the memory store keeps for durable jobs."""

    steps: dict[str, dict[str, Step]] = field(default_factory=dict)
    waits: dict[str, Wait] = field(default_factory=dict)
    inbox: dict[str, list[Message]] = field(default_factory=dict)
    # (event name, key) -> ids of the jobs whose wait listens for it (an answered wait stays
    # registered until its job takes the answer, but no longer listens)
    listeners: dict[tuple[str, str], dict[str, None]] = field(
        default_factory=lambda: defaultdict(dict))
    kept: list[tuple[Message, float]] = field(default_factory=list)  # (event, kept until)

    def forget(self, job_id: str) -> None:
        """Drop a deleted job's records."""
        self.steps.pop(job_id, None)
        self.inbox.pop(job_id, None)
        self.unwait(job_id)

    def unlisten(self, job_id: str) -> None:
        """The job's wait hears no more events."""
        wait = self.waits.get(job_id)
        if wait is not None and wait.kind == EVENT:
            self.listeners[(wait.name, wait.key)].pop(job_id, None)

    def unwait(self, job_id: str) -> None:
        """The job waits for nothing."""
        self.unlisten(job_id)
        self.waits.pop(job_id, None)

    def answers(self, job_id: str) -> bool:
        """True when the job's wait has a message waiting for it in its inbox."""
        wait = self.waits.get(job_id)
        return wait is not None and any(m.matches(wait) for m in self.inbox.get(job_id, ()))

    def taken(self, job_id: str) -> set[str]:
        """Ids of the messages the job received."""
        return {s.origin for s in self.steps.get(job_id, {}).values() if s.origin}


class MemoryDurable:
    """``DurableStore`` over a ``MemoryState`` (its lock, jobs and moves)."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        self._rows = DurableRows()
        state.forgets.append(self._rows.forget)

    def read(self, job_id: str) -> DurableHistory:
        """The job's steps, wait and inbox size."""
        with self._state.lock:
            rows = self._rows
            return DurableHistory(list(rows.steps.get(job_id, {}).values()),
                                  rows.waits.get(job_id), len(rows.inbox.get(job_id, ())))

    def save_steps(self, job_id: str, token: str, steps: Sequence[Step]) -> bool:
        """Record steps of the running job, fenced by its lease."""
        with self._state.lock:
            entry = self._state.holder(job_id, token)
            if entry is None:
                return False
            mine = self._rows.steps.setdefault(job_id, {})
            saved = [s for s in steps if merge(mine.get(s.name), s) is s]
            mine.update((s.name, s) for s in saved)
            self._log(entry, saved)
            return True

    def receive(self, job_id: str, token: str, wait: Wait) -> Received | None:
        """Register the wait and take what answers it; see ``DurableStore.receive``."""
        with self._state.lock:
            entry = self._state.holder(job_id, token)
            if entry is None:
                return None
            rows, now = self._rows, self._state.now()
            done = rows.steps.get(job_id, {}).get(wait.step)
            if done is not None and done.final:
                return received(done)
            stored = rows.waits.get(job_id)
            if stored is None or stored.step != wait.step:
                rows.unwait(job_id)
                stored = rows.waits[job_id] = Wait(wait.kind, wait.step, wait.name, wait.key,
                                                   wait.until, wait.window, since=now)
                if stored.kind == EVENT:
                    rows.listeners[(stored.name, stored.key)][job_id] = None
            inbox = rows.inbox.get(job_id, [])
            message = next((m for m in inbox if m.matches(stored)), None)
            if message is not None:
                inbox.remove(message)
            else:
                self._drop_expired(now)
                message = kept_pick((m for m, _ in rows.kept), stored, rows.taken(job_id))
            if message is None and now < stored.until:
                return Received(False, until=stored.until)
            step = outcome_of(stored, message, now, entry.rec.attempt)
            rows.steps.setdefault(job_id, {})[step.name] = step
            rows.unwait(job_id)
            self._log(entry, [step])
            return received(step)

    def send(self, job_id: str, message: Message) -> bool | None:
        """Put a message in a job's inbox, waking the job if it waits for it."""
        with self._state.lock:
            entry = self._state.jobs.get(job_id)
            if entry is None:
                return None
            if entry.rec.state.terminal:
                return False
            self._deliver(entry, replace(message, sent_at=self._state.now()))
            return True

    def send_event(self, message: Message, keep: float) -> int:
        """Deliver an event to every wait listening for it; keep it ``keep`` seconds."""
        with self._state.lock:
            now = self._state.now()
            message = replace(message, sent_at=now)  # the store's clock stamps it
            self._drop_expired(now)
            if keep > 0:
                self._rows.kept.append((message, now + keep))
            reached = 0
            for job_id in list(self._rows.listeners.get((message.name, message.key), {})):
                entry = self._state.jobs.get(job_id)
                if entry is None:
                    self._rows.unwait(job_id)
                    continue
                if entry.rec.state.terminal:  # its wait stays, for a retry by hand
                    continue
                self._rows.unlisten(job_id)  # a wait takes one event: the first to reach it
                self._deliver(entry, message)
                reached += 1
            return reached

    def _deliver(self, entry: Entry, message: Message) -> None:
        inbox = self._rows.inbox.setdefault(entry.rec.id, [])
        if any(m.id == message.id for m in inbox) or message.id in self._rows.taken(entry.rec.id):
            return  # the same message sent again (a retried send): stored once
        inbox.append(message)
        self.suspended(entry)

    def suspend(self, entry: Entry, ack: Ack, now: float, message: str | None) -> None:
        """Apply a SUSPENDED ack: ``scheduled`` until ``resume_at``."""
        rec = entry.rec
        rec.run_at = now if ack.resume_at is None else ack.resume_at
        self._state.move(entry, JobState.SCHEDULED, EventKind.SUSPENDED, now,
                          worker=rec.worker, message=message, data={"until": rec.run_at})
        self.suspended(entry)

    def suspended(self, entry: Entry) -> None:
        """A scheduled job whose wait has its answer in the inbox is made pending: at a
        delivery, and right after a SUSPENDED ack (the answer came while it was leaving its
        worker)."""
        if entry.rec.state is JobState.SCHEDULED and self._rows.answers(entry.rec.id):
            entry.rec.message = WOKEN_MESSAGE
            self._state.move(entry, JobState.PENDING, EventKind.WOKEN, self._state.now(),
                              message=WOKEN_MESSAGE)

    def _drop_expired(self, now: float) -> None:
        self._rows.kept = [(m, until) for m, until in self._rows.kept if until > now]

    @staticmethod
    def _log(entry: Entry, steps: Sequence[Step]) -> None:
        assert entry.rec.events is not None
        entry.rec.events.extend(step_events(steps))
