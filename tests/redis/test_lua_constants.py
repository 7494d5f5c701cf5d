"""The loader writes a script's numeric constants as their values where they are read
(``constants.py``): Redis runs the whole chunk on every call, and each closure pays for every
local it captures (docs/internals/redis-lua.md, "What a call costs"). Only certain constants
are rewritten, never a string, a comment, a field or a name bound twice, and no line moves,
so errors still name their file and line."""

from __future__ import annotations

import re

import pytest

from conveyor.storage.redis.constants import inline_constants
from conveyor.storage.redis.scripts import SCRIPTS


def test_a_constant_is_read_as_its_value_and_its_declaration_stays() -> None:
    source = ("local LIMIT = 20  -- jobs per call\nlocal F_STATE = 1\n"
              "local function f(t) return t[F_STATE], LIMIT + 1 end")
    assert inline_constants(source).split("\n") == [
        "local LIMIT = 20  -- jobs per call", "local F_STATE = 1",
        "local function f(t) return t[1], 20 + 1 end"]


@pytest.mark.parametrize("source", [
    "local N = 1\nN = 2\nreturn N",  # assigned again
    "local N = 1\nlocal a, N = 3, 4\nreturn N",  # declared again
    "local N = 1\nlocal function f(a, N) return N end\nreturn N",  # a parameter
    "local N = 1\nfor N = 1, 3 do end\nreturn N",  # a loop variable
    "local N = 1\nlocal t = {N = 2}\nreturn N",  # a record field of that name
    "local N = 1\nreturn N .. [[text]]",  # a long bracket: the script is left whole
])
def test_a_name_bound_twice_or_assigned_is_left_as_a_name(source: str) -> None:
    assert inline_constants(source) == source


def test_strings_comments_fields_and_expressions_are_left_as_written() -> None:
    source = ("local N = 5\nlocal X = 1 + 2\nlocal low = 3\n"
              "return 'N is', \"N\", t.N, t:N(), X, low, N -- N here\n"
              "local s = N..'x'")
    assert inline_constants(source).split("\n") == [
        "local N = 5", "local X = 1 + 2", "local low = 3",
        "return 'N is', \"N\", t.N, t:N(), X, low, 5 -- N here",
        "local s = N..'x'"]  # ``5..`` would read as a malformed number


def test_every_shipped_script_reads_the_field_positions_as_numbers() -> None:
    """What the rewrite is for: no closure captures a state-line position any more."""
    field = re.compile(r"(?<![\w.:])(F_[A-Z_]+|NFIELDS)\b")
    for name, script in SCRIPTS.items():
        for number, line in enumerate(script.source.split("\n"), 1):
            code = re.sub(r"--.*|'(?:\\.|[^'\\])*'", "", line)
            if not code.startswith("local "):
                assert not field.search(code), f"{name}.lua line {number}: {line}"
