"""A job stored between a lease's look at its queue and its lock on that queue's jobs is
leased by the rules it was stored with: a flow-controlled job is not taken by the plain
branch, past its concurrency limit.

The window is made wide on purpose, without a sleep: the lease's first statement for the
queue finds a job past its deadline and no flow-controlled job; ending that job writes a
workflow mark, and the test holds a conflicting uncommitted mark, so the lease waits there
(``pg_stat_activity`` says when) while a flow-controlled job is stored and committed. Then
the mark is rolled back and the lease goes on to its lock.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.core.flow_control import FlowControl
from conveyor.core.ids import new_id
from conveyor.core.job import Ack, BatchSpec, JobSpec, LeasedJob, Node, Outcome
from conveyor.storage.postgres.storage import PostgresStorage, open_postgres
from tests.postgres import schema_conn


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=l{uuid.uuid4().hex[:10]}")
    yield storage
    storage.close()


def _job(queue: str, **kwargs: Any) -> JobSpec:
    return JobSpec(id=new_id(), name="t.x", queue=queue, payload="[]", **kwargs)


def test_a_flow_controlled_job_stored_inside_a_lease_waits_for_its_key(
        store: PostgresStorage) -> None:
    key = FlowControl(concurrency_key="k", concurrency_limit=1)
    store.enqueue([_job("keyed", flow=key)])
    [holder] = store.dequeue(["keyed"], "w1", 5, 60)  # key k now at its limit
    store.create_batch(BatchSpec(id="g", kind="workflow"))
    late = _job("plain", batch_id="g", node=Node((), (), "fail", ""),
                deadline=time.time() - 1)
    store.enqueue([late])
    blocker = schema_conn(store)
    blocker.execute("BEGIN")
    blocker.execute("INSERT INTO wf_marks (id) VALUES (%s)", (late.id,))
    leased: list[LeasedJob] = []
    lease = threading.Thread(target=lambda: leased.extend(
        store.dequeue(["plain"], "w2", 5, 60)))
    lease.start()
    watcher = schema_conn(store)
    deadline = time.monotonic() + 30
    waiting = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
               "AND query LIKE '%dequeue%'")
    while watcher.execute(waiting).fetchone() != (1,):
        assert time.monotonic() < deadline, "the lease never reached the mark"
        time.sleep(0.01)
    gated = _job("plain", flow=key)
    store.enqueue([gated])  # committed while the lease waits
    blocker.execute("ROLLBACK")
    lease.join(30)
    assert not lease.is_alive()
    blocker.close()
    watcher.close()
    assert gated.id not in [j.id for j in leased]  # k is held by `holder`, still running
    record = store.get_job(late.id)
    assert record is not None and record.state.value == "dead"
    assert store.ack([Ack(holder.id, holder.token, Outcome.SUCCEEDED)]) == [True]
    assert [j.id for j in store.dequeue(["plain"], "w2", 5, 60)] == [gated.id]
