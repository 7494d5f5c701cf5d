"""Damage stored records the way a bug, a disk or a client of another version could.

Test code may know a backend's layout (the engine may not): each damage writes straight into
the store with the backend's own driver, after the job was enqueued normally.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

import aio_pika
import psycopg

from conveyor.app import Conveyor
from conveyor.broker import open_broker
from conveyor.broker.rabbitmq.broker import RabbitBroker
from conveyor.broker.rabbitmq.packs import PACKED
from conveyor.core.ids import new_id
from conveyor.core.job import FlowControl, JobSpec
from conveyor.storage.postgres.connection import parse_postgres_url

Damage = Callable[[Conveyor, str], None]

# 100,000 levels of nesting: more than any JSON decoder recurses through.
DEEP = 100_000
DEEP_PAYLOAD = '{"a":[' + "[" * DEEP + "]" * DEEP + '],"k":{}}'


@dataclass(frozen=True)
class Poison:
    """One damaged value: where it applies, how to make it, what the job's reason must say."""

    label: str
    backends: tuple[str, ...]
    damage: Damage
    reason: str  # a word the dead job's reason must contain (lower case)


def enqueue_raw(app: Conveyor, payload: str, name: str = "faults.work") -> str:
    """A job written as a client of another version could write it (no client checks)."""
    spec = JobSpec(id=new_id(), name=name, queue="default", payload=payload, max_retries=0)
    app.storage.enqueue([spec])
    return spec.id


# Keys that break the key rule (docs/flow-control.md "Keys"), as a client that does not check
# it writes them: each such job must end dead alone, its reason naming the key.
LONG_KEY = "partner:" + "7e" * 3000  # 6,008 bytes: past what PostgreSQL's B-tree takes
KEYED_POISONS = {
    "rate key of 6,008 bytes": FlowControl(rate_key=LONG_KEY, rate_limit=100, rate_period=1.0),
    "concurrency key of 6,008 bytes": FlowControl(concurrency_key=LONG_KEY, concurrency_limit=4),
    "order key with a newline": FlowControl(order_key="account:\n42"),
}


def enqueue_keyed(app: Conveyor, flow: FlowControl) -> str:
    """A ``faults.work`` job whose flow control ``flow`` was never checked (written through
    ``Storage.enqueue``, as a client of another version would)."""
    spec = JobSpec(id=new_id(), name="faults.work", queue="default", payload='{"a":[0],"k":{}}',
                   max_retries=0, flow=flow)
    app.storage.enqueue([spec])
    return spec.id


def publish_stray(broker_url: str, queue: str, job_ids: list[str]) -> None:
    """Messages conveyor never sent, on ``queue`` of the RabbitMQ ``broker_url`` names: one
    per id in ``job_ids`` (another queue's job, ids no store holds), and a pack nested
    200,000 levels deep."""
    broker = open_broker(broker_url)
    assert isinstance(broker, RabbitBroker)
    try:
        for job_id in job_ids:
            assert broker.publish(queue, [job_id]) == [True]

        async def deep() -> None:
            await broker._publisher.default_exchange.publish(
                aio_pika.Message(b"[" * 200_000, content_type=PACKED),
                routing_key=broker.name(queue))

        broker._call(deep())
    finally:
        broker.close()


def _sqlite_path(app: Conveyor) -> str:
    return app.storage.url.split("sqlite:///", 1)[1].split("?", 1)[0]


def _sqlite_set_bytes(column: str, raw: bytes) -> Damage:
    def damage(app: Conveyor, job_id: str) -> None:
        with sqlite3.connect(_sqlite_path(app), timeout=30) as db:
            # CAST(blob AS TEXT) stores the bytes as they are: invalid UTF-8 in a TEXT column.
            db.execute(f"UPDATE jobs SET {column} = CAST(? AS TEXT) WHERE id = ?", (raw, job_id))
    return damage


def _postgres_rewrite(column: str, change: Callable[[str], str]) -> Damage:
    """Rewrite one text column of the job's row (PostgreSQL text is always valid UTF-8, so
    its damage is text that is valid but wrong: JSON cut short, a value of another shape)."""
    def damage(app: Conveyor, job_id: str) -> None:
        settings = parse_postgres_url(app.storage.url)
        with psycopg.connect(settings.conninfo, autocommit=True) as db:
            table = f'"{settings.schema}".jobs'
            row = db.execute(f"SELECT {column} FROM {table} WHERE id = %s", (job_id,)).fetchone()
            assert row is not None, f"no row for {job_id}"
            db.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s",
                       (change(row[0]), job_id))
    return damage


def _redis_rewrite(which: str, change: Callable[[bytes], bytes]) -> Damage:
    def damage(app: Conveyor, job_id: str) -> None:
        storage = app.storage
        key = getattr(storage.keys.queue("default"), which)  # type: ignore[attr-defined]
        client = storage.link.client  # type: ignore[attr-defined]
        value = client.hget(key, job_id)
        assert value is not None, f"no {which} entry for {job_id}"
        if isinstance(value, str):  # the storage's client decodes replies (surrogateescape)
            value = value.encode("utf-8", "surrogateescape")
        client.hset(key, job_id, change(value))
    return damage


def damage_batch_runs(app: Conveyor, batch_id: str) -> None:
    """Overwrite every run entry of a Redis batch (a bulk join's jobs,
    docs/internals/redis-batches.md) with bytes no run parses."""
    storage = app.storage
    keys = storage.keys.batch(batch_id)  # type: ignore[attr-defined]
    client = storage.link.client  # type: ignore[attr-defined]
    heads = client.zrange(keys.heads, 0, -1)
    assert heads, f"batch {batch_id} holds no run"
    for head in heads:
        client.hset(keys.runs, head, b"\xff\xfe not a run")


def _drop_name(static: bytes) -> bytes:
    record = json.loads(static)
    del record["n"]
    return json.dumps(record).encode()


REDIS = ("redis", "redis_cluster", "redis_sentinel")
POISONS = (
    Poison("record truncated", REDIS, _redis_rewrite("jobs", lambda v: v[: len(v) // 2]),
           "unreadable"),
    Poison("record not UTF-8", REDIS, _redis_rewrite("jobs", lambda v: b"\xff\xfe" + v[2:]),
           "unreadable"),
    Poison("record missing its name", REDIS, _redis_rewrite("jobs", _drop_name), "unreadable"),
    Poison("state entry truncated", REDIS, _redis_rewrite("state", lambda v: v[:3]),
           "unreadable"),
    Poison("payload not UTF-8", ("sqlite",), _sqlite_set_bytes("payload", b'{"a":["\xff\xfe"]}'),
           "unreadable"),
    Poison("name not UTF-8", ("sqlite",), _sqlite_set_bytes("name", b"faults.\xffwork"),
           "unreadable"),
    Poison("payload truncated", ("postgres",), _postgres_rewrite("payload", lambda v: v[:-3]),
           "json"),
    Poison("payload not an object", ("postgres",), _postgres_rewrite("payload", lambda v: "[1]"),
           "object"),
)
