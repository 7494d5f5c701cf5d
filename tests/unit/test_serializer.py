"""JSON payloads: what is accepted, what is refused, and how the refusal reads."""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

import pytest

from conveyor.core.serializer import (
    MAX_DEPTH,
    decode_payload,
    dumps,
    encode_arg_lists,
    encode_args,
    encode_payload,
    find_bad_value,
    loads,
)
from conveyor.errors import PayloadError


def test_payload_round_trips() -> None:
    text = encode_payload([1, "two", [3.5, None]], {"flag": True, "nested": {"a": []}},
                          {"trace": "abc"})
    assert decode_payload(text) == ([1, "two", [3.5, None]], {"flag": True, "nested": {"a": []}},
                                    {"trace": "abc"})


def test_payload_is_compact_and_keeps_unicode() -> None:
    text = encode_payload(["café"], {})
    assert text == '{"a":["café"],"k":{}}'
    assert decode_payload(text) == (["café"], {}, {})


def test_tuples_become_lists() -> None:
    assert decode_payload(encode_payload((1, (2, 3)), {}))[0] == [1, [2, 3]]


def test_a_value_json_cannot_hold_is_named_by_its_path() -> None:
    when = datetime.datetime(2024, 1, 1)
    with pytest.raises(PayloadError, match=r"args\[1\]\['when'\]: datetime is not JSON"):
        encode_payload([1, {"when": when}], {})
    with pytest.raises(PayloadError, match=r"kwargs\['blob'\]: bytes is not JSON"):
        encode_payload([], {"blob": b"x"})
    with pytest.raises(PayloadError, match=r"meta\['s'\]: set is not JSON"):
        encode_payload([], {}, {"s": {1}})


def test_nan_and_infinity_are_refused() -> None:
    with pytest.raises(PayloadError, match="nan is not JSON"):
        encode_payload([math.nan], {})
    with pytest.raises(PayloadError, match="inf is not JSON"):
        dumps({"x": math.inf})


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(PayloadError, match="key 1 is int"):
        encode_payload([{1: "a"}], {})


def test_find_bad_value_names_a_non_string_key() -> None:
    assert find_bad_value([{1: "a"}], "args") == "args[0]: key 1 is int, JSON keys are strings"


def test_payload_size_limit() -> None:
    assert encode_payload(["x" * 100], {}, max_bytes=200)
    with pytest.raises(PayloadError, match=r"over the limit of 200 bytes"):
        encode_payload(["x" * 300], {}, max_bytes=200)
    # The limit counts bytes, not characters: 60 four-byte characters are 240 bytes.
    with pytest.raises(PayloadError, match="over the limit"):
        encode_payload(["\U0001f600" * 60], {}, max_bytes=200)


@pytest.mark.parametrize(("text", "reason"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"a": {}}', "must hold a list"),
    ('{"a": [], "k": []}', "must hold a list"),
    ('{"a": [], "k": {}, "m": 3}', "must hold a list"),
])
def test_malformed_payloads_raise_a_clear_error(text: str, reason: str) -> None:
    with pytest.raises(PayloadError, match=reason):
        decode_payload(text)


def test_missing_parts_default_to_empty() -> None:
    assert decode_payload("{}") == ([], {}, {})


def test_dumps_and_loads() -> None:
    assert dumps({"b": [1, 2], "a": None}) == '{"b":[1,2],"a":null}'
    assert loads('{"x": [true]}') == {"x": [True]}
    with pytest.raises(PayloadError, match=r"value\['f'\]: builtin_function_or_method is not"):
        dumps({"f": print})


def test_find_bad_value() -> None:
    assert find_bad_value({"a": [1, 2.5, "s", None, True]}, "v") is None
    assert find_bad_value([object()], "args") == "args[0]: object is not JSON"


def test_payload_is_plain_json() -> None:
    # Never pickle: any JSON reader can read what conveyor stores.
    assert json.loads(encode_payload([1], {"k": "v"})) == {"a": [1], "k": {"k": "v"}}


