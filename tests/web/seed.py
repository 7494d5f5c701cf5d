"""Jobs in every state, a batch and a live worker, made through the real storage protocol.

Shared by the CLI and web tests: each outcome is produced the way a worker produces it
(``dequeue`` with a lease, then a fenced ``ack``), so what the pages show is real data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conveyor import Conveyor
from conveyor.client.periodic import Schedule
from conveyor.core.job import Ack, ErrorInfo, Outcome
from conveyor.storage import Backend
from conveyor.storage.workers import BusySlot, WorkerInfo

XSS = "<script>alert('pwned')</script>"
TRACEBACK = 'Traceback (most recent call last):\n  File "shop.py", line 9\nConnectionError: down'


@dataclass
class Seeded:
    """Ids of what ``seed`` created."""

    ids: dict[str, str] = field(default_factory=dict)
    batch_id: str = ""
    worker_id: str = "w-test-1"


def make_app(url: str | None) -> Conveyor:
    """An app with the job names the seed uses (``None``: the URL from ``CONVEYOR_URL``)."""
    app = Conveyor(url)

    @app.job(name="shop.register", queue="default")
    def register(seller: int, product: object, note: str = "") -> None:
        """Stand-in job; tests complete it through the storage (``note`` carries the seed's
        hostile text in a keyword: enqueue checks a call against the signature)."""

    @app.job(name="shop.export", queue="exports")
    def export(part: int, sku: str = "") -> None:
        """Stand-in job in a second queue."""

    return app


def run_one(storage: Backend, queue: str, outcome: Outcome, **ack: object) -> str:
    """Lease the next job of ``queue`` and acknowledge it with ``outcome``; returns its id."""
    [job] = storage.dequeue([queue], "w-seed", 1, 60.0)
    assert storage.ack([Ack(job.id, job.token, outcome, **ack)]) == [True]  # type: ignore[arg-type]
    return job.id


def seed(app: Conveyor) -> Seeded:
    """Create one job per interesting state, a four-job batch and a busy worker."""
    s = Seeded()
    st = app.storage
    error = ErrorInfo("ConnectionError", "inventory service down", TRACEBACK)
    for key, outcome, ack in (
        ("succeeded", Outcome.SUCCEEDED, {"result": '{"ok": true}'}),
        ("failed", Outcome.FAILED, {"message": "seller not qualified"}),
        ("dead", Outcome.DEAD, {"message": "gave up", "error": error}),
        ("retrying", Outcome.RETRY, {"error": error, "retry_in": 3600.0}),
    ):
        app.enqueue("shop.register", [1, key])
        s.ids[key] = run_one(st, "default", outcome, **ack)
    ref = app.enqueue("shop.register", [2, XSS], {"note": XSS})
    assert ref is not None
    s.ids["xss"] = ref.id
    sched = app.enqueue("shop.register", [3, "later"], delay=3600)
    assert sched is not None
    s.ids["scheduled"] = sched.id
    with app.batch(description="import products.csv") as batch:
        for part in range(4):
            app.enqueue("shop.export", [part])
    s.batch_id = batch.id
    st.save_schedules([
        Schedule("nightly-export", "0 3 * * *", "shop.export", queue="exports",
                 tz="Europe/Berlin").info(),
        Schedule("restock-check", "*/15 * * * *", "shop.register").info()])
    st.schedule_ticked("restock-check", st.now() - 600)
    now = st.now()
    info = WorkerInfo(s.worker_id, "host-a", 4242, ("default", "exports"), 5, now - 60,
                      busy=(BusySlot(s.ids["xss"], "shop.register", "default", now - 3),),
                      last_seen=now)
    st.heartbeat(info, {}, 60.0)
    return s
