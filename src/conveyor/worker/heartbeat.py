"""Heartbeater: registers the worker and extends every lease it holds, in one storage call.

The reply steers the worker: leases found lost are never acknowledged (another worker owns
the job now), cancellation requests reach the running job's context, and a remote ``quiet``
or ``stop`` command (from the CLI or web UI) is handed to the launcher.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

from conveyor.core.clock import Clock
from conveyor.core.job import Ack, HeartbeatReply, Outcome
from conveyor.storage.base import Storage
from conveyor.storage.workers import WorkerInfo
from conveyor.worker.acker import Acker
from conveyor.worker.component import PeriodicComponent
from conveyor.worker.config import WorkerConfig
from conveyor.worker.inflight import InFlight
from conveyor.worker.reserve import Reserve

__all__ = ["Heartbeater"]

log = logging.getLogger("conveyor.worker")


def _ignore_command(command: str) -> None:
    log.warning("remote command %r ignored: no launcher is listening", command)


class Heartbeater(PeriodicComponent):
    """Beats every ``config.heartbeat_interval`` seconds (2 s by default)."""

    name = "heartbeat"

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        config: WorkerConfig,
        *,
        inflight: InFlight,
        acker: Acker | None = None,
        reserve: Reserve | None = None,
        on_command: Callable[[str], None] = _ignore_command,
    ) -> None:
        super().__init__(storage, clock, config)
        self.inflight = inflight
        self.acker = acker
        self.reserve = reserve
        self.on_command = on_command
        self.status = "running"
        self.started_at = clock.now()
        self.hostname = socket.gethostname()
        self.last_reply: HeartbeatReply | None = None

    def info(self) -> WorkerInfo:
        """This worker as the registry shows it."""
        return WorkerInfo(
            id=self.config.worker_id,
            hostname=self.hostname,
            pid=os.getpid(),
            queues=self.config.queue_names,
            concurrency=self.config.concurrency,
            started_at=self.started_at,
            status=self.status,
            busy=self.inflight.busy(),
            last_seen=self.clock.now(),
        )

    def leases(self) -> dict[str, str]:
        """Every lease this process holds: running jobs, jobs in the reserve and acks not yet
        written.

        One job can appear twice: its ack still waiting to be written (a storage outage) while
        it was recovered and leased to this process again. The running lease wins: the older
        one cannot be extended anyway, and sending it would report the live run as lost.
        """
        leases = self.acker.leases() if self.acker is not None else {}
        if self.reserve is not None:
            leases.update(self.reserve.leases())
        leases.update(self.inflight.leases())
        return leases

    def tick(self) -> None:
        """One heartbeat, and act on its reply."""
        leases = self.leases()
        reply = self.storage.heartbeat(self.info(), leases, self.config.lease)
        self.last_reply = reply
        self.handle(reply, leases)

    def handle(self, reply: HeartbeatReply, leases: dict[str, str]) -> None:
        """Mark lost leases, pass on cancellations, run a remote command.

        The reply names jobs; ``leases`` (what this beat sent) says which lease of each it
        was about, so a verdict on one attempt never reaches another attempt of the job.
        """
        for job_id in reply.lost:
            if self._unreserve(job_id, leases) is not None:  # never started: just dropped
                log.warning("lost the lease of job %s before it started here", job_id)
                continue
            member = self.inflight.member(leases.get(job_id, ""), job_id)
            if member is not None:  # one member of an aggregated run (deleted by hand)
                member.lost = True
                continue
            entry = self.inflight.get(leases.get(job_id, ""))
            if entry is not None and not entry.lost:
                entry.lost = True
                entry.ctx.request_cancel()
                log.warning(
                    "lost the lease of job %s (%s); its outcome will not be recorded here",
                    job_id, entry.job.name,
                )
        for job_id in reply.cancel:
            if self.acker is not None and self._unreserve(job_id, leases) is not None:
                self.acker.add(Ack(job_id, leases[job_id], Outcome.CANCELLED,
                                   message="cancelled before it started"))
                log.info("job %s cancelled before it started", job_id)
                continue
            member = self.inflight.member(leases.get(job_id, ""), job_id)
            if member is not None:  # one member of an aggregated run: it alone is left out
                member.ctx.request_cancel()
                continue
            entry = self.inflight.get(leases.get(job_id, ""))
            if entry is not None and not entry.ctx.cancelled:
                entry.ctx.request_cancel()
                if entry.task is not None:
                    entry.task.get_loop().call_soon_threadsafe(entry.task.cancel)
                log.info("cancellation requested for job %s (%s)", job_id, entry.job.name)
        if reply.command:
            log.warning("remote command received: %s", reply.command)
            self.on_command(reply.command)

    def _unreserve(self, job_id: str, leases: dict[str, str]) -> object:
        """Take ``job_id`` out of the reserve when this beat's lease of it is held there."""
        if self.reserve is None or job_id not in leases:
            return None
        return self.reserve.remove(job_id, leases[job_id])

    def interval(self) -> float:
        """``config.heartbeat_interval``."""
        return self.config.heartbeat_interval

    def unregister(self) -> None:
        """Leave the worker registry (clean shutdown)."""
        try:
            self.storage.unregister_worker(self.config.worker_id)
        except Exception:
            log.exception("could not unregister worker %s", self.config.worker_id)
