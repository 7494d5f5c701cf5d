"""The rules of circuit breakers (``core/breaker.py``), written once for the stores that run
them in Python (memory, SQLite; PostgreSQL and Redis spell the same rules in their own step).

A breaker's state is a ``BreakerRow`` per key; a key without one is closed. A store calls
``lease_verdict`` for a pending job of a key in the step that leases it, ``probe`` when the
verdict is ``PROBE``, and ``after_ack`` in the step that records an acknowledgement of a job
of a key (``breaker_touch`` says whether the ack concerns the breaker at all). Plain data, no
I/O: each store reads and writes the row itself, atomically with the job's own move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conveyor.core.breaker import CLOSED, HALF_OPEN, OPEN, BreakerState
from conveyor.core.flow_control import FlowControl
from conveyor.core.job import Ack, Outcome
from conveyor.core.text import shown

__all__ = [
    "ANSWER", "ERROR", "HELD", "PROBE", "SNOOZE", "START", "BreakerRow", "after_ack",
    "breaker_touch", "lease_verdict", "listed", "probe",
]

#: ``lease_verdict``: the job starts as usual, starts as the breaker's probe, or waits.
START, PROBE, HELD = "start", "probe", "held"
#: ``breaker_touch``: a counted error, an answer of the downstream (success or ``Fail``),
#: a ``RetryAfter`` pause.
ERROR, ANSWER, SNOOZE = "error", "answer", "snooze"
#: ``reason`` is one line of at most this many characters.
REASON_CHARS = 200


@dataclass(slots=True)
class BreakerRow:
    """One key's breaker as a store keeps it. ``failures``: the times of counted errors,
    oldest first (a sliding log, as a rate key's); ``within``: the window they count in
    (the acknowledged job's setting)."""

    key: str
    state: str = CLOSED
    failures: list[float] = field(default_factory=list)
    within: float = 0.0
    opened_at: float | None = None
    probe_at: float | None = None
    probe_id: str | None = None
    reason: str | None = None
    trips: int = 0

    def counted(self, now: float) -> int:
        """Counted errors within the window ending at ``now``."""
        return sum(1 for t in self.failures if t > now - self.within)

    def view(self, now: float, queue: str | None = None) -> BreakerState:
        """The row as ``Inspector.breakers`` shows it."""
        return BreakerState(self.key, self.state, self.counted(now), self.opened_at,
                            self.probe_at, self.probe_id, self.reason, self.trips, queue)

    @property
    def forgettable(self) -> bool:
        """Closed with an empty log: the same as no row, so the store drops it."""
        return self.state == CLOSED and not self.failures


def lease_verdict(row: BreakerRow | None, now: float, probe_running: bool) -> str:
    """What a pending job of ``row``'s key does now: ``START`` (closed), ``HELD`` (open
    before ``probe_at``, or half-open while the probe runs), ``PROBE`` (the cool-down is over,
    or the probe is gone: its worker died, it was deleted). ``probe_running``: the job
    ``row.probe_id`` is active (or was taken as the probe in this same step)."""
    if row is None or row.state == CLOSED:
        return START
    if row.state == OPEN:
        return HELD if row.probe_at is not None and now < row.probe_at else PROBE
    return HELD if probe_running else PROBE


def probe(row: BreakerRow, job_id: str) -> str:
    """Make ``job_id`` the probe of ``row``'s key (half-open); returns its event's text."""
    row.state, row.probe_id = HALF_OPEN, job_id
    return f"probe of breaker {shown(row.key)}"


def breaker_touch(ack: Ack, outcome: Outcome) -> str | None:
    """How the acknowledgement ``ack``, applied as ``outcome``, concerns its job's breaker:
    ``ERROR`` (the run raised: retry or dead with an error; a job that never ran because it
    could not be prepared does not count), ``ANSWER`` (succeeded, or ``Fail``: the downstream
    answered), ``SNOOZE`` (``RetryAfter``), or None (cancelled, interrupted, suspended)."""
    if outcome is Outcome.RETRY or outcome is Outcome.DEAD:
        if not ack.ran or (outcome is Outcome.DEAD and ack.error is None):
            return None
        return ERROR
    if outcome is Outcome.SUCCEEDED or outcome is Outcome.FAILED:
        return ANSWER
    if outcome is Outcome.SNOOZE:
        return SNOOZE
    return None


def after_ack(row: BreakerRow | None, key: str, flow: FlowControl, touch: str, job_id: str,
              now: float, ack: Ack) -> tuple[BreakerRow | None, str | None]:
    """Apply one acknowledgement (``breaker_touch`` said ``touch``) of job ``job_id`` of
    breaker ``key`` to its ``row``: returns the row to keep (None: drop it, the key is
    closed and clean) and the text of the ``breaker`` event the job gets (None: none)."""
    row = row if row is not None else BreakerRow(key)
    row.within = flow.breaker_within or row.within
    message: str | None = None
    is_probe = row.state == HALF_OPEN and row.probe_id == job_id
    if touch == ERROR:
        row.failures = [t for t in row.failures if t > now - row.within] + [now]
        if is_probe:
            _open(row, now, flow.breaker_cool_down, f"probe failed: {_error_line(ack)}")
            message = f"breaker {shown(key)} opened again: probe failed"
        elif row.state == CLOSED and len(row.failures) >= flow.breaker_open_after:
            _open(row, now, flow.breaker_cool_down,
                  f"{len(row.failures)} errors within {row.within:g}s; "
                  f"last: {_error_line(ack)}")
            message = f"breaker {shown(key)} opened: {row.reason}"
    elif touch == ANSWER and is_probe:
        row.state, row.failures = CLOSED, []
        row.opened_at = row.probe_at = row.probe_id = row.reason = None
        message = f"breaker {shown(key)} closed: probe succeeded"
    elif touch == SNOOZE:
        seconds = max(ack.retry_in or 0.0, 0.0)
        if row.state == CLOSED:
            row.opened_at, row.trips = now, row.trips + 1
        row.state, row.probe_id = OPEN, None
        row.probe_at = max(row.probe_at or 0.0, now + seconds)
        row.reason = f"paused {seconds:g}s by RetryAfter"
        message = f"breaker {shown(key)} paused for {seconds:g}s (RetryAfter)"
    if row.state == CLOSED:
        row.failures = [t for t in row.failures if t > now - row.within]
    return (None if row.forgettable else row), message


def listed(views: list[BreakerState]) -> list[BreakerState]:
    """``Inspector.breakers`` of a store's breakers: open and half-open keys first (by key),
    then closed keys with counted errors in their window; closed clean keys left out."""
    kept = [v for v in views if v.holding or v.failures]
    return sorted(kept, key=lambda v: (not v.holding, v.key, v.queue or ""))


def _open(row: BreakerRow, now: float, cool_down: float, reason: str) -> None:
    row.state, row.opened_at, row.probe_at, row.probe_id = OPEN, now, now + cool_down, None
    row.trips += 1
    row.reason = reason[:REASON_CHARS]


def _error_line(ack: Ack) -> str:
    """The error of an acknowledgement on one line: ``Type: message``."""
    error = ack.error
    text = ack.message or (f"{error.type}: {error.message}" if error is not None else "error")
    if error is not None and not text.startswith(error.type):
        text = f"{error.type}: {text}"
    return " ".join(text.split())[:REASON_CHARS]
