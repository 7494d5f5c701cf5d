"""The text rules: what conveyor stores of human text, how it prints it, which names it takes."""

from __future__ import annotations

import dataclasses

import pytest

from conveyor.core.flow_control import GATE_KEYS, KEY_KINDS, FlowControl
from conveyor.core.ids import new_id
from conveyor.core.text import (
    MAX_ID_LENGTH,
    MAX_KEY_BYTES,
    MAX_NAME_LENGTH,
    check_name,
    id_fault,
    key_fault,
    printable,
    storable,
)
from conveyor.errors import InvalidNameError


def test_storable_text_is_unchanged_when_it_already_encodes() -> None:
    for text in ("", "plain", "café ☕ 😀", "tab\tnewline\nnul\x00", "\U0010ffff"):
        assert storable(text) is text or storable(text) == text
        storable(text).encode("utf-8")


def test_lone_surrogates_become_the_replacement_character() -> None:
    assert storable("bad \ud800 text") == "bad \ufffd text"
    assert storable("\udfff\ud800") == "\ufffd\ufffd"
    storable("x\udc80y").encode("utf-8")


def test_a_surrogate_pair_becomes_the_character_it_spells() -> None:
    assert storable("\ud83d\ude00") == "😀"


def test_printable_escapes_control_characters_and_lone_surrogates_only() -> None:
    assert printable("a\nb\rc\x00d\x1b[31m\x7f") == "a\\nb\\rc\\x00d\\x1b[31m\\x7f"
    assert printable("ok \ud800") == "ok \\ud800"
    assert printable("line\u2028sep\x85") == "line\\u2028sep\\x85"
    assert printable("café ☕ 'quoted' \\ back") == "café ☕ 'quoted' \\ back"
    assert "\n" not in printable("x" * 10 + "\n")


@pytest.mark.parametrize("name", ["emails.send", "a", "x" * MAX_NAME_LENGTH, "café", "a b"])
def test_ordinary_names_are_accepted(name: str) -> None:
    check_name("job name", name)


@pytest.mark.parametrize("name", ["", "a\nb", "a\tb", "a\rb", "nul\x00", "esc\x1b[2J",
                                  "\ud800", "line\u2028sep", "x" * (MAX_NAME_LENGTH + 1), 42])
def test_names_that_cannot_be_stored_or_printed_safely_are_refused(name: object) -> None:
    with pytest.raises(InvalidNameError) as info:
        check_name("job name", name)
    text = str(info.value)
    assert text.startswith("job name ") and "\n" not in text and len(text) < 300
    assert isinstance(info.value, ValueError)


# The key rule (docs/flow-control.md, "Keys"): keys are often built from user data, so every
# character is taken but the few that break lines, logs or stores; the bound is in bytes.
@pytest.mark.parametrize("key", ["partner:42", "user:Zoë", "emoji:😀", "a b", "zero\u200bwidth",
                                 "k" * MAX_KEY_BYTES, "€" * (MAX_KEY_BYTES // 3),
                                 "unassigned:\U000e0080", "\ufffd"])
def test_ordinary_keys_are_accepted(key: str) -> None:
    assert key_fault(key) is None


@pytest.mark.parametrize("key", ["", "k" * (MAX_KEY_BYTES + 1), "€" * (MAX_KEY_BYTES // 3 + 1),
                                 "a\nb", "a\rb", "a\tb", "nul\x00", "us\x1f", "del\x7f",
                                 "c1\x85", "line\u2028", "para\u2029", "lone\ud800", 42, b"k",
                                 "x" * 10_000_000])
def test_keys_that_break_the_rule_say_why_in_one_short_line(key: object) -> None:
    fault = key_fault(key)
    assert fault is not None and "\n" not in fault and len(fault) < 200


# Ids a caller chooses (a workflow node's): safe in a URL path, a log line and a Redis key.
@pytest.mark.parametrize("value", ["a", "node-1", "page:3", "v1.2_x", "x" * MAX_ID_LENGTH])
def test_ordinary_ids_are_accepted(value: str) -> None:
    assert id_fault(value) is None
    assert id_fault(new_id()) is None


@pytest.mark.parametrize("value", [5, None, "", "x" * (MAX_ID_LENGTH + 1), "x" * 100_000, "a/b",
                                   "a b", "a\nb", "lone\ud800", "café", "{tag}"])
def test_ids_that_are_not_safe_everywhere_are_refused(value: object) -> None:
    fault = id_fault(value)
    assert fault is not None and "\n" not in fault and len(fault) < 200


def test_every_flow_control_key_is_under_the_key_rule() -> None:
    """One rule for every key (issue 49): a new kind of key (fairness, say) is a FlowControl
    field named ``*_key``; it must be listed in ``KEY_KINDS``, which is what enqueue checks."""
    fields = {f.name for f in dataclasses.fields(FlowControl) if f.name.endswith("_key")}
    assert fields == set(KEY_KINDS)
    assert set(GATE_KEYS) <= fields
    flow = FlowControl(**dict.fromkeys(fields, "k" * (MAX_KEY_BYTES + 1)))
    assert sorted(kind for kind, _ in flow.named_keys()) == sorted(KEY_KINDS.values())
