"""The Lua scripts: every key they touch is declared in KEYS, and a flushed script cache is
reloaded transparently."""

from __future__ import annotations

import re

import redis
from conveyor.job import Ack, JobSpec, Outcome
from conveyor.storage.redis.scripts import ADMIN, LIB, RECOVER, SCRIPT_NAMES, script_text
from conveyor.storage.redis.storage import RedisStorage

# Commands whose first argument is not a key.
KEYLESS = {"TIME"}
CALL = re.compile(r"redis\.call\(\s*'([A-Z]+)'\s*(?:,\s*([^,)]+))?")
KEY_VAR = re.compile(r"^(K_[A-Z_]+|KEYS\[\d+\])$")
ASSIGN = re.compile(r"^\s*local\s+(K_[A-Z_]+)\s*=\s*(.+?)\s*$", re.M)


def test_every_script_has_a_header_naming_keys_argv_and_returns() -> None:
    for name in SCRIPT_NAMES:
        head = script_text(name).split("\n")[:12]
        text = "\n".join(head)
        assert head[0].startswith(f"-- {name}.lua:"), name
        for part in ("-- KEYS:", "-- ARGV:", "-- Returns:"):
            assert part in text, f"{name}.lua header lacks {part}"


def test_every_key_a_script_touches_comes_from_keys() -> None:
    for name in (*SCRIPT_NAMES, LIB, ADMIN, RECOVER):
        text = script_text(name)
        for var, value in ASSIGN.findall(text):
            # Key variables are assigned from KEYS[i] only (or picked from such variables).
            assert re.fullmatch(r"KEYS\[\d+\]|\{.*\}|[A-Z_]+\[.+\]", value), (name, var, value)
        for command, first in CALL.findall(text):
            if command in KEYLESS:
                continue
            assert KEY_VAR.match(first.strip()), f"{name}.lua: {command} on {first!r}"


def test_noscript_after_script_flush_reloads(store: RedisStorage, redis_server: object) -> None:
    store.enqueue([JobSpec(id="a", name="t", queue="q", payload="{}")])
    client = redis.Redis.from_url(redis_server.url)  # type: ignore[attr-defined]
    client.script_flush()
    assert client.script_exists(store.scripts.shas["dequeue"]) == [False]
    jobs = store.dequeue(["q"], "w", 5, 30)
    assert [j.id for j in jobs] == ["a"]
    assert client.script_exists(store.scripts.shas["dequeue"]) == [True]
    client.script_flush()
    assert store.ack([Ack("a", jobs[0].token, Outcome.SUCCEEDED)]) == [True]
    client.close()


def test_a_lease_pipelined_behind_a_wait_survives_a_flushed_script_cache(
    store: RedisStorage, redis_server: object
) -> None:
    store.enqueue([JobSpec(id="b", name="t", queue="q", payload="{}")])
    client = redis.Redis.from_url(redis_server.url)  # type: ignore[attr-defined]
    client.script_flush()
    jobs = store.wait_dequeue(["q"], ["q"], "w", 5, 30, 1.0)
    assert [j.id for j in jobs] == ["b"]
    assert client.script_exists(store.scripts.shas["dequeue"]) == [True]
    client.close()
