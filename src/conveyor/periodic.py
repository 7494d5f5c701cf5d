"""Periodic jobs: cron schedules enqueued exactly once per tick, however many workers run.

Every worker runs a ``CronScheduler``. Each tick is enqueued with a unique key made of the
schedule's name and the tick's time, so the storage's atomic unique lock lets exactly one
worker's enqueue through and the others get the existing job back. A scheduler looks back
``catch_up`` seconds at start, so a tick that fell while every worker was restarting is still
enqueued (once) when the first one comes back [sidekiq-cron, asynq scheduler] -- but never a
tick from before the storage first saw the schedule: a new schedule starts with the next tick.

Schedules are also written to the storage when a worker starts, so the CLI and the dashboard
list them (with the last tick enqueued and the next one due) and an operator can pause one:
every worker's scheduler reads the paused names at each look and skips their ticks. Ticks that
fall while a schedule is paused are skipped for good, not caught up on resume.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from conveyor.clock import Clock
from conveyor.ids import new_id
from conveyor.job import FlowControl, JobSpec
from conveyor.serializer import encode_payload
from conveyor.storage import Backend
from conveyor.storage.schedule_records import ScheduleInfo

log = logging.getLogger("conveyor.periodic")

try:  # croniter is the optional "cron" extra; _cron() says how to get it
    import croniter as _croniter
except ImportError:  # pragma: no cover - exercised only without the extra
    _croniter = None  # type: ignore[assignment]


def _cron() -> type[_croniter.croniter]:
    if _croniter is None:
        raise RuntimeError("periodic jobs need croniter: pip install 'conveyor[cron]'")
    return _croniter.croniter


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic job: a cron expression in a time zone, and what to enqueue.

    ``timeout``, ``expires_in`` and ``flow`` are the job's own options (``expires_in`` counts
    from the tick); the tick's unique key replaces any unique key of ``flow``.
    """

    name: str
    cron: str
    job_name: str
    queue: str = "default"
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    tz: str = "UTC"
    max_retries: int = 25
    timeout: float | None = None
    expires_in: float | None = None
    flow: FlowControl | None = None

    def info(self) -> ScheduleInfo:
        """The definition the storage keeps (for listing and pausing)."""
        return ScheduleInfo(self.name, self.cron, self.tz, self.job_name, self.queue)

    def zone(self) -> tzinfo:
        """The schedule's time zone."""
        return timezone.utc if self.tz == "UTC" else ZoneInfo(self.tz)

    def ticks_between(self, start: float, end: float) -> list[float]:
        """Tick times t with start < t <= end, as epoch seconds."""
        it = _cron()(self.cron, datetime.fromtimestamp(start, self.zone()))
        ticks: list[float] = []
        while True:
            t = float(it.get_next(float))
            if t > end:
                return ticks
            ticks.append(t)

    def spec(self, tick: float, unique_for: float) -> JobSpec:
        """The job for one tick; its unique key makes a second enqueue of the tick a no-op."""
        return JobSpec(
            id=new_id(),
            name=self.job_name,
            queue=self.queue,
            payload=encode_payload(self.args, self.kwargs, {"periodic": self.name, "tick": tick}),
            max_retries=self.max_retries,
            timeout=self.timeout,
            deadline=None if self.expires_in is None else tick + self.expires_in,
            flow=dataclasses.replace(self.flow or FlowControl(), unique_for=unique_for,
                                     unique_key=f"periodic:{self.name}:{int(tick)}"),
        )


def validate_cron(expr: str) -> None:
    """Raise ``ValueError`` with the reason when a cron expression is not valid."""
    if not _cron().is_valid(expr):
        raise ValueError(f"invalid cron expression {expr!r}")


def validate_tz(tz: str) -> None:
    """Raise ``ValueError`` when ``tz`` is not an IANA time zone name."""
    if tz == "UTC":
        return
    try:
        ZoneInfo(tz)
    except (ValueError, KeyError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f"unknown time zone {tz!r}; use an IANA name like 'Europe/Berlin'"
                         ) from exc


def next_tick(info: ScheduleInfo, now: float) -> float | None:
    """When a stored schedule is next due after ``now`` (None if its cron cannot be read)."""
    try:
        zone = timezone.utc if info.tz == "UTC" else ZoneInfo(info.tz)
        it = _cron()(info.cron, datetime.fromtimestamp(now, zone))
        return float(it.get_next(float))
    except (ValueError, KeyError, RuntimeError):
        return None


