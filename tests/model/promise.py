"""What conveyor promises about one job, in plain Python (docs/api.md, "Job lifecycle rules").

No conveyor code is used here: this is the reference the real worker and storage are compared
with. Each method is one thing that happens to a job (a lease, an outcome, an operator's
action, a lease that expired); it changes the expected record exactly as the docs say.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.model.durable_promise import Progress

#: States a job waits in: a cancel ends it at once.
WAITING = frozenset({"pending", "scheduled", "retrying", "waiting"})
#: States a retry by hand takes a job from.
RETRYABLE = frozenset({"dead", "failed", "cancelled", "retrying"})
TERMINAL = frozenset({"succeeded", "failed", "dead", "cancelled"})

BOOM = "boom"  # what a raising body raises
DECLINED = "declined"  # what a failing body's ``Fail`` says
SHUT_DOWN = "worker shut down before the job ended"
HANDED_BACK = "handed back unstarted: a job recovered from a crashed worker is running here"
RETRY_IN = 1.0  # the ``retry_in`` of the model's jobs: a fixed delay, so the model knows it
MAX_RECOVERIES = 5


def unknown_message(name: str) -> str:
    """The error of a job whose name the worker does not know."""
    return (f"no job named {name!r} in this worker; retrying — is the worker running the "
            "new code?")


def timeout_message(name: str, seconds: float) -> str:
    """The error of a job that ran past its timeout (the message keeps the class, issue 51)."""
    return f"JobTimeout: job {name} ran longer than its timeout of {seconds:g}s"


def backoff_window(attempt: int) -> tuple[float, float]:
    """The default backoff before retry ``attempt``: ``attempt**4 + 15`` plus 0 to
    ``10 * (attempt + 1)`` seconds of jitter."""
    low = float(attempt**4 + 15)
    return low, low + 10.0 * (attempt + 1)


@dataclass
class Expected:
    """The record one job must have, and what the model knows of its running attempt."""

    id: str
    name: str
    queue: str
    plan: tuple[str, ...]
    max_retries: int
    batch: str | None = None
    state: str = "pending"
    attempt: int = 0
    errors: int = 0
    recoveries: int = 0
    message: str | None = None
    cancel_requested: bool = False
    result: str | None = None
    kinds: list[str] = field(default_factory=lambda: ["enqueued"])
    # -- the running attempt (not part of the stored record) --
    holder: str | None = None  # the worker whose lease it is
    lease_until: float = 0.0
    deadline: float | None = None
    ctx_cancelled: bool = False  # the worker passed the cancel request to the job
    due: tuple[float, float] | None = None  # retrying: when it becomes pending (a window)
    durable: Progress = field(default_factory=Progress)  # a durable job's steps and waits

    @property
    def terminal(self) -> bool:
        """True once the job ended."""
        return self.state in TERMINAL

    def step(self) -> str:
        """What the body does in the current attempt (the plan's last step repeats)."""
        return self.plan[min(self.attempt, len(self.plan)) - 1]

    # -- the worker ---------------------------------------------------------------------------
    def leased(self, worker: str, now: float, lease: float, timeout: float | None) -> None:
        """A worker leased the job: one more attempt, ``started``."""
        assert self.state == "pending", f"{self.id} leased while {self.state}"
        self.attempt += 1
        self.state = "active"
        self.holder = worker
        self.lease_until = now + lease
        self.deadline = None if timeout is None else now + timeout
        self.ctx_cancelled = False
        self.kinds.append("started")

    def _end(self, state: str, kind: str, message: str | None) -> None:
        self.state = state
        self.message = message
        self.kinds.append(kind)
        self.holder = None

    def succeeded(self, logged: bool) -> None:
        """The body returned. After the worker told it to stop (``ctx.cancelled``) that is
        the job stopping early: cancelled (docs/worker.md, "Cancellation")."""
        if logged:
            self.kinds += ["message", "progress"]
        if self.ctx_cancelled:
            self._end("cancelled", "cancelled", "cancelled while running")
            return
        self.result = '"done"'
        self._end("succeeded", "succeeded", None)

    def failed(self) -> None:
        """The body raised ``Fail``: its own answer, it stands even after a cancel request."""
        self._end("failed", "failed", DECLINED)

    def errored(self, text: str, now: float, backoff: tuple[float, float] | None = None) -> None:
        """The attempt ended in an error (an exception, a timeout, an unknown name): it counts
        in ``errors``; a cancel request ends the job cancelled, else retried or dead."""
        self.errors += 1
        if self.cancel_requested:
            self._end("cancelled", "cancelled", f"cancelled: {text}")
        elif self.errors <= self.max_retries:
            self._end("retrying", "error", text)
            low, high = backoff or (RETRY_IN, RETRY_IN)
            self.due = (now + low, now + high)
        else:
            self._end("dead", "dead", text)

    def cancelled_running(self) -> None:
        """An async job the worker cancelled at the request: cancelled, not an error."""
        self._end("cancelled", "cancelled", "cancelled while running")

    def interrupted(self, message: str) -> None:
        """Hard shutdown or a hand-back: pending again, not an error attempt."""
        if self.cancel_requested:
            self._end("cancelled", "cancelled", f"cancelled: {message}")
        else:
            self._end("pending", "interrupted", message)

    # -- the storage's own moves --------------------------------------------------------------
    def promoted(self) -> None:
        """A retry's time came: pending again."""
        self.state = "pending"
        self.due = None
        self.kinds.append("enqueued")

    def recovered(self, why: str = "lease expired") -> None:
        """Its lease expired (the worker died), or a broker redelivered its message because
        its worker's connection died: back to pending, cancelled if asked, dead past the
        recovery limit. Never an error."""
        self.recoveries += 1
        self.holder = None
        if self.cancel_requested:
            self._end("cancelled", "cancelled", f"cancelled: {why}")
        elif self.recoveries > MAX_RECOVERIES:
            self._end("dead", "dead", f"recovered {self.recoveries} times (poison job?)")
        else:
            self.state = "pending"
            self.kinds.append("recovered")

    # -- operators ----------------------------------------------------------------------------
    def cancel(self) -> str:
        """``app.cancel``: waiting → cancelled; running → a request. Returns the new state."""
        if self.state in WAITING:
            self.due = None
            self._end("cancelled", "cancelled", "cancelled while waiting")
        elif self.state == "active" and not self.cancel_requested:
            self.cancel_requested = True
            self.kinds.append("cancel_requested")
        return self.state

    def cancellable(self) -> bool:
        """True when a batch cancel counts the job: waiting or running (a running job asked
        before counts again; it is not asked twice)."""
        return self.state in WAITING or self.state == "active"

    def retry_by_hand(self) -> bool:
        """``retry_jobs``: ended or retrying → pending, the request and message cleared."""
        if self.state not in RETRYABLE:
            return False
        self.state = "pending"
        self.due = None
        self.message = None
        self.cancel_requested = False
        self.kinds.append("retried")
        return True
