"""Client and server middleware: ordering, changing the draft, stopping an enqueue."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conveyor import Conveyor, JobContext
from conveyor.client.client import EnqueueDraft, JobRef
from conveyor.client.middleware import MiddlewareChain
from conveyor.client.registry import make_options


class Tag:
    """A server middleware that records when it runs around the job."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    def __call__(self, ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        self.seen.append(f"{self.name}>")
        result = call_next()
        self.seen.append(f"<{self.name}")
        return result


class AsyncTag(Tag):
    """A server middleware that also wraps async jobs."""

    async def run_async(self, ctx: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        self.seen.append(f"{self.name}>")
        result = await call_next()
        self.seen.append(f"<{self.name}")
        return result


def make_ctx(app: Conveyor) -> JobContext:
    return JobContext(runtime=app.runtime, app=app, job_id="j1", name="tests.job")


def test_chain_order_follows_add_prepend_insert_and_remove(app: Conveyor) -> None:
    seen: list[str] = []
    a, b, c, d, e = (Tag(n, seen) for n in "abcde")
    chain = MiddlewareChain()
    chain.add(b)
    chain.prepend(a)
    chain.add(d)
    chain.insert_before(d, c)
    chain.insert_after(Tag, e)  # a class finds its first instance: a
    chain.remove(b)
    assert list(chain) == [a, e, c, d] and len(chain) == 4 and b not in chain
    def job() -> int:
        seen.append("job")
        return 42

    assert chain.run(make_ctx(app), job) == 42
    assert seen == ["a>", "e>", "c>", "d>", "job", "<d", "<c", "<e", "<a"]
    with pytest.raises(ValueError, match="not in this middleware chain"):
        chain.remove(b)


def test_server_middleware_sees_exceptions(app: Conveyor) -> None:
    caught: list[str] = []

    def guard(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        try:
            return call_next()
        except KeyError as exc:
            caught.append(f"{ctx.job_id}:{exc}")
            raise

    def boom() -> None:
        raise KeyError("k")

    chain = MiddlewareChain([guard])
    with pytest.raises(KeyError):
        chain.run(make_ctx(app), boom)
    assert caught == ["j1:'k'"]


def test_async_jobs_pass_only_through_async_capable_middleware(
    app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    chain = MiddlewareChain([AsyncTag("a", seen), Tag("sync", seen), AsyncTag("b", seen)])

    async def job() -> str:
        seen.append("job")
        return "done"

    with caplog.at_level(logging.WARNING, logger="conveyor.middleware"):
        assert asyncio.run(chain.run_async(make_ctx(app), job)) == "done"
        asyncio.run(chain.run_async(make_ctx(app), job))
    assert seen[:5] == ["a>", "b>", "job", "<b", "<a"]
    assert len([r for r in caplog.records if "has no run_async" in r.message]) == 1


def test_client_middleware_changes_the_draft(app: Conveyor) -> None:
    @app.job
    def notify(user: int) -> None: ...

    def route_vip(draft: EnqueueDraft, call_next: Callable[[], JobRef | None]) -> JobRef | None:
        draft.meta["tenant"] = "acme"
        if draft.args == [1]:
            draft.options = make_options(draft.options, queue="vip")
            draft.args = [1001]
        return call_next()

    app.client_middleware.add(route_vip)
    ref = notify.enqueue(1)
    assert ref is not None
    record = app.get_job(ref.id)
    assert record is not None
    assert (record.queue, record.args) == ("vip", [1001])
    assert '"m":{"tenant":"acme"}' in record.payload


def test_client_middleware_can_stop_an_enqueue(app: Conveyor) -> None:
    @app.job
    def notify(user: int) -> None: ...

    order: list[str] = []

    def outer(draft: EnqueueDraft, call_next: Callable[[], JobRef | None]) -> JobRef | None:
        order.append("outer")
        return call_next()

    def blocklist(draft: EnqueueDraft, call_next: Callable[[], JobRef | None]) -> JobRef | None:
        order.append("blocklist")
        return None if draft.args[0] < 0 else call_next()

    app.client_middleware.add(outer)
    app.client_middleware.add(blocklist)
    assert notify.enqueue(-1) is None
    assert order == ["outer", "blocklist"]
    refs = notify.enqueue_many([[1], [-2], [3]])
    assert len(refs) == 2
    assert sorted(r.args[0] for r in app.storage.list_jobs()) == [1, 3]
