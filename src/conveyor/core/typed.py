"""Typed job data: parameters and return values annotated with a pydantic model, a dataclass
or a ``TypedDict`` are validated at enqueue, stored as JSON and handed back typed
(docs/job-data.md, "Typed arguments").

An annotation is *typed* when it names such a type anywhere (``Order``, ``list[Order]``,
``Order | None``, ``dict[str, Line]``); any other annotation (``int``, ``str``, none) is left
as it is, as before: stored JSON is checked for JSON-ness and size only. With pydantic
installed (the ``pydantic`` extra) every typed annotation goes through a pydantic
``TypeAdapter``, so field types pydantic knows (``datetime``, ``UUID``, ``Decimal``…) work;
without it dataclasses and ``TypedDict``s are converted here, with fields of JSON types,
nested dataclasses and ``TypedDict``s, lists, dicts, ``Optional`` / unions and ``Literal``.

Errors are one line naming the parameter and the field, e.g. ``argument 'order': field
items.0.qty: Input should be a valid integer``.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Protocol, Union, cast

from conveyor.errors import TypedDataError

__all__ = ["Adapter", "adapter_for"]

_ANY = object()  # an annotation left out


class Adapter(Protocol):
    """One typed annotation: JSON out, typed in."""

    def dump(self, value: Any) -> Any:
        """``value`` validated (a typed object or its JSON form) and made JSON; raises
        ``TypedDataError`` naming the field."""
        ...

    def load(self, value: Any) -> Any:
        """The typed object of stored JSON ``value``; raises ``TypedDataError``."""
        ...


def adapter_for(annotation: Any) -> Adapter | None:
    """The adapter of a typed annotation, or None for one that names no model type."""
    if annotation is _ANY or not _names_model(annotation, 0):
        return None
    pydantic = _pydantic()
    if pydantic is not None:
        try:
            return _Pydantic(pydantic.TypeAdapter(annotation))
        except pydantic.PydanticUserError:  # typing.TypedDict before Python 3.12, say
            pass
    return _Plain(annotation)


def _pydantic() -> Any:
    try:
        import pydantic
    except ImportError:  # the optional extra is not installed: the plain converter serves
        return None
    return pydantic


def _is_model(tp: Any) -> bool:
    if not isinstance(tp, type):
        return False
    if dataclasses.is_dataclass(tp) or _is_typeddict(tp):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(tp, pydantic.BaseModel)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") \
        and hasattr(tp, "__annotations__")


def _names_model(tp: Any, depth: int) -> bool:
    if depth > 8:
        return False
    if _is_model(tp):
        return True
    return any(_names_model(arg, depth + 1) for arg in typing.get_args(tp)
               if not isinstance(arg, (str, int, float, bool)) and arg is not Ellipsis)


def one_line(error: Exception) -> str:
    """The first problem pydantic found, as ``field a.b: message`` (and how many more)."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return " ".join(str(error).split())
    found = errors()
    if not found:
        return " ".join(str(error).split())
    first = found[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    text = f"field {where}: {first.get('msg', 'invalid')}" if where else \
        str(first.get("msg", "invalid"))
    return " ".join(f"{text}{more}".split())


class _Pydantic:
    """A pydantic ``TypeAdapter``: strict about nothing pydantic is not (its lax mode)."""

    __slots__ = ("_adapter",)

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter

    def dump(self, value: Any) -> Any:
        try:
            return self._adapter.dump_python(self._adapter.validate_python(value), mode="json")
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise TypedDataError(one_line(exc)) from None

    def load(self, value: Any) -> Any:
        try:
            return self._adapter.validate_python(value)
        except ValueError as exc:
            raise TypedDataError(one_line(exc)) from None


class _Plain:
    """Dataclasses and ``TypedDict``s without pydantic."""

    __slots__ = ("_tp",)

    def __init__(self, tp: Any) -> None:
        self._tp = tp

    def dump(self, value: Any) -> Any:
        return _convert(self._tp, value, (), dump=True)

    def load(self, value: Any) -> Any:
        return _convert(self._tp, value, (), dump=False)


_SCALARS: dict[type, tuple[type, ...]] = {
    str: (str,), int: (int,), float: (int, float), bool: (bool,), type(None): (type(None),)}


def _fail(path: tuple[Any, ...], message: str) -> TypedDataError:
    where = ".".join(str(p) for p in path)
    return TypedDataError(f"field {where}: {message}" if where else message)


def _convert(tp: Any, value: Any, path: tuple[Any, ...], *, dump: bool) -> Any:
    if tp is Any or tp is object:
        return value
    if tp is None:
        tp = type(None)
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _convert(arg, value, path, dump=dump)
            except TypedDataError:
                continue
        raise _fail(path, f"{value!r} matches none of {tp}")
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise _fail(path, f"{value!r} is not one of {typing.get_args(tp)}")
    if isinstance(tp, type) and tp in _SCALARS:
        if isinstance(value, _SCALARS[tp]) and not (tp is not bool and isinstance(value, bool)):
            return float(cast(float, value)) if tp is float and not dump else value
        raise _fail(path, f"expected {tp.__name__}, got {type(value).__name__}")
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        return _sequence(tp, origin or tp, value, path, dump)
    if origin in (dict, Mapping) or tp is dict:
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise _fail(path, f"expected an object with string keys, got {type(value).__name__}")
        return {k: _convert(inner, v, (*path, k), dump=dump) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value, path, dump)
    if _is_typeddict(tp):
        return _typeddict(tp, value, path, dump)
    raise _fail(path, f"{getattr(tp, '__name__', tp)} needs the pydantic extra "
                      "(pip install 'conveyor[pydantic]')")


def _sequence(tp: Any, kind: Any, value: Any, path: tuple[Any, ...], dump: bool) -> Any:
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise _fail(path, f"expected a list, got {type(value).__name__}")
    args = typing.get_args(tp)
    if kind is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise _fail(path, f"expected {len(args)} items, got {len(value)}")
        items = [_convert(a, v, (*path, i), dump=dump) for i, (a, v) in
                 enumerate(zip(args, value, strict=True))]
    else:
        inner = args[0] if args else Any
        items = [_convert(inner, v, (*path, i), dump=dump) for i, v in enumerate(value)]
    if dump:
        return items
    return items if kind is list else kind(items)


def _hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp)
    except (NameError, TypeError) as exc:
        raise TypedDataError(f"the annotations of {tp.__name__} cannot be read: {exc}") from None


def _fields(tp: type, value: Any, path: tuple[Any, ...], required: frozenset[str],
            dump: bool) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"expected {tp.__name__} or an object, got {type(value).__name__}")
    hints = _hints(tp)
    unknown = sorted(set(value) - set(hints))
    if unknown:
        raise _fail((*path, unknown[0]), f"not a field of {tp.__name__}")
    missing = sorted(required - set(value))
    if missing:
        raise _fail((*path, missing[0]), "field required")
    return {k: _convert(hints[k], v, (*path, k), dump=dump) for k, v in value.items()}


def _dataclass(tp: type, value: Any, path: tuple[Any, ...], dump: bool) -> Any:
    fields = [f for f in dataclasses.fields(tp) if f.init]
    if isinstance(value, tp):
        value = {f.name: getattr(value, f.name) for f in fields}
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
    converted = _fields(tp, value, path, required, dump)
    return converted if dump else tp(**converted)


def _typeddict(tp: Any, value: Any, path: tuple[Any, ...], dump: bool) -> Any:
    required = frozenset(getattr(tp, "__required_keys__", ()))
    return _fields(tp, value, path, required, dump)
