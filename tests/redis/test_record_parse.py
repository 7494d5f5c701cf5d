"""``_record.lua``'s ``parse`` reads a sound state line in one pattern match and anything
else field by field: both must give what the field-by-field reading always gave — every
field, the event log, and why the entry is damaged (a truncated or garbled entry is leased
and reported, never a script error: DESIGN §7, tests/redis/test_damaged_records.py)."""

from __future__ import annotations

import pytest

from conveyor.storage.redis import codec
from conveyor.storage.redis.keys import QueueKeys
from conveyor.storage.redis.scripts import assemble, script_text
from conveyor.storage.redis.storage import RedisStorage

# A made-up script returning what parse() makes of ARGV[2].
PROBE = ('-- probe.lua\n--- @include "_record"\n--- @key state\n'
         "local f, events, bad = parse(ARGV[2])\n"
         "return {table.concat(f, '|', 1, NFIELDS), #f, events, bad or ''}\n")
N = len(codec.STATE_FIELDS)


def parsed(store: RedisStorage, raw: str) -> list[object]:
    script = assemble("probe", lambda name: PROBE if name == "probe" else script_text(name),
                      QueueKeys)
    store.scripts.scripts = {**store.scripts.scripts, "probe": script}
    return list(store.scripts.once("probe", store.keys.queue("q"), ["", raw]))


def fields(*values: str) -> list[str]:
    """``values`` then '' up to the line's width."""
    return [*values, *[""] * (N - len(values))]


@pytest.mark.parametrize(("head", "want_fields", "damage"), [
    ("\t".join(fields("pending", "1.5", "0")), fields("pending", "1.5", "0"), ""),
    ("\t".join(fields("nosuch", "1.5")), fields("nosuch", "1.5"), "names no known state"),
    # one tab too many (a field more than this version knows): the last field keeps the rest
    ("\t".join([*fields("active"), "extra"]), [*fields("active")[:-1], "\textra"], ""),
    ("pending\t1.5\t0", fields("pending", "1.5", "0"), f"truncated (3 of {N} fields)"),
    ("", fields(), f"truncated (1 of {N} fields)"),
])
def test_a_state_entry_reads_the_same_whatever_its_shape(
        store: RedisStorage, head: str, want_fields: list[str], damage: str) -> None:
    events = '{"t":1.5,"k":"enqueued"}\n'
    joined, count, log, bad = parsed(store, f"{head}\n{events}")
    assert (joined, count, log) == ("|".join(want_fields), N, events)
    assert (damage in str(bad)) and (bool(bad) == bool(damage))
