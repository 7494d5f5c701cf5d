"""Periodic jobs: cron schedules enqueued exactly once per tick, however many workers run.

Every worker runs a ``CronScheduler``. Each tick is enqueued with a unique key made of the
schedule's name and the tick's time, so the storage's atomic unique lock lets exactly one
worker's enqueue through and the others get the existing job back. A scheduler looks back
``catch_up`` seconds at start, so a tick that fell while every worker was restarting is still
enqueued (once) when the first one comes back [sidekiq-cron, asynq scheduler] -- but never a
tick from before the storage first saw the schedule, nor from before its last resume or the
last change of its definition.

The schedules a worker's code declares (``@app.periodic``) are written to the storage when it
starts; schedules can also be added, changed, paused and removed at run time
(``conveyor.client.schedules``, ``conveyor periodic``, the dashboard). At each look a scheduler
reads every stored schedule and ticks the definition in force (an operator's edit stands over the
code's: ``storage/schedule_edits.py``): those its code declares, and those added at run time
whose job its app defines, with that job's options. Ticks that fall while a schedule is paused
are skipped for good, not caught up on resume.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from conveyor.client.draft import build_flow
from conveyor.client.options import JobOptions
from conveyor.core.clock import Clock
from conveyor.core.ids import new_id
from conveyor.core.job import FlowControl, JobSpec
from conveyor.core.serializer import dumps, encode_payload
from conveyor.core.text import check_name
from conveyor.core.versions import stamped
from conveyor.errors import StorageUnavailable
from conveyor.storage import Backend
from conveyor.storage.schedule_records import CODE, ScheduleInfo

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
    version: int | None = None  # the job type's: stamped on each tick (core/versions.py)

    def info(self) -> ScheduleInfo:
        """The definition the storage keeps (for listing, pausing and editing)."""
        return ScheduleInfo(self.name, self.cron, self.tz, self.job_name, self.queue,
                            args=args_json(self.args), kwargs=kwargs_json(self.kwargs))

    @classmethod
    def stored(cls, info: ScheduleInfo, opts: JobOptions) -> Schedule:
        """The schedule a stored definition describes, its ticks given the options ``opts``
        of its job (as the worker's app registered it). Raises ``ValueError`` (a bad cron,
        time zone or arguments) or ``InvalidKeyError`` (a flow-control key of the arguments
        that breaks the key rule)."""
        validate_cron(info.cron)
        validate_tz(info.tz)
        args, kwargs = info.arguments()
        return cls(name=info.name, cron=info.cron, job_name=info.job_name, queue=info.queue,
                   args=tuple(args), kwargs=kwargs, tz=info.tz, max_retries=opts.max_retries,
                   timeout=opts.timeout, expires_in=opts.expires_in, version=opts.version,
                   flow=build_flow(info.job_name, opts, args, kwargs))

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
            payload=encode_payload(self.args, self.kwargs, stamped(
                {"periodic": self.name, "tick": tick}, self.version)),
            max_retries=self.max_retries,
            timeout=self.timeout,
            deadline=None if self.expires_in is None else tick + self.expires_in,
            flow=dataclasses.replace(self.flow or FlowControl(), unique_for=unique_for,
                                     unique_key=f"periodic:{self.name}:{int(tick)}"),
        )


def args_json(args: Any) -> str:
    """A schedule's positional arguments as the JSON text stored (``ValueError`` unless a
    list of JSON values)."""
    if not isinstance(args, list | tuple):
        raise ValueError(f"a schedule's args must be a JSON array, not {type(args).__name__}")
    return dumps(list(args))


def kwargs_json(kwargs: Any) -> str:
    """A schedule's keyword arguments as the JSON text stored, keys sorted (so equal
    arguments are equal text); ``ValueError`` unless an object of JSON values."""
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ValueError("a schedule's kwargs must be a JSON object")
    return dumps(dict(sorted(kwargs.items())))


def check_definition(fields: Mapping[str, Any]) -> dict[str, str]:
    """The stored form of a schedule's definition fields (any of ``DEFINITION_FIELDS``),
    each checked: a cron expression, an IANA time zone, job and queue names by the text rule,
    ``args`` a list and ``kwargs`` a dict of JSON values. Raises ``ValueError`` with the
    reason (``InvalidNameError`` and ``PayloadError`` are ``ValueError``s)."""
    out: dict[str, str] = {}
    for key, value in fields.items():
        if key in ("cron", "tz", "job_name", "queue") and not isinstance(value, str):
            raise ValueError(f"a schedule's {key} must be a string, not {type(value).__name__}")
        if key == "cron":
            validate_cron(value)
        elif key == "tz":
            validate_tz(value)
        elif key in ("job_name", "queue"):
            check_name(key.replace("_", " "), value)
        elif key == "args":
            value = args_json(value)
        elif key == "kwargs":
            value = kwargs_json(value)
        else:
            raise ValueError(f"not a field of a schedule: {key!r}")
        out[key] = value
    return out


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


def _due(schedule: Schedule, info: ScheduleInfo, since: float, now: float) -> list[float]:
    """The schedule's ticks in (since, now], minus those a pause covers or that fell before
    the schedule existed, its last resume or the last change of its definition.

    A paused schedule has none. A scheduler that starts (or recovers from a storage outage)
    soon after a resume would otherwise catch up the ticks of the paused period; a schedule
    registered or changed now would catch up ticks of a definition that was not in force:
    catch-up is for ticks missed while workers were down, nothing else.
    """
    if info.paused:
        return []
    floor = info.floor()
    return schedule.ticks_between(since if floor is None else max(since, floor), now)


@dataclass(frozen=True, slots=True)
class CronConfig:
    """How often the scheduler looks, and how far back it catches up after a restart."""

    interval: float = 1.0
    catch_up: float = 300.0


#: A worker's lookup of a job name: the options its app registered the job with, or None.
JobLookup = Callable[[str], JobOptions | None]


class CronScheduler:
    """Worker component that enqueues due ticks of every stored schedule it may run (DESIGN
    §3 shape): those of ``schedules`` (its code's), and, with ``jobs``, those added at run time
    whose job ``jobs`` knows. ``by`` names the worker in the audit trail."""

    def __init__(self, storage: Backend, clock: Clock, config: CronConfig,
                 schedules: Sequence[Schedule], jobs: JobLookup | None = None,
                 by: str = "") -> None:
        self.storage = storage
        self.clock = clock
        self.config = config
        self.schedules = list(schedules)
        self.declared = {s.name: s for s in self.schedules}
        self.jobs = jobs
        self.by = by
        self._last: float | None = None
        self._registered = not self.schedules
        self._built: dict[str, tuple[tuple[str, ...], Schedule | None]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.enqueued = 0

    def register(self) -> None:
        """Write the schedules the code declares to the storage (listing, pausing, editing)."""
        if self.schedules:
            self.storage.save_schedules([s.info() for s in self.schedules], by=self.by)
        self._registered = True

    def plan(self, info: ScheduleInfo) -> Schedule | None:
        """What this worker ticks for a stored schedule, or None: not its code's and not a
        job its app defines, or a definition it cannot run (logged once per definition)."""
        key = (info.origin, *info.definition().values())
        found = self._built.get(info.name)
        if found is not None and found[0] == key:
            return found[1]
        schedule = self._build(info)
        self._built[info.name] = (key, schedule)
        return schedule

    def _build(self, info: ScheduleInfo) -> Schedule | None:
        code = self.declared.get(info.name) if info.origin == CODE else None
        if info.origin == CODE and code is None:
            return None  # another app's schedule, or one its code no longer declares
        if code is not None and code.info().definition() == info.definition():
            return code  # the code's own definition, with the options it was declared with
        opts = self.jobs(info.job_name) if self.jobs is not None else None
        if opts is None:
            log.info("periodic schedule %r: this worker's app defines no job %r; workers "
                     "whose app does enqueue its ticks", info.name, info.job_name)
            return None
        try:
            return Schedule.stored(info, opts)
        except (ValueError, KeyError, RuntimeError) as exc:  # one bad schedule stops alone
            log.error("periodic schedule %r cannot run: %s", info.name, exc)
            return None

    def tick(self) -> int:
        """Enqueue every tick due since the last look; returns how many this worker created."""
        if not self._registered:
            self.register()  # not yet done (storage down at start): no tick before it is
        now = self.clock.now()
        # Never look back further than catch_up, even after failed looks: the unique lock of a
        # tick lasts twice as long, so every tick in the window is still guarded against a
        # second enqueue.
        floor = now - self.config.catch_up
        since = floor if self._last is None else max(self._last, floor)
        due: list[tuple[Schedule, float]] = []
        for info in self.storage.schedules():
            schedule = self.plan(info)
            if schedule is not None:
                due += [(schedule, t) for t in _due(schedule, info, since, now)]
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
        """Register the code's schedules, then run ``tick`` every ``interval`` seconds in a
        daemon thread (a worker whose code declares none still runs those added at run
        time)."""
        try:
            self.register()
        except Exception:  # listing is a convenience: scheduling must start regardless
            log.exception("could not write periodic schedules to the storage; trying again")
        self._thread = threading.Thread(target=self._run, name="conveyor-cron", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.config.interval):
            try:
                self.tick()
            except StorageUnavailable as exc:  # an outage: one line, not one a second
                if not failing:
                    log.warning("periodic scheduler: %s (trying again until it answers)", exc)
                failing = True
                continue
            except Exception:  # anything else must not end periodic scheduling either
                log.exception("periodic scheduler tick failed; will try again")
                failing = True
                continue
            if failing:
                log.info("periodic scheduler: working again")
            failing = False

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
