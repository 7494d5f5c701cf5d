"""Every Redis key name conveyor uses, and nothing else spells one.

All keys of a queue share the hash tag ``{q:<queue>}`` and all keys of a batch the tag
``{b:<batch id>}``, so each Lua script touches a single slot and runs on Redis Cluster.
Registries (queues, batches, workers) are plain keys only written outside scripts; the
schedules' keys share the tag ``{schedules}`` (``ScheduleKeys``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue (all in one hash slot)."""

    jobs: str  # hash: job id -> static JSON (name, payload, options), written once
    state: str  # hash: job id -> TAB-separated mutable fields, "\n", NDJSON event log
    pending: str  # list: LPUSH new, RPOP oldest
    scheduled: str  # zset: run_at
    active: str  # zset: lease expiry
    retrying: str  # zset: next run
    succeeded: str  # zset: finished_at
    failed: str
    dead: str
    cancelled: str
    meta: str  # hash: paused flag, outcome counters
    notify: str  # list: wake-up tokens for idle workers (BLPOP)
    unique: str  # hash: unique key -> "expiry|job id"
    results: str  # hash: job id -> result JSON of a succeeded job
    messages: str  # hash: job id -> the job's last message (failure reason, error)
    parked: str  # zset: pending jobs held back by flow control, in the order they were popped
    flow: str  # hash: concurrency counts, order-key holders
    repair: str  # string, with a TTL: set by the worker that runs this queue's repair pass
    # zset, all scores 0: the sliding log of start times per rate key (see lua/_rates.lua)
    rates: str
    rate_ends: str  # zset: rate key -> when its newest start leaves the window
    # zset, with a broker: pending jobs handed to a relay to publish -> when they are due to be
    # published again if no worker has started them by then (docs/internals/outbox.md)
    published: str
    waiting: str  # zset: workflow nodes waiting for their parents -> when stored
    # Aggregation groups (lua/_groups.lua): members by state (zset id -> arrival), each
    # group's record (hash "name\x1fkey" -> "first|last|size|flush_at|lead|grace|delay|max"),
    # groups by flush time (zset), and members by group then arrival (zset, all scores 0:
    # "name\x1fkey\0<arrival>\0<id>", so one group's oldest are a lex range)
    aggregating: str
    groups: str
    group_due: str
    group_members: str
    # set: ids of jobs a caller waits on (JobRef.aresult); ack.lua publishes the id of each
    # that ends on the channel of the same name
    waiters: str
    # hash: the last day's outcomes per minute, a ring of 1,440 fields (lua/_counts.lua)
    history: str
    # A queue's lineup (lua/_lineup.lua, docs/scheduling.md): the pending jobs with a
    # priority, aging, a fair key or a cost (zset, all scores 0: "<100 - priority><fair
    # key>\0<arrival>\0<id>"), each one's entry there (hash id -> member), and when aging
    # raises each next (zset id -> time)
    lineup: str
    lined: str
    aging: str
    # Durable jobs (docs/durable.md, lua/_durable.lua): a job's steps (hash: id -> step names,
    # id US name -> record JSON, id RS -> ids of the messages it took), its wait (hash: id ->
    # TAB fields), its inbox (hash: id -> one message a line), the event waits still
    # listening (zset, scores 0: "name US key US id")
    steps: str
    waits: str
    inbox: str
    listeners: str
    # Breakers (lua/_breakers.lua, docs/flow-control.md): hash breaker key -> its record
    # (state, times, probe, failure log, reason), and zset closed key -> when its failure log
    # runs out (so a key that stopped failing is forgotten: _breaker_acks.lua)
    breakers: str
    breaker_ends: str

    def by_state(self, state: str) -> str:
        """The index key holding jobs in ``state``."""
        return str(getattr(self, state))


@dataclass(frozen=True, slots=True)
class BatchKeys:
    """The keys of one batch (all in one hash slot)."""

    batch: str  # hash: fields, counters, callbacks
    jobs: str  # hash: job id -> "state:queue" ("deleted:queue": a deleted job of a run)
    # Indexes that let a batch page be read by rank, never by loading the whole batch:
    order: str  # zset: job id, score 0 (so ranked by id: enqueue order)
    states: str  # zset: job id, score = the state's position in ALL_STATES + 1
    # A bulk join keeps one entry per run of ids instead of the three above per job, until
    # a reader indexes the run (lua/_runs.lua):
    heads: str  # zset, score 0: the first id of each run not yet indexed
    runs: str  # hash: first id -> "<count> state:queue"
    # A workflow's graph (storage/redis/graph.py): "n:<id>" Node JSON, "u:<id>" parents not
    # settled yet, "s:<id>" the state its children were settled with, "e:<id>" "fail"/"skip"
    # when the graph ended the job, "r:<id>" "1" once it released it
    graph: str
    # hash: job id -> a counter bumped by batch.lua each time the job enters or leaves a
    # terminal state (a mark to settle; removed by graph.lua only if unchanged since read)
    marks: str


@dataclass(frozen=True, slots=True)
class DoorbellKeys:
    """The key of ring.lua: one queue's doorbell (``Keys.doorbell``), in the shared
    ``{doorbell}`` slot rather than the queue's."""

    doorbell: str


@dataclass(frozen=True, slots=True)
class ScheduleKeys:
    """The keys of the periodic schedules (all in one hash slot: schedule.lua)."""

    records: str  # hash: name -> the schedule's record JSON (all but its last tick)
    ticks: str  # zset: name -> the newest tick enqueued (ZADD GT)
    changes: str  # list: the audit trail, change JSON, newest first


@dataclass(frozen=True, slots=True)
class EventKeys:
    """The key of kept.lua: events kept for waits that begin later (docs/durable.md), in the
    shared ``{events}`` slot (hash: "name US key" -> one event a line)."""

    kept: str


class Keys:
    """Key names under one prefix (``?prefix=`` in the storage URL)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.queues = f"{prefix}:queues"  # set of queue names
        self.batches = f"{prefix}:batches"  # zset: batch id -> created_at
        # zset: workflows that may hold marks to settle -> when registered (graph.py's sweep)
        self.workflows_marked = f"{prefix}:workflows:marked"
        self.workers = f"{prefix}:workers"  # zset: worker id -> last seen
        self.worker_info = f"{prefix}:workers:info"  # hash: worker id -> WorkerInfo JSON
        # Periodic schedules, all in the slot of the tag {schedules} (schedule.lua)
        self.schedules = ScheduleKeys(*(f"{prefix}:{{schedules}}:{field}"
                                        for field in ScheduleKeys.__slots__))
        self.events = EventKeys(f"{prefix}:{{events}}:kept")
        self.queue = lru_cache(maxsize=4096)(self._queue)
        self.batch = lru_cache(maxsize=4096)(self._batch)

    def _queue(self, name: str) -> QueueKeys:
        base = f"{self.prefix}:{{q:{name}}}:"
        return QueueKeys(*(base + field for field in QueueKeys.__slots__))

    def _batch(self, batch_id: str) -> BatchKeys:
        base = f"{self.prefix}:{{b:{batch_id}}}:"
        return BatchKeys(*(base + field for field in BatchKeys.__slots__))

    def doorbell(self, queue: str) -> str:
        """List: wake-up tokens of one queue on Redis Cluster. Every doorbell shares the tag
        ``{doorbell}``, so one BLPOP can watch the doorbells of many queues."""
        return f"{self.prefix}:{{doorbell}}:{queue}"

    def worker_command(self, worker_id: str) -> str:
        """String key: a pending remote command (quiet/stop) for one worker."""
        return f"{self.prefix}:workers:cmd:{worker_id}"
