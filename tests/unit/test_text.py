"""The text rules: what conveyor stores of human text, how it prints it, which names it takes."""

from __future__ import annotations

import pytest

from conveyor.errors import InvalidNameError
from conveyor.text import MAX_NAME_LENGTH, check_name, printable, storable


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
