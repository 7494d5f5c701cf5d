"""Isolation: a job recovered from a crashed worker runs alone before the fetcher goes on.

A job that kills its process (segfault, ``os._exit``, out of memory) takes the jobs running
beside it down too. They are all recovered together, and if they were leased together again
they would crash together until every one reached the recovery limit and went dead with the
poison job. So a fetch that returns a recovered job (``recoveries > 0``) keeps only that one,
hands the rest straight back (``INTERRUPTED``: pending again, no error counted), waits for the
jobs already running here to end, runs the suspect alone, and only then fetches again. An
innocent job runs fine on its own; the poison job crashes alone until the storage sends it to
dead. The price is lower concurrency right after a crash, for recovered jobs only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from conveyor.clock import Clock
from conveyor.job import Ack, LeasedJob, Outcome
from conveyor.worker.acker import Acker
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.processor import Processor

__all__ = ["Isolation"]

log = logging.getLogger("conveyor.worker")

HANDED_BACK = "handed back unstarted: a job recovered from a crashed worker runs alone first"


class Isolation:
    """The fetcher's state while a recovered job waits to run, or runs, alone."""

    def __init__(self, clock: Clock, processor: Processor, inflight: InFlight, acker: Acker,
                 submit: Callable[[Entry], None]) -> None:
        self.clock = clock
        self.processor = processor
        self.inflight = inflight
        self.acker = acker
        self.submit = submit
        self.held: Entry | None = None  # leased, waiting for the others to end
        self.alone: Entry | None = None  # running alone

    @property
    def active(self) -> bool:
        """True while normal fetching must wait."""
        return self.held is not None or self.alone is not None

    def take(self, jobs: Sequence[LeasedJob]) -> list[LeasedJob]:
        """From one fetch, the jobs to run normally; holds back the first recovered one."""
        suspect = next((job for job in jobs if job.recoveries), None)
        if suspect is None:
            return list(jobs)
        for job in jobs:
            if job is not suspect:
                self.acker.add(Ack(job.id, job.token, Outcome.INTERRUPTED, message=HANDED_BACK))
        prepared = self.processor.prepare(suspect)
        if isinstance(prepared, Ack):
            self.acker.add(prepared)
            return []
        log.warning("job %s (%s) was recovered %d time(s) from a crashed worker; running it "
                    "alone", suspect.id, suspect.name, suspect.recoveries)
        self.inflight.add(prepared)
        self.held = prepared
        return []

    def advance(self, timeout: float) -> None:
        """Start the held job once it is the only one here; notice when it has ended."""
        held, alone = self.held, self.alone
        if held is not None:
            if not self.inflight.holds(held):  # hard shutdown or lease lost
                self.held = None
            elif self.inflight.wait_until(lambda: len(self.inflight) <= 1, timeout):
                self.held, self.alone = None, held
                now = self.clock.now()
                if held.deadline is not None:  # its timeout counts from now, not the lease
                    held.deadline = now + (held.deadline - held.started)
                held.started = held.logged_at = now
                self.submit(held)
        elif alone is not None and self.inflight.wait_until(
            lambda: not self.inflight.holds(alone), timeout
        ):
            self.alone = None

    def release(self) -> None:
        """At quiet/stop: hand a held job back at once instead of letting it wait out the stop."""
        held, self.held = self.held, None
        if held is not None and self.inflight.claim(held) and not held.lost:
            self.acker.add(Ack(held.job.id, held.job.token, Outcome.INTERRUPTED,
                               message="worker stopped before the job started"))
