"""A job function's call checked at enqueue: arguments that could never bind to the
function's signature are refused before anything is stored (docs/api.md, "Enqueueing").

Without the check a wrong call is stored, fails in the worker with the ``TypeError`` Python
raises there, and is retried by the job's rules (25 times over about 25 days by default); a
workflow waiting on it stalls meanwhile. Celery checks a call the same way at ``.delay()``.

``CallShape.check`` binds with ``inspect.Signature.bind``; ``fits`` is the bulk path's
shortcut for the common item (positional arguments only), one comparison per item.

On that binding stand the typed parameters (``conveyor.core.typed``, docs/job-data.md): a
parameter annotated with a pydantic model, a dataclass or a ``TypedDict`` is validated and
made JSON by ``convert`` at enqueue, and made typed again by ``load`` when the job runs; a
return annotation of such a type does the same for the result (``dump_result``,
``load_result``).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from conveyor.core.typed import Adapter, adapter_for
from conveyor.errors import TypedDataError

__all__ = ["CallShape", "split_item"]

_RESULT = object()  # stands for a result a workflow node receives in front of its arguments
_VARIADIC = 1 << 62


class CallShape:
    """What calls a function accepts; ``None`` parts when Python cannot tell (a builtin)."""

    __slots__ = ("_func", "_least", "_most", "_name", "_params", "_result", "_sig", "_typed")

    def __init__(self, func: Callable[..., Any], name: str) -> None:
        self._name = name
        self._func = func
        self._typed: dict[str, Adapter] | None = None  # read from the annotations on first use
        self._result: Adapter | None = None
        self._params: list[inspect.Parameter] = []
        try:
            found = inspect.signature(func)
            self._params = list(found.parameters.values())
            # Annotations left out: the error names the parameters, in one short line.
            self._sig: inspect.Signature | None = found.replace(
                parameters=[p.replace(annotation=p.empty) for p in found.parameters.values()],
                return_annotation=found.empty)
        except (TypeError, ValueError):  # no signature to check against: nothing is refused
            self._sig = None
        self._least, self._most = _positional_range(self._sig)

    def fits(self, count: int) -> bool:
        """True when ``count`` positional arguments alone bind (the bulk path's shortcut)."""
        return self._least <= count <= self._most

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any], leading: int = 0,
              what: str = "") -> None:
        """Raise ``TypeError`` (one line) unless ``args``/``kwargs`` bind, after ``leading``
        results given in front of them (a workflow node's parents' results, an errback's job
        id, error and traceback). ``what`` names the call (an ``enqueue_many`` item)."""
        if self._sig is None or (not kwargs and leading == 0 and self.fits(len(args))):
            return
        try:
            self._sig.bind(*([_RESULT] * leading), *args, **kwargs)
        except TypeError as exc:
            given = f" after the {_plural(leading, 'value')} it receives" if leading else ""
            head = f"{what}: " if what else ""
            text = f"{head}cannot call {self._name}{self._sig}{given}: {exc}"
            raise TypeError(" ".join(text.split())) from None

    @property
    def typed(self) -> bool:
        """True when a parameter or the return value is typed (``conveyor.core.typed``)."""
        return bool(self._adapters()) or self._result is not None

    def convert(self, args: Sequence[Any], kwargs: Mapping[str, Any], leading: int = 0,
                what: str = "") -> tuple[Sequence[Any], Mapping[str, Any]]:
        """``check``, then the typed arguments validated and made JSON: the arguments to
        store. ``TypedDataError`` (a ``TypeError``, one line) names the parameter and field;
        untyped calls come back as given."""
        self.check(args, kwargs, leading, what)
        if not self._adapters():
            return args, kwargs
        head = f"{what}: " if what else ""
        return self._apply(args, kwargs, leading, lambda a, v: a.dump(v),
                           f"{head}{self._name}")

    def load(self, args: Sequence[Any], kwargs: Mapping[str, Any],
             where: str = "") -> tuple[list[Any], dict[str, Any]]:
        """The stored arguments with each typed one made its type again (the job runs with
        them; a workflow node's parents' results included). ``TypedDataError`` names the
        parameter and field."""
        if not self._adapters():
            return list(args), dict(kwargs)
        found = self._apply(args, kwargs, 0, lambda a, v: a.load(v), where or self._name)
        return list(found[0]), dict(found[1])

    def dump_result(self, value: Any) -> Any:
        """A result of the typed return annotation validated and made JSON."""
        return self._result_as("dump", value,
                               f"{self._name} returned a value that is not its return type")

    def load_result(self, value: Any) -> Any:
        """A stored result made the typed return annotation's type again."""
        return self._result_as("load", value,
                               f"the result of {self._name} is not its return type")

    def _result_as(self, how: str, value: Any, why: str) -> Any:
        self._adapters()
        if self._result is None or value is None:
            return value
        try:
            return self._result.dump(value) if how == "dump" else self._result.load(value)
        except TypedDataError as exc:
            raise TypedDataError(f"{why}: {exc}") from None

    def _adapters(self) -> dict[str, Adapter]:
        if self._typed is None:
            hints = _hints(self._func)
            self._typed = {p.name: found for p in self._params
                           if (found := adapter_for(hints.get(p.name, _NONE))) is not None}
            self._result = adapter_for(hints.get("return", _NONE))
        return self._typed

    def _apply(self, args: Sequence[Any], kwargs: Mapping[str, Any], leading: int,
               change: Callable[[Adapter, Any], Any],
               where: str) -> tuple[Sequence[Any], Mapping[str, Any]]:
        """``args``/``kwargs`` with ``change`` applied to each typed value, found by the
        parameter it binds to (positions counted after ``leading`` values in front)."""
        typed = self._adapters()
        out, named = list(args), dict(kwargs)
        position = 0
        taken = {p.name for p in self._params}

        def one(adapter: Adapter, value: Any, label: str) -> Any:
            try:
                return change(adapter, value)
            except TypedDataError as exc:
                raise TypedDataError(f"{where}: argument {label!r}: {exc}") from None

        for param in self._params:
            adapter = typed.get(param.name)
            if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                index = position - leading
                position += 1
                if adapter is None:
                    continue
                if 0 <= index < len(out):
                    out[index] = one(adapter, out[index], param.name)
                elif param.name in named:
                    named[param.name] = one(adapter, named[param.name], param.name)
            elif param.kind is param.VAR_POSITIONAL and adapter is not None:
                for index in range(max(position - leading, 0), len(out)):
                    out[index] = one(adapter, out[index], f"{param.name}[{index}]")
            elif param.kind is param.KEYWORD_ONLY and adapter is not None \
                    and param.name in named:
                named[param.name] = one(adapter, named[param.name], param.name)
            elif param.kind is param.VAR_KEYWORD and adapter is not None:
                for key in [k for k in named if k not in taken]:
                    named[key] = one(adapter, named[key], key)
        return out, named