def test_non_string_keys_are_refused_in_kwargs_meta_and_values() -> None:
    with pytest.raises(PayloadError, match=r"kwargs\['rows'\]\[0\]: key None is NoneType"):
        encode_payload([], {"rows": [{None: 1}]})
    with pytest.raises(PayloadError, match=r"meta\['m'\]: key True is bool"):
        encode_payload([], {}, {"m": {True: 1}})
    with pytest.raises(PayloadError, match=r"value: key 1\.5 is float"):
        dumps({1.5: "x"})
    text = encode_payload(["x", 1, {"a": [{"b": None}]}], {})
    assert text == '{"a":["x",1,{"a":[{"b":null}]}],"k":{}}'


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


def test_lone_surrogates_in_arguments_round_trip_and_the_payload_is_storable() -> None:
    args = ["bad \ud800", {"\udfff key": ["x\udc80"]}, "café"]
    text = encode_payload(args, {"k": "\ud800"})
    text.encode("utf-8")  # what every backend does with it
    assert decode_payload(text) == (args, {"k": "\ud800"}, {})
    assert json.loads(dumps("\ud800")) == "\ud800"
    dumps(["\ud800"]).encode("utf-8")


def test_a_payload_nested_too_deeply_is_refused_at_enqueue_in_one_line() -> None:
    for levels in (300, 100_000):
        with pytest.raises(PayloadError, match="nested too deeply") as info:
            encode_payload([_nested(levels)], {})
        assert "\n" not in str(info.value) and "args[0]" in str(info.value)
    with pytest.raises(PayloadError, match="nested too deeply"):
        dumps({"result": _nested(100_000)})
    encode_payload([_nested(50)], {})  # ordinary nesting is fine


def test_a_stored_payload_nested_too_deeply_decodes_to_a_clear_error() -> None:
    text = '{"a":[' + "[" * 100_000 + "]" * 100_000 + '],"k":{}}'
    with pytest.raises(PayloadError, match="nested too deeply"):
        decode_payload(text)


_NESTED: list[object] = []
_deep: list[object] = _NESTED
for _ in range(MAX_DEPTH + 1):
    _deep.append([])
    _deep = _deep[0]  # type: ignore[assignment]


@pytest.mark.parametrize(("args", "kwargs"), [
    ((), {}), ([1, "a", 2.5, None, True], {}), (("t", 0.0), {}), ([], {"a": 1, "b": [1, 2]}),
    ([[1, [2, [3]]]], {"x": "y{z"}), ([{"k": 1}], {}), ([], {"n": {"m": 1}}),
    (["caf\u00e9"], {}), (["\ud800"], {}), ([{1: 2}], {}), ([], {"v": {(1,): 2}}),
    ([float("nan")], {}), ([object()], {}), ([], {"o": object()}), ([_NESTED], {}),
    (["x" * 600], {}), ([{"a": [{"b": 1}]}], {"c": {"d": None}}),
])
def test_encode_args_matches_encode_payload(args: Any, kwargs: Any) -> None:
    """The bulk path's encoder gives the same text, or raises the same error."""
    def outcome(fn: Any) -> tuple[str, str]:
        try:
            return ("ok", fn(args, kwargs, 512))
        except PayloadError as exc:
            return ("error", str(exc))

    assert outcome(encode_args) == outcome(lambda a, k, m: encode_payload(a, k, None, m))


@pytest.mark.parametrize(("items", "taken"), [
    ([[1], (2, 3), [], ["a]b", "x\n", 'q"\\'], (None, True, 1.5, -0.0, 10**20)], True),
    ([[]], True), ([()], True), ([["noop", 0.0]] * 3, True),
    ([[1]] * 300, False),  # the lot near the limit: item by item
    ([["x],[y"]], False), ([[[1]]], False), ([[{"a": 1}]], False), ([["caf\u00e9"]], False),
    ([["\ud800"]], False), ([[float("nan")]], False), ([[object()]], False), (["s"], False),
    ([[1], "s"], False), ([{"a": 1}], False), ([([1], {"b": 2})], False),
    ([[1], ((2,), {})], False), ([["x" * 300]], False), ([], False),
])
def test_encode_arg_lists_matches_encode_args(items: list[Any], taken: bool) -> None:
    """One encoding for a block gives each item's text, or declines (the caller then
    encodes item by item): never a different text."""
    texts = encode_arg_lists(items, 512)
    assert (texts is not None) == taken
    if texts is not None:
        assert texts == [encode_args(item, {}, 512) for item in items]
