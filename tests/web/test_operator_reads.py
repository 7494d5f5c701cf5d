"""Long operator reads — a search, a failures export — hold no other page, stop when the
operator goes away, and cannot be set off by another site (issue 49: three abandoned searches
made ``/api/stats`` wait 19.8 s; an 88,745-row export was built whole in memory).

Expectations from the peers: Sidekiq's web UI streams nothing but pages every list and caps a
search (``Sidekiq::SortedSet#scan`` reads page by page); Flower and asynq's web UI serve each
page from its own request. Ours: pages and long reads run on separate thread pools, a long
read is bounded and stops when its client disconnects, an export is sent as it is read.
Every race here is made to happen in one order (a read held until the test releases it),
never hoped for.
"""

from __future__ import annotations

import asyncio
import csv
import io
import threading
from typing import Any

from conveyor import Conveyor
from conveyor.core.job import Outcome
from conveyor.http.asgi import Message
from conveyor.web import RunningServer, create_app
from conveyor.web.lanes import CHUNK, LONG_THREADS
from tests.web.conftest import Client
from tests.web.seed import run_one


class Held:
    """An Inspector whose long reads (``job_heads``, a batch's ``list_jobs``) each wait until
    ``release`` is set, after saying so (``entered``); every call is recorded in ``log``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()
        self.log: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):  # a member that is no method (``durable``): as it is
            return method

        def called(*args: Any, **kwargs: Any) -> Any:
            long_read = name == "job_heads" or (name == "list_jobs" and kwargs.get("batch_id"))
            if long_read:
                self.log.append("page")
                self.entered.set()
                assert self.release.wait(60), "never released"
            return method(*args, **kwargs)

        return called


def test_searches_that_take_long_hold_no_page(jobs: Conveyor) -> None:
    """Issue 49's stall: every page shared one storage thread, so searches in progress held
    ``/api/stats``. Here more searches than long-read threads are held mid-read, and the
    overview's poll, the queues page and a job are still served."""
    held = Held(jobs.storage)
    server = RunningServer(create_app(held), "127.0.0.1", 0).start()
    searches = [threading.Thread(target=Client(server.port).get, args=(f"/jobs?q=zzz{n}",))
                for n in range(LONG_THREADS + 1)]
    try:
        for search in searches:
            search.start()
        assert held.entered.wait(30)
        client = Client(server.port)
        assert client.get("/api/stats").status == 200  # on main: waits for the searches
        assert client.get("/queues").status == 200
        some = jobs.storage.list_jobs(limit=1)[0].id
        assert client.get(f"/jobs/{some}").status == 200
        assert not held.release.is_set()  # the searches were held all along
    finally:
        held.release.set()
        for search in searches:
            search.join(60)
        server.stop()


def _scope(path: str, query: str = "", **headers: str) -> dict[str, Any]:
    raw = [(b"host", b"127.0.0.1")] + [(k.replace("_", "-").encode(), v.encode())
                                        for k, v in headers.items()]
    return {"type": "http", "method": "GET", "path": path, "root_path": "", "scheme": "http",
            "query_string": query.encode(), "headers": raw, "http_version": "1.1"}


async def _drive(dashboard: Any, scope: dict[str, Any], held: Held, *,
                 leave_after_entered: bool, sent: list[Message] | None = None
                 ) -> list[Message]:
    """One request through the ASGI app. With ``leave_after_entered`` the client disconnects
    once a long read is held, and the read is released only after the dashboard heard it
    (``call_soon`` runs after the step in which the watcher read the disconnect)."""
    out: list[Message] = [] if sent is None else sent
    asked = False

    async def receive() -> Message:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if leave_after_entered:
            await asyncio.to_thread(held.entered.wait, 30)
            asyncio.get_running_loop().call_soon(held.release.set)
        else:
            await asyncio.Event().wait()  # the client stays
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        out.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            held.log.append("body")

    if not leave_after_entered:
        held.release.set()
    await dashboard(scope, receive, send)
    return out


def _bulk(app: Conveyor, count: int, size: int) -> None:
    for n in range(count):
        app.enqueue("shop.register", [n, "x" * size])


def test_a_search_stops_when_the_operator_goes_away(jobs: Conveyor) -> None:
    """An abandoned search reads no further page once its client has gone (issue 49: three
    abandoned searches ran on, 6.1 s each)."""
    _bulk(jobs, 1200, 10)  # three pages of job heads
    held = Held(jobs.storage)
    asyncio.run(_drive(create_app(held), _scope("/jobs", "q=zzz"), held,
                       leave_after_entered=True))
    assert held.log.count("page") == 1


def _failed_batch(app: Conveyor, count: int, size: int) -> str:
    with app.batch(description="rows") as batch:
        for n in range(count):
            app.enqueue("shop.export", [n, "y" * size], queue="rows")
    for _ in range(count):
        run_one(app.storage, "rows", Outcome.FAILED, message="bad row")
    return batch.id


def test_an_export_is_sent_as_it_is_read(jobs: Conveyor) -> None:
    """The failures export is streamed: body messages of about ``CHUNK`` characters, the
    first sent before the last page of jobs is read (issue 49: built whole, 105 MB)."""
    batch = _failed_batch(jobs, 120, 5000)
    held = Held(jobs.storage)
    sent = asyncio.run(_drive(create_app(held), _scope(f"/batches/{batch}/failures.csv"),
                              held, leave_after_entered=False))
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body" and m["body"]]
    assert len(bodies) > 2 and max(len(b) for b in bodies) < CHUNK + 8000
    assert held.log.index("body") < len(held.log) - 1 - held.log[::-1].index("page")
    rows = list(csv.DictReader(io.StringIO(b"".join(bodies).decode())))
    assert len(rows) == 120 and {r["state"] for r in rows} == {"failed"}


def test_an_export_stops_when_the_operator_goes_away(jobs: Conveyor) -> None:
    batch = _failed_batch(jobs, 120, 5000)  # a first page of 20, then the rest
    held = Held(jobs.storage)
    asyncio.run(_drive(create_app(held), _scope(f"/batches/{batch}/failures.csv"), held,
                       leave_after_entered=True))
    assert held.log.count("page") == 1  # the page being read when the client left, no more


def test_another_site_cannot_set_off_a_search_or_an_export(jobs: Conveyor) -> None:
    """Without a token, any page the operator opens could send the search GET (an ``<img>``
    pointing at it). A request marked cross-site by the browser (``Sec-Fetch-Site``) gets the
    page with the search not run, and an export is refused; the dashboard's own forms and a
    typed address (``same-origin``, ``none``) run them."""
    held = Held(jobs.storage)
    held.release.set()
    server = RunningServer(create_app(held), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        elsewhere = client.get("/jobs?q=gave+up", **{"Sec-Fetch-Site": "cross-site"})
        assert elsewhere.status == 200 and "search not run" in elsewhere.body
        assert held.log == []
        batch = _failed_batch(jobs, 1, 10)
        refused = client.get(f"/batches/{batch}/failures.csv", **{"Sec-Fetch-Site": "same-site"})
        assert refused.status == 403 and held.log == []
        ours = client.get("/jobs?q=gave+up", **{"Sec-Fetch-Site": "same-origin"})
        assert "1 found among the" in ours.body and held.log == ["page"]
        typed = client.get(f"/batches/{batch}/failures.csv", **{"Sec-Fetch-Site": "none"})
        assert typed.status == 200 and "bad row" in typed.body
    finally:
        server.stop()