_NONE = object()


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """The function's resolved annotations; one that cannot be resolved (a name defined
    nowhere the function can see) is left out: that parameter is untyped."""
    try:
        return typing.get_type_hints(func)
    except Exception:  # a forward reference to a local name, a bad string annotation
        raw = getattr(func, "__annotations__", {})
        return {name: value for name, value in raw.items() if not isinstance(value, str)}


def _positional_range(sig: inspect.Signature | None) -> tuple[int, int]:
    """(fewest, most) positional arguments a call of only positional arguments may pass;
    (1, 0) (nothing fits) when a keyword-only parameter is required."""
    if sig is None:
        return 0, _VARIADIC
    least = most = 0
    for param in sig.parameters.values():
        kind = param.kind
        if kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            most += 1
            if param.default is param.empty:
                least = most
        elif kind is param.VAR_POSITIONAL:
            most = _VARIADIC
        elif kind is param.KEYWORD_ONLY and param.default is param.empty:
            return 1, 0
    return least, most


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def split_item(item: Any, index: int) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """(args, kwargs) of one ``enqueue_many`` item; ``TypeError`` naming the item otherwise."""
    if isinstance(item, Mapping):
        return (), item
    if (
        isinstance(item, tuple) and len(item) == 2
        and isinstance(item[0], (list, tuple)) and isinstance(item[1], Mapping)
    ):
        return item[0], item[1]
    if isinstance(item, (list, tuple)):
        return item, {}
    raise TypeError(
        f"enqueue_many item {index} is a {type(item).__name__}; give a list/tuple of args, "
        "a dict of kwargs, or an (args, kwargs) tuple"
    )