def unlistened(schedules: Sequence[ScheduleInfo] | Sequence[Schedule],
               listened: Iterable[str]) -> dict[str, list[str]]:
    """Queues that ticks land on but no worker listens to, with the schedules that use each.

    Such ticks are enqueued and then wait, silently, until a worker for their queue starts.
    """
    heard = set(listened)
    out: dict[str, list[str]] = {}
    for s in schedules:
        if s.queue not in heard:
            out.setdefault(s.queue, []).append(s.name)
    return out


def describe_unlistened(queues: dict[str, list[str]]) -> str:
    """One line naming each unlistened queue and its schedules, and what to do."""
    parts = "; ".join(f"queue {q!r} (schedules: {', '.join(names)})"
                      for q, names in sorted(queues.items()))
    flags = " ".join(f"-q {q}" for q in sorted(queues))
    return (f"periodic ticks go to queues no running worker listens to: {parts}; they will "
            f"wait until a worker runs with {flags}")


def _due(schedule: Schedule, since: float, now: float,
         pauses: dict[str, float | None], created_at: float | None) -> list[float]:
    """The schedule's ticks in (since, now], minus those a pause covers or that came before
    the schedule existed.

    A paused schedule has none. A resumed one has none from before its resume either: a
    scheduler that starts (or recovers from a storage outage) soon after a resume would
    otherwise catch up the ticks of the paused period. Likewise a schedule registered for the
    first time has none from before the storage first saw it: catch-up is for ticks missed
    while workers were down, not for ticks of a schedule that did not exist yet.
    """
    if created_at is not None:
        since = max(since, created_at)
    if schedule.name in pauses:
        resumed_at = pauses[schedule.name]
        if resumed_at is None:
            return []
        since = max(since, resumed_at)
    return schedule.ticks_between(since, now)


@dataclass(frozen=True, slots=True)
class CronConfig:
    """How often the scheduler looks, and how far back it catches up after a restart."""

    interval: float = 1.0
    catch_up: float = 300.0


class CronScheduler:
    """Worker component that enqueues due ticks of every schedule (DESIGN §3 shape)."""

    def __init__(self, storage: Backend, clock: Clock, config: CronConfig,
                 schedules: Sequence[Schedule]) -> None:
        self.storage = storage
        self.clock = clock
        self.config = config
        self.schedules = list(schedules)
        self._last: float | None = None
        self._created: dict[str, float | None] | None = None  # read back by register()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.enqueued = 0

    def register(self) -> None:
        """Write the schedules' definitions to the storage (listing, pausing), then read back
        when each was first saved (by this worker or an earlier one)."""
        if self.schedules:
            self.storage.save_schedules([s.info() for s in self.schedules])
            stored = {s.name: s.created_at for s in self.storage.schedules()}
            self._created = {s.name: stored.get(s.name) for s in self.schedules}

    def tick(self) -> int:
        """Enqueue every tick due since the last look; returns how many this worker created."""
        if self._created is None and self.schedules:
            self.register()  # not yet done (storage down at start): no tick before it is
        born = self._created or {}
        now = self.clock.now()
        # Never look back further than catch_up, even after failed looks: the unique lock of a
        # tick lasts twice as long, so every tick in the window is still guarded against a
        # second enqueue.
        floor = now - self.config.catch_up
        since = floor if self._last is None else max(self._last, floor)
        pauses = self.storage.schedule_pauses() if self.schedules else {}
        due = [(s, t) for s in self.schedules
               for t in _due(s, since, now, pauses, born.get(s.name))]
        specs = [s.spec(t, unique_for=self.config.catch_up * 2) for s, t in due]
        results = self.storage.enqueue(specs) if specs else []
        self._last = now  # only now: a failed read or enqueue looks at the same window again
        newest: dict[str, float] = {}
        for (s, t), r in zip(due, results, strict=True):
            if r.created:
                newest[s.name] = max(t, newest.get(s.name, t))
        for name, t in newest.items():
            self.storage.schedule_ticked(name, t)
        created = sum(1 for r in results if r.created)
        self.enqueued += created
        return created

    def start(self) -> None:
        """Register the schedules, then run ``tick`` every ``interval`` seconds in a daemon
        thread."""
        if not self.schedules:
            return
        try:
            self.register()
        except Exception:  # listing is a convenience: scheduling must start regardless
            log.exception("could not write periodic schedules to the storage; they run anyway")
        self._thread = threading.Thread(target=self._run, name="conveyor-cron", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval):
            try:
                self.tick()
            except Exception:  # a storage hiccup must not end periodic scheduling
                log.exception("periodic scheduler tick failed; will try again")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

