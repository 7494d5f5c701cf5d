"""The Lua scripts: each header lists what it uses (includes, KEYS), the loader assembles and
checks them, every key a script touches comes from KEYS, errors name the file and line they
come from, and a flushed script cache is reloaded transparently."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources

import pytest

import redis
from conveyor.core.job import ALL_STATES, Ack, JobSpec, Outcome
from conveyor.storage.redis import codec
from conveyor.storage.redis.batches import state_code
from conveyor.storage.redis.keys import QueueKeys
from conveyor.storage.redis.scripts import (
    INCLUDE,
    SCRIPT_NAMES,
    SCRIPTS,
    Script,
    ScriptLayoutError,
    assemble,
    check_fields,
    script_text,
)
from conveyor.storage.redis.storage import RedisStorage
from conveyor.storage.totals import HISTORY_MINUTES

# Commands whose first argument is not a key.
KEYLESS = {"TIME"}
CALL = re.compile(r"redis\.call\(\s*'([A-Z]+)'\s*(?:,\s*([^,)]+))?")
KEY_VAR = re.compile(r"^(K_[A-Z_]+|KEYS\[\d+\])$")
# The one exception, by script and argument: the other queues' jobs hashes a caller-chosen
# id is checked in, passed as ARGV on a single server only (RedisEnqueue._others returns
# none on Cluster, where a script may not reach another slot: docs/internals/redis-lua.md,
# "Ids across queues"; the conformance suite's test_chosen_ids runs on Cluster too).
OTHER_QUEUES = {("enqueue", "HEXISTS", "OTHERS[k]"), ("enqueue_one", "HEXISTS", "ARGV[i]")}
ASSIGN = re.compile(r"^\s*local\s+(K_[A-Z_]+)\s*=\s*(.+?)\s*$", re.M)


def lua_files() -> list[str]:
    folder = resources.files("conveyor.storage.redis").joinpath("lua")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".lua"))


def test_every_file_is_a_script_or_a_library() -> None:
    names = lua_files()
    assert sorted(n for n in names if not n.startswith("_")) == sorted(SCRIPT_NAMES)


def test_every_script_has_a_header_naming_includes_keys_argv_and_returns() -> None:
    for name in SCRIPT_NAMES:
        lines = script_text(name).split("\n")
        assert lines[0].startswith(f"-- {name}.lua:"), name
        head = lines[:next(i for i, line in enumerate(lines) if not line.startswith("--"))]
        assert any(INCLUDE.match(line) for line in head), f"{name}.lua lists no include"
        assert any(line.startswith("--- @key ") for line in head), f"{name}.lua: no keys"
        for part in ("-- ARGV:", "-- Returns:"):
            assert any(line.startswith(part) for line in head), f"{name}.lua lacks {part}"
        assert SCRIPTS[name].keys, name


def test_every_library_is_included_at_most_once_and_every_used_one_is_listed() -> None:
    libraries = [n for n in lua_files() if n.startswith("_")]
    for name in SCRIPT_NAMES:
        source = SCRIPTS[name].source
        for lib in libraries:
            assert source.count(f"-- {lib}.lua:") <= 1, (name, lib)
        files = {file for file, _ in SCRIPTS[name].origins}
        assert files - {name} <= set(libraries)


def test_every_key_a_script_touches_comes_from_keys() -> None:
    for name in SCRIPT_NAMES:
        text = SCRIPTS[name].source
        for var, value in ASSIGN.findall(text):
            # Key variables are assigned from KEYS[i] only (or picked from such variables).
            assert re.fullmatch(r"KEYS\[\d+\]|\{.*\}|(f and )?[A-Z_]+\[.+\]", value), (
                name, var, value)
        for command, first in CALL.findall(text):
            if command in KEYLESS or (name, command, first.strip()) in OTHER_QUEUES:
                continue
            assert KEY_VAR.match(first.strip()), f"{name}.lua: {command} on {first!r}"
        assert "KEYS[" not in script_text(name), f"{name}.lua spells KEYS[i] itself"


def test_each_script_declares_only_the_keys_it_uses() -> None:
    for name in SCRIPT_NAMES:
        script = SCRIPTS[name]
        for key in script.keys:
            uses = len(re.findall(rf"\bK_{key.upper()}\b", script.source))
            assert uses > 1, f"{name}.lua declares {key} and never uses it"


def test_the_lua_field_table_is_codec_state_fields() -> None:
    text = script_text("_fields")
    found = re.findall(r"^local F_([A-Z_]+) = (\d+)\b", text, re.M)
    assert [(n.lower(), int(p)) for n, p in found] == [
        (n, i) for i, n in enumerate(codec.STATE_FIELDS, 1)]
    with pytest.raises(ScriptLayoutError, match="STATE_FIELDS"):
        check_fields(text.replace("F_ATTEMPTS = 3", "F_ATTEMPTS = 4"))
    with pytest.raises(ScriptLayoutError, match="NFIELDS"):
        check_fields(text.replace("NFIELDS = 21", "NFIELDS = 20"))


def test_batch_lua_state_codes_are_the_inspectors() -> None:
    found = dict(re.findall(r"(\w+) = (\d+)", re.search(
        r"STATE_CODE = \{(.*?)\}", script_text("_runs"), re.S)[1]))  # type: ignore[index]
    assert {s: int(c) for s, c in found.items()} == {s.value: state_code(s) for s in ALL_STATES}


def test_the_lua_history_ring_keeps_records_history_minutes() -> None:
    found = re.search(r"^local HISTORY_MINUTES = (\d+)$", script_text("_counts"), re.M)
    assert found is not None and int(found[1]) == HISTORY_MINUTES


# -- the loader, on made-up files -------------------------------------------------------------

FAKE = {
    "_a": '-- _a.lua: a library\n--- @include "_b"\nlocal A = B + 1\n',
    "_b": "-- _b.lua: another\nlocal B = 1\n",
    "_needy": '-- _needy.lua\n--- @needs-keys state meta\nlocal M = K_META\n',
    "ok": '-- ok.lua: x\n--- @include "_a"\n--- @include "_b"\n--- @key state\n'
          "return {A, K_STATE}\n",
}


def reader(files: dict[str, str]) -> Callable[[str], str]:
    return lambda name: files[name]


def test_includes_resolve_recursively_once_and_keys_come_first() -> None:
    script = assemble("ok", reader(FAKE), QueueKeys)
    lines = script.source.split("\n")
    assert lines[0] == "local K_STATE = KEYS[1]"
    assert script.origins[0] == ("ok", 4)  # the key's header line
    assert script.source.count("local B = 1") == 1
    # B is a constant: the loader writes it as its value (test_lua_constants.py)
    assert lines.index("local B = 1") < lines.index("local A = 1 + 1")
    assert script.where(lines.index("local A = 1 + 1") + 1) == "lua/_a.lua:3"
    assert script.where(len(lines) - 1) == "lua/ok.lua:5"
    assert script.key_list(QueueKeys(*[f"k:{f}" for f in QueueKeys.__slots__])) == ("k:state",)


@pytest.mark.parametrize(("files", "message"), [
    ({**FAKE, "_b": '--- @include "_a"\n'}, "cycle"),
    ({**FAKE, "ok": "--- @key nosuch\n"}, "does not have"),
    ({**FAKE, "ok": "--- @key state\n--- @key state\n"}, "twice"),
    ({**FAKE, "ok": '--- @include "_needy"\n--- @key state\n'}, r"needs the keys \['meta'\]"),
    ({**FAKE, "_b": "--- @key meta\n"}, "library"),
    ({**FAKE, "ok": "--- @inclde \"_a\"\n"}, "unknown directive"),
    ({**FAKE, "ok": '--- @include "_nosuch"\n'}, "does not exist"),
])
def test_a_layout_mistake_fails_at_load(files: dict[str, str], message: str) -> None:
    with pytest.raises(ScriptLayoutError, match=message):
        assemble("ok", reader(files), QueueKeys)


def test_keys_come_from_the_holder_the_script_names(store: RedisStorage) -> None:
    with pytest.raises(TypeError, match="QueueKeys"):
        store.scripts.keys("dequeue", store.keys.batch("b"))


BROKEN = {
    "_clock": script_text("_clock"),
    "_boom": "-- _boom.lua: fails when called\nlocal function boom(x)\n"
             "  return x.missing.field\nend\n",
    "broken": '-- broken.lua\n--- @include "_clock"\n--- @include "_boom"\n'
              "--- @key state\nif ARGV[2] == 'here' then\n  error('failed here')\nend\n"
              "redis.call('GET', K_STATE)\nreturn boom({})\n",
    "garbled": "-- garbled.lua\n--- @key state\nlocal x = K_STATE\nlocal = 2\n",
}


def run_made_up(store: RedisStorage, name: str, args: list[str]) -> str:
    script: Script = assemble(name, reader(BROKEN), QueueKeys)
    store.scripts.scripts = {**store.scripts.scripts, name: script}
    with pytest.raises(redis.ResponseError) as caught:
        store.scripts.once(name, store.keys.queue("q"), ["", *args])
    return str(caught.value)


def test_a_script_error_names_the_file_and_line_it_comes_from(store: RedisStorage) -> None:
    assert "lua/_boom.lua:3:" in run_made_up(store, "broken", ["x"])
    in_script = run_made_up(store, "broken", ["here"])
    assert "lua/broken.lua:6: failed here" in in_script
    assert "user_script" not in in_script and "[running broken.lua]" in in_script
    assert "lua/garbled.lua:4:" in run_made_up(store, "garbled", [])  # a compile error


def test_every_shipped_script_compiles(store: RedisStorage) -> None:
    for script in SCRIPTS.values():
        assert store.link.raw("SCRIPT", "LOAD", script.source) == script.sha


# TIME's reply as ARGV 2 and 3: a local ``redis`` ahead of the include shadows the server's
CLOCKED = {
    "_clock": script_text("_clock"),
    "clocked": "-- clocked.lua\nlocal redis = {call = function() return {ARGV[2], ARGV[3]} end}\n"
               '--- @include "_clock"\n--- @key state\n'
               "return {NOWS, string.format('%.6f', NOW), string.format('%.17g', NOW)}\n",
}


@pytest.mark.parametrize("usec", ["0", "7", "42", "100000", "999999"])
def test_the_server_clock_text_is_six_decimals_of_its_time(store: RedisStorage,
                                                            usec: str) -> None:
    """NOWS (state lines, events) is "%.6f" of the server's TIME, which codec parses as the
    float NOW compares with: the text is built from TIME's two parts, so a microsecond value
    below 100,000 must be padded (x.000042, not x.42) and NOW must be the same instant."""
    script = assemble("clocked", reader(CLOCKED), QueueKeys)
    store.scripts.scripts = {**store.scripts.scripts, "clocked": script}
    text, formatted, number = store.scripts.once("clocked", store.keys.queue("q"),
                                                 ["", "1795920533", usec])
    assert text == f"{1795920533 + int(usec) / 1e6:.6f}" == formatted
    assert float(number) == float(text)


# -- the script cache ---------------------------------------------------------------------------

def test_noscript_after_script_flush_reloads(store: RedisStorage, redis_server: object) -> None:
    store.enqueue([JobSpec(id="a", name="t", queue="q", payload="{}")])
    client = redis.Redis.from_url(redis_server.url)  # type: ignore[attr-defined]
    client.script_flush()
    assert client.script_exists(store.scripts.scripts["dequeue"].sha) == [False]
    jobs = store.dequeue(["q"], "w", 5, 30)
    assert [j.id for j in jobs] == ["a"]
    assert client.script_exists(store.scripts.scripts["dequeue"].sha) == [True]
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
    assert client.script_exists(store.scripts.scripts["dequeue"].sha) == [True]
    client.close()
