"""Reserve: jobs leased ahead of free slots, while this process's jobs are short.

A worker that leases only as many jobs as it has free slots pays one storage round trip per
handful of jobs, and its slots sit idle during that round trip. With short jobs (a few
milliseconds or less) that call is most of the work: the store spends about as much per
call at 10 jobs as at 50. So the fetcher leases a few more jobs than it has free slots and
keeps them here; when a slot frees it starts one at once, and tops the reserve up while the
others run.

A job held here is a job another worker might have run, so the reserve is bounded by *time*,
not only by count: at most what this process starts in ``window`` seconds at the pace it has
started jobs lately (and never more than ``limit``). Long jobs start a few per second, so the
reserve stays empty and nothing changes for them; a drain of no-op jobs keeps ``limit`` ahead.
A job waits here a few milliseconds, not behind a slow job for seconds.

Reserved jobs are leased like running ones: their leases are extended by every heartbeat
(``leases``), a worker that dies leaves them to the recoverer, ``quiet`` hands them back
unstarted (``take_all``), a lease lost or a cancellation is applied before they start. A job
recovered from a crashed worker taken from the reserve goes through isolation as a fetched
one does (worker/isolation.py), and nothing is leased ahead while one runs here: if it
crashed the process again, the reserve would be recovered with it. A job that crashes its
process on its first run does take the reserve down with it: those jobs come back as
suspects, each run apart once — cheap, since a reserve only exists while jobs are short.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from conveyor.core.job import LeasedJob

__all__ = ["Reserve", "fitting"]

# The pace is measured over spans of at least ``_MEASURE`` seconds of work (time spent
# waiting for work does not count: ``waited``) and smoothed over about ``_SMOOTH`` seconds,
# each span weighing by its length; the first span (from the first job started) is taken as
# it is. A burst of short jobs opens the reserve within ~10 ms of work, even after an idle
# hour; a slow spell closes it within about a second.
_MEASURE = 0.01
_SMOOTH = 0.5


def fitting(jobs: Sequence[LeasedJob], free: int) -> int:
    """How many of ``jobs``, in order, fit in ``free`` slots (a job takes its ``cost``): the
    first that does not fit stops the count, so no later job starts before it."""
    if len(jobs) <= free and all(job.cost == 1 for job in jobs):
        return len(jobs)
    count = 0
    for job in jobs:
        if job.cost > free:
            break
        free -= job.cost
        count += 1
    return count


class Reserve:
    """Leased jobs waiting for a slot here, and how many more are worth leasing ahead."""

    def __init__(self, limit: int, window: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = max(0, limit)
        self.window = max(0.0, window)
        self._clock = clock
        self._jobs: deque[LeasedJob] = deque()
        self._lock = threading.Lock()
        self._pace = 0.0  # jobs started per second here, smoothed
        self._since: float | None = None  # start of the span being measured
        self._counted = 0
        self._measured = False
        self.reserved = 0  # jobs ever put in the reserve (for tests and stats)

    def __len__(self) -> int:
        return len(self._jobs)

    def started(self, count: int) -> None:
        """Count ``count`` jobs started in this process (the pace the bound is taken from)."""
        with self._lock:
            now = self._clock()
            if self._since is None:  # the first jobs: the first span starts here
                self._since = now
            self._counted += count
            elapsed = now - self._since
            if elapsed >= _MEASURE:
                weight = 1.0 - math.exp(-elapsed / _SMOOTH) if self._measured else 1.0
                self._pace += weight * (self._counted / elapsed - self._pace)
                self._measured = True
                self._since, self._counted = now, 0

    def waited(self, seconds: float) -> None:
        """Leave ``seconds`` the fetcher spent waiting for work out of the pace: the pace is
        how fast jobs start while there are jobs, not how often they arrive."""
        with self._lock:
            if self._since is not None:
                self._since += seconds

    @property
    def pace(self) -> float:
        """Jobs started per second here lately."""
        return self._pace

    def target(self) -> int:
        """How many jobs to hold ahead now: what starts within ``window`` at the pace."""
        return min(self.limit, int(self._pace * self.window))

    def wanted(self) -> int:
        """Jobs to lease ahead in the next fetch: none while the reserve is at least half
        its target (topping it up by one or two would cost a round trip each), else enough
        to fill it."""
        target = self.target()
        held = len(self._jobs)
        if target <= 0 or held * 2 >= target:
            return 0
        return target - held

    def put(self, jobs: list[LeasedJob]) -> None:
        """Hold freshly leased jobs for the next free slots."""
        with self._lock:
            self._jobs.extend(jobs)
            self.reserved += len(jobs)

    def take(self, count: int) -> list[LeasedJob]:
        """Held jobs, oldest first, that fit in ``count`` free slots (``fitting``)."""
        with self._lock:
            return [self._jobs.popleft() for _ in range(fitting(self._jobs, count))]

    def take_plain(self, count: int) -> list[LeasedJob]:
        """Held jobs, oldest first, that fit in ``count`` free slots, stopping at the first
        one recovered from a crashed worker (it goes through isolation: ``take``)."""
        with self._lock:
            out: list[LeasedJob] = []
            while self._jobs and not self._jobs[0].recoveries and self._jobs[0].cost <= count:
                count -= self._jobs[0].cost
                out.append(self._jobs.popleft())
            return out

    def take_all(self) -> list[LeasedJob]:
        """Every held job (to hand back unstarted)."""
        with self._lock:
            jobs = list(self._jobs)
            self._jobs.clear()
            return jobs

    def remove(self, job_id: str, token: str) -> LeasedJob | None:
        """Take the held job with this lease out of the reserve, or None when not held."""
        with self._lock:
            for job in self._jobs:
                if job.id == job_id and job.token == token:
                    self._jobs.remove(job)
                    return job
            return None

    def leases(self) -> dict[str, str]:
        """Job id → lease token of every held job: their leases must be extended."""
        with self._lock:
            return {job.id: job.token for job in self._jobs}
