"""Isolation: a job recovered from a crashed worker (a *suspect*) never runs beside another.

A job that kills its process (segfault, ``os._exit``, out of memory) takes the jobs running
beside it down too; they are all recovered together, each with ``recoveries`` counted up. If
suspects ran together again they would crash together until every one reached the recovery
limit and went dead with the poison job. So each worker process runs at most one suspect at
a time, in one slot, while its other slots keep fetching and running normal jobs:

- a fetch that brings a suspect while none runs here starts it like any job;
- every other suspect of the fetch (and any suspect fetched while one runs) is handed straight
  back (``INTERRUPTED``: pending again, no error counted), and that hand-back is written
  *before* the fetch's jobs start, so a poison job crashing the process at once cannot drag
  jobs it was merely fetched with into another recovery.

A poison job then crashes with at most ``concurrency - 1`` normal jobs beside it; those come
back as suspects with one recovery, and never share a process with another suspect again. An
innocent job runs fine; the poison job crashes until the storage sends it to dead. Throughput
after a crash stays at every slot but the suspect's (docs/reliability.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from conveyor.core.job import Ack, LeasedJob, Outcome
from conveyor.worker.acker import Acker
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.processor import Processor

__all__ = ["Isolation"]

log = logging.getLogger("conveyor.worker")

HANDED_BACK = "handed back unstarted: a job recovered from a crashed worker is running here"


class Isolation:
    """Which suspect runs in this process, if any; sorts each fetch before it is started."""

    def __init__(self, processor: Processor, inflight: InFlight, acker: Acker) -> None:
        self.processor = processor
        self.inflight = inflight
        self.acker = acker
        self.suspect: Entry | None = None  # the suspect running here
        self.handed_back = 0

    @property
    def busy(self) -> bool:
        """True while a suspect runs here: any suspect fetched now is handed back."""
        suspect = self.suspect
        return suspect is not None and self.inflight.holds(suspect)

    def take(self, jobs: Sequence[LeasedJob]) -> list[Entry | Ack]:
        """Prepare one fetch: entries to start (at most one suspect among them) and acks.

        Suspects that may not run now are handed back here, synchronously.
        """
        out: list[Entry | Ack] = []
        back: list[Ack] = []
        busy = self.busy
        for job in jobs:
            if job.recoveries and busy:
                back.append(Ack(job.id, job.token, Outcome.INTERRUPTED, message=HANDED_BACK))
                continue
            prepared = self.processor.prepare(job)
            out.append(prepared)
            if job.recoveries and isinstance(prepared, Entry):
                self.suspect, busy = prepared, True
                log.warning("job %s (%s) was recovered %d time(s) from a crashed worker; no "
                            "other recovered job runs here until it ends",
                            job.id, job.name, job.recoveries)
        if back:
            self._hand_back(back)
        return out

    def wait(self, timeout: float) -> None:
        """Block until the suspect running here ends, or ``timeout``: called when a fetch
        brought nothing but suspects, which fetching again at once would only hand back."""
        self.inflight.wait_until(lambda: not self.busy, timeout)

    def _hand_back(self, acks: list[Ack]) -> None:
        # Through the acker, in this thread: stored before the fetch's jobs start, and with
        # a broker the deliveries that carried them settled (the relay publishes them again).
        try:
            self.acker.write_now(acks)
        except Exception:  # the leases expire and the recoverer puts them back instead
            log.exception("handing back %d recovered job(s) failed", len(acks))
            return
        self.handed_back += len(acks)

