"""JSON payloads: encode job arguments once at enqueue, decode them in the worker.

JSON only, never pickle: anyone who can write to the storage must not be able to run code in
every worker (DESIGN §7). A value JSON cannot hold is rejected at enqueue with its path, e.g.
``args[1]['when']: datetime is not JSON``.

Data round-trips exactly, whatever its text: a string holding a lone surrogate (which UTF-8,
and so every backend, cannot hold) is written with JSON's ASCII escapes (``"\\ud800"``, valid
JSON) and reads back as the same string. Nesting is limited to ``MAX_DEPTH`` levels at the door
so that any stored value decodes in a worker's thread; a deeper one written by another client
decodes to a ``PayloadError``, never a ``RecursionError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.errors import PayloadError

DEFAULT_MAX_PAYLOAD = 512 * 1024
MAX_DEPTH = 200
"""Deepest nesting of lists and objects accepted in arguments and results: far beyond real
data, and far enough below Python's recursion limit to decode on any worker thread."""

_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)
_ascii_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_decoder = json.JSONDecoder()
# The C encoder behind _encoder, made once: JSONEncoder.encode builds a new one per call, which
# is most of the cost of encoding a small value. No circular check (markers None): a cycle
# raises RecursionError, and encode_args hands such values to encode_payload, which names it.
_c_make = getattr(json.encoder, "c_make_encoder", None)
_c_encode = None if _c_make is None else _c_make(
    None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
# What encoding a value can raise: TypeError/ValueError for what JSON cannot hold (ValueError
# includes ints past Python's digit limit), RecursionError for nesting past the stack.
_ENCODE_ERRORS = (TypeError, ValueError, RecursionError)


def _encode(value: Any) -> str:
    """Compact JSON of ``value``, always encodable as UTF-8 (see the module docstring)."""
    text: str = _encoder.encode(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: only the escaped form is storable
            text = _ascii_encoder.encode(value)
    return text


def dumps(value: Any) -> str:
    """Compact JSON text of a value; raises ``PayloadError`` naming the bad part."""
    try:
        text = _encode(value)
    except _ENCODE_ERRORS as exc:
        where = find_bad_value(value, "value")
        raise PayloadError(where or str(exc)) from exc
    _refuse_coerced_keys([value], "value", unwrap=True)
    return text


def encode_payload(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
    max_bytes: int = DEFAULT_MAX_PAYLOAD,
) -> str:
    """The stored payload text ``{"a": args, "k": kwargs, "m": meta}``.

    Raises ``PayloadError`` for a value that is not JSON (with its path) or a payload over
    ``max_bytes`` (with both sizes).
    """
    body: dict[str, Any] = {"a": list(args), "k": dict(kwargs)}
    if meta:
        body["m"] = dict(meta)
    try:
        text = _encode(body)
    except _ENCODE_ERRORS as exc:
        where = find_bad_value(list(args), "args") or find_bad_value(dict(kwargs), "kwargs")
        if where is None and meta:
            where = find_bad_value(dict(meta), "meta")
        raise PayloadError(where or f"arguments are not JSON: {exc}") from exc
    _refuse_coerced_keys(args, "args")
    _refuse_coerced_keys(kwargs.values(), "kwargs", names=list(kwargs))
    if meta:
        _refuse_coerced_keys(meta.values(), "meta", names=list(meta))
    size = oversize(text, max_bytes)
    if size:
        raise PayloadError(
            f"payload is {size} bytes, over the limit of {max_bytes} bytes; "
            "store large data elsewhere and pass a reference"
        )
    return text


def oversize(text: str, max_bytes: int) -> int:
    """The size of ``text`` in UTF-8 bytes when over ``max_bytes``, else 0 (the size rule
    of payloads, results and a workflow node's assembled arguments)."""
    # len(str) undercounts multi-byte characters; only encode when it could matter.
    if len(text) * 4 <= max_bytes:
        return 0
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > max_bytes else 0


def encode_args(
    args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int = DEFAULT_MAX_PAYLOAD
) -> str:
    """``encode_payload(args, kwargs, None, max_bytes)``, cheaper for plain arguments (the
    bulk enqueue path calls it once per job).

    The two halves are encoded on their own and joined, and the walk for coerced keys and
    depth is skipped when the text shows it could find nothing (no object inside, fewer
    brackets than ``MAX_DEPTH``). Anything else (an error, non-ASCII text, a payload near the
    limit) goes through ``encode_payload`` itself: the same text, the same errors.
    """
    encode = _encoder.encode if _c_encode is None else _join_encoded
    try:
        a = encode(args)
        k = encode(kwargs) if kwargs else "{}"
    except _ENCODE_ERRORS:
        return encode_payload(args, kwargs, None, max_bytes)
    text = f'{{"a":{a},"k":{k}}}'
    if ("{" in a or "{" in k[1:] or a.count("[") + k.count("[") >= MAX_DEPTH
            or len(text) * 4 > max_bytes or not text.isascii()):
        return encode_payload(args, kwargs, None, max_bytes)
    return text


_SEQUENCES = frozenset((list, tuple))


def encode_arg_lists(items: list[Any], max_bytes: int = DEFAULT_MAX_PAYLOAD) -> list[str] | None:
    """``[encode_args(item, {}, max_bytes) for item in items]`` in one encoder call, when
    every item is a list or tuple of JSON scalars (no nested list, no object, ASCII text) and
    the lot is far below ``max_bytes``; None otherwise (the caller encodes item by item).

    The items are encoded as one JSON array and cut at the "],[" between them: when the text
    holds no "[" but the array's own, no item can hold a "],[" of its own.
    """
    if not items or _c_encode is None or not set(map(type, items)) <= _SEQUENCES:
        return None
    try:
        text = "".join(_c_encode(items, 0))
    except _ENCODE_ERRORS:
        return None
    if (text.count("[") != len(items) + 1 or "{" in text or len(text) * 4 > max_bytes
            or not text.isascii()):
        return None
    # JSON text holds no raw newline: it can mark the cuts.
    body = text[2:-2].replace("],[", '],"k":{}}\n{"a":[')
    return f'{{"a":[{body}],"k":{{}}}}'.split("\n")


def _join_encoded(value: Any) -> str:
    assert _c_encode is not None
    return "".join(_c_encode(value, 0))


def decode_payload(payload: str) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(args, kwargs, meta) from stored payload text; raises ``PayloadError`` if malformed."""
    try:
        body = _decoder.decode(payload)
    except RecursionError:
        raise PayloadError("payload is nested too deeply to decode (written by another "
                           f"client? conveyor accepts at most {MAX_DEPTH} levels)") from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise PayloadError(f"payload must be a JSON object, got {type(body).__name__}")
    args, kwargs, meta = body.get("a", []), body.get("k", {}), body.get("m", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(meta, dict):
        raise PayloadError("payload must hold a list 'a', an object 'k' and an object 'm'")
    return args, kwargs, meta


def loads(text: str) -> Any:
    """Parse JSON text."""
    return _decoder.decode(text)


_CONTAINERS = (dict, list, tuple)


def _refuse_coerced_keys(
    values: Any, path: str, *, names: list[str] | None = None, unwrap: bool = False
) -> None:
    """Raise for a dict key that is not a string somewhere inside ``values``.

    The json encoder silently turns keys 1, 1.5, True and None into strings, so the job
    would get different arguments than it was given. Scalars (the usual arguments) are
    skipped at the cost of one type check each; only containers are walked.
    """
    for i, item in enumerate(values):
        if isinstance(item, _CONTAINERS):
            if unwrap:
                where = path
            elif names is not None:
                where = f"{path}[{names[i]!r}]"
            else:
                where = f"{path}[{i}]"
            found = find_bad_value(item, where)
            if found:
                raise PayloadError(found)


def find_bad_value(value: Any, path: str, depth: int = 0) -> str | None:
    """Path and reason of the first value JSON cannot hold (or nested deeper than
    ``MAX_DEPTH``), or None if all is JSON."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value!r} is not JSON"
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        where = path if len(path) <= 60 else f"{path[:40]}...{path[-12:]}"
        return f"{where}: nested too deeply (more than {MAX_DEPTH} levels of lists and objects)"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = find_bad_value(item, f"{path}[{i}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: key {key!r} is {type(key).__name__}, JSON keys are strings"
            found = find_bad_value(item, f"{path}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    return f"{path}: {type(value).__name__} is not JSON"
